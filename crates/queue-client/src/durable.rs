//! Durable claims: a claim acknowledged only once `WAIT` (or `WAITAOF`) confirms that
//! the primary's replicas hold it, so that a failover right after the claim cannot
//! forget it and let the ticket in a second time.
//!
//! How the confirmation is asked: `WAIT` waits for the replication offset of the
//! connection's own last write. The claim is made on the connection `WAIT` then runs
//! on. A claim repeated by its holder (the retry after a claim that was not confirmed
//! in time) writes nothing, so a `WAIT` after it alone would confirm nothing (or only
//! an older write of that connection). The client therefore also renews the lease it
//! has just been given (`SESSION.HEARTBEAT Q user`, a write on the queue's primary,
//! after the claim's) and sends `WAIT` right behind it in one pipeline on the same
//! connection: the offset waited for covers the claim whichever connection made it,
//! first time or repeat.
//!
//! `WAIT` blocks its connection until it answers, so it never runs on the shared
//! connection (every other call would queue behind a replica that does not answer):
//! each confirmation borrows a connection of its own from a small pool, opened on
//! demand to the same store with the same settings.

use crate::conn::{Conn, Refusals};
use crate::{Claim, ClientError, ConnectOptions, Target};
use redis::Value;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The most `WAIT`s one client runs at once; further durable claims wait for one
/// of these connections.
pub const MAX_WAITING_CONNECTIONS: usize = 32;

/// How durable a claim must be before [`QueueClient::claim_as`](crate::QueueClient::claim_as)
/// acknowledges it. The default (`replicas` 0, `aof` false) is off: claims are
/// acknowledged as soon as the primary made them, as before.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Durability {
    /// Replicas that must hold the claim (`WAIT replicas timeout`). More than the
    /// primary has can never be confirmed.
    pub replicas: u32,
    /// How long to wait for them before answering [`ClientError::NotDurable`]
    /// (the claim itself stands: its holder's retry gets it again).
    pub timeout: Duration,
    /// Also wait until the claim is written to the append-only file: on the primary
    /// and on `replicas` replicas (`WAITAOF 1 replicas timeout`; every one of those
    /// servers needs `appendonly yes`).
    pub aof: bool,
}

impl Default for Durability {
    fn default() -> Self {
        Durability::OFF
    }
}

/// The longest wait a durability setting accepts.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(10);

impl Durability {
    /// Claims acknowledged once the primary made them (no `WAIT`).
    pub const OFF: Durability = Durability { replicas: 0, timeout: Duration::from_millis(200), aof: false };

    /// Whether claims wait for anything.
    pub fn is_on(&self) -> bool {
        self.replicas > 0 || self.aof
    }

    /// Checks the setting: a timeout from 1 ms to 10 s when on, at most 64 replicas.
    pub fn check(&self) -> Result<(), String> {
        if self.replicas > 64 {
            return Err(format!("durable replicas must be 0 to 64, got {}", self.replicas));
        }
        if self.is_on() && (self.timeout < Duration::from_millis(1) || self.timeout > MAX_TIMEOUT) {
            return Err(format!("durable timeout must be 1 to 10000 ms, got {} ms", self.timeout.as_millis()));
        }
        Ok(())
    }

    /// The command that waits: `WAIT n ms` or `WAITAOF 1 n ms`.
    fn wait_command(&self) -> redis::Cmd {
        let ms = self.timeout.as_millis().max(1) as u64;
        if self.aof {
            let mut c = redis::cmd("WAITAOF");
            c.arg(1).arg(self.replicas).arg(ms);
            c
        } else {
            let mut c = redis::cmd("WAIT");
            c.arg(self.replicas).arg(ms);
            c
        }
    }

