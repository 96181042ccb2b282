//! One person per admitted visitor: someone whose admission to a queue is still live
//! and who reaches that queue's waiting room again (Back after admission, a bookmark,
//! a second tab) is sent straight back to the app, on the admission they hold, rather
//! than offered a second place in line (a second person, a second slot, another
//! `X-Queue-User` halfway through their visit). Both modes: the gate serves the room
//! under `/gate/room/` in proxy and forward-auth mode alike.

use crate::returns::return_or_root;
use crate::{now_ms, Gate};
use axum::extract::{Query, Request};
use axum::http::Method;
use axum::response::Response;
use serde::Deserialize;

/// The waiting-room page's query: `?queue=&return=` (and others, ignored here).
#[derive(Deserialize)]
struct RoomQuery {
    queue: Option<String>,
    #[serde(rename = "return")]
    back: Option<String>,
}

/// For a request of the waiting-room page (`rest`: the path after `/gate/room`, here
/// `/`) carrying a live admission to the queue it names (`default` when it names
/// none, as queue-api's page reads it): 303 to its `return` (a same-site path only,
/// else `/`). None for every other request, which goes on to queue-api.
pub fn back_to_app(gate: &Gate, rest: &str, req: &Request) -> Option<Response> {
    if rest != "/" || !(req.method() == Method::GET || req.method() == Method::HEAD) {
        return None;
    }
    let Query(q) = Query::<RoomQuery>::try_from_uri(req.uri()).ok()?;
    let queue = q.queue.as_deref().filter(|q| !q.is_empty()).unwrap_or("default");
    let admitted = gate.admission_for(req.headers(), queue, now_ms())?;
    let back = return_or_root(q.back.as_deref());
    tracing::debug!(queue, user = admitted.claims.sub, back, "admitted person back at the waiting room; sent back");
    let mut resp = crate::answer::see_other(&back);
    crate::answer::no_store(&mut resp);
    Some(resp)
}
