//! The pause between two attempts at something that failed (connecting to Valkey,
//! a lost subscription, the leader lease): exponential, capped, with jitter, reset
//! once an attempt succeeds.
//!
//! The jitter is "equal jitter" as the AWS Architecture Blog's "Exponential Backoff
//! and Jitter" describes it: the `n`-th pause is drawn uniformly between half and all
//! of `min(max, base * 2^n)`. Without jitter, every instance of every service that lost
//! Valkey at the same moment (a restart, a failover) retries at the same moments, in
//! lockstep, for as long as it stays away. Full jitter (anywhere between zero and the
//! ceiling) spreads them a little more, but it may draw a pause of nearly nothing:
//! a failure that comes back at once (a refused permission, a refused connection)
//! would then be retried in a tight loop, and the first retry would often come before
//! the thing that failed had any chance to change. Equal jitter keeps half of each
//! pause as a floor, so the retry rate stays bounded by the un-jittered schedule's
//! double, and still spreads the herd over the other half.

use std::time::Duration;

/// Exponential backoff with equal jitter between `base` and `max`.
#[derive(Debug, Clone)]
pub struct Backoff {
    base: Duration,
    max: Duration,
    /// The ceiling of the next pause (before jitter): `base`, doubled after each
    /// pause up to `max`.
    ceiling: Duration,
}

impl Backoff {
    /// Pauses from about `base`, doubling up to `max` (`max` below `base` counts as
    /// `base`).
    pub fn new(base: Duration, max: Duration) -> Backoff {
        Backoff { base, max: max.max(base), ceiling: base }
    }

    /// The next pause: between half and all of the current ceiling, which then
    /// doubles (up to `max`).
    pub fn next_delay(&mut self) -> Duration {
        let ceiling = self.ceiling;
        self.ceiling = self.ceiling.saturating_mul(2).min(self.max);
        let floor = ceiling / 2;
        let spread = u64::try_from((ceiling - floor).as_nanos()).unwrap_or(u64::MAX);
        floor + Duration::from_nanos(fastrand::u64(0..=spread))
    }

    /// After a success: the next pause starts from `base` again.
    pub fn reset(&mut self) {
        self.ceiling = self.base;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    /// Each pause lies between half and all of its ceiling.
    fn within(d: Duration, ceiling: Duration) -> bool {
        ceiling / 2 <= d && d <= ceiling
    }

    #[test]
    fn pauses_grow_within_their_bounds_up_to_the_cap() {
        for _ in 0..200 {
            let mut b = Backoff::new(100 * MS, 500 * MS);
            for ceiling in [100, 200, 400, 500, 500, 500] {
                let d = b.next_delay();
                assert!(within(d, ceiling * MS), "{d:?} outside [{}, {ceiling}] ms", ceiling / 2);
            }
        }
    }

    #[test]
    fn reset_starts_from_base_again() {
        let mut b = Backoff::new(100 * MS, Duration::from_secs(5));
        for _ in 0..10 {
            b.next_delay();
        }
        assert!(b.next_delay() >= Duration::from_millis(2500));
        b.reset();
        assert!(within(b.next_delay(), 100 * MS));
        assert!(within(b.next_delay(), 200 * MS));
    }

    #[test]
    fn pauses_are_spread() {
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..50 {
            seen.insert(Backoff::new(Duration::from_secs(1), Duration::from_secs(1)).next_delay());
        }
        assert!(seen.len() > 40, "jitter draws {} distinct pauses of 50", seen.len());
        let mean = seen.iter().sum::<Duration>() / seen.len() as u32;
        assert!(within(mean, Duration::from_secs(1)));
    }

    #[test]
    fn degenerate_settings_hold() {
        let mut zero = Backoff::new(Duration::ZERO, Duration::ZERO);
        assert_eq!(zero.next_delay(), Duration::ZERO);
        let mut inverted = Backoff::new(100 * MS, MS);
        for _ in 0..5 {
            assert!(within(inverted.next_delay(), 100 * MS), "max below base counts as base");
        }
        let mut huge = Backoff::new(Duration::from_secs(1 << 40), Duration::MAX);
        for _ in 0..70 {
            huge.next_delay();
        }
    }
}
