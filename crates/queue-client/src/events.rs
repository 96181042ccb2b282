//! Promotion events: after each PROMOTE that changed something, the queue-manager
//! announces it, so that every queue-api instance refreshes its push streams at once
//! instead of waiting for its next tick.
//!
//! Channel `queue:{<queue>}:promoted` (the queue's hash tag: one cluster slot, so
//! sharded pub/sub works), payload [`QueueEvent`] as JSON. Published with PUBLISH on a
//! single server and SPUBLISH on a cluster.

use crate::announce::Announcement;
use crate::feed::Feed;
use crate::{Backoff, ClientError, LogEntry, QueueClient, Target};
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
    /// An announcement that the queue's branding changed (queue-api sends it; nobody
    /// was promoted): absent from the payload otherwise, so older readers see an event
    /// that promoted nobody.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub branding: bool,
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
    subscribe(target, PROMOTED_PATTERN, promoted_channel, event_of)
}

/// How one subscription round ended.
enum Round {
    /// Nobody listens any more: stop.
    Unheard,
    /// The subscription failed or closed; `connected` when it had been open.
    Lost { connected: bool },
}

/// Runs subscription rounds on a task until nobody listens, waiting between two
/// rounds a [`Backoff`] from 100 ms up to 5 s (from 100 ms again after a round that
/// had connected).
fn keep_subscribed<T, R, F>(target: Target, round: R) -> mpsc::Receiver<T>
where
    T: Send + 'static,
    R: Fn(Target, mpsc::Sender<T>) -> F + Send + 'static,
    F: std::future::Future<Output = Round> + Send,
{
    let (tx, rx) = mpsc::channel(1024);
    tokio::spawn(async move {
        let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(5));
        loop {
            if tx.is_closed() {
                return;
            }
            match round(target.clone(), tx.clone()).await {
                Round::Unheard => return,
                Round::Lost { connected: true } => backoff.reset(),
                Round::Lost { connected: false } => {}
            }
            tokio::time::sleep(backoff.next_delay()).await;
        }
    });
    rx
}

/// Sends on what `feed` hears and `parse` reads (other payloads are skipped) until
/// it closes (false) or nobody listens (true).
async fn forward<T>(feed: &mut Feed, tx: &mpsc::Sender<T>, parse: fn(&Announcement) -> Option<T>) -> bool {
    while let Some(heard) = feed.next().await {
        if let Some(item) = parse(&heard) {
            if tx.send(item).await.is_err() {
                return true;
            }
        }
    }
    false
}

fn event_of(heard: &Announcement) -> Option<QueueEvent> {
    serde_json::from_slice(&heard.payload).ok()
}

/// One sharded subscription with its discovery loop (each queue's `channel`); Ok
/// once nobody listens.
async fn sharded_round<T>(
    target: &Target,
    tx: &mpsc::Sender<T>,
    channel: fn(&str) -> String,
    parse: fn(&Announcement) -> Option<T>,
) -> Result<(), ClientError> {
    let (mut feed, channels) = Feed::open(target, PROMOTED_PATTERN, Some(Duration::from_secs(5))).await?;
    let client = QueueClient::connect_target(target, crate::LazyClient::service_options()).await?;
    let discover = async {
        loop {
            let mut queues = client.scan_queues().await.unwrap_or_default();
            queues.extend(client.registered_queues().await.unwrap_or_default());
            for q in queues.iter().filter(|q| keys::check_queue(q.as_bytes()).is_ok()) {
                if let Err(e) = channels.add(&channel(q)).await {
                    tracing::debug!(queue = q, error = %e, "cannot subscribe yet");
                }
            }
            tokio::time::sleep(CLUSTER_DISCOVER_EVERY).await;
        }
    };
    tokio::select! {
        () = discover => unreachable!("the discovery loop never ends"),
        done = forward(&mut feed, tx, parse) => if done { Ok(()) } else { Err(ClientError::Unavailable("the event feed closed".into())) },
    }
}

