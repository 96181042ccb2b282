//! Session leases as the services that hold sessions keep them alive (chat-server,
//! the gate): each tick, one `SESSION.HEARTBEAT` per queue naming every user whose
//! lease the instance renews, at most [`HEARTBEAT_BATCH`] per call (a big queue takes
//! several), with the reply read back as the users whose lease is gone (lapsed, or
//! ended at another instance). Which users to renew and what to do with the gone ones
//! is each service's own policy.

use crate::{ClientError, QueueClient};
use std::time::{Duration, Instant};

/// Most users named in one `SESSION.HEARTBEAT` call (more take several).
pub const HEARTBEAT_BATCH: usize = 5000;

/// How one `SESSION.HEARTBEAT` call of [`QueueClient::renew_leases`] went.
#[derive(Debug)]
pub struct Renewal<'u, S> {
    /// How long the call took.
    pub took: Duration,
    /// The users named in the call whose lease is gone: their access ends. Or the
    /// call's failure (nothing is known of its users; the next tick asks again).
    pub gone: Result<Vec<&'u S>, ClientError>,
}

impl QueueClient {
    /// Renews the leases of `users` of `queue`: `SESSION.HEARTBEAT` with
    /// [`HEARTBEAT_BATCH`] of them at a time, `each` told after every call how it went.
    /// No user, no call.
    pub async fn renew_leases<'u, S: AsRef<str>>(
        &self,
        queue: &str,
        users: &'u [S],
        mut each: impl FnMut(Renewal<'u, S>),
    ) {
        for batch in users.chunks(HEARTBEAT_BATCH) {
            let started = Instant::now();
            let reply = self.heartbeat(queue, batch).await;
            each(Renewal { took: started.elapsed(), gone: reply.map(|live| gone(batch, &live)) });
        }
    }
}

/// The users whose flag in `live` (the heartbeat's reply, in the order asked) is false.
fn gone<'u, S>(users: &'u [S], live: &[bool]) -> Vec<&'u S> {
    users.iter().zip(live).filter(|(_, live)| !**live).map(|(user, _)| user).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gone_are_those_flagged_false_in_order() {
        let users = ["a", "b", "c", "d"];
        assert_eq!(gone(&users, &[true, false, true, false]), [&"b", &"d"]);
        assert!(gone(&users, &[true; 4]).is_empty());
        assert!(gone::<&str>(&[], &[]).is_empty());
    }
}
