//! The room across instances: every broadcast frame (chat, system, presence deltas)
//! is published to the room's channel, `chat:{Q}:room`, as
//! `{"origin": <instance>, "sentAtMs": <ms>, "frame": <frame>}`, and every instance,
//! the sender's included, hands the frames it hears to its local sockets. One
//! delivery path for all, so every socket sees the room's frames in the same order.
//!
//! The channel carries the queue's hash tag, so on a cluster it lives in the queue's
//! slot (SPUBLISH). On one server the subscriber is one dedicated pub/sub connection
//! per instance (PSUBSCRIBE `chat:{*}:room`, [`keys::ROOM_PATTERN`]); on a cluster it
//! is sharded pub/sub (SSUBSCRIBE), room by room: a session's room is subscribed on
//! its shard before the session is served ([`join_room`]), so a room's traffic stays
//! on its queue's shard. Reconnected with backoff; after a reconnection the caller's
//! `resubscribed` runs (the rooms get a fresh presence snapshot, since deltas sent
//! meanwhile were lost: `presence::resync`).

use crate::frames;
use crate::AppState;
use queue_client::feed::Feed;
use queue_client::{Backoff, ClientError};
use queue_core::keys;
use serde::Deserialize;
use serde_json::value::RawValue;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio_tungstenite::tungstenite::Utf8Bytes;

/// What goes on the channel: the frame as is, with who sent it and when.
pub fn envelope(origin: &str, sent_at_ms: u64, frame: &str) -> String {
    let origin = serde_json::to_string(origin).expect("a string serializes");
    format!("{{\"origin\":{origin},\"sentAtMs\":{sent_at_ms},\"frame\":{frame}}}")
}

#[derive(Deserialize)]
struct Heard<'a> {
    origin: String,
    #[serde(rename = "sentAtMs", default)]
    sent_at_ms: u64,
    #[serde(borrow)]
    frame: &'a RawValue,
}

/// Opens an envelope: origin, sending time and the frame's JSON text.
pub fn open(payload: &[u8]) -> Option<(String, u64, String)> {
    let heard: Heard = serde_json::from_slice(payload).ok()?;
    Some((heard.origin, heard.sent_at_ms, heard.frame.get().to_string()))
}

/// Publishes a frame to the room on every instance.
pub async fn publish(state: &AppState, queue: &str, frame: &str) -> Result<(), ClientError> {
    let client = state.store.client().await.ok_or_else(|| ClientError::Unavailable("not connected yet".into()))?;
    client.publish_room(queue, &envelope(&state.instance_id, frames::now_ms(), frame)).await?;
    state.metrics.messages_broadcast.increment(1);
    Ok(())
}

/// Keeps the room subscription up for the life of the process; `resubscribed` runs
/// each time it is up again after a loss.
pub async fn subscribe(state: Arc<AppState>, resubscribed: impl Fn(Arc<AppState>)) {
    let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(5));
    let mut first = true;
    loop {
        match listen(&state, first, &resubscribed).await {
            Ok(()) => {
                first = false;
                backoff.reset();
                tracing::warn!("room subscription lost; reconnecting");
            }
            Err(e) => tracing::warn!(error = %e, "room subscription unavailable; retrying"),
        }
        state.room_feed_up.store(false, Ordering::SeqCst);
        tokio::time::sleep(backoff.next_delay()).await;
    }
}

/// Listens to `queue`'s room (on a cluster: SSUBSCRIBE on its shard, awaited, so
/// that the session hears its own first frames); nothing to do on one server.
pub async fn join_room(state: &AppState, queue: &str) {
    let channels = state.rooms.channels();
    if let Err(e) = channels.add(&keys::room_channel(queue)).await {
        tracing::warn!(queue, error = %e, "cannot subscribe to the room yet; the feed retries");
    }
}

/// One subscription, until its connection drops.
async fn listen(state: &Arc<AppState>, first: bool, resubscribed: impl Fn(Arc<AppState>)) -> Result<(), ClientError> {
    let target = state.config.common.target();
    let (mut rooms, channels) = Feed::open(&target, keys::ROOM_PATTERN, Some(Duration::from_secs(2))).await?;
    for queue in state.rooms.queues() {
        channels.add(&keys::room_channel(&queue)).await?;
    }
    state.rooms.set_channels(channels);
    state.room_feed_up.store(true, Ordering::SeqCst);
    if !first {
        resubscribed(state.clone());
    }
    while let Some(heard) = rooms.next().await {
        let Some(queue) = keys::room_of(&heard.channel) else { continue };
        let Some((origin, sent_at_ms, frame)) = open(&heard.payload) else {
            tracing::debug!(channel = heard.channel, "unreadable room message ignored");
            continue;
        };
        if origin == state.instance_id && sent_at_ms > 0 {
            state.latency.record(frames::now_ms().saturating_sub(sent_at_ms));
        }
        state.rooms.deliver(queue, Utf8Bytes::from(frame));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn envelopes_round_trip_the_frame_verbatim() {
        let frame = frames::chat(0, "a\"b", "hi");
        let env = envelope("chat-1", 42, &frame);
        let v: serde_json::Value = serde_json::from_str(&env).unwrap();
        assert_eq!(v["origin"], "chat-1");
        assert_eq!(v["frame"]["type"], "MESSAGE_RECEIVE");
        assert_eq!(open(env.as_bytes()), Some(("chat-1".into(), 42, frame)));
        assert_eq!(open(b"{not json"), None);
        assert_eq!(open(br#"{"origin":"x"}"#), None);
    }
}
