//! Adaptive admission: how many users one PROMOTE may let in, from the downstream
//! server's health signal. A multiplicative decrease when the server says it is
//! struggling, a ramp back up when it says it is fine, and a fixed answer when it
//! says nothing (it may be down, or its publisher may be): closed by default,
//! unrestricted when configured fail-open.
//!
//! [`admission`] is the pure step; [`Governor`] applies it at most once per
//! `adjust_every`, so that a fast tick does not react ten times to one reading
//! (the signal is refreshed every few seconds).

use crate::health::Health;
use std::time::Duration;
use tokio::time::Instant;

/// The most a PROMOTE may be asked to issue (`MAX` is checked by the command).
pub const PROMOTE_MAX_LIMIT: u32 = 100_000;

/// The per-tick allowance passed to PROMOTE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// At most this many users per tick; 0 admits nobody (PROMOTE is not called).
    Limited(u32),
    /// No limit from the policy: PROMOTE without `MAX` (the queue's soft cap, rate
    /// and batch_max still apply).
    Unrestricted,
}

impl Admission {
    /// The admission when no live signal exists.
    pub fn without_signal(cfg: &PolicyConfig) -> Admission {
        if cfg.fail_open {
            Admission::Unrestricted
        } else {
            Admission::Limited(0)
        }
    }

    /// For the metrics: the allowance, -1 when unrestricted.
    pub fn as_gauge(self) -> i64 {
        match self {
            Admission::Limited(n) => i64::from(n),
            Admission::Unrestricted => -1,
        }
    }
}

/// Thresholds and steps of the policy.
#[derive(Debug, Clone, PartialEq)]
pub struct PolicyConfig {
    /// Admit everyone (true) or no one (false) while no live signal exists.
    pub fail_open: bool,
    /// Load (0..1) at or above which the allowance is halved.
    pub high_load: f64,
    /// Load at or below which the allowance may grow (when latency agrees).
    pub low_load: f64,
    /// Latency (ms) at or above which the allowance is halved; 0 ignores latency.
    pub high_latency_ms: u64,
    /// Latency at or below which the allowance may grow; 0 ignores latency.
    pub low_latency_ms: u64,
    /// The smallest increase; also the first allowance after a closed period.
    pub step: u32,
    /// The allowance above which the policy stops limiting (becomes unrestricted),
    /// and where halving from unrestricted starts.
    pub ceiling: u32,
    /// Least time between two changes of the allowance.
    pub adjust_every: Duration,
}

impl Default for PolicyConfig {
    fn default() -> Self {
        PolicyConfig {
            fail_open: false,
            high_load: 0.85,
            low_load: 0.6,
            high_latency_ms: 0,
            low_latency_ms: 0,
            step: 10,
            ceiling: 1000,
            adjust_every: Duration::from_secs(1),
        }
    }
}

/// What a reading says about the downstream server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Struggling: admit fewer.
    Bad,
    /// Between the watermarks: keep the allowance.
    Hold,
    /// Comfortable: admit more.
    Good,
}

/// Classifies a reading: bad if load or latency is at or above its high mark, good
/// if both are at or below their low marks, else hold.
pub fn verdict(h: &Health, cfg: &PolicyConfig) -> Verdict {
    let latency_high = cfg.high_latency_ms > 0 && h.latency_ms >= cfg.high_latency_ms;
    if h.load >= cfg.high_load || latency_high {
        return Verdict::Bad;
    }
    let latency_low = cfg.low_latency_ms == 0 || h.latency_ms <= cfg.low_latency_ms;
    if h.load <= cfg.low_load && latency_low {
        Verdict::Good
    } else {
        Verdict::Hold
    }
}

/// One step of the policy: the next allowance from the signal (the worst live
/// reading, `None` when none is live) and the previous allowance.
pub fn admission(signal: Option<&Health>, prev: Admission, cfg: &PolicyConfig) -> Admission {
    let Some(h) = signal else { return Admission::without_signal(cfg) };
    let ceiling = cfg.ceiling.clamp(1, PROMOTE_MAX_LIMIT);
    match (verdict(h, cfg), prev) {
        (Verdict::Hold, prev) => prev,
        (Verdict::Bad, Admission::Unrestricted) => Admission::Limited(ceiling / 2),
        (Verdict::Bad, Admission::Limited(n)) => Admission::Limited(n.min(ceiling) / 2),
        (Verdict::Good, Admission::Unrestricted) => Admission::Unrestricted,
        (Verdict::Good, Admission::Limited(n)) => {
            let next = n.saturating_mul(2).max(n.saturating_add(cfg.step.max(1)));
            if next >= ceiling {
                Admission::Unrestricted
            } else {
                Admission::Limited(next)
            }
        }
    }
}

