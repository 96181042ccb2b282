//! Listening on the queues' channels, on one server or a cluster.
//!
//! On one server a [`Feed`] is a pattern subscription (PSUBSCRIBE) on one dedicated
//! connection: every queue's channel at once. On a cluster it is sharded pub/sub: the
//! channels carry their queue's hash tag, so each lives in its queue's slot, is
//! published with SPUBLISH on that shard only, and is listened to with SSUBSCRIBE,
//! channel by channel ([`Channels::add`]), on the shard's primary. Sharded pub/sub has
//! no patterns, so whoever listens names the channels it wants.
//!
//! Each channel is subscribed once. The cluster connection re-sends the subscriptions
//! after it reconnected or refreshed the topology, which happens when a command
//! fails; a primary that died (its connection closed: a `disconnection` push) or lost
//! a channel's slot (the server's `sunsubscribe` push) while nothing else is sent is
//! noticed from those pushes, and then every channel is subscribed again (on a moved
//! slot that makes the client follow the topology), every [`RESUBSCRIBE_EVERY`] until
//! all succeed. Messages published while a subscription is down are lost, as with any
//! pub/sub: listeners also refresh on a timer.

use crate::announce::Announcement;
use crate::conn::cluster_builder;
use crate::{ClientError, ConnectOptions, Target};
use redis::cluster_async::ClusterConnection;
use redis::{PushInfo, PushKind, Value};
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;

/// How often a sharded feed tries again to subscribe its channels, after a
/// disconnection or a slot moved, until every one succeeded.
pub const RESUBSCRIBE_EVERY: Duration = Duration::from_secs(1);

/// A subscription to the queues' channels.
pub struct Feed {
    inner: Inner,
}

enum Inner {
    Pattern(redis::aio::PubSub),
    Sharded {
        pushes: mpsc::UnboundedReceiver<PushInfo>,
        keeper: tokio::task::JoinHandle<()>,
        /// Told of a disconnection or a slot moved ([`keep_subscribed`]).
        lost: Arc<tokio::sync::Notify>,
    },
}

impl Drop for Feed {
    fn drop(&mut self) {
        if let Inner::Sharded { keeper, .. } = &self.inner {
            keeper.abort();
        }
    }
}

impl std::fmt::Debug for Feed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Feed").field("sharded", &matches!(self.inner, Inner::Sharded { .. })).finish()
    }
}

/// Names the channels a sharded feed listens to (cheap to clone). For a pattern feed
/// every channel of the pattern is heard already and [`Channels::add`] does nothing.
#[derive(Clone, Default)]
pub struct Channels {
    sharded: Option<Arc<Sharded>>,
}

struct Sharded {
    conn: ClusterConnection,
    channels: Mutex<BTreeSet<String>>,
    deadline: Duration,
}

impl std::fmt::Debug for Channels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Channels").field("sharded", &self.sharded.is_some()).finish()
    }
}

async fn ssubscribe(conn: &ClusterConnection, channel: &str, deadline: Duration) -> Result<(), ClientError> {
    let mut c = conn.clone();
    match tokio::time::timeout(deadline, c.ssubscribe(channel)).await {
        Ok(r) => Ok(r?),
        Err(_) => Err(ClientError::Unavailable(format!("SSUBSCRIBE {channel}: no reply within {deadline:?}"))),
    }
}

impl Channels {
    /// Listens to `channel` too (SSUBSCRIBE on its shard), once the server confirmed;
    /// nothing to do when already listening or on a pattern feed.
    pub async fn add(&self, channel: &str) -> Result<(), ClientError> {
        let Some(s) = &self.sharded else { return Ok(()) };
        if s.channels.lock().unwrap().contains(channel) {
            return Ok(());
        }
        ssubscribe(&s.conn, channel, s.deadline).await?;
        s.channels.lock().unwrap().insert(channel.to_string());
        Ok(())
    }

    /// Whether the feed is sharded (a cluster's).
    pub fn is_sharded(&self) -> bool {
        self.sharded.is_some()
    }

    /// The channels listened to (sharded feeds only).
    pub fn listed(&self) -> Vec<String> {
        self.sharded.as_ref().map(|s| s.channels.lock().unwrap().iter().cloned().collect()).unwrap_or_default()
    }
}

