//! Per-address rate limit: a token bucket per client IP, in memory.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::Instant;

pub struct RateLimiter {
    per_second: f64,
    burst: f64,
    buckets: Mutex<HashMap<IpAddr, (f64, Instant)>>,
}

/// Addresses kept before idle (full) buckets are forgotten.
const MAX_TRACKED: usize = 100_000;

impl RateLimiter {
    /// `per_second` 0 disables the limit.
    pub fn new(per_second: f64, burst: f64) -> Self {
        RateLimiter { per_second, burst: burst.max(1.0), buckets: Mutex::new(HashMap::new()) }
    }

    /// Takes a token for `ip` at `now`, or says in how many whole seconds one comes.
    pub fn check(&self, ip: IpAddr, now: Instant) -> Result<(), u64> {
        if self.per_second <= 0.0 {
            return Ok(());
        }
        let mut map = self.buckets.lock().unwrap();
        if map.len() >= MAX_TRACKED {
            let (rate, burst) = (self.per_second, self.burst);
            map.retain(|_, (t, at)| *t + now.duration_since(*at).as_secs_f64() * rate < burst);
        }
        let (tokens, at) = map.entry(ip).or_insert((self.burst, now));
        *tokens = (*tokens + now.duration_since(*at).as_secs_f64() * self.per_second).min(self.burst);
        *at = now;
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            Ok(())
        } else {
            Err(((1.0 - *tokens) / self.per_second).ceil().max(1.0) as u64)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn bucket_per_address() {
        let l = RateLimiter::new(2.0, 3.0);
        let (a, b) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let t = Instant::now();
        assert!((0..3).all(|_| l.check(a, t).is_ok()));
        assert_eq!(l.check(a, t), Err(1));
        assert!(l.check(b, t).is_ok(), "another address has its own bucket");
        assert!(l.check(a, t + Duration::from_millis(500)).is_ok(), "refills at 2/s");
        assert!(RateLimiter::new(0.0, 1.0).check(a, t).is_ok(), "0 disables");
    }
}
