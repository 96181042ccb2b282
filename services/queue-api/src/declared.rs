//! Which queues exist. A queue exists because an operator made it: its settings hash
//! `queue:{Q}:config` exists (a setting was written, by `QUEUE.CONFIG` or the back
//! office), or its name is in the set `queue-registry` (the back office's create, the
//! gate's routes at its start, and every queue an older queue-api served), or it is
//! `default` (seed 000's). Every public endpoint about a queue (entry, status, leave,
//! stream, challenge, opening, the page) asks [`Declared::check`] before anything
//! else reaches Valkey for it, so a name nobody declared is a 404 `unknown_queue`
//! that writes nothing: no queue, no registration, no proof-of-work record.
//!
//! Answers are kept on each instance: "declared" for [`KEEP`] (so a deletion in the
//! back office reaches every instance within that), "not declared" not at all (a
//! queue made a moment ago works at once everywhere). A check not kept costs one call
//! per key: `SISMEMBER` of the registry, then `EXISTS` of the settings hash. A queue
//! declared by its settings alone (`QUEUE.CONFIG` with valkey-cli) is added to the
//! registry when a check finds it, so that the back office lists it.
//!
//! The module and the Lua library do not refuse an undeclared queue themselves (see
//! docs/commands.md, "Which queues exist"): whoever can send `QUEUE.ENTER` to Valkey
//! can send `QUEUE.CONFIG` too; the visitor this defends against reaches only HTTP.

use crate::error::ApiError;
use crate::routes::DEFAULT_QUEUE;
use queue_client::{ClientError, QueueClient};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long an instance keeps a queue as declared without asking again.
pub const KEEP: Duration = Duration::from_secs(5);

/// Past this many queues kept, the lapsed ones are dropped (only declared queues are
/// kept, so this bounds nothing a visitor controls).
const PRUNE_PAST: usize = 10_000;

/// The declared queues this instance knows of, each with when it was last confirmed.
#[derive(Default)]
pub struct Declared {
    known: Mutex<HashMap<String, Instant>>,
}

impl Declared {
    /// Ok when `queue` is declared, else [`ApiError::UnknownQueue`] (404).
    pub async fn check(&self, client: &QueueClient, queue: &str) -> Result<(), ApiError> {
        if self.is_declared(client, queue).await? {
            Ok(())
        } else {
            Err(ApiError::UnknownQueue(queue.to_string()))
        }
    }

    /// Whether `queue` is declared: `default`, kept from a recent answer, or asked.
    pub async fn is_declared(&self, client: &QueueClient, queue: &str) -> Result<bool, ClientError> {
        if queue == DEFAULT_QUEUE || self.kept(queue) {
            return Ok(true);
        }
        self.ask(client, queue).await
    }

    /// Asks Valkey, whatever is kept (the back office, before a deletion).
    pub async fn ask(&self, client: &QueueClient, queue: &str) -> Result<bool, ClientError> {
        if queue == DEFAULT_QUEUE {
            return Ok(true);
        }
        let declared = if client.is_registered(queue).await? {
            true
        } else if client.has_settings(queue).await? {
            // Settings written with valkey-cli: listed in the back office from now on.
            if let Err(e) = client.register_queue(queue).await {
                tracing::warn!(queue, error = %e, "could not add a queue declared by its settings to the registry");
            }
            true
        } else {
            false
        };
        if declared {
            self.keep(queue);
        } else {
            self.forget(queue);
        }
        Ok(declared)
    }

    /// Declares `queue` (`SADD queue-registry`): the back office's create and every
    /// change it makes to a queue.
    pub async fn declare(&self, client: &QueueClient, queue: &str) -> Result<bool, ClientError> {
        let added = client.register_queue(queue).await?;
        self.keep(queue);
        Ok(added)
    }

    fn kept(&self, queue: &str) -> bool {
        self.known.lock().unwrap().get(queue).is_some_and(|at| at.elapsed() < KEEP)
    }

    fn keep(&self, queue: &str) {
        let mut known = self.known.lock().unwrap();
        if known.len() >= PRUNE_PAST {
            known.retain(|_, at| at.elapsed() < KEEP);
        }
        known.insert(queue.to_string(), Instant::now());
    }

    /// Forgets `queue` here (deleted): the next check asks Valkey.
    pub fn forget(&self, queue: &str) {
        self.known.lock().unwrap().remove(queue);
    }
}
