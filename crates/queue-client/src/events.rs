//! Promotion events: after each PROMOTE that changed something, the queue-manager
//! announces it, so that every queue-api instance refreshes its push streams at once
//! instead of waiting for its next tick.
//!
//! Channel `queue:{<queue>}:promoted` (the queue's hash tag: one cluster slot, so
//! sharded pub/sub works), payload [`QueueEvent`] as JSON. Published with PUBLISH on a
//! single server and SPUBLISH on a cluster.

use crate::feed::Feed;
use crate::{ClientError, QueueClient, Target};
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

/// How often a cluster subscriber looks for queues it does not listen to yet.
pub const CLUSTER_DISCOVER_EVERY: Duration = Duration::from_secs(2);

/// Receives every queue's events from what `target` names. On one server this is
/// [`subscribe_all`]. On a cluster, sharded pub/sub has no patterns: the subscriber
/// finds the queues (the registry and every primary's keys, every
/// [`CLUSTER_DISCOVER_EVERY`]) and SSUBSCRIBEs to each one's channel on its shard.
pub fn subscribe_target(target: Target) -> mpsc::Receiver<QueueEvent> {
    if !target.cluster {
        return subscribe_all_target(target);
    }
    keep_subscribed(target, |target, tx| async move {
        match sharded_round(&target, &tx).await {
            Ok(()) => Round::Unheard,
            Err(e) => {
                tracing::warn!(error = %e, "event subscription unavailable; retrying");
                Round::Lost { connected: false }
            }
        }
    })
}

/// How one subscription round ended.
enum Round {
    /// Nobody listens any more: stop.
    Unheard,
    /// The subscription failed or closed; `connected` when it had been open.
    Lost { connected: bool },
}

/// Runs subscription rounds on a task until nobody listens, waiting between two
/// rounds from 100 ms, doubled after each up to 5 s (from 100 ms again after a round
/// that had connected).
fn keep_subscribed<R, F>(target: Target, round: R) -> mpsc::Receiver<QueueEvent>
where
    R: Fn(Target, mpsc::Sender<QueueEvent>) -> F + Send + 'static,
    F: std::future::Future<Output = Round> + Send,
{
    let (tx, rx) = mpsc::channel(1024);
    tokio::spawn(async move {
        let first = Duration::from_millis(100);
        let mut delay = first;
        loop {
            if tx.is_closed() {
                return;
            }
            match round(target.clone(), tx.clone()).await {
                Round::Unheard => return,
                Round::Lost { connected: true } => delay = first,
                Round::Lost { connected: false } => {}
            }
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(Duration::from_secs(5));
        }
    });
    rx
}

/// Sends on the events `feed` hears (payloads that are not events are skipped) until
/// it closes (false) or nobody listens (true).
async fn forward(feed: &mut Feed, tx: &mpsc::Sender<QueueEvent>) -> bool {
    while let Some(heard) = feed.next().await {
        if let Ok(event) = serde_json::from_slice::<QueueEvent>(&heard.payload) {
            if tx.send(event).await.is_err() {
                return true;
            }
        }
    }
    false
}

/// One sharded subscription with its discovery loop; Ok once nobody listens.
async fn sharded_round(target: &Target, tx: &mpsc::Sender<QueueEvent>) -> Result<(), ClientError> {
    let (mut feed, channels) = Feed::open(target, PROMOTED_PATTERN, Some(Duration::from_secs(5))).await?;
    let client = QueueClient::connect_target(target, crate::LazyClient::service_options()).await?;
    let discover = async {
        loop {
            let mut queues = client.scan_queues().await.unwrap_or_default();
            queues.extend(client.registered_queues().await.unwrap_or_default());
            for q in queues.iter().filter(|q| keys::check_queue(q.as_bytes()).is_ok()) {
                if let Err(e) = channels.add(&promoted_channel(q)).await {
                    tracing::debug!(queue = q, error = %e, "cannot subscribe yet");
                }
            }
            tokio::time::sleep(CLUSTER_DISCOVER_EVERY).await;
        }
    };
    tokio::select! {
        () = discover => unreachable!("the discovery loop never ends"),
        done = forward(&mut feed, tx) => if done { Ok(()) } else { Err(ClientError::Unavailable("the event feed closed".into())) },
    }
}

/// Receives every queue's events from one server, reconnecting (with backoff) when
/// the server goes away; events sent while disconnected are lost, which is why
/// subscribers also refresh on a timer.
pub fn subscribe_all(url: String) -> mpsc::Receiver<QueueEvent> {
    subscribe_all_target(Target::single(url))
}

fn subscribe_all_target(target: Target) -> mpsc::Receiver<QueueEvent> {
    keep_subscribed(target, |target, tx| async move {
        let Ok((mut events, _)) = Feed::open(&target, PROMOTED_PATTERN, None).await else {
            return Round::Lost { connected: false };
        };
        if forward(&mut events, &tx).await {
            Round::Unheard
        } else {
            Round::Lost { connected: true }
        }
    })
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
