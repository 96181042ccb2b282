//! Which faults a chaos run injects, and when: every kind as often as asked, in a
//! seeded random order, one per slot of the arrivals.

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Service {
    Api,
    Chat,
    Manager,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fsync {
    EverySec,
    Always,
}

impl Fsync {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Fsync::EverySec => "everysec",
            Fsync::Always => "always",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    Kill(Service),
    /// kill -9 of valkey-server, restarted from its AOF with this fsync policy.
    Valkey(Fsync),
    /// SIGSTOP of the leading queue-manager for longer than its lease.
    StopLeader,
}

impl std::fmt::Display for Fault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Fault::Kill(Service::Api) => write!(f, "kill -9 queue-api"),
            Fault::Kill(Service::Chat) => write!(f, "kill -9 chat-server"),
            Fault::Kill(Service::Manager) => write!(f, "kill -9 leading manager"),
            Fault::Valkey(m) => write!(f, "kill -9 valkey, AOF {}", m.as_str()),
            Fault::StopLeader => write!(f, "SIGSTOP leading manager"),
        }
    }
}

/// The faults of a run at their offsets from the start: every kind as often as asked,
/// in a seeded random order, one per equal slot of `[from, to)` at a random moment in
/// the slot's first half (so each has time to recover before the next).
pub fn schedule(
    kills: u32,
    valkey: u32,
    stops: u32,
    from: Duration,
    to: Duration,
    seed: u64,
) -> Vec<(Duration, Fault)> {
    let mut faults = Vec::new();
    for svc in [Service::Api, Service::Chat, Service::Manager] {
        faults.extend((0..kills).map(|_| Fault::Kill(svc)));
    }
    faults.extend((0..valkey).map(|i| Fault::Valkey(if i % 2 == 0 { Fsync::EverySec } else { Fsync::Always })));
    faults.extend((0..stops).map(|_| Fault::StopLeader));
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed ^ 0xc4a0_5000);
    faults.shuffle(&mut rng);
    if faults.is_empty() {
        return Vec::new();
    }
    let slot = to.saturating_sub(from) / faults.len() as u32;
    faults
        .into_iter()
        .enumerate()
        .map(|(i, f)| (from + slot * i as u32 + slot.mul_f64(rng.random_range(0.0..0.5)), f))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schedule_has_every_fault_once_per_slot_inside_the_window() {
        let (from, to) = (Duration::from_secs(5), Duration::from_secs(83));
        let plan = schedule(3, 3, 1, from, to, 7);
        assert_eq!(plan.len(), 13);
        let count = |f: Fault| plan.iter().filter(|(_, g)| *g == f).count();
        for svc in [Service::Api, Service::Chat, Service::Manager] {
            assert_eq!(count(Fault::Kill(svc)), 3);
        }
        assert_eq!(count(Fault::Valkey(Fsync::EverySec)), 2);
        assert_eq!(count(Fault::Valkey(Fsync::Always)), 1);
        assert_eq!(count(Fault::StopLeader), 1);
        let slot = (to - from) / 13;
        for (i, (t, _)) in plan.iter().enumerate() {
            let start = from + slot * i as u32;
            assert!(*t >= start && *t < start + slot / 2 + Duration::from_millis(1), "fault {i} at {t:?}");
        }
        assert_eq!(plan, schedule(3, 3, 1, from, to, 7), "a seed replays the schedule");
        assert_ne!(plan, schedule(3, 3, 1, from, to, 8));
    }
}
