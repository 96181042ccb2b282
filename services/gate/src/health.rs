//! Whether Valkey answers, as the gate's own calls (heartbeats, claims, a PING on a
//! quiet tick) find it, and so whether `--fail-open` lets traffic through.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// Valkey's reachability, updated by every call the gate makes.
#[derive(Debug)]
pub struct StoreHealth {
    /// Milliseconds since the epoch of the first failure of the current outage; 0 while up.
    down_since_ms: AtomicU64,
    /// Whether fail-open was logged for the current outage.
    failing_open: AtomicBool,
    fail_open_after: Option<Duration>,
}

impl StoreHealth {
    /// Unreachable from `now_ms` on (nothing has answered yet).
    pub fn new(fail_open_after: Option<Duration>, now_ms: u64) -> StoreHealth {
        StoreHealth {
            down_since_ms: AtomicU64::new(now_ms.max(1)),
            failing_open: AtomicBool::new(false),
            fail_open_after,
        }
    }

    /// A call went through.
    pub fn up(&self) {
        if self.down_since_ms.swap(0, Ordering::Relaxed) != 0 {
            tracing::info!("Valkey answers");
            if self.failing_open.swap(false, Ordering::Relaxed) {
                tracing::warn!("fail-open over: unadmitted requests go to the waiting room again");
            }
        }
    }

    /// A call failed because the store is unreachable.
    pub fn down(&self, now_ms: u64, why: &dyn std::fmt::Display) {
        if self.down_since_ms.compare_exchange(0, now_ms.max(1), Ordering::Relaxed, Ordering::Relaxed).is_ok() {
            tracing::warn!(error = %why, "Valkey unreachable: admitted people keep access until their token expires, claims get 503");
        }
    }

    pub fn is_up(&self) -> bool {
        self.down_since_ms.load(Ordering::Relaxed) == 0
    }

    /// Whether unadmitted requests pass: `--fail-open` is set and the store has been
    /// unreachable for at least that long.
    pub fn fail_open(&self, now_ms: u64) -> bool {
        let Some(after) = self.fail_open_after else { return false };
        let since = self.down_since_ms.load(Ordering::Relaxed);
        if since == 0 || now_ms.saturating_sub(since) < after.as_millis() as u64 {
            return false;
        }
        if !self.failing_open.swap(true, Ordering::Relaxed) {
            tracing::warn!(after = %humantime::format_duration(after), "Valkey unreachable for the fail-open time: unadmitted requests pass");
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fail_open_after_the_set_time_only() {
        let h = StoreHealth::new(Some(Duration::from_secs(5)), 1000);
        assert!(!h.is_up());
        h.up();
        assert!(h.is_up() && !h.fail_open(100_000));
        h.down(10_000, &"x");
        h.down(12_000, &"x"); // the outage began at the first failure
        assert!(!h.fail_open(14_999));
        assert!(h.fail_open(15_000));
        h.up();
        assert!(!h.fail_open(100_000));
        let never = StoreHealth::new(None, 1);
        assert!(!never.fail_open(u64::MAX));
    }
}
