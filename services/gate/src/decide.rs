//! The decision for one request, shared by the proxy and forward auth: pure and
//! cheap (no Valkey call): the rules, then the tokens the request carries, verified
//! once and cached, their times compared and their session looked up in memory.

use crate::rules::normalize_path;
use crate::sessions::{State, Verified};
use crate::{EndReason, EndRequest, Gate};
use axum::http::{HeaderMap, HeaderValue};
use std::net::IpAddr;
use std::sync::Arc;
use subtle::ConstantTimeEq;

/// Header and cookie that carry the bypass secret.
pub const BYPASS_HEADER: &str = "x-queue-bypass";
pub const BYPASS_COOKIE: &str = "queue_bypass";

/// The request as the gate sees it.
#[derive(Debug, Clone, Copy)]
pub struct Incoming<'a> {
    /// The original Host (port allowed).
    pub host: &'a str,
    /// The original path, raw (as sent, percent escapes and all), without the query.
    pub path: &'a str,
    pub headers: &'a HeaderMap,
    /// The client's address, when known.
    pub client: Option<IpAddr>,
    /// Whether the client came over HTTPS (the cookie is then Secure).
    pub https: bool,
    /// Whether a token due for renewal is renewed in this answer (a Set-Cookie);
    /// false when the caller renews another way (`--renew-redirect`).
    pub renew: bool,
}

/// Every outcome, for the decision counter; the refusals say why.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Outcome {
    Admitted,
    Bypass,
    Unmatched,
    FailOpen,
    /// No token for this queue: sent to wait.
    Waiting,
    /// A token for another queue only.
    OtherQueue,
    /// Not a token of ours: malformed, unknown key, bad signature.
    Invalid,
    Expired,
    /// Ended by the app or by leaving.
    Ended,
    /// The lease lapsed in Valkey.
    Lapsed,
    /// Past the queue's longest session.
    MaxSession,
    /// A path that is not one (control characters, bad escapes).
    BadPath,
}

impl Outcome {
    pub const ALL: [Outcome; 12] = [
        Outcome::Admitted,
        Outcome::Bypass,
        Outcome::Unmatched,
        Outcome::FailOpen,
        Outcome::Waiting,
        Outcome::OtherQueue,
        Outcome::Invalid,
        Outcome::Expired,
        Outcome::Ended,
        Outcome::Lapsed,
        Outcome::MaxSession,
        Outcome::BadPath,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Admitted => "admitted",
            Outcome::Bypass => "bypass",
            Outcome::Unmatched => "unmatched",
            Outcome::FailOpen => "fail_open",
            Outcome::Waiting => "waiting",
            Outcome::OtherQueue => "other_queue",
            Outcome::Invalid => "invalid",
            Outcome::Expired => "expired",
            Outcome::Ended => "ended",
            Outcome::Lapsed => "lapsed",
            Outcome::MaxSession => "max_session",
            Outcome::BadPath => "bad_path",
        }
    }
}

/// What to do with the request.
pub enum Decision {
    /// Let it through without an admission (bypass, unmatched, fail-open).
    Pass(Outcome),
    /// An admitted person; `renewed` is the Set-Cookie with a fresh token when the
    /// old one nears expiry.
    Admit { verified: Arc<Verified>, token: String, renewed: Option<HeaderValue> },
    /// Send to the waiting room of `queue` (or straight in, when there is room);
    /// `hosted`: the route names a host (else `--public-url` makes the room's link).
    Refuse { queue: String, outcome: Outcome, hosted: bool },
    /// The path cannot be read (400).
    BadPath,
}

impl Decision {
    pub fn outcome(&self) -> Outcome {
        match self {
            Decision::Pass(o) => *o,
            Decision::Admit { .. } => Outcome::Admitted,
            Decision::Refuse { outcome, .. } => *outcome,
            Decision::BadPath => Outcome::BadPath,
        }
    }
}

/// Equal strings in time independent of where they differ (`subtle`, whose compare
/// the optimizer cannot turn back into an early exit; a length that differs answers
/// at once, as the length of the secret is not the secret).
fn same_secret(a: &[u8], b: &[u8]) -> bool {
    a.ct_eq(b).into()
}

impl Gate {
    /// Decides `req` at `now_ms`, counting the outcome.
    pub fn decide(&self, req: &Incoming, now_ms: u64) -> Decision {
        let decision = self.decide_uncounted(req, now_ms);
        self.metrics.decided(decision.outcome());
        decision
    }

