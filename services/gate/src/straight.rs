//! Straight through while there is room: a visitor without a live token for a gated
//! queue, when nobody waits in that queue and a slot is free (the rule of an instant
//! entry, the queue's rate bucket included), is let in on that very request.
//! `QUEUE.PASS` enters and claims in one atomic command (a session lease open, as
//! after `TICKET.CLAIM`); the gate then makes the session exactly as `/gate/claim`
//! does ([`Gate::admit`]) and sets the cookie on the answer. When people wait, the
//! room is full, the queue is closed or sold out, the command changes nothing and the
//! visitor goes to the waiting room as before.
//!
//! One Valkey call for a visitor's first request, none after (the token decides). A
//! client that never keeps the cookie (a crawler, a script) would take a slot with
//! every request: each client address (as the gate reads it, `--trusted-proxies`;
//! IPv6 by its /64) gets at most `--straight-through-per-address` straight passes a
//! minute ([`Limiter`], bounded memory), then goes to the room like anyone when the
//! room is busy. The rate bucket and the queue's capacity bound everyone together;
//! known bots are best kept off gated paths by bypass rules or `robots.txt`.

use crate::decide::Outcome;
use crate::sessions::Verified;
use crate::{now_ms, Gate};
use axum::http::{HeaderMap, HeaderValue};
use dashmap::DashMap;
use queue_client::ClientError;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Most client addresses the limiter keeps; past it the addresses of earlier minutes
/// go, and when the table is still full a new address gets no straight pass this
/// minute (it goes to the room when the room is busy, as anyone).
pub const MAX_ADDRESSES: usize = 100_000;

/// After the queue said "not now", the gate sends visitors of that queue to the room
/// without asking again for this long: a flood of first requests on a busy queue
/// costs Valkey one call per queue per this time, not one per request.
pub const BUSY_MS: u64 = 250;

/// The nickname of a visitor let straight in (they never gave one).
pub const NICKNAME: &str = "visitor";

/// Straight passes per client address per minute (a fixed window), in bounded memory.
#[derive(Debug)]
pub struct Limiter {
    per_minute: u32,
    max: usize,
    /// By address (IPv6: its /64): the minute counted and the passes taken in it.
    windows: DashMap<IpAddr, (u64, u32)>,
}

impl Limiter {
    /// `per_minute` passes per address a minute (0: no limit), at most `max` addresses.
    pub fn new(per_minute: u32, max: usize) -> Limiter {
        Limiter { per_minute, max, windows: DashMap::new() }
    }

    /// The key of `addr`: an IPv4 address as is, an IPv6 one by its /64 (one
    /// subscriber's network, which it can fill with addresses at will).
    fn key(addr: IpAddr) -> IpAddr {
        match service_kit::client_addr::canonical_ip(addr) {
            IpAddr::V6(v6) => {
                let mut o = v6.octets();
                o[8..].fill(0);
                IpAddr::V6(o.into())
            }
            v4 => v4,
        }
    }

    /// Takes one straight pass for `addr` at `now_ms`: false when the address used
    /// its passes this minute (or no room is left for a new address).
    pub fn take(&self, addr: IpAddr, now_ms: u64) -> bool {
        if self.per_minute == 0 {
            return true;
        }
        let minute = now_ms / 60_000;
        let key = Limiter::key(addr);
        if !self.windows.contains_key(&key) && self.windows.len() >= self.max {
            self.windows.retain(|_, (m, _)| *m == minute);
            if self.windows.len() >= self.max {
                return false;
            }
        }
        let mut w = self.windows.entry(key).or_insert((minute, 0));
        if w.0 != minute {
            *w = (minute, 0);
        }
        if w.1 >= self.per_minute {
            return false;
        }
        w.1 += 1;
        true
    }

    /// The addresses kept now.
    pub fn len(&self) -> usize {
        self.windows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.windows.is_empty()
    }
}

/// What lets a visitor straight in (the per-address limiter, the per-queue "busy"
/// hint), shared by both modes.
#[derive(Debug)]
pub struct StraightThrough {
    pub limiter: Limiter,
    /// By queue: until when (ms) the queue is taken as busy (see [`BUSY_MS`]).
    busy: DashMap<String, AtomicU64>,
}

