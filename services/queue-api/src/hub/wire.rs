//! A push stream's events as they go on the wire (server-sent events): the event's
//! name is the status, its data the standing as the REST contract shows it.

use super::Summary;
use crate::routes::StandingBody;
use axum::response::sse::Event;
use queue_client::{Standing, Status};
use serde_json::json;

/// A stream's event; `position` events also carry how many wait in all (seed 001's
/// total), when known, as `totalWaiting`, and whether admission is paused (soft cap
/// 0) as `admissionPaused`.
pub fn event_for(s: &Standing, queue: &str, summary: Summary) -> Event {
    let name = match s.status {
        Status::Waiting => "position",
        Status::Promoted => "promoted",
        Status::Active => "active",
        Status::Unknown => "unknown",
    };
    let mut v = serde_json::to_value(StandingBody::new(s, queue)).expect("serializable");
    if s.status == Status::Waiting {
        if let Some(total) = summary.total {
            // Never fewer than the rank shown beside it (the total is read apart).
            v["totalWaiting"] = json!(total.max(s.rank));
        }
        v["admissionPaused"] = json!(summary.paused);
    }
    Event::default().event(name).data(v.to_string())
}
