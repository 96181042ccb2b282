//! What the gate knows of the sessions it has seen, in memory, so that the decision
//! for a request needs no Valkey call: verified tokens (cached by the token string),
//! and per session id when it was last seen here and whether it has ended (by the
//! app, by `/gate/leave`, by its longest time) or lapsed in Valkey (found out by the
//! heartbeat of the next tick, see [`crate::lease`]).

use crate::token::{Claims, Keys, TokenError};
use dashmap::DashMap;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;

/// Most verified tokens kept; past it the expired ones go, then all of them (a
/// token is verified again when next seen, which costs only CPU).
pub const MAX_CACHED_TOKENS: usize = 500_000;

/// How long (seconds) past now a held session stays in the table ([`Session::hold`]).
const HOLD_S: u64 = 5;

/// Where a session stands, as this instance knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum State {
    Live = 0,
    /// Ended by the app (`Queue-Session: end`) or by `/gate/leave`.
    Ended = 1,
    /// Its lease was gone when the gate renewed it.
    Lapsed = 2,
    /// Past the queue's longest session.
    TooLong = 3,
}

impl State {
    fn from_u8(v: u8) -> State {
        match v {
            0 => State::Live,
            1 => State::Ended,
            2 => State::Lapsed,
            _ => State::TooLong,
        }
    }
}

/// One session (one claim) as this instance knows it.
#[derive(Debug)]
pub struct Session {
    pub queue: String,
    pub user: String,
    pub sid: String,
    last_seen_ms: AtomicU64,
    state: AtomicU8,
    /// The latest expiry (seconds) of its tokens seen here: the entry is kept until then.
    exp_s: AtomicU64,
    /// When its ticket was claimed (seconds).
    pub auth_time: u64,
    /// Woken when the session leaves [`State::Live`] (open WebSocket tunnels close).
    finished: tokio::sync::Notify,
}

impl Session {
    pub fn state(&self) -> State {
        State::from_u8(self.state.load(Ordering::Relaxed))
    }

    pub fn touch(&self, now_ms: u64) {
        // A plain store: the latest of concurrent requests is close enough.
        self.last_seen_ms.store(now_ms, Ordering::Relaxed);
    }

    pub fn last_seen_ms(&self) -> u64 {
        self.last_seen_ms.load(Ordering::Relaxed)
    }

    /// Moves a live session to `to`; true for the one caller that did it.
    pub fn finish(&self, to: State) -> bool {
        let done =
            self.state.compare_exchange(State::Live as u8, to as u8, Ordering::Relaxed, Ordering::Relaxed).is_ok();
        if done {
            self.finished.notify_waiters();
        }
        done
    }

    /// Waits until the session is no longer live (returns at once if it is not).
    pub async fn until_finished(&self) {
        loop {
            let notified = self.finished.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.state() != State::Live {
                return;
            }
            notified.await;
        }
    }

    /// Held by something other than requests (an open WebSocket tunnel): seen now, and
    /// kept in the table (so still renewed) past its tokens' expiry for a little while.
    pub fn hold(&self, now_ms: u64) {
        self.touch(now_ms);
        self.exp_s.fetch_max(now_ms / 1000 + HOLD_S, Ordering::Relaxed);
    }
}

/// A verified token and its session.
#[derive(Debug)]
pub struct Verified {
    pub claims: Claims,
    pub session: Arc<Session>,
}

/// The sessions and verified tokens of this instance.
#[derive(Debug, Default)]
pub struct Table {
    sessions: DashMap<String, Arc<Session>>,
    tokens: DashMap<Box<str>, Arc<Verified>>,
}

/// The users to renew this tick, by queue, with their sessions here.
pub type Due = BTreeMap<String, BTreeMap<String, Vec<Arc<Session>>>>;

impl Table {
    /// The verified token (from the cache, or verified now and cached).
    pub fn lookup(&self, token: &str, keys: &Keys, now_ms: u64) -> Result<Arc<Verified>, TokenError> {
        if let Some(v) = self.tokens.get(token) {
            return Ok(v.clone());
        }
        let claims = keys.verify(token)?;
        let session = self.session_for(&claims, now_ms);
        let verified = Arc::new(Verified { claims, session });
        if self.tokens.len() >= MAX_CACHED_TOKENS {
            self.sweep(now_ms);
            if self.tokens.len() >= MAX_CACHED_TOKENS {
                self.tokens.clear();
            }
        }
        self.tokens.insert(token.into(), verified.clone());
        Ok(verified)
    }

    /// The session of these claims, made (as live, seen now) if new here.
    pub fn session_for(&self, claims: &Claims, now_ms: u64) -> Arc<Session> {
        let session = self
            .sessions
            .entry(claims.sid.clone())
            .or_insert_with(|| {
                Arc::new(Session {
                    queue: claims.aud.clone(),
                    user: claims.sub.clone(),
                    sid: claims.sid.clone(),
                    last_seen_ms: AtomicU64::new(now_ms),
                    state: AtomicU8::new(State::Live as u8),
                    exp_s: AtomicU64::new(0),
                    auth_time: claims.auth_time,
                    finished: tokio::sync::Notify::new(),
                })
            })
            .clone();
        session.exp_s.fetch_max(claims.exp, Ordering::Relaxed);
        session
    }

    /// The session with this id, if known here.
    pub fn get(&self, sid: &str) -> Option<Arc<Session>> {
        self.sessions.get(sid).map(|s| s.clone())
    }

