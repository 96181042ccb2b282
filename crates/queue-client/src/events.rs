//! Promotion events: after each PROMOTE that changed something, the queue-manager
//! announces it, so that every queue-api instance refreshes its push streams at once
//! instead of waiting for its next tick.
//!
//! Channel `queue:{<queue>}:promoted` (the queue's hash tag: one cluster slot, so
//! sharded pub/sub works), payload [`QueueEvent`] as JSON. Published with PUBLISH on a
//! single server and SPUBLISH on a cluster.

use crate::announce::Subscription;
use crate::{ClientError, QueueClient};
use queue_core::keys;
use serde::{Deserialize, Serialize};
use std::time::Duration;
use tokio::sync::mpsc;

/// The pattern matching every queue's channel (single server only).
pub use keys::PROMOTED_PATTERN;

/// The channel a queue's events go to.
pub fn promoted_channel(queue: &str) -> String {
    keys::key(queue, keys::PROMOTED)
}

/// What changed on a queue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QueueEvent {
    /// The queue's name.
    pub queue: String,
    /// Tickets issued by this PROMOTE.
    pub promoted: u64,
    /// Users left waiting after it.
    pub waiting: u64,
    /// When (Unix ms).
    pub at_ms: u64,
}

impl QueueClient {
    /// Announces `event` on its queue's channel; returns how many subscribers got it.
    pub async fn publish_event(&self, event: &QueueEvent) -> Result<u64, ClientError> {
        let payload = serde_json::to_string(event).map_err(|e| ClientError::Protocol(e.to_string()))?;
        self.publish(&promoted_channel(&event.queue), &payload).await
    }
}

/// Receives every queue's events from one server, reconnecting (with backoff) when
/// the server goes away; events sent while disconnected are lost, which is why
/// subscribers also refresh on a timer.
pub fn subscribe_all(url: String) -> mpsc::Receiver<QueueEvent> {
    let (tx, rx) = mpsc::channel(1024);
    tokio::spawn(async move {
        let mut delay = Duration::from_millis(100);
        loop {
            if tx.is_closed() {
                return;
            }
            if let Ok(mut events) = Subscription::pattern(&url, PROMOTED_PATTERN, None).await {
                delay = Duration::from_millis(100);
                while let Some(heard) = events.next().await {
                    if let Ok(event) = serde_json::from_slice::<QueueEvent>(&heard.payload) {
                        if tx.send(event).await.is_err() {
                            return;
                        }
                    }
                }
            }
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(Duration::from_secs(5));
        }
    });
    rx
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The module and the Lua library announce freed-slot promotions themselves, with
    /// the engine's payload: it must read as the manager's event.
    #[test]
    fn the_engines_announcement_reads_as_an_event() {
        let payload = queue_core::engine::announcement("q-1", 2, 40, 1_700_000_000_000);
        let e: QueueEvent = serde_json::from_str(&payload).unwrap();
        assert_eq!(e, QueueEvent { queue: "q-1".into(), promoted: 2, waiting: 40, at_ms: 1_700_000_000_000 });
        assert_eq!(serde_json::to_string(&e).unwrap(), payload);
    }
}
