//! Who is inside a queue: `queue:{Q}:active` maps each user inside to its nickname
//! (written by TICKET.CLAIM) and `queue:{Q}:sessions` holds each lease's expiry. A
//! lease that ran out stays in both until the next PROMOTE sweeps it.

use crate::reply::{self, Fields};
use crate::{ClientError, QueueClient};
use queue_core::keys::{key, ACTIVE, SESSIONS};
use std::collections::{HashMap, HashSet};

impl QueueClient {
    /// The users whose lease is live at `now_ms` (`ZRANGE queue:{Q}:sessions
    /// (now +inf BYSCORE`).
    pub async fn live_sessions(&self, queue: &str, now_ms: u64) -> Result<HashSet<String>, ClientError> {
        let mut cmd = redis::cmd("ZRANGE");
        cmd.arg(key(queue, SESSIONS)).arg(format!("({now_ms}")).arg("+inf").arg("BYSCORE");
        Ok(reply::strings(self.raw(&cmd).await?, "ZRANGE sessions")?.into_iter().collect())
    }

    /// The users inside by nickname (`HGETALL queue:{Q}:active`), lapsed leases included.
    pub async fn active_users(&self, queue: &str) -> Result<HashMap<String, String>, ClientError> {
        let mut cmd = redis::cmd("HGETALL");
        cmd.arg(key(queue, ACTIVE));
        Ok(Fields::new(self.raw(&cmd).await?, "HGETALL active")?.into_strings())
    }

    /// The users with a live lease at `now_ms`, userId -> nickname.
    pub async fn present_users(&self, queue: &str, now_ms: u64) -> Result<HashMap<String, String>, ClientError> {
        let live = self.live_sessions(queue, now_ms).await?;
        let mut users = self.active_users(queue).await?;
        users.retain(|user, _| live.contains(user));
        Ok(users)
    }
}
