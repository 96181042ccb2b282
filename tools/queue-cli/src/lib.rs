//! The slim client of the waiting room, over HTTP and WebSocket only, as people reach it:
//! [`join`] is one person's journey, [`swarm`] a crowd of virtual users with an audit of
//! what they saw (FIFO order, capacity, one claim per ticket). The `queue-cli` binary
//! is its command line.

pub mod api;
pub mod capacity;
pub mod chaos;
pub mod chat;
pub mod claim_rate;
pub mod gate;
pub mod history;
pub mod join;
pub mod outage;
pub mod poll_load;
pub mod push_scale;
pub mod sse;
pub mod stats;
pub mod swarm;
pub mod verify;