impl Feed {
    /// Opens a feed on `target`: on one server, PSUBSCRIBE `pattern` (giving up after
    /// `connect_timeout`, if any); on a cluster, a sharded feed with no channel yet.
    pub async fn open(
        target: &Target,
        pattern: &str,
        connect_timeout: Option<Duration>,
    ) -> Result<(Feed, Channels), ClientError> {
        let limit = connect_timeout.unwrap_or(Duration::from_secs(3600));
        let timed_out = || ClientError::Unavailable("connecting for pub/sub timed out".into());
        if !target.cluster {
            let client = target.client()?;
            let mut pubsub =
                tokio::time::timeout(limit, client.get_async_pubsub()).await.map_err(|_| timed_out())??;
            pubsub.psubscribe(pattern).await?;
            return Ok((Feed { inner: Inner::Pattern(pubsub) }, Channels::default()));
        }
        let options = ConnectOptions { connection_timeout: limit.min(Duration::from_secs(2)), ..Default::default() };
        let (tx, pushes) = mpsc::unbounded_channel();
        let client =
            cluster_builder(target, &options)?.use_protocol(redis::ProtocolVersion::RESP3).push_sender(tx).build()?;
        let conn = tokio::time::timeout(limit, client.get_async_connection()).await.map_err(|_| timed_out())??;
        let sharded =
            Arc::new(Sharded { conn, channels: Mutex::new(BTreeSet::new()), deadline: options.response_timeout });
        let lost = Arc::new(tokio::sync::Notify::new());
        let keeper = tokio::spawn(keep_subscribed(Arc::downgrade(&sharded), lost.clone()));
        Ok((Feed { inner: Inner::Sharded { pushes, keeper, lost } }, Channels { sharded: Some(sharded) }))
    }

    /// The next message; `None` once the connection dropped for good (a pattern
    /// feed's connection, or every handle on a sharded one).
    pub async fn next(&mut self) -> Option<Announcement> {
        match &mut self.inner {
            Inner::Pattern(pubsub) => {
                use futures_util::StreamExt;
                let msg = pubsub.on_message().next().await?;
                Some(Announcement {
                    channel: msg.get_channel_name().to_string(),
                    payload: msg.get_payload_bytes().to_vec(),
                })
            }
            Inner::Sharded { pushes, lost, .. } => loop {
                let push = pushes.recv().await?;
                if matches!(push.kind, PushKind::Disconnection | PushKind::SUnsubscribe) {
                    lost.notify_one();
                    continue;
                }
                if !matches!(push.kind, PushKind::SMessage | PushKind::Message) {
                    continue;
                }
                let mut data = push.data.into_iter();
                let (Some(channel), Some(payload)) = (data.next(), data.next()) else { continue };
                let Some(channel) = crate::reply::text(&channel) else { continue };
                let payload = match payload {
                    Value::BulkString(b) => b,
                    other => crate::reply::text(&other).unwrap_or_default().into_bytes(),
                };
                return Some(Announcement { channel, payload });
            },
        }
    }
}

/// Subscribes every channel again after a disconnection or a slot moved (told by
/// [`Feed::next`]), every [`RESUBSCRIBE_EVERY`] until all succeeded, while the feed
/// lives; nothing while the subscriptions stand.
async fn keep_subscribed(feed: std::sync::Weak<Sharded>, lost: Arc<tokio::sync::Notify>) {
    loop {
        lost.notified().await;
        loop {
            // Past the burst of pushes one failure brings.
            tokio::time::sleep(Duration::from_millis(100)).await;
            let Some(s) = feed.upgrade() else { return };
            let channels: Vec<String> = s.channels.lock().unwrap().iter().cloned().collect();
            let mut failed = false;
            for channel in channels {
                if let Err(e) = ssubscribe(&s.conn, &channel, s.deadline).await {
                    tracing::debug!(channel, error = %e, "resubscribing failed; trying again");
                    failed = true;
                }
            }
            if !failed {
                break;
            }
            drop(s);
            tokio::time::sleep(RESUBSCRIBE_EVERY).await;
        }
    }
}