    /// Forgets sessions and tokens past their expiry.
    pub fn sweep(&self, now_ms: u64) {
        let now_s = now_ms / 1000;
        self.tokens.retain(|_, v| v.claims.exp > now_s);
        self.sessions.retain(|_, s| s.exp_s.load(Ordering::Relaxed) > now_s);
    }

    /// The live sessions seen within their queue's idle time, by queue and user: the
    /// leases to renew this tick. `idle_ms` gives each queue's idle time.
    pub fn due(&self, now_ms: u64, idle_ms: impl Fn(&str) -> u64) -> Due {
        let mut due: Due = BTreeMap::new();
        for entry in self.sessions.iter() {
            let s = entry.value();
            if s.state() != State::Live || now_ms.saturating_sub(s.last_seen_ms()) > idle_ms(&s.queue) {
                continue;
            }
            due.entry(s.queue.clone()).or_default().entry(s.user.clone()).or_default().push(s.clone());
        }
        due
    }

    /// Ends the live sessions past their queue's longest time (`max_s` gives it, in
    /// seconds, None for no limit) and returns those whose lease to end: not one whose
    /// person holds a later session here (a SESSION.END names the person, not the
    /// session, and would end the later one).
    pub fn past_max_session(&self, now_s: u64, max_s: impl Fn(&str) -> Option<u64>) -> Vec<Arc<Session>> {
        let mut over = Vec::new();
        for entry in self.sessions.iter() {
            let s = entry.value();
            if s.state() == State::Live && max_s(&s.queue).is_some_and(|max| s.auth_time + max <= now_s) {
                over.push(s.clone());
            }
        }
        over.retain(|s| s.finish(State::TooLong));
        over.retain(|s| {
            !self.sessions.iter().any(|o| {
                o.queue == s.queue && o.user == s.user && o.auth_time > s.auth_time && o.state() == State::Live
            })
        });
        over
    }

    /// Whether `user` holds a live session of `queue` here claimed at or after
    /// `since_ms` (to the second): a later session, which a SESSION.END kept from
    /// before it must not end (the command names the person, not the session).
    pub fn live_since(&self, queue: &str, user: &str, since_ms: u64) -> bool {
        self.sessions.iter().any(|s| {
            s.queue == queue && s.user == user && s.state() == State::Live && s.auth_time * 1000 + 1000 > since_ms
        })
    }

    /// Live sessions seen within the idle time, per queue: the people inside as this
    /// instance sees them.
    pub fn inside(&self, now_ms: u64, idle_ms: impl Fn(&str) -> u64) -> BTreeMap<String, usize> {
        self.due(now_ms, idle_ms).into_iter().map(|(q, users)| (q, users.len())).collect()
    }

    pub fn cached_tokens(&self) -> usize {
        self.tokens.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::token::ISSUER;

    fn claims(sid: &str, user: &str, exp: u64) -> Claims {
        Claims { iss: ISSUER.into(), aud: "q".into(), sub: user.into(), sid: sid.into(), iat: 0, exp, auth_time: 0 }
    }

    #[test]
    fn cached_by_token_one_session_per_sid() {
        let keys = Keys::ephemeral();
        let table = Table::default();
        let (a, b) = (keys.sign(&claims("s1", "u1", 100)), keys.sign(&claims("s1", "u1", 200)));
        let va = table.lookup(&a, &keys, 1000).unwrap();
        let vb = table.lookup(&b, &keys, 1000).unwrap();
        assert!(Arc::ptr_eq(&va.session, &vb.session));
        assert!(Arc::ptr_eq(&va, &table.lookup(&a, &keys, 1000).unwrap()));
        assert_eq!(table.cached_tokens(), 2);
        table.sweep(150_000);
        assert_eq!(table.cached_tokens(), 1);
        assert!(table.get("s1").is_some());
        table.sweep(200_000);
        assert!(table.get("s1").is_none());
    }

    #[test]
    fn longest_session_ends_once_and_spares_a_later_session() {
        let keys = Keys::ephemeral();
        let table = Table::default();
        let mut old = claims("s1", "u1", 10_000);
        old.auth_time = 100;
        let mut new = claims("s2", "u1", 10_000);
        new.auth_time = 200;
        let mut other = claims("s3", "u2", 10_000);
        other.auth_time = 100;
        for c in [&old, &new, &other] {
            table.lookup(&keys.sign(c), &keys, 1000).unwrap();
        }
        let ended = table.past_max_session(160, |_| Some(60));
        // s1 and s3 are past 60 s; s1's person holds a later session, so only u2 is ended.
        assert_eq!(ended.iter().map(|s| s.sid.as_str()).collect::<Vec<_>>(), ["s3"]);
        assert_eq!(table.get("s1").unwrap().state(), State::TooLong);
        assert_eq!(table.get("s2").unwrap().state(), State::Live);
        assert!(table.past_max_session(160, |_| Some(60)).is_empty(), "once");
        assert!(table.past_max_session(10_000, |_| None).is_empty());
    }

    #[test]
    fn due_only_live_and_recent() {
        let keys = Keys::ephemeral();
        let table = Table::default();
        for (sid, user) in [("s1", "u1"), ("s2", "u2"), ("s3", "u3")] {
            table.lookup(&keys.sign(&claims(sid, user, 10_000)), &keys, 1000).unwrap();
        }
        table.get("s2").unwrap().touch(50_000);
        assert!(table.get("s3").unwrap().finish(State::Ended));
        assert!(!table.get("s3").unwrap().finish(State::Lapsed), "only once");
        let due = table.due(60_000, |_| 30_000);
        assert_eq!(due["q"].keys().collect::<Vec<_>>(), ["u2"]);
        assert_eq!(table.inside(20_000, |_| 30_000)["q"], 2);
    }
}