    fn decide_uncounted(&self, req: &Incoming, now_ms: u64) -> Decision {
        let Some(path) = normalize_path(req.path) else { return Decision::BadPath };
        let rules = &self.config.rules;
        if let Some(secret) = &self.config.bypass_secret {
            let given = req
                .headers
                .get(BYPASS_HEADER)
                .map(|v| v.as_bytes())
                .or_else(|| crate::cookie::cookie(req.headers, BYPASS_COOKIE).map(str::as_bytes));
            if given.is_some_and(|g| same_secret(g, secret.as_bytes())) {
                return Decision::Pass(Outcome::Bypass);
            }
        }
        // Routes first: inside a gated route, a static-looking path (/checkout.js,
        // /checkout/x.png) waits too unless the route opted in.
        let route = rules.route_for(req.host, &path);
        let assets = route.is_none_or(|r| r.static_assets);
        if rules.bypass(&path, req.client, assets).is_some() {
            return Decision::Pass(Outcome::Bypass);
        }
        let Some(queue) = rules.queue_for(req.host, &path) else { return Decision::Pass(Outcome::Unmatched) };
        let mut why = Outcome::Waiting;
        for token in crate::cookie::tokens(req.headers, &self.config.cookie_name) {
            match self.admission(token, queue, now_ms) {
                Ok(v) => {
                    let renewed = if req.renew { self.renewal(&v, req, now_ms) } else { None };
                    return Decision::Admit { verified: v, token: token.to_string(), renewed };
                }
                Err(refused) => why = why.max(refused),
            }
        }
        if self.health.fail_open(now_ms) {
            return Decision::Pass(Outcome::FailOpen);
        }
        let hosted = route.is_some_and(|r| r.host.is_some());
        Decision::Refuse { queue: queue.to_string(), outcome: why, hosted }
    }

    /// The live admission to `queue` that `headers` carry (Bearer or cookie), as a
    /// gated request of that queue would be admitted on it: a token of ours for that
    /// queue, unexpired, its session live here and within the longest session. No
    /// Valkey call. The person counts as seen.
    pub fn admission_for(&self, headers: &HeaderMap, queue: &str, now_ms: u64) -> Option<Arc<Verified>> {
        crate::cookie::tokens(headers, &self.config.cookie_name).find_map(|t| self.admission(t, queue, now_ms).ok())
    }

    /// What `token` gives a request of `queue` at `now_ms`: the admission (its person
    /// counted as seen), or the outcome that refuses it.
    fn admission(&self, token: &str, queue: &str, now_ms: u64) -> Result<Arc<Verified>, Outcome> {
        let now_s = now_ms / 1000;
        match self.table.lookup(token, &self.config.keys, now_ms) {
            Err(_) => Err(Outcome::Invalid),
            Ok(v) if v.claims.aud != queue => Err(Outcome::OtherQueue),
            Ok(v) if v.claims.exp <= now_s => Err(Outcome::Expired),
            Ok(v) => match v.session.state() {
                State::Ended => Err(Outcome::Ended),
                State::Lapsed => Err(Outcome::Lapsed),
                State::TooLong => Err(Outcome::MaxSession),
                State::Live if self.past_max_session(&v, now_s) => Err(Outcome::MaxSession),
                State::Live => {
                    v.session.touch(now_ms);
                    Ok(v)
                }
            },
        }
    }

    /// Whether the session has run past its queue's longest time; the first request
    /// to find out ends it.
    fn past_max_session(&self, v: &Verified, now_s: u64) -> bool {
        let Some(max) = self.config.rules.settings(&v.claims.aud).max_session else { return false };
        if v.claims.auth_time + max.as_secs() > now_s {
            return false;
        }
        if v.session.finish(State::TooLong) {
            tracing::info!(queue = v.claims.aud, user = v.claims.sub, "longest session reached; ending it");
            self.end_session(&v.claims.aud, &v.claims.sub, EndReason::MaxSession);
        }
        true
    }

    /// How long a token of `queue` lives (seconds): `--token-ttl`, but never longer
    /// than the queue's idle time. Every token is issued when its person is seen, and
    /// the gate that saw them renews their lease for the idle time after that, so a
    /// token dies before its lease can lapse (see docs/gate.md, Sessions).
    pub fn token_life_s(&self, queue: &str) -> u64 {
        self.config.token_ttl.min(self.config.rules.settings(queue).idle).as_secs().max(1)
    }

