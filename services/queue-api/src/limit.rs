//! Per-address rate limit: governor's keyed limiter (GCRA, the token bucket's
//! equivalent), one bucket per client IP, in memory.

use governor::clock::{Clock, DefaultClock};
use governor::middleware::NoOpMiddleware;
use governor::state::keyed::DashMapStateStore;
use governor::Quota;
use std::net::IpAddr;
use std::num::NonZeroU32;
use std::time::Duration;

/// governor's limiter keyed by client address.
type Keyed<C> = governor::RateLimiter<IpAddr, DashMapStateStore<IpAddr>, C, NoOpMiddleware<<C as Clock>::Instant>>;

pub struct RateLimiter<C: Clock = DefaultClock> {
    /// `None`: no limit.
    keyed: Option<Keyed<C>>,
}

/// Addresses kept before those back to a full bucket are forgotten.
const MAX_TRACKED: usize = 100_000;

impl RateLimiter {
    /// `per_second` 0 disables the limit; `burst` requests may come at once.
    pub fn new(per_second: f64, burst: f64) -> Self {
        RateLimiter::with_clock(per_second, burst, DefaultClock::default())
    }
}

impl<C: Clock> RateLimiter<C> {
    pub fn with_clock(per_second: f64, burst: f64, clock: C) -> Self {
        let burst = NonZeroU32::new(burst.max(1.0).min(f64::from(u32::MAX)) as u32).expect("at least 1");
        let quota = (per_second > 0.0 && per_second.is_finite())
            .then(|| Quota::with_period(Duration::from_secs_f64(1.0 / per_second)))
            .flatten()
            .map(|q| q.allow_burst(burst));
        RateLimiter { keyed: quota.map(|q| governor::RateLimiter::dashmap_with_clock(q, clock)) }
    }

    /// Takes a token for `ip`, or says in how many whole seconds (at least 1) one comes.
    pub fn check(&self, ip: IpAddr) -> Result<(), u64> {
        let Some(keyed) = &self.keyed else {
            return Ok(());
        };
        if keyed.len() >= MAX_TRACKED {
            keyed.retain_recent();
        }
        keyed
            .check_key(&ip)
            .map_err(|wait| wait.wait_time_from(keyed.clock().now()).as_secs_f64().ceil().max(1.0) as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use governor::clock::FakeRelativeClock;

    #[test]
    fn bucket_per_address() {
        let clock = FakeRelativeClock::default();
        let l = RateLimiter::with_clock(2.0, 3.0, clock.clone());
        let (a, b) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        assert!((0..3).all(|_| l.check(a).is_ok()));
        assert_eq!(l.check(a), Err(1));
        assert!(l.check(b).is_ok(), "another address has its own bucket");
        clock.advance(Duration::from_millis(500));
        assert!(l.check(a).is_ok(), "refills at 2/s");
        assert!(RateLimiter::new(0.0, 1.0).check(a).is_ok(), "0 disables");
    }
}