/// Subscribes on what `target` names: on one server by `pattern`, on a cluster each
/// discovered queue's `channel` on its shard; reconnecting with backoff.
fn subscribe<T: Send + 'static>(
    target: Target,
    pattern: &'static str,
    channel: fn(&str) -> String,
    parse: fn(&Announcement) -> Option<T>,
) -> mpsc::Receiver<T> {
    if target.cluster {
        return keep_subscribed(target, move |target, tx| async move {
            match sharded_round(&target, &tx, channel, parse).await {
                Ok(()) => Round::Unheard,
                Err(e) => {
                    tracing::warn!(error = %e, "event subscription unavailable; retrying");
                    Round::Lost { connected: false }
                }
            }
        });
    }
    keep_subscribed(target, move |target, tx| async move {
        let Ok((mut feed, _)) = Feed::open(&target, pattern, None).await else {
            return Round::Lost { connected: false };
        };
        if forward(&mut feed, &tx, parse).await {
            Round::Unheard
        } else {
            Round::Lost { connected: true }
        }
    })
}

/// A change log entry of a queue, as published by the command that wrote it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// The queue whose log it is.
    pub queue: String,
    /// The entry, as written.
    pub entry: LogEntry,
}

/// The changes channel of `queue`.
pub fn changes_channel(queue: &str) -> String {
    keys::key(queue, keys::CHANGES)
}

fn change_of(heard: &Announcement) -> Option<Change> {
    let queue = std::str::from_utf8(keys::owner_queue(heard.channel.as_bytes())?).ok()?;
    if heard.channel != changes_channel(queue) {
        return None;
    }
    let entry = LogEntry::from_message(&heard.payload).ok()?;
    Some(Change { queue: queue.to_string(), entry })
}

/// Receives every queue's change log entries as they are written (docs/commands.md,
/// "The change log and watchers"), from what `target` names, as [`subscribe_target`]
/// does events. Entries published while disconnected are lost: watchers compare the
/// log's number with what they applied and read what they missed.
pub fn subscribe_changes(target: Target) -> mpsc::Receiver<Change> {
    subscribe(target, keys::CHANGES_PATTERN, changes_channel, change_of)
}

/// Receives every queue's events from one server, reconnecting (with backoff) when
/// the server goes away; events sent while disconnected are lost, which is why
/// subscribers also refresh on a timer.
pub fn subscribe_all(url: String) -> mpsc::Receiver<QueueEvent> {
    subscribe_all_target(Target::single(url))
}

fn subscribe_all_target(target: Target) -> mpsc::Receiver<QueueEvent> {
    subscribe(target, PROMOTED_PATTERN, promoted_channel, event_of)
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
        assert_eq!(
            e,
            QueueEvent { queue: "q-1".into(), promoted: 2, waiting: 40, at_ms: 1_700_000_000_000, branding: false }
        );
        assert_eq!(serde_json::to_string(&e).unwrap(), payload);
    }

    #[test]
    fn a_published_change_reads_as_its_log_entry() {
        let heard = |channel: &str, payload: &str| Announcement { channel: channel.into(), payload: payload.into() };
        let c = change_of(&heard("queue:{q-1}:changes", "1700-3 n 7 head 40 gone 2 left 44,47 waiting 90")).unwrap();
        assert_eq!(c.queue, "q-1");
        let want = LogEntry {
            id: "1700-3".into(),
            n: 7,
            head: Some((40, 2)),
            left: vec![44, 47],
            waiting: 90,
            ..LogEntry::default()
        };
        assert_eq!(c.entry, want);
        let c = change_of(&heard(
            "queue:{q}:changes",
            "1700-4 n 8 head 52 gone 3 tickets 50.aB-_x,52.Zz09 left 60,61 again 61 waiting 80",
        ))
        .unwrap();
        assert_eq!(c.entry.tickets, [(50, "50.aB-_x".to_string()), (52, "52.Zz09".to_string())]);
        assert_eq!((c.entry.left.as_slice(), c.entry.again.as_slice()), (&[60, 61][..], &[61][..]));
        assert_eq!(c.entry.ticket_of(52), Some("52.Zz09"));
        assert_eq!(c.entry.ticket_of(51), None);
        assert_eq!(c.entry.ticket_of(5), None, "a number is the whole part before the dot");
        let c = change_of(&heard("queue:{q}:changes", "1-0 n 1 reset 1 waiting 2")).unwrap();
        assert!(c.entry.reset && c.entry.head.is_none() && c.entry.left.is_empty());
        assert_eq!(change_of(&heard("queue:{q}:promoted", "1-0 n 1 waiting 2")), None, "another channel");
        assert_eq!(change_of(&heard("queue:{q}:changes", "1-0 waiting 2")), None, "no number");
        assert_eq!(change_of(&heard("queue:{q}:changes", "1-0 n x waiting 2")), None, "not a number");
        assert_eq!(change_of(&heard("queue:{q}:changes", "")), None);
    }
}
