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

/// `closed`: the sale has ended (`closed: true`: nobody new gets in; false: it is
/// open again). Sent on every stream of the queue when it changes, and first on a
/// stream opened while closed.
pub fn closed_event(queue: &str, closed: bool) -> Event {
    Event::default().event("closed").data(json!({ "queue": queue, "closed": closed }).to_string())
}

/// `soldOut`: nothing is left to sell (`soldOut: true`: nobody more gets in; false:
/// stock came back).
pub fn sold_out_event(queue: &str, sold_out: bool) -> Event {
    Event::default().event("soldOut").data(json!({ "queue": queue, "soldOut": sold_out }).to_string())
}

/// `message`: the operator's message to everyone waiting (`text` empty: cleared).
pub fn message_event(queue: &str, text: &str) -> Event {
    Event::default().event("message").data(json!({ "queue": queue, "text": text }).to_string())
}

/// `brand`: the queue's branding changed; `brand` holds the settings the page shows
/// (title, message, logo_url, accent, background; one absent is unset), which the
/// page applies without a reload.
pub fn brand_event(queue: &str, brand: &serde_json::Value) -> Event {
    Event::default().event("brand").data(json!({ "queue": queue, "brand": brand }).to_string())
}
