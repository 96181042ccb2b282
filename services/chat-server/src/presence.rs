//! Who is in a room, for the snapshot a new connection gets (seed 004: the full list
//! on join, then only deltas).
//!
//! The queue itself knows, across every instance: `queue:{Q}:active` maps each user
//! inside to its nickname (written by TICKET.CLAIM), and `queue:{Q}:sessions` holds
//! each lease's expiry. A lease that ran out stays in both until the next PROMOTE
//! sweeps it, so the snapshot keeps only users whose lease is still live.
//!
//! Then the deltas ([`tell`]), and a fresh snapshot for every room after the room
//! feed was lost and is back ([`resync`]).

use crate::frames::{self, Person};
use crate::{bus, AppState};
use queue_client::{ClientError, QueueClient};
use std::sync::Arc;
use tokio_tungstenite::tungstenite::Utf8Bytes;

/// Everyone with a live session in `queue` at `now_ms`, by nickname.
pub async fn snapshot(client: &QueueClient, queue: &str, now_ms: u64) -> Result<Vec<Person>, ClientError> {
    let mut people: Vec<Person> = client
        .present_users(queue, now_ms)
        .await?
        .into_iter()
        .map(|(user_id, nickname)| Person { user_id, nickname })
        .collect();
    people.sort_by(|a, b| (&a.nickname, &a.user_id).cmp(&(&b.nickname, &b.user_id)));
    Ok(people)
}

/// Every presence tick, tells each room what changed on this instance since the last:
/// one system line and one `PRESENCE_JOINED` for all who joined, the same for those
/// who left. A crowd of N arriving together then costs each socket a few frames per
/// tick instead of one per arrival (N² in all). Runs until the shutdown flag is up.
pub async fn tell_loop(state: Arc<AppState>) {
    let state = &state;
    crate::every_tick(state, state.config.presence_tick, || tell(state)).await;
}

/// Publishes the changes noted since the last call.
pub async fn tell(state: &AppState) {
    for (queue, joined, left) in state.rooms.take_changes() {
        let now = frames::now_ms();
        let mut out = Vec::new();
        for (people, verb) in [(&joined, "joined"), (&left, "left")] {
            if people.is_empty() {
                continue;
            }
            out.push(frames::system(now, &frames::people_line(people, verb)));
            out.push(if verb == "joined" { frames::presence_joined(people) } else { frames::presence_left(people) });
        }
        for frame in out {
            if let Err(e) = bus::publish(state, &queue, &frame).await {
                tracing::warn!(queue, error = %e, "could not announce presence changes");
            }
        }
    }
}

/// How often, and how many times, a resync asks again for the rooms it could not read
/// (the room feed may be back before the store connection is).
const RESYNC_RETRY: std::time::Duration = std::time::Duration::from_millis(250);
const RESYNC_ATTEMPTS: u32 = 120;

/// Sends each room's local sockets the full presence list again (after the room feed
/// was lost: the deltas sent meanwhile never arrived). A room whose list could not be
/// read is asked for again, every 250 ms for half a minute or until shutdown.
pub async fn resync(state: Arc<AppState>) {
    let mut pending: Vec<String> = state.rooms.users().into_iter().map(|(q, _)| q).collect();
    let mut shutdown = state.shutdown.clone();
    for attempt in 1..=RESYNC_ATTEMPTS {
        if let Some(client) = state.store.client().await {
            let mut failed = Vec::new();
            for queue in pending {
                match snapshot(&client, &queue, frames::now_ms()).await {
                    Ok(people) => {
                        state.rooms.deliver(&queue, Utf8Bytes::from(frames::presence_snapshot(&people)));
                    }
                    Err(e) => {
                        tracing::debug!(queue, attempt, error = %e, "presence resync failed; asking again");
                        failed.push(queue);
                    }
                }
            }
            pending = failed;
        }
        if pending.is_empty() {
            return;
        }
        tokio::select! {
            _ = tokio::time::sleep(RESYNC_RETRY) => {}
            _ = crate::stopped(&mut shutdown) => return,
        }
    }
    tracing::warn!(rooms = ?pending, "presence resync gave up: these rooms get deltas only");
}