    /// The expiry (seconds) of a token of `queue` issued at `now_ms` for a session
    /// claimed at `auth_time`: its lifetime from now rounded up to the second (a token
    /// never lives a second short of it), and never past the longest session.
    pub fn token_exp(&self, queue: &str, auth_time: u64, now_ms: u64) -> u64 {
        let mut exp = now_ms.div_ceil(1000) + self.token_life_s(queue);
        if let Some(max) = self.config.rules.settings(queue).max_session {
            exp = exp.min(auth_time + max.as_secs().max(1)).max(now_ms / 1000 + 1);
        }
        exp
    }

    /// Whether `v`'s token is due for renewal at `now_ms`: a tenth of its lifetime gone
    /// (at least a second, or half of a shorter life), a renewal would move its expiry
    /// (not when the longest session caps it), and Valkey answering (a token is renewed
    /// only while its lease can be). So a person can be silent for nine tenths of the
    /// idle time after any request and still be in on the token it left with.
    pub fn renewal_due(&self, v: &Verified, now_ms: u64) -> bool {
        let life_ms = self.token_life_s(&v.claims.aud) * 1000;
        let step_ms = (life_ms / 10).max(1000.min(life_ms / 2));
        let left_ms = (v.claims.exp * 1000).saturating_sub(now_ms);
        left_ms + step_ms <= life_ms
            && self.token_exp(&v.claims.aud, v.claims.auth_time, now_ms) > v.claims.exp
            && self.health.is_up()
    }

    /// A fresh token for `v`'s session (same session id and claim time) and its expiry.
    pub fn renewed_token(&self, v: &Verified, now_ms: u64) -> (String, u64) {
        let now_s = now_ms / 1000;
        let mut claims = v.claims.clone();
        claims.iat = now_s;
        claims.exp = self.token_exp(&claims.aud, claims.auth_time, now_ms);
        let fresh = self.config.keys.sign(&claims);
        self.table.session_for(&claims, now_ms);
        self.metrics.renewed.increment(1);
        (fresh, claims.exp)
    }

    /// A Set-Cookie with a fresh token once it is due ([`Gate::renewal_due`]).
    fn renewal(&self, v: &Verified, req: &Incoming, now_ms: u64) -> Option<HeaderValue> {
        if !self.renewal_due(v, now_ms) {
            return None;
        }
        let fresh = self.renewed_token(v, now_ms);
        Some(self.cookie_with(req.headers, &v.claims.aud, Some(fresh), req.https, now_ms / 1000))
    }

    /// The Set-Cookie holding the request's tokens for other queues (still valid) and
    /// `token` (with its expiry) for `queue` (none: the cookie loses `queue`'s token).
    pub fn cookie_with(
        &self,
        headers: &HeaderMap,
        queue: &str,
        token: Option<(String, u64)>,
        https: bool,
        now_s: u64,
    ) -> HeaderValue {
        let mut keep: Vec<String> = Vec::new();
        let mut max_exp = 0;
        if let Some(value) = crate::cookie::cookie(headers, &self.config.cookie_name) {
            for t in value.split(crate::cookie::SEPARATOR).take(crate::cookie::MAX_TOKENS) {
                if let Ok(v) = self.table.lookup(t, &self.config.keys, now_s * 1000) {
                    if v.claims.aud != queue && v.claims.exp > now_s && !keep.iter().any(|k| k == t) {
                        max_exp = max_exp.max(v.claims.exp);
                        keep.push(t.to_string());
                    }
                }
            }
        }
        if let Some((t, exp)) = token {
            max_exp = max_exp.max(exp);
            keep.push(t);
        }
        if keep.len() > crate::cookie::MAX_TOKENS {
            keep.drain(..keep.len() - crate::cookie::MAX_TOKENS);
        }
        self.cookie.set(&keep, max_exp.saturating_sub(now_s), https)
    }

    /// Marks nothing: queues SESSION.END for `user` of `queue` (the ender task calls it).
    pub fn end_session(&self, queue: &str, user: &str, reason: EndReason) {
        self.metrics.ended(reason);
        let _ = self.ends.send(EndRequest { queue: queue.to_string(), user: user.to_string(), reason });
    }
}
