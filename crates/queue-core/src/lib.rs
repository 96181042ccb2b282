//! Pure logic of the waiting room, shared by the Valkey module (and mirrored by the
//! Lua fallback): names and key layout, argument parsing, the per-queue config schema,
//! admission arithmetic, record encodings, ticket ids and the client-visible errors.
//!
//! Nothing here touches the server API, so all of it is unit-tested without a server.

pub mod admission;
pub mod args;
pub mod config;
pub mod engine;
pub mod error;
pub mod hex;
pub mod keys;
pub mod lanes;
pub mod lua;
pub mod memory;
pub mod pow;
pub mod record;
pub mod replies;
pub mod ticket;

pub use engine::opening;
pub use error::QueueError;
