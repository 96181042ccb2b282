//! Who is in a room, for the snapshot a new connection gets (seed 004: the full list
//! on join, then only deltas).
//!
//! The queue itself knows, across every instance: `queue:{Q}:active` maps each user
//! inside to its nickname (written by TICKET.CLAIM), and `queue:{Q}:sessions` holds
//! each lease's expiry. A lease that ran out stays in both until the next PROMOTE
//! sweeps it, so the snapshot keeps only users whose lease is still live.

use crate::frames::Person;
use queue_client::{ClientError, QueueClient};

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
