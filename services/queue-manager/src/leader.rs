//! The leader lease: of all the replicas, only the holder of key
//! `queue-manager:leader` promotes.
//!
//! - Acquire: `SET queue-manager:leader <token> NX PX <lease>`, the token being
//!   random per process.
//! - Renew (every lease/3): a script that PEXPIREs the key only while it still holds
//!   our token, so a replica whose lease lapsed cannot extend someone else's.
//! - Release (graceful shutdown): a script that DELs the key only while it holds our
//!   token, so a standby takes over at its next attempt instead of a lease later.
//!
//! Fencing. The server's expiry starts when it runs the command, which is after we
//! sent it, so "sent at + lease" is a time before which nobody else can hold the key.
//! We promote only while `now < sent at + lease - margin` (tokio's monotonic clock),
//! checked right before every PROMOTE. A replica that was paused (GC, SIGSTOP, an
//! overloaded host) past that point promotes nothing until a renewal succeeds, and
//! the renewal fails if another replica took the key meanwhile. The margin (lease/3)
//! covers the time between that check and the server running the PROMOTE.

use queue_client::{ClientError, QueueClient};
use std::sync::Mutex;
use std::time::Duration;
use tokio::time::Instant;

/// The lease key. No hash tag: on a cluster it lives wherever its slot is.
pub const LEADER_KEY: &str = queue_core::keys::LEADER;

/// What a call to [`Lease::refresh`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// We held the lease and still do.
    Kept,
    /// We did not hold it and now do.
    Acquired,
    /// We held it (as far as we knew) and another replica holds it now, or the key
    /// expired and was taken.
    Lost,
    /// Someone else holds it, as before.
    Standby,
}

/// This replica's view of the lease.
#[derive(Debug)]
pub struct Lease {
    key: String,
    token: String,
    period: Duration,
    margin: Duration,
    /// Until when we may promote; `None` when we do not believe we hold the key.
    valid_until: Mutex<Option<Instant>>,
}

impl Lease {
    /// A lease of `period` on `key`, with a fresh random token.
    pub fn new(key: impl Into<String>, period: Duration) -> Lease {
        let token = uuid::Uuid::new_v4().simple().to_string();
        Lease { key: key.into(), token, period, margin: period / 3, valid_until: Mutex::new(None) }
    }

    /// This replica's token (the key's value while it leads).
    pub fn token(&self) -> &str {
        &self.token
    }

    /// The lease period.
    pub fn period(&self) -> Duration {
        self.period
    }

    /// Whether this replica may promote now: it holds the lease and the fencing
    /// deadline has not passed.
    pub fn is_held(&self) -> bool {
        self.valid_until.lock().unwrap().is_some_and(|t| Instant::now() < t)
    }

    fn held_until(&self, sent_at: Instant) {
        *self.valid_until.lock().unwrap() = Some(sent_at + self.period - self.margin);
    }

    fn forget(&self) {
        *self.valid_until.lock().unwrap() = None;
    }

    /// Renews the lease if we hold it, else tries to acquire it. On an error the
    /// deadline is left as it was: it runs out by itself if the store stays away.
    pub async fn refresh(&self, client: &QueueClient) -> Result<Change, ClientError> {
        let believed = self.valid_until.lock().unwrap().is_some();
        if believed {
            let sent_at = Instant::now();
            if client.renew_lease(&self.key, &self.token, self.period).await? {
                self.held_until(sent_at);
                return Ok(Change::Kept);
            }
            self.forget();
        }
        let sent_at = Instant::now();
        if client.acquire_lease(&self.key, &self.token, self.period).await? {
            self.held_until(sent_at);
            // The key expired under us and nobody else took it: ours again.
            return Ok(if believed { Change::Kept } else { Change::Acquired });
        }
        Ok(if believed { Change::Lost } else { Change::Standby })
    }

    /// Gives the lease up (if we hold it), so that a standby takes over at once.
    /// Promoting stops before the call is sent.
    pub async fn release(&self, client: &QueueClient) -> Result<bool, ClientError> {
        self.forget();
        client.release_lease(&self.key, &self.token).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_differ() {
        let a = Lease::new(LEADER_KEY, Duration::from_secs(3));
        let b = Lease::new(LEADER_KEY, Duration::from_secs(3));
        assert_ne!(a.token(), b.token());
        assert_eq!(a.token().len(), 32);
    }

    /// The fencing deadline: a lease renewed at t is good until t + lease - lease/3,
    /// and not a moment later, whatever the store says.
    #[tokio::test(start_paused = true)]
    async fn fencing_deadline_runs_on_the_local_clock() {
        let lease = Lease::new(LEADER_KEY, Duration::from_millis(3000));
        assert!(!lease.is_held());
        lease.held_until(Instant::now());
        assert!(lease.is_held());
        tokio::time::advance(Duration::from_millis(1999)).await;
        assert!(lease.is_held());
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(!lease.is_held(), "a paused leader must stop at lease - margin");
        lease.held_until(Instant::now());
        assert!(lease.is_held());
        lease.forget();
        assert!(!lease.is_held());
    }
}
