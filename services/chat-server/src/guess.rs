//! Ticket guessing: each client address may fail the ticket check (an unknown,
//! used or malformed ticket) `burst` times at once and then `per_minute` times a
//! minute; past that its handshakes are refused with 429 before any claim reaches
//! Valkey. Tickets carry 96 random bits, so guessing was hopeless anyway: this keeps
//! a guesser from turning the attempt into load on Valkey and into noise in the logs.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::Instant;

/// Addresses kept before those whose bucket refilled are forgotten.
const MAX_TRACKED: usize = 100_000;

pub struct FailureLimit {
    /// Tokens a second; 0: no limit.
    rate: f64,
    burst: f64,
    buckets: Mutex<HashMap<IpAddr, (f64, Instant)>>,
}

impl FailureLimit {
    pub fn new(per_minute: f64, burst: f64) -> FailureLimit {
        FailureLimit { rate: per_minute.max(0.0) / 60.0, burst: burst.max(1.0), buckets: Mutex::default() }
    }

    fn tokens(&self, held: Option<&(f64, Instant)>, now: Instant) -> f64 {
        match held {
            None => self.burst,
            Some((tokens, at)) => {
                (tokens + now.saturating_duration_since(*at).as_secs_f64() * self.rate).min(self.burst)
            }
        }
    }

    /// Whole seconds until `ip` may try a ticket again, or None when it may now.
    pub fn blocked(&self, ip: IpAddr, now: Instant) -> Option<u64> {
        if self.rate <= 0.0 {
            return None;
        }
        let buckets = self.buckets.lock().expect("not poisoned");
        let tokens = self.tokens(buckets.get(&ip), now);
        (tokens < 1.0).then(|| ((1.0 - tokens) / self.rate).ceil().max(1.0) as u64)
    }

    /// `ip` failed the ticket check once.
    pub fn failed(&self, ip: IpAddr, now: Instant) {
        if self.rate <= 0.0 {
            return;
        }
        let mut buckets = self.buckets.lock().expect("not poisoned");
        if buckets.len() >= MAX_TRACKED {
            let (rate, burst) = (self.rate, self.burst);
            buckets.retain(|_, (t, at)| *t + now.saturating_duration_since(*at).as_secs_f64() * rate < burst);
        }
        let tokens = self.tokens(buckets.get(&ip), now);
        buckets.insert(ip, ((tokens - 1.0).max(0.0), now));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn burst_then_the_rate_per_address() {
        let t0 = Instant::now();
        let l = FailureLimit::new(6.0, 3.0); // one every 10 s
        let (a, b) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        for _ in 0..3 {
            assert_eq!(l.blocked(a, t0), None);
            l.failed(a, t0);
        }
        assert_eq!(l.blocked(a, t0), Some(10));
        assert_eq!(l.blocked(b, t0), None, "another address has its own bucket");
        assert_eq!(l.blocked(a, t0 + Duration::from_secs(4)), Some(6));
        assert_eq!(l.blocked(a, t0 + Duration::from_secs(10)), None);
        l.failed(a, t0 + Duration::from_secs(10));
        assert!(l.blocked(a, t0 + Duration::from_secs(10)).is_some());
        assert_eq!(l.blocked(a, t0 + Duration::from_secs(3600)), None, "refills");
    }

    #[test]
    fn zero_lifts_the_limit() {
        let t0 = Instant::now();
        let l = FailureLimit::new(0.0, 1.0);
        let a = "10.0.0.1".parse().unwrap();
        for _ in 0..100 {
            l.failed(a, t0);
        }
        assert_eq!(l.blocked(a, t0), None);
    }
}