impl StraightThrough {
    pub fn new(per_address: u32) -> StraightThrough {
        StraightThrough { limiter: Limiter::new(per_address, MAX_ADDRESSES), busy: DashMap::new() }
    }

    fn busy(&self, queue: &str, now_ms: u64) -> bool {
        self.busy.get(queue).is_some_and(|until| until.load(Ordering::Relaxed) > now_ms)
    }

    fn mark_busy(&self, queue: &str, now_ms: u64) {
        let until = now_ms + BUSY_MS;
        if let Some(u) = self.busy.get(queue) {
            u.store(until, Ordering::Relaxed);
            return;
        }
        self.busy.insert(queue.to_string(), AtomicU64::new(until));
    }
}

/// A visitor let straight in: their admission (as the next request's decision will
/// find it) and the Set-Cookie holding its token.
pub struct Passed {
    pub verified: Arc<Verified>,
    pub cookie: HeaderValue,
}

/// Whether a refusal with `outcome` may be turned into a straight pass: no live token
/// for the queue (none, another queue's, not ours, expired, a lapsed lease). A
/// session the app or the person ended, or one past the longest session, queues.
pub fn eligible(outcome: Outcome) -> bool {
    matches!(outcome, Outcome::Waiting | Outcome::OtherQueue | Outcome::Invalid | Outcome::Expired | Outcome::Lapsed)
}

/// Whether the request can carry a straight pass's cookie back: not a CORS preflight
/// (it never carries cookies), and not a request another site's page makes for an
/// image, a script or a fetch (`Sec-Fetch-Site: cross-site` with any mode but a
/// top-level navigation): such a request comes without the SameSite=Lax cookie and
/// the browser would not keep the one set on its answer, so each would take a slot
/// for nothing, and a popular page of another site embedding a gated path would
/// fill the room through its visitors' browsers (each from its own address, past
/// the per-address limit). Clients that send no `Sec-Fetch-*` (scripts, crawlers,
/// older browsers) are held by the per-address limit.
pub fn may_keep_cookie(headers: &HeaderMap) -> bool {
    if headers.contains_key("access-control-request-method") {
        return false;
    }
    let value = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or("");
    !value("sec-fetch-site").eq_ignore_ascii_case("cross-site")
        || value("sec-fetch-mode").eq_ignore_ascii_case("navigate")
}