/// The policy's state for one queue: the current allowance and when it last
/// changed. A missing signal takes effect at once (closing must not wait); changes
/// driven by readings are spaced by `adjust_every`.
#[derive(Debug, Clone)]
pub struct Governor {
    current: Admission,
    changed_at: Option<Instant>,
}

impl Governor {
    /// A fresh state, as after a missing signal: the ramp starts from closed (or
    /// unrestricted when fail-open).
    pub fn new(cfg: &PolicyConfig) -> Governor {
        Governor { current: Admission::without_signal(cfg), changed_at: None }
    }

    /// The allowance in force.
    pub fn current(&self) -> Admission {
        self.current
    }

    /// The allowance for this tick, given the signal read now.
    pub fn next(&mut self, signal: Option<&Health>, cfg: &PolicyConfig, now: Instant) -> Admission {
        let due = self.changed_at.is_none_or(|t| now.duration_since(t) >= cfg.adjust_every);
        if signal.is_none() || due {
            let next = admission(signal, self.current, cfg);
            if next != self.current {
                self.current = next;
                self.changed_at = Some(now);
            }
        }
        self.current
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Admission::{Limited, Unrestricted};

    fn load(load: f64) -> Health {
        Health { load, latency_ms: 0 }
    }

    fn latency(ms: u64) -> Health {
        Health { load: 0.1, latency_ms: ms }
    }

    #[test]
    fn verdicts_follow_the_watermarks() {
        let cfg = PolicyConfig { high_latency_ms: 500, low_latency_ms: 100, ..PolicyConfig::default() };
        let cases = [
            (load(0.0), Verdict::Good),
            (load(0.6), Verdict::Good),
            (load(0.7), Verdict::Hold),
            (load(0.85), Verdict::Bad),
            (load(1.5), Verdict::Bad),
            (latency(100), Verdict::Good),
            (latency(300), Verdict::Hold),
            (latency(500), Verdict::Bad),
            (Health { load: 0.9, latency_ms: 10 }, Verdict::Bad),
            (Health { load: 0.1, latency_ms: 9000 }, Verdict::Bad),
        ];
        for (h, want) in cases {
            assert_eq!(verdict(&h, &cfg), want, "{h:?}");
        }
        // Latency ignored when not configured.
        assert_eq!(verdict(&latency(60_000), &PolicyConfig::default()), Verdict::Good);
    }

    #[test]
    fn steps_table() {
        let cfg = PolicyConfig { step: 10, ceiling: 1000, ..PolicyConfig::default() };
        let (good, hold, bad) = (load(0.1), load(0.7), load(0.95));
        let cases: [(Option<&Health>, Admission, Admission); 14] = [
            (Some(&bad), Unrestricted, Limited(500)),
            (Some(&bad), Limited(500), Limited(250)),
            (Some(&bad), Limited(1), Limited(0)),
            (Some(&bad), Limited(0), Limited(0)),
            (Some(&bad), Limited(5000), Limited(500)),
            (Some(&hold), Limited(0), Limited(0)),
            (Some(&hold), Limited(37), Limited(37)),
            (Some(&hold), Unrestricted, Unrestricted),
            (Some(&good), Limited(0), Limited(10)),
            (Some(&good), Limited(3), Limited(13)),
            (Some(&good), Limited(40), Limited(80)),
            (Some(&good), Limited(600), Unrestricted),
            (Some(&good), Unrestricted, Unrestricted),
            (None, Limited(300), Limited(0)),
        ];
        for (signal, prev, want) in cases {
            assert_eq!(admission(signal, prev, &cfg), want, "{signal:?} after {prev:?}");
        }
    }

    #[test]
    fn missing_signal_is_fail_closed_or_fail_open() {
        let closed = PolicyConfig::default();
        let open = PolicyConfig { fail_open: true, ..PolicyConfig::default() };
        for prev in [Limited(0), Limited(70), Unrestricted] {
            assert_eq!(admission(None, prev, &closed), Limited(0));
            assert_eq!(admission(None, prev, &open), Unrestricted);
        }
        assert_eq!(Governor::new(&closed).current(), Limited(0));
        assert_eq!(Governor::new(&open).current(), Unrestricted);
    }

    #[test]
    fn a_degenerate_ceiling_still_limits() {
        let cfg = PolicyConfig { ceiling: 0, step: 0, ..PolicyConfig::default() };
        assert_eq!(admission(Some(&load(0.1)), Limited(0), &cfg), Unrestricted);
        assert_eq!(admission(Some(&load(0.99)), Unrestricted, &cfg), Limited(0));
    }

    #[test]
    fn gauge_values() {
        assert_eq!(Limited(7).as_gauge(), 7);
        assert_eq!(Unrestricted.as_gauge(), -1);
    }

    /// The ramp: from closed, a good signal grows the allowance once per interval,
    /// however often the manager ticks; a bad one halves it, also once per interval.
    #[tokio::test(start_paused = true)]
    async fn governor_changes_at_most_once_per_interval() {
        let cfg = PolicyConfig { adjust_every: Duration::from_secs(1), step: 10, ceiling: 100, ..Default::default() };
        let mut g = Governor::new(&cfg);
        let good = load(0.2);
        let bad = load(0.9);
        // The first reading acts at once.
        assert_eq!(g.next(Some(&good), &cfg, Instant::now()), Limited(10));
        // Ticks every 100 ms within the same second change nothing.
        for _ in 0..9 {
            tokio::time::advance(Duration::from_millis(100)).await;
            assert_eq!(g.next(Some(&good), &cfg, Instant::now()), Limited(10));
        }
        tokio::time::advance(Duration::from_millis(100)).await;
        assert_eq!(g.next(Some(&good), &cfg, Instant::now()), Limited(20));
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(g.next(Some(&good), &cfg, Instant::now()), Limited(40));
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(g.next(Some(&good), &cfg, Instant::now()), Limited(80));
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(g.next(Some(&good), &cfg, Instant::now()), Unrestricted);
        // Trouble: halved, then halved again only a full interval later.
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(g.next(Some(&bad), &cfg, Instant::now()), Limited(50));
        tokio::time::advance(Duration::from_millis(500)).await;
        assert_eq!(g.next(Some(&bad), &cfg, Instant::now()), Limited(50));
        tokio::time::advance(Duration::from_millis(500)).await;
        assert_eq!(g.next(Some(&bad), &cfg, Instant::now()), Limited(25));
    }

    #[tokio::test(start_paused = true)]
    async fn a_missing_signal_closes_at_once_and_the_ramp_restarts() {
        let cfg = PolicyConfig::default();
        let mut g = Governor::new(&cfg);
        let good = load(0.1);
        for _ in 0..20 {
            g.next(Some(&good), &cfg, Instant::now());
            tokio::time::advance(cfg.adjust_every).await;
        }
        assert_eq!(g.current(), Unrestricted);
        // The signal vanishes: closed on this very tick, no interval to wait.
        tokio::time::advance(Duration::from_millis(10)).await;
        assert_eq!(g.next(None, &cfg, Instant::now()), Limited(0));
        // It comes back good: the ramp starts from the first step, an interval later.
        tokio::time::advance(Duration::from_millis(10)).await;
        assert_eq!(g.next(Some(&good), &cfg, Instant::now()), Limited(0));
        tokio::time::advance(cfg.adjust_every).await;
        assert_eq!(g.next(Some(&good), &cfg, Instant::now()), Limited(cfg.step));
    }

    #[tokio::test(start_paused = true)]
    async fn fail_open_admits_everyone_without_a_signal() {
        let cfg = PolicyConfig { fail_open: true, ..PolicyConfig::default() };
        let mut g = Governor::new(&cfg);
        assert_eq!(g.next(None, &cfg, Instant::now()), Unrestricted);
        tokio::time::advance(Duration::from_secs(5)).await;
        assert_eq!(g.next(Some(&load(0.99)), &cfg, Instant::now()), Limited(cfg.ceiling / 2));
        tokio::time::advance(Duration::from_millis(1)).await;
        assert_eq!(g.next(None, &cfg, Instant::now()), Unrestricted);
    }
}
