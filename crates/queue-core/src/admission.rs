//! Admission arithmetic: how many users a PROMOTE may let in, the token bucket, the
//! measured admission rate and the estimated wait. Integers only, so the Lua fallback
//! (whose numbers are doubles, exact below 2^53) computes the very same values.

/// Token bucket state, in thousandths of a token so that sub-second refills count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bucket {
    pub milli_tokens: i64,
    pub at_ms: i64,
}

/// Most MAX a PROMOTE accepts (the same as the largest batch_max). MAX 0 does the
/// housekeeping (expired tickets and leases, silent waiters) and admits no one.
pub const MAX_PROMOTE: i64 = 100_000;
/// Waiters a PROMOTE examines beyond the head to drop those who left without a word.
pub const SWEEP_BUDGET: usize = 256;

/// Longest refill interval considered; keeps `elapsed * rate` far below 2^53.
pub const MAX_REFILL_MS: i64 = 1_000_000_000;

impl Bucket {
    /// A bucket seen for the first time starts full.
    pub fn full(size: i64, now: i64) -> Self {
        Bucket { milli_tokens: size * 1000, at_ms: now }
    }

    /// Tokens after refilling at `rate` users/second up to `size` users.
    pub fn refill(self, now: i64, rate: i64, size: i64) -> Self {
        let elapsed = (now - self.at_ms).clamp(0, MAX_REFILL_MS);
        let cap = size * 1000;
        let tokens = if self.milli_tokens >= cap { cap } else { (self.milli_tokens + elapsed * rate).min(cap) };
        Bucket { milli_tokens: tokens, at_ms: now.max(self.at_ms) }
    }

    pub fn whole(&self) -> i64 {
        self.milli_tokens / 1000
    }

    pub fn take(self, n: i64) -> Self {
        Bucket { milli_tokens: self.milli_tokens - n * 1000, ..self }
    }
}

/// Free places under the soft cap, never negative (the cap may have been lowered).
pub fn free_slots(soft_cap: i64, active: i64, joining: i64) -> i64 {
    (soft_cap - active - joining).max(0)
}

/// How many tickets one PROMOTE issues: the least of the free slots, the whole
/// tokens (when rate limited), the caller's MAX and the queue's batch_max.
pub fn promote_count(free: i64, tokens: Option<i64>, max: Option<i64>, batch_max: i64) -> i64 {
    let mut n = free.min(batch_max);
    if let Some(t) = tokens {
        n = n.min(t);
    }
    if let Some(m) = max {
        n = n.min(m);
    }
    n.max(0)
}

/// Window over which the admission rate is measured.
pub const RATE_WINDOW_MS: i64 = 10_000;

/// Measured admissions: a window start, the count in it, and the last full
/// window's rate in users per minute.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RateWindow {
    pub at_ms: i64,
    pub count: i64,
    pub per_minute: i64,
}

impl RateWindow {
    /// Records `admitted` users at `now`; closes the window once it is long enough.
    pub fn record(self, now: i64, admitted: i64) -> Self {
        let mut w = self;
        if w.at_ms == 0 {
            w.at_ms = now;
        }
        w.count += admitted;
        let span = now - w.at_ms;
        if span >= RATE_WINDOW_MS {
            w.per_minute = w.count * 60_000 / span;
            w.at_ms = now;
            w.count = 0;
        }
        w
    }
}

/// Estimated wait in whole seconds for the user at `rank` (1 = next): from the
/// measured rate, else the configured rate; unknown (None) when neither is known.
pub fn estimated_wait_seconds(rank: i64, measured_per_minute: i64, rate_per_second: i64) -> Option<i64> {
    let per_minute = if measured_per_minute > 0 { measured_per_minute } else { rate_per_second * 60 };
    if per_minute <= 0 || rank <= 0 {
        return None;
    }
    Some((rank * 60 + per_minute - 1) / per_minute)
}

/// A waiting user's last-seen time is rewritten only when it is this old, so that
/// polling clients do not turn every STATUS into a replicated write.
pub fn seen_refresh_ms(abandon_after: i64) -> Option<i64> {
    if abandon_after <= 0 {
        None
    } else {
        Some((abandon_after / 8).clamp(250, 30_000))
    }
}

/// A waiting user not heard from since `seen` is dropped once `abandon_after` passed.
pub fn is_abandoned(seen: i64, now: i64, abandon_after: i64) -> bool {
    abandon_after > 0 && now - seen > abandon_after
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_refills_up_to_its_size() {
        // 2 users per second, bucket of 10: the seed's "10 every 5 seconds".
        let b = Bucket::full(10, 1_000);
        assert_eq!(b.whole(), 10);
        let b = b.take(10);
        let table = [(1_000, 0), (1_499, 0), (1_500, 1), (3_000, 4), (6_000, 10), (60_000, 10)];
        for (now, want) in table {
            assert_eq!(b.refill(now, 2, 10).whole(), want, "at {now}");
        }
        // The clock going backwards never adds tokens.
        assert_eq!(b.refill(500, 2, 10).whole(), 0);
        // Huge gaps do not overflow.
        assert_eq!(b.refill(i64::MAX / 2, 1_000_000, 10_000_000).whole(), 10_000_000);
    }

    #[test]
    fn promote_count_takes_the_least() {
        type Row = (i64, Option<i64>, Option<i64>, i64, i64);
        let table: &[Row] = &[
            (100, None, None, 1000, 100),
            (100, Some(7), None, 1000, 7),
            (100, Some(7), Some(3), 1000, 3),
            (100, None, None, 10, 10),
            (0, Some(50), Some(50), 50, 0),
            (5, Some(-1), None, 10, 0),
        ];
        for &(free, tokens, max, batch, want) in table {
            assert_eq!(promote_count(free, tokens, max, batch), want);
        }
        assert_eq!(free_slots(10, 4, 3), 3);
        assert_eq!(free_slots(10, 9, 3), 0);
    }

    #[test]
    fn rate_window_measures_per_minute() {
        let w = RateWindow::default().record(1_000, 5);
        assert_eq!(w, RateWindow { at_ms: 1_000, count: 5, per_minute: 0 });
        let w = w.record(6_000, 5).record(11_000, 10);
        assert_eq!(w.per_minute, 20 * 60_000 / 10_000);
        assert_eq!(w.count, 0);
        assert_eq!(w.at_ms, 11_000);
    }

    #[test]
    fn wait_estimates() {
        assert_eq!(estimated_wait_seconds(1, 120, 0), Some(1));
        assert_eq!(estimated_wait_seconds(120, 120, 0), Some(60));
        assert_eq!(estimated_wait_seconds(121, 120, 0), Some(61));
        assert_eq!(estimated_wait_seconds(10, 0, 2), Some(5));
        assert_eq!(estimated_wait_seconds(10, 0, 0), None);
        assert_eq!(estimated_wait_seconds(0, 60, 0), None);
    }

    #[test]
    fn abandonment() {
        assert_eq!(seen_refresh_ms(0), None);
        assert_eq!(seen_refresh_ms(1000), Some(250));
        assert_eq!(seen_refresh_ms(60_000), Some(7_500));
        assert!(!is_abandoned(0, 1_000_000, 0));
        assert!(!is_abandoned(1_000, 2_000, 1_000));
        assert!(is_abandoned(1_000, 2_001, 1_000));
    }
}
