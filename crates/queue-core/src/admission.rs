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

/// Window over which the admission rate is measured: a window closes at the first
/// admission this long after it opened.
pub const RATE_WINDOW_MS: i64 = 10_000;

/// The time constant of the smoothed rate: a closed window of `span` ms weighs
/// `span / (span + RATE_SMOOTHING_MS)` against what came before (a 10 s window a
/// quarter), so one uneven window moves the rate a little, a change that lasts shows
/// within a minute or two, and a long window (a slow line) counts for more.
pub const RATE_SMOOTHING_MS: i64 = 30_000;

/// Measured admissions: a window start, the count in it, and the smoothed rate of the
/// windows closed so far in thousandths of an admission per minute (so a slow line
/// keeps its precision in integer arithmetic).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RateWindow {
    pub at_ms: i64,
    pub count: i64,
    pub per_minute: i64,
}

/// `count` admissions over `span` ms, in thousandths of an admission per minute.
fn milli_per_minute(count: i64, span: i64) -> i64 {
    count * 60_000_000 / span.max(1)
}

impl RateWindow {
    /// Records `admitted` users at `now`; closes the window once it is long enough,
    /// folding it into the smoothed rate (the first one sets it). Measuring starts
    /// with the first admission.
    pub fn record(self, now: i64, admitted: i64) -> Self {
        let mut w = self;
        if w.at_ms == 0 {
            // The first admissions mark where measuring starts: the window counts
            // those after them (counting both ends would read a lump as a rate).
            if admitted > 0 {
                w.at_ms = now;
            }
            return w;
        }
        w.count += admitted;
        let span = now - w.at_ms;
        if span >= RATE_WINDOW_MS {
            let this = milli_per_minute(w.count, span);
            w.per_minute = if w.per_minute > 0 {
                (w.per_minute * RATE_SMOOTHING_MS + this * span) / (RATE_SMOOTHING_MS + span)
            } else {
                this
            };
            w.at_ms = now;
            w.count = 0;
        }
        w
    }
}

/// The shortest stretch of an open window read as a rate (before a first full one).
pub const MIN_RATE_SPAN_MS: i64 = 2_000;

/// How long past the usual gap nobody may be let in before the line counts as
/// stopped: the estimate is then unknown rather than a guess that keeps growing.
pub const STALL_MS: i64 = 60_000;

/// The admissions per minute a wait estimate uses at `now`, in thousandths. Only
/// admissions from the line are measured (someone let in at once says nothing about
/// how fast the line moves). The smoothed rate of the closed windows; it holds
/// through the usual gap between admissions (an open window up to the longer of
/// [`RATE_WINDOW_MS`] and two average gaps), then decays as the quiet goes on, and
/// reads 0 once the quiet outlasts that by [`STALL_MS`] (the line stopped). Before a
/// first closed window, the open one once it spans [`MIN_RATE_SPAN_MS`]; with nothing
/// measured yet, the `rate` setting (0: unknown). Never above the `rate` setting
/// when one is set: the bucket caps admissions.
pub fn admissions_milli_per_minute(w: RateWindow, now: i64, rate_per_second: i64) -> i64 {
    let limit = rate_per_second.max(0) * 60_000;
    if w.at_ms == 0 {
        return limit;
    }
    let span = now - w.at_ms;
    let measured = if w.per_minute <= 0 {
        if (MIN_RATE_SPAN_MS..RATE_WINDOW_MS + STALL_MS).contains(&span) {
            milli_per_minute(w.count, span)
        } else {
            0
        }
    } else {
        // The usual gap: two windows, or two average gaps (60 s / rate) if longer.
        let usual = (2 * RATE_WINDOW_MS).max(2 * 60_000_000 / w.per_minute.max(1));
        let quiet = span - usual;
        if quiet <= 0 {
            w.per_minute
        } else if quiet >= STALL_MS {
            0
        } else {
            w.per_minute * RATE_SMOOTHING_MS / (RATE_SMOOTHING_MS + quiet)
        }
    };
    if limit > 0 {
        measured.min(limit)
    } else {
        measured
    }
}

/// The admissions per minute a wait estimate uses at `now` (see
/// [`admissions_milli_per_minute`]), rounded to whole admissions, at least 1 when
/// anyone is being let in (0: unknown).
pub fn admissions_per_minute(w: RateWindow, now: i64, rate_per_second: i64) -> i64 {
    let milli = admissions_milli_per_minute(w, now, rate_per_second);
    if milli <= 0 {
        0
    } else {
        ((milli + 500) / 1000).max(1)
    }
}