    /// Whether the reply of [`Durability::wait_command`] confirms the setting; the
    /// shortfall described otherwise.
    fn confirmed(&self, reply: &Value) -> Result<(), ClientError> {
        let number = |v: &Value| match v {
            Value::Int(n) => Some(*n),
            _ => None,
        };
        let (local, replicas) = if self.aof {
            match reply {
                Value::Array(a) if a.len() == 2 => match (number(&a[0]), number(&a[1])) {
                    (Some(l), Some(r)) => (l, r),
                    _ => return Err(ClientError::protocol(format!("WAITAOF: expected two integers, got {reply:?}"))),
                },
                _ => return Err(ClientError::protocol(format!("WAITAOF: expected two integers, got {reply:?}"))),
            }
        } else {
            match number(reply) {
                Some(r) => (1, r),
                None => return Err(ClientError::protocol(format!("WAIT: expected an integer, got {reply:?}"))),
            }
        };
        if local >= 1 && replicas >= i64::from(self.replicas) {
            return Ok(());
        }
        let ms = self.timeout.as_millis();
        Err(ClientError::NotDurable(if self.aof {
            format!(
                "the claim was not on disk on the primary and {} replicas within {ms} ms \
                 (primary: {}, replicas: {replicas}); retry with the same holder",
                self.replicas,
                if local >= 1 { "yes" } else { "no" },
            )
        } else {
            format!(
                "the claim was not confirmed by {} replicas within {ms} ms (confirmed by {replicas}); \
                 retry with the same holder",
                self.replicas
            )
        }))
    }
}

/// The connections `WAIT` runs on, one confirmation at a time each.
pub(crate) struct Waiters {
    pub(crate) durability: Durability,
    target: Target,
    options: ConnectOptions,
    refusals: Arc<Refusals>,
    idle: Mutex<Vec<Conn>>,
    permits: tokio::sync::Semaphore,
}

impl Waiters {
    pub(crate) fn new(
        durability: Durability,
        target: Target,
        options: ConnectOptions,
        refusals: Arc<Refusals>,
    ) -> Self {
        Waiters {
            durability,
            target,
            options,
            refusals,
            idle: Mutex::new(Vec::new()),
            permits: tokio::sync::Semaphore::new(MAX_WAITING_CONNECTIONS),
        }
    }

    /// Makes the claim `claim` on a connection of its own, then renews the claimed
    /// session (`heartbeat` of the claim's user) and waits on that same connection
    /// until the setting is confirmed: the claim, [`ClientError::NotDurable`] when it
    /// was not confirmed in time (or the session was gone, so there was nothing to
    /// confirm), or the claim's refusal, or why the store could not be asked.
    ///
    /// The claim goes on the waiting connection too so that its own write (a first
    /// claim) counts for `WAIT` even when the renewal writes nothing new (a renewal in
    /// the same millisecond as the claim gives the lease the deadline it has).
    pub(crate) async fn claim(
        &self,
        claim: &redis::Cmd,
        queue: &str,
        heartbeat: impl Fn(&str) -> redis::Cmd,
    ) -> Result<Claim, ClientError> {
        self.confirm(claim, "TICKET.CLAIM", queue, heartbeat, |v| Claim::from_value(v).map(Some))
            .await?
            .ok_or_else(|| ClientError::protocol("TICKET.CLAIM: no claim in the reply"))
    }

    /// [`Waiters::claim`] for `QUEUE.PASS` (`pass`): a nil reply (no pass, nothing
    /// written) is `None` at once; a pass is confirmed as a claim is, and when it is
    /// not, [`ClientError::NotDurable`] names the ticket to claim again with the
    /// same holder.
    pub(crate) async fn pass(
        &self,
        pass: &redis::Cmd,
        queue: &str,
        heartbeat: impl Fn(&str) -> redis::Cmd,
    ) -> Result<Option<Claim>, ClientError> {
        let mut ticket = None;
        let r = self
            .confirm(pass, "QUEUE.PASS", queue, heartbeat, |v| {
                let c = Claim::from_pass(v)?;
                ticket = c.as_ref().map(|c| c.ticket_id.clone());
                Ok(c)
            })
            .await;
        match (r, ticket) {
            (Err(ClientError::NotDurable(why)), Some(t)) => {
                Err(ClientError::NotDurable(format!("{why} (the pass used ticket {t}: claim it with the same holder)")))
            }
            (r, _) => r,
        }
    }