impl Gate {
    /// Lets the visitor of a request refused with `outcome` straight in to `queue` when
    /// there is room (one QUEUE.PASS); None sends them to the waiting room. `client`
    /// is the client's address (unknown: no straight pass).
    pub async fn straight_through(
        &self,
        queue: &str,
        outcome: Outcome,
        headers: &HeaderMap,
        client: Option<IpAddr>,
        https: bool,
    ) -> Option<Passed> {
        if !eligible(outcome) || !self.config.rules.settings(queue).straight_through {
            return None;
        }
        if !may_keep_cookie(headers) {
            self.metrics.straight("cross_site");
            return None;
        }
        let now = now_ms();
        let st = &self.straight;
        if !self.health.is_up() || st.busy(queue, now) {
            self.metrics.straight("room");
            return None;
        }
        let Some(client_addr) = client else {
            self.metrics.straight("no_address");
            return None;
        };
        if !st.limiter.take(client_addr, now) {
            self.metrics.straight("limited");
            return None;
        }
        let Some(store) = self.store.client().await else {
            self.metrics.straight("unavailable");
            return None;
        };
        let user = format!("pass-{}", crate::claim::new_session_id());
        let holder = store.durability().is_on().then(crate::claim::new_session_id);
        match store.pass(queue, &user, NICKNAME, holder.as_deref()).await {
            Ok(Some(claim)) => {
                self.health.up();
                self.metrics.straight("passed");
                let now = now_ms();
                let (token, _exp, cookie) = self.admit(queue, &claim.user_id, headers, https, now);
                let verified = self.table.lookup(&token, &self.config.keys, now).ok()?;
                tracing::info!(queue, user = claim.user_id, "straight through; admitted");
                Some(Passed { verified, cookie })
            }
            Ok(None) => {
                self.health.up();
                self.metrics.straight("room");
                st.mark_busy(queue, now_ms());
                None
            }
            Err(ClientError::NotDurable(why)) => {
                // The pass stands on the primary only; nobody holds its lease, which
                // lapses after the idle time. The visitor queues as anyone.
                self.metrics.straight("not_durable");
                tracing::warn!(queue, why, "straight pass not confirmed by the replicas in time; to the room");
                None
            }
            Err(e) if e.is_unavailable() => {
                self.metrics.straight("unavailable");
                self.health.down(now_ms(), &e);
                None
            }
            Err(e) => {
                self.metrics.straight("error");
                tracing::warn!(queue, error = %e, "straight pass refused; to the room");
                st.mark_busy(queue, now_ms());
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_that_cannot_keep_the_cookie_get_no_pass() {
        let h = |pairs: &[(&'static str, &'static str)]| {
            let mut m = HeaderMap::new();
            for (k, v) in pairs {
                m.insert(*k, HeaderValue::from_static(v));
            }
            m
        };
        assert!(may_keep_cookie(&h(&[])), "a script or crawler: the per-address limit holds it");
        assert!(may_keep_cookie(&h(&[("sec-fetch-site", "none"), ("sec-fetch-mode", "navigate")])));
        assert!(
            may_keep_cookie(&h(&[("sec-fetch-site", "cross-site"), ("sec-fetch-mode", "navigate")])),
            "a link from another site"
        );
        assert!(
            may_keep_cookie(&h(&[("sec-fetch-site", "same-origin"), ("sec-fetch-mode", "cors")])),
            "the app's own fetch"
        );
        assert!(
            !may_keep_cookie(&h(&[
                ("sec-fetch-site", "cross-site"),
                ("sec-fetch-mode", "no-cors"),
                ("sec-fetch-dest", "image")
            ])),
            "another site's <img>"
        );
        assert!(
            !may_keep_cookie(&h(&[("sec-fetch-site", "Cross-Site"), ("sec-fetch-mode", "cors")])),
            "another site's fetch"
        );
        assert!(!may_keep_cookie(&h(&[("access-control-request-method", "POST")])), "a CORS preflight");
    }

    #[test]
    fn passes_per_address_per_minute() {
        let l = Limiter::new(2, 3);
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        let t = 120_000;
        assert!(l.take(a, t) && l.take(a, t + 1));
        assert!(!l.take(a, t + 2), "the third this minute");
        assert!(l.take(a, t + 60_000), "a new minute");
        // IPv6: one /64 is one client; a v4-mapped address is the v4 one.
        let v6 = |s: &str| s.parse::<IpAddr>().unwrap();
        assert!(l.take(v6("2001:db8::1"), t) && l.take(v6("2001:db8::2"), t));
        assert!(!l.take(v6("2001:db8::ffff:1"), t));
        assert!(l.take(v6("2001:db8:0:1::1"), t));
        assert!(l.take(v6("::ffff:192.0.2.1"), t + 60_001), "mapped: the same address, one left");
        assert!(!l.take(a, t + 60_002), "its minute used up");
        // Bounded: a new address finds the addresses of earlier minutes gone; when
        // all are of this minute, none gets in.
        assert_eq!(l.len(), 3);
        assert!(l.take(v6("198.51.100.7"), t + 60_003));
        assert!(l.take(v6("198.51.100.8"), t + 60_004));
        assert_eq!(l.len(), 3);
        assert!(!l.take(v6("198.51.100.9"), t + 60_005), "full");
        // 0: no limit.
        let free = Limiter::new(0, 1);
        assert!((0..100).all(|_| free.take(a, t)) && free.is_empty());
    }

    #[test]
    fn who_may_pass() {
        assert!(eligible(Outcome::Waiting) && eligible(Outcome::Expired) && eligible(Outcome::Lapsed));
        assert!(!eligible(Outcome::Ended) && !eligible(Outcome::MaxSession) && !eligible(Outcome::Admitted));
    }
}