/// Under this many seconds a wait gets no figure: its last seconds pass faster than
/// any figure a person reads can follow (20 s shown when 2 s are left is ten times
/// off, and a figure per second is noise), so nothing is said rather than something
/// wrong; the page then says the turn is near.
pub const SOON_SECS: i64 = 15;

/// Estimated wait in whole seconds for the user at `rank` (1 = next) at `per_minute`
/// admissions (see [`admissions_per_minute`]), rounded to a step a person reads (see
/// [`shown_wait_seconds`]). None: unknown (nobody is being let in), or under
/// [`SOON_SECS`] (the turn is near).
pub fn estimated_wait_seconds(rank: i64, per_minute: i64) -> Option<i64> {
    if per_minute <= 0 || rank <= 0 {
        return None;
    }
    let secs = (rank * 120 + per_minute) / (2 * per_minute);
    (secs >= SOON_SECS).then(|| shown_wait_seconds(secs))
}

/// A wait in seconds rounded to the nearest step a person reads, so that the figure
/// shown changes at most a few times a minute rather than with every admission: 20 s
/// steps under 50 s (20, 40: never 0 while waiting, three figures in the last
/// minute), 30 s steps up to 3.5 minutes, whole minutes up to 30 minutes, 5 minutes
/// up to 2 hours, then 15 minutes. From 50 s on a figure is at most a fifth off what
/// it rounds (10 % or less past 5 minutes), so the rounding keeps the estimate honest;
/// the boundaries are placed where the figure never falls as the wait grows.
pub fn shown_wait_seconds(secs: i64) -> i64 {
    let step = match secs {
        ..50 => 20,
        50..210 => 30,
        210..1_830 => 60,
        1_830..7_350 => 300,
        _ => 900,
    };
    ((secs + step / 2) / step * step).max(20)
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
        assert_eq!(w, RateWindow { at_ms: 1_000, count: 0, per_minute: 0 }, "the first admissions start it");
        // The first window sets the rate: 20 in 10 s, 120 a minute (in thousandths).
        let w = w.record(6_000, 10).record(11_000, 10);
        assert_eq!(w.per_minute, 120_000);
        assert_eq!(w.count, 0);
        assert_eq!(w.at_ms, 11_000);
        // The next 10 s window weighs a quarter: 240 a minute moves it to 150.
        let w = w.record(21_000, 40);
        assert_eq!(w.per_minute, (120_000 * 30_000 + 240_000 * 10_000) / 40_000);
        assert_eq!(w.per_minute, 150_000);
        // A window closed by an admission after a long quiet weighs more: 1 in 60 s.
        assert_eq!(w.record(81_000, 1).per_minute, (150_000 * 30_000 + 1_000 * 60_000) / 90_000);
    }

    #[test]
    fn a_steady_line_reads_steady() {
        // 3 admitted every 2 s (90 a minute), one window after another: the rate
        // read at every second stays at 90 once measured, as does the estimate.
        let mut w = RateWindow::default();
        let mut seen = std::collections::BTreeSet::new();
        for t in 1..=300 {
            let now = t * 1_000;
            if t % 2 == 0 {
                w = w.record(now, 3);
            }
            if t >= 20 {
                seen.insert(admissions_per_minute(w, now, 0));
            }
        }
        assert_eq!(seen.into_iter().collect::<Vec<_>>(), vec![90]);
        // Bursts of 30 every 20 s (the same 90 a minute, in lumps): no gap reads as a
        // stop, and the rate stays within a few percent.
        let mut w = RateWindow::default();
        for t in 1..=600 {
            let now = t * 1_000;
            if t % 20 == 0 {
                w = w.record(now, 30);
            }
            if t >= 60 {
                let m = admissions_per_minute(w, now, 0);
                assert!((85..=95).contains(&m), "{m} a minute at {t} s");
            }
        }
    }

    #[test]
    fn the_rate_an_estimate_uses() {
        let none = RateWindow::default();
        // Nothing measured: the setting, or unknown.
        assert_eq!(admissions_per_minute(none, 5_000, 2), 120);
        assert_eq!(admissions_per_minute(none, 5_000, 0), 0);
        // A smoothed 600 a minute (a usual gap of 20 s: two windows); its successor
        // has counted 30 in 4 s so far.
        let w = RateWindow { at_ms: 10_000, count: 30, per_minute: 600_000 };
        assert_eq!(admissions_per_minute(w, 14_000, 0), 600);
        // The setting caps what was measured (the bucket lets no more through).
        assert_eq!(admissions_per_minute(w, 14_000, 5), 300);
        // Quiet for as long as the usual gap: still 600; then it decays.
        assert_eq!(admissions_per_minute(w, 30_000, 0), 600);
        assert_eq!(admissions_per_minute(w, 60_000, 0), 300);
        assert_eq!(admissions_milli_per_minute(w, 89_999, 0), 600_000 * 30_000 / 89_999);
        // Quiet for a minute past the usual gap: stopped, unknown.
        assert_eq!(admissions_per_minute(w, 90_000, 0), 0);
        assert_eq!(estimated_wait_seconds(5, admissions_per_minute(w, 90_000, 2)), None);
        // A slow line (3 a minute, a gap of 20 s): the usual gap is 40 s.
        let slow = RateWindow { at_ms: 10_000, count: 0, per_minute: 3_000 };
        assert_eq!(admissions_per_minute(slow, 50_000, 0), 3);
        assert_eq!(admissions_per_minute(slow, 80_000, 0), 2);
        assert_eq!(admissions_per_minute(slow, 110_000, 0), 0);
        // Under one a minute rounds up to 1 while anyone is let in.
        assert_eq!(admissions_per_minute(RateWindow { at_ms: 10_000, count: 0, per_minute: 300 }, 11_000, 0), 1);
        // The first window: unknown for its first 2 s, then read as it goes.
        let first = RateWindow { at_ms: 10_000, count: 6, per_minute: 0 };
        assert_eq!(admissions_per_minute(first, 11_999, 0), 0);
        assert_eq!(admissions_per_minute(first, 13_000, 0), 120);
        assert_eq!(admissions_milli_per_minute(first, 79_999, 0), 6 * 60_000_000 / 69_999);
        assert_eq!(admissions_per_minute(first, 80_000, 0), 0);
    }

    #[test]
    fn wait_estimates() {
        assert_eq!(estimated_wait_seconds(1, 120), None, "under 15 s: no figure, the turn is near");
        assert_eq!(estimated_wait_seconds(28, 120), None, "14 s: near");
        assert_eq!(estimated_wait_seconds(29, 120), Some(20), "14.5 s rounds to 15 s: the smallest figure, 20 s");
        assert_eq!(estimated_wait_seconds(120, 120), Some(60));
        assert_eq!(estimated_wait_seconds(121, 120), Some(60));
        assert_eq!(estimated_wait_seconds(59, 120), Some(40), "29.5 s rounds to 30 s, then to 40 s");
        assert_eq!(estimated_wait_seconds(10, 120), None);
        assert_eq!(estimated_wait_seconds(10, 0), None);
        assert_eq!(estimated_wait_seconds(0, 60), None);
        assert_eq!(estimated_wait_seconds(1, 6000), None);
        assert_eq!(estimated_wait_seconds(1, 4), Some(20), "15 s for the next one at 4 a minute");
        assert_eq!(estimated_wait_seconds(150, 120), Some(90), "75 s rounds to 90 s");
        assert_eq!(estimated_wait_seconds(450, 60), Some(480), "7.5 min rounds to 8");
        assert_eq!(estimated_wait_seconds(100_000, 60), Some(99_900), "15 minute steps past 2 hours");
    }

    #[test]
    fn shown_waits_are_steps_a_person_reads() {
        let table = [
            (0, 20),
            (1, 20),
            (29, 20),
            (30, 40),
            (49, 40),
            (50, 60),
            (74, 60),
            (75, 90),
            (194, 180),
            (195, 210),
            (209, 210),
            (210, 240),
            (1_829, 1_800),
            (1_830, 1_800),
            (1_950, 2_100),
            (7_349, 7_200),
            (7_350, 7_200),
            (7_650, 8_100),
        ];
        for (secs, want) in table {
            assert_eq!(shown_wait_seconds(secs), want, "{secs} s");
        }
        // Never falls as the wait grows, and stays within a fifth of what it rounds
        // from 50 s on (a tenth from 5 minutes on).
        let mut last = 0;
        for secs in 0..20_000 {
            let shown = shown_wait_seconds(secs);
            assert!(shown >= last, "{secs} s");
            if secs >= 50 {
                assert!((shown - secs).abs() * 5 <= secs, "{secs} s shown as {shown}");
            }
            if secs >= 300 {
                assert!((shown - secs).abs() * 10 <= secs, "{secs} s shown as {shown}");
            }
            last = shown;
        }
        // A steady line (the true wait falls a minute a minute): three figures in the
        // last minute, at most three a minute up to 3.5 minutes, then one or two.
        let changes = |from: i64, to: i64| {
            let mut shown: Vec<i64> = (to..=from).rev().map(shown_wait_seconds).collect();
            shown.dedup();
            shown.len()
        };
        assert_eq!(changes(59, 0), 3);
        assert!(changes(180, 121) <= 3);
        assert!(changes(600, 541) <= 2);
        assert!(changes(3_000, 2_941) <= 2);
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
