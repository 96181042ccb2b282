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

/// Measured admissions: a window start, the count in it, and the rate in users per
/// minute of the full windows so far: each new one weighs half, the older ones the
/// other half (smoother than one window, still following a change within a few
/// windows); a window that admitted nobody sets it to 0 at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RateWindow {
    pub at_ms: i64,
    pub count: i64,
    pub per_minute: i64,
}

impl RateWindow {
    /// Records `admitted` users at `now`; closes the window once it is long enough.
    /// Measuring starts with the first admission.
    pub fn record(self, now: i64, admitted: i64) -> Self {
        let mut w = self;
        if w.at_ms == 0 {
            if admitted <= 0 {
                return w;
            }
            w.at_ms = now;
        }
        w.count += admitted;
        let span = now - w.at_ms;
        if span >= RATE_WINDOW_MS {
            let this = w.count * 60_000 / span;
            w.per_minute = if this > 0 && w.per_minute > 0 { (this + w.per_minute) / 2 } else { this };
            w.at_ms = now;
            w.count = 0;
        }
        w
    }
}

/// The shortest stretch of an open window read as a rate (before a first full one).
pub const MIN_RATE_SPAN_MS: i64 = 2_000;

/// The admissions per minute a wait estimate uses at `now`. Only admissions from the
/// line are measured (someone let in at once says nothing about how fast the line
/// moves). The last full window's count, except that a window running past its length
/// without closing (nobody admitted since) reads as what it has counted so far, so a
/// stall shows at once; before a full window with admissions, the open window once it
/// spans [`MIN_RATE_SPAN_MS`]; with nothing measured yet, the `rate` setting (0:
/// unknown). Never above the `rate` setting when one is set: the bucket caps admissions.
pub fn admissions_per_minute(w: RateWindow, now: i64, rate_per_second: i64) -> i64 {
    let limit = rate_per_second.max(0) * 60;
    let span = now - w.at_ms;
    let measured = if w.at_ms == 0 {
        return limit;
    } else if span >= RATE_WINDOW_MS || (w.per_minute == 0 && span >= MIN_RATE_SPAN_MS) {
        w.count * 60_000 / span
    } else {
        w.per_minute
    };
    if limit > 0 {
        measured.min(limit)
    } else {
        measured
    }
}

/// Estimated wait in whole seconds (rounded, at least 1) for the user at `rank`
/// (1 = next) at `per_minute` admissions (see [`admissions_per_minute`]); unknown
/// (None) when nobody is being let in.
pub fn estimated_wait_seconds(rank: i64, per_minute: i64) -> Option<i64> {
    if per_minute <= 0 || rank <= 0 {
        return None;
    }
    Some(((rank * 120 + per_minute) / (2 * per_minute)).max(1))
}

/// How sure an estimate is: admissions come one by one at uneven moments, so the
/// time for `rank` of them spreads around the estimate by about 1/sqrt(rank). The
/// range covers roughly four people in five (1.28 standard deviations of the time
/// for `rank` admissions at a steady rate): wide near the head, narrow far back.
/// Whole seconds, `low <= estimate <= high`, `low >= 1` unless the estimate is 0.
pub fn wait_range(estimate: i64, rank: i64) -> (i64, i64) {
    if estimate <= 0 || rank <= 0 {
        return (estimate.max(0), estimate.max(0));
    }
    let spread = 1.28 / (rank as f64).sqrt();
    let low = (estimate as f64 * (1.0 - spread)).floor().max(1.0) as i64;
    let high = (estimate as f64 * (1.0 + spread)).ceil() as i64;
    (low.min(estimate), high.max(estimate))
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
        assert_eq!(RateWindow::default().record(1_000, 0), RateWindow::default(), "starts with an admission");
        let w = RateWindow::default().record(1_000, 5);
        assert_eq!(w, RateWindow { at_ms: 1_000, count: 5, per_minute: 0 });
        let w = w.record(6_000, 5).record(11_000, 10);
        assert_eq!(w.per_minute, 20 * 60_000 / 10_000);
        assert_eq!(w.count, 0);
        assert_eq!(w.at_ms, 11_000);
        // The next window counts half.
        let w = w.record(21_000, 40);
        assert_eq!(w.per_minute, (240 + 120) / 2);
        // An empty one stops the line at once.
        assert_eq!(w.record(31_000, 0).per_minute, 0);
    }

    #[test]
    fn wait_estimates() {
        assert_eq!(estimated_wait_seconds(1, 120), Some(1));
        assert_eq!(estimated_wait_seconds(120, 120), Some(60));
        assert_eq!(estimated_wait_seconds(121, 120), Some(61));
        assert_eq!(estimated_wait_seconds(3, 120), Some(2), "1.5 s rounds up");
        assert_eq!(estimated_wait_seconds(10, 120), Some(5));
        assert_eq!(estimated_wait_seconds(10, 0), None);
        assert_eq!(estimated_wait_seconds(0, 60), None);
        assert_eq!(estimated_wait_seconds(1, 6000), Some(1), "never 0 while waiting");
    }

    #[test]
    fn the_rate_an_estimate_uses() {
        let none = RateWindow::default();
        // Nothing measured: the setting, or unknown.
        assert_eq!(admissions_per_minute(none, 5_000, 2), 120);
        assert_eq!(admissions_per_minute(none, 5_000, 0), 0);
        // A full window measured 600/min; its successor has counted 30 in 4 s so far.
        let w = RateWindow { at_ms: 10_000, count: 30, per_minute: 600 };
        assert_eq!(admissions_per_minute(w, 14_000, 0), 600);
        // The setting caps what was measured (the bucket lets no more through).
        assert_eq!(admissions_per_minute(w, 14_000, 5), 300);
        // Nobody let in for 20 s: the open window reads 30 in 20 s, then less and less.
        assert_eq!(admissions_per_minute(w, 30_000, 0), 90);
        assert_eq!(admissions_per_minute(w, 70_000, 0), 30);
        // A window that closed empty (PROMOTE found no room for 10 s): nobody moves.
        let stalled = RateWindow { at_ms: 10_000, count: 0, per_minute: 0 };
        assert_eq!(admissions_per_minute(stalled, 12_000, 2), 0);
        assert_eq!(estimated_wait_seconds(5, admissions_per_minute(stalled, 12_000, 2)), None);
        // The first window: unknown for its first 2 s, then read as it goes.
        let first = RateWindow { at_ms: 10_000, count: 6, per_minute: 0 };
        assert_eq!(admissions_per_minute(first, 11_999, 0), 0);
        assert_eq!(admissions_per_minute(first, 13_000, 0), 120);
    }

    #[test]
    fn ranges_narrow_with_the_rank() {
        assert_eq!(wait_range(10, 1), (1, 23));
        assert_eq!(wait_range(100, 100), (87, 113));
        assert_eq!(wait_range(1000, 10_000), (987, 1013));
        assert_eq!(wait_range(0, 5), (0, 0));
        let (low, high) = wait_range(7, 3);
        assert!((1..=7).contains(&low) && high >= 7);
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