    /// Sends `cmd` (a claim or a pass) on a connection of its own, then renews the
    /// session it opened and waits there until the setting is confirmed; `parse`
    /// reads the command's reply (None: nothing was claimed, so nothing to wait for).
    async fn confirm(
        &self,
        cmd: &redis::Cmd,
        name: &'static str,
        queue: &str,
        heartbeat: impl Fn(&str) -> redis::Cmd,
        parse: impl FnOnce(Value) -> Result<Option<Claim>, ClientError>,
    ) -> Result<Option<Claim>, ClientError> {
        let claim = cmd;
        let d = self.durability;
        let _permit = tokio::time::timeout(self.options.response_timeout, self.permits.acquire())
            .await
            .map_err(|_| ClientError::Unavailable("no connection free to confirm a durable claim in time".into()))?
            .map_err(|_| ClientError::Unavailable("the durable-claim connections are closed".into()))?;
        let idle = self.idle.lock().unwrap().pop();
        let conn = match idle {
            Some(c) => c,
            None => Conn::open_sharing(&self.target, &self.options, self.refusals.clone()).await?,
        };
        let claimed = crate::in_command_span(name, queue, async { Ok(conn.send(claim).await?) }).await;
        let claimed = match claimed {
            Ok(v) => parse(v),
            Err(e) => Err(e),
        };
        let claim = match claimed {
            Ok(Some(c)) => c,
            Ok(None) => {
                self.idle.lock().unwrap().push(conn);
                return Ok(None);
            }
            Err(e) => {
                // A refusal leaves the connection as good as it was; anything else
                // may have broken it: not reused.
                if matches!(e, ClientError::Refused(_) | ClientError::InvalidArgument(_)) {
                    self.idle.lock().unwrap().push(conn);
                }
                return Err(e);
            }
        };
        let mut pipe = redis::pipe();
        pipe.add_command(heartbeat(&claim.user_id)).add_command(d.wait_command());
        let replies = crate::in_command_span(if d.aof { "WAITAOF" } else { "WAIT" }, queue, async {
            Ok(conn.send_pipeline(&pipe, 2, d.timeout).await?)
        })
        .await?;
        self.idle.lock().unwrap().push(conn);
        let mut replies = replies.into_iter();
        let (Some(renewed), Some(waited)) = (replies.next(), replies.next()) else {
            return Err(ClientError::protocol("durable claim: expected two replies"));
        };
        match renewed {
            Value::ServerError(e) => return Err(redis::RedisError::from(e).into()),
            v => {
                let flags = crate::types::flags(v, 1, "heartbeat")?;
                if flags.first() != Some(&true) {
                    return Err(ClientError::NotDurable(
                        "the session ended before its claim could be confirmed".into(),
                    ));
                }
            }
        }
        match waited {
            Value::ServerError(e) => Err(redis::RedisError::from(e).into()),
            v => d.confirmed(&v).map(|()| Some(claim)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_are_checked() {
        assert!(!Durability::OFF.is_on());
        assert!(Durability::OFF.check().is_ok());
        let on = Durability { replicas: 1, timeout: Duration::from_millis(100), aof: false };
        assert!(on.is_on() && on.check().is_ok());
        assert!(Durability { timeout: Duration::ZERO, ..on }.check().unwrap_err().contains("timeout"));
        assert!(Durability { timeout: Duration::from_secs(11), ..on }.check().is_err());
        assert!(Durability { replicas: 65, ..on }.check().unwrap_err().contains("replicas"));
        assert!(Durability { replicas: 0, aof: true, ..on }.is_on());
    }

    #[test]
    fn replies_confirm_or_fall_short() {
        let on = Durability { replicas: 2, timeout: Duration::from_millis(50), aof: false };
        assert!(on.confirmed(&Value::Int(2)).is_ok());
        assert!(on.confirmed(&Value::Int(3)).is_ok());
        let short = on.confirmed(&Value::Int(1)).unwrap_err();
        assert!(matches!(&short, ClientError::NotDurable(t) if t.contains("confirmed by 1")), "{short:?}");
        assert!(matches!(on.confirmed(&Value::Nil), Err(ClientError::Protocol(_))));
        let aof = Durability { aof: true, ..on };
        assert!(aof.confirmed(&Value::Array(vec![Value::Int(1), Value::Int(2)])).is_ok());
        assert!(matches!(
            aof.confirmed(&Value::Array(vec![Value::Int(0), Value::Int(2)])),
            Err(ClientError::NotDurable(_))
        ));
        assert!(matches!(
            aof.confirmed(&Value::Array(vec![Value::Int(1), Value::Int(1)])),
            Err(ClientError::NotDurable(_))
        ));
        let packed = |d: Durability| String::from_utf8_lossy(&d.wait_command().get_packed_command()).into_owned();
        assert!(packed(on).contains("WAIT\r\n$1\r\n2\r\n$2\r\n50"), "{}", packed(on));
        assert!(packed(aof).contains("WAITAOF\r\n$1\r\n1\r\n$1\r\n2\r\n$2\r\n50"), "{}", packed(aof));
    }
}
