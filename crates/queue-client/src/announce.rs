//! Pub/sub on the queues' channels: every channel carries its queue's hash tag, so on
//! a cluster it lives in the queue's slot and is published with SPUBLISH (PUBLISH on
//! a single server). [`Subscription`] is by pattern, on one server;
//! [`crate::feed::Feed`] listens on one server or a cluster.
//!
//! Channels: a queue's promotion announcements ([`crate::events`],
//! `queue:{Q}:promoted`) and the chat rooms (`chat:{Q}:room`, [`keys::room_channel`]).

use crate::reply::int;
use crate::{ClientError, QueueClient};
use queue_core::keys;
use std::time::Duration;

/// One message heard on a subscription.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Announcement {
    /// The channel it was published to.
    pub channel: String,
    /// What was published.
    pub payload: Vec<u8>,
}

/// A pattern subscription on one dedicated connection.
pub struct Subscription {
    pubsub: redis::aio::PubSub,
}

impl std::fmt::Debug for Subscription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscription").finish_non_exhaustive()
    }
}

impl Subscription {
    /// Opens a connection to the server at `url` (giving up after `connect_timeout`,
    /// if any) and subscribes to the channels matching `pattern`.
    pub async fn pattern(url: &str, pattern: &str, connect_timeout: Option<Duration>) -> Result<Self, ClientError> {
        let client = crate::Target::single(url).client()?;
        let mut pubsub = match connect_timeout {
            Some(limit) => tokio::time::timeout(limit, client.get_async_pubsub())
                .await
                .map_err(|_| ClientError::Unavailable("connecting for pub/sub timed out".into()))??,
            None => client.get_async_pubsub().await?,
        };
        pubsub.psubscribe(pattern).await?;
        Ok(Subscription { pubsub })
    }

    /// Every chat room's channel ([`keys::ROOM_PATTERN`]).
    pub async fn rooms(url: &str, connect_timeout: Option<Duration>) -> Result<Self, ClientError> {
        Subscription::pattern(url, keys::ROOM_PATTERN, connect_timeout).await
    }

    /// The next message; `None` once the connection dropped.
    pub async fn next(&mut self) -> Option<Announcement> {
        use futures_util::StreamExt;
        let msg = self.pubsub.on_message().next().await?;
        Some(Announcement { channel: msg.get_channel_name().to_string(), payload: msg.get_payload_bytes().to_vec() })
    }
}

impl QueueClient {
    /// Publishes `payload` on `channel` (SPUBLISH on a cluster, routed by the
    /// channel's slot; PUBLISH otherwise); returns how many subscribers got it.
    pub(crate) async fn publish(&self, channel: &str, payload: &str) -> Result<u64, ClientError> {
        let mut cmd = redis::cmd(if self.is_cluster() { "SPUBLISH" } else { "PUBLISH" });
        cmd.arg(channel).arg(payload);
        Ok(int(&self.raw(&cmd).await?).unwrap_or(0).max(0) as u64)
    }

    /// Publishes `payload` to `queue`'s chat room ([`keys::room_channel`]); returns
    /// how many subscribers got it.
    pub async fn publish_room(&self, queue: &str, payload: &str) -> Result<u64, ClientError> {
        self.publish(&keys::room_channel(queue), payload).await
    }
}
