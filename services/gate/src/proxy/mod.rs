//! Reverse-proxy mode (`--upstream`): every request that is not the gate's own is
//! decided and, when it may pass, forwarded to the app with its answer passed back;
//! the waiting room is served the same way under `/gate/room/` from `--queue-api`.
//!
//! What a request gets is written once, as phases ([`phases`]: the decision, the
//! headers to the app, an admitted person's answer settled, the failure answers);
//! two transports call them: the fast path ([`fast`], plain requests on the client
//! connection's own task) and the general path ([`general`], hyper and the router,
//! for everything else). Hop-by-hop headers are dropped, `X-Forwarded-For/-Proto/
//! -Host` set, and WebSocket upgrades (no other) carried through.

pub mod fast;
pub mod general;
pub mod phases;

pub use general::{client, room_path, HttpClient};
pub use phases::{Origin, QUEUE_NAME, QUEUE_SESSION, QUEUE_USER};
