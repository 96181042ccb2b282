//! Per-connection flood control: a token bucket over the frames a client sends.
//! Excess frames are answered with an `ERROR` frame and dropped; a client that keeps
//! going after many drops in a row is closed (1008), so a runaway client costs one
//! close instead of a storm of errors.

use std::time::Instant;

/// Frames dropped in a row after which the connection is closed.
pub const MAX_DROPPED_IN_A_ROW: u32 = 50;

/// What to do with one frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Take it.
    Accept,
    /// Drop it and say so.
    Drop,
    /// Too many dropped in a row: close the connection.
    Close,
}

#[derive(Debug, Clone)]
pub struct FrameLimit {
    rate: f64,
    burst: f64,
    tokens: f64,
    last: Instant,
    dropped_in_a_row: u32,
}

impl FrameLimit {
    /// A full bucket of `burst` frames, refilled at `rate` per second.
    pub fn new(rate: f64, burst: f64, now: Instant) -> FrameLimit {
        let burst = burst.max(1.0);
        FrameLimit { rate, burst, tokens: burst, last: now, dropped_in_a_row: 0 }
    }

    pub fn check(&mut self, now: Instant) -> Verdict {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.rate).min(self.burst);
        self.last = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            self.dropped_in_a_row = 0;
            return Verdict::Accept;
        }
        self.dropped_in_a_row += 1;
        if self.dropped_in_a_row > MAX_DROPPED_IN_A_ROW {
            Verdict::Close
        } else {
            Verdict::Drop
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn burst_then_rate() {
        let t0 = Instant::now();
        let mut l = FrameLimit::new(5.0, 10.0, t0);
        for i in 0..10 {
            assert_eq!(l.check(t0), Verdict::Accept, "frame {i} of the burst");
        }
        assert_eq!(l.check(t0), Verdict::Drop);
        // 5 per second: one token every 200 ms.
        assert_eq!(l.check(t0 + Duration::from_millis(150)), Verdict::Drop);
        assert_eq!(l.check(t0 + Duration::from_millis(210)), Verdict::Accept);
        assert_eq!(l.check(t0 + Duration::from_millis(220)), Verdict::Drop);
        // A long pause refills up to the burst, not beyond.
        let later = t0 + Duration::from_secs(60);
        for _ in 0..10 {
            assert_eq!(l.check(later), Verdict::Accept);
        }
        assert_eq!(l.check(later), Verdict::Drop);
    }

    #[test]
    fn closes_after_too_many_drops_in_a_row() {
        let t0 = Instant::now();
        let mut l = FrameLimit::new(1.0, 1.0, t0);
        assert_eq!(l.check(t0), Verdict::Accept);
        for _ in 0..MAX_DROPPED_IN_A_ROW {
            assert_eq!(l.check(t0), Verdict::Drop);
        }
        assert_eq!(l.check(t0), Verdict::Close);
    }

    #[test]
    fn an_accepted_frame_resets_the_drop_count() {
        let t0 = Instant::now();
        let mut l = FrameLimit::new(1.0, 1.0, t0);
        assert_eq!(l.check(t0), Verdict::Accept);
        for _ in 0..MAX_DROPPED_IN_A_ROW {
            assert_eq!(l.check(t0), Verdict::Drop);
        }
        let t1 = t0 + Duration::from_secs(1);
        assert_eq!(l.check(t1), Verdict::Accept);
        for _ in 0..MAX_DROPPED_IN_A_ROW {
            assert_eq!(l.check(t1), Verdict::Drop);
        }
    }
}
