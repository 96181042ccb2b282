//! The over-capacity audits against a soft cap that may change during a run.
//!
//! The swarm reads the cap from the back office every few hundred milliseconds
//! ([`CapHistory`]); a reading's cap was in force at some moment between the request
//! leaving and the answer arriving, and a change between two readings happened at some
//! moment between them. The server admits (promotes: a ticket is issued and counts
//! until its session ends) only while the number inside is below the cap in force at
//! that moment, and a lowered cap evicts nobody. So the number inside after an
//! admission is at most the cap in force when it was made, and between admissions it
//! only falls. Hence the rules, each of which counts only certain breaches:
//!
//! - **The swarm's count** ([`Admission`]): when the swarm sees a user promoted, every
//!   user it counts as holding was inside at the moment the last of them was admitted,
//!   and that moment lies between the user's last WAITING answer (or its entry
//!   request) and now. The count is a breach only when it exceeds every cap that may
//!   have been in force within that window, widened by [`MARGIN`] on both sides.
//! - **The server's count** ([`Sample`]): a back-office sample whose `active + joining`
//!   rose since the previous sample holds someone admitted between the two; it is a
//!   breach only when it exceeds every cap that may have been in force between the
//!   previous sample's request and this sample's answer (widened by [`MARGIN`]). A
//!   count that did not rise is not judged again: after a cap is lowered, the people
//!   already inside leave at their pace.

use serde::Serialize;

/// Seconds added on either side of a window: an answer's moment on the server comes
/// before it arrives here (responses and push frames in flight on a busy machine).
pub const MARGIN: f64 = 1.0;

/// A run of back-office readings with the same soft cap.
#[derive(Debug, Clone, Copy)]
struct Run {
    cap: u64,
    /// When the first reading of the run was answered.
    first_recv: f64,
    /// When the last reading of the run was sent.
    last_sent: f64,
}

/// The soft caps read over a run, in seconds since its start.
#[derive(Debug, Clone, Default)]
pub struct CapHistory {
    runs: Vec<Run>,
    /// The last reading's request left at this time (`INFINITY`: the cap is fixed).
    last_sent: f64,
}

/// A soft-cap change seen during the run: `from` -> `to`, first read at `at_seconds`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct CapChange {
    pub at_seconds: f64,
    pub from: u64,
    pub to: u64,
}

impl CapHistory {
    /// A cap given up front (`--soft-cap`): in force the whole run.
    pub fn fixed(cap: u64) -> CapHistory {
        let run = Run { cap, first_recv: f64::NEG_INFINITY, last_sent: f64::INFINITY };
        CapHistory { runs: vec![run], last_sent: f64::INFINITY }
    }

    /// A reading sent at `sent` and answered at `recv`; readings come in order.
    pub fn read(&mut self, sent: f64, recv: f64, cap: u64) {
        self.last_sent = sent;
        match self.runs.last_mut() {
            Some(run) if run.cap == cap => run.last_sent = sent,
            _ => self.runs.push(Run { cap, first_recv: recv, last_sent: sent }),
        }
    }

    /// The cap at the first reading.
    pub fn first(&self) -> Option<u64> {
        self.runs.first().map(|r| r.cap)
    }

    /// The changes seen, each at the time it was first read.
    pub fn changes(&self) -> Vec<CapChange> {
        self.runs.windows(2).map(|w| CapChange { at_seconds: w[1].first_recv, from: w[0].cap, to: w[1].cap }).collect()
    }

    /// The largest cap that may have been in force at some moment of `[from, to]`
    /// (None before any reading). A run's cap may have been in force from its
    /// predecessor's last request to its successor's first answer; the first run
    /// stands for the time before the first reading, the last for the time after.
    pub fn allowed(&self, from: f64, to: f64) -> Option<u64> {
        let n = self.runs.len();
        (0..n)
            .filter(|&i| {
                let start = if i == 0 { f64::NEG_INFINITY } else { self.runs[i - 1].last_sent };
                let end = if i + 1 == n { f64::INFINITY } else { self.runs[i + 1].first_recv };
                start <= to && from <= end
            })
            .map(|i| self.runs[i].cap)
            .max()
    }

    /// Whether no later reading can change [`CapHistory::allowed`] for a window ending
    /// at `to`: a reading was sent after it (any run read later starts after `to`).
    pub fn settled(&self, to: f64) -> bool {
        self.last_sent > to
    }
}

/// The swarm saw a user promoted at `seen`, after its last WAITING answer (or its
/// entry request) at `earliest`, and counted `holding` users inside, this one included.
#[derive(Debug, Clone, Copy)]
pub struct Admission {
    pub earliest: f64,
    pub seen: f64,
    pub holding: u64,
}

impl Admission {
    /// The window judged ends here.
    pub fn until(&self) -> f64 {
        self.seen + MARGIN
    }

    /// The cap exceeded when this admission is a breach.
    pub fn over(&self, caps: &CapHistory) -> Option<u64> {
        caps.allowed(self.earliest - MARGIN, self.until()).filter(|&cap| self.holding > cap)
    }
}

/// The server's `active + joining` in a back-office answer to a request sent at `sent`
/// and answered at `recv`.
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    pub sent: f64,
    pub recv: f64,
    pub in_use: u64,
}

impl Sample {
    /// The window judged ends here.
    pub fn until(&self) -> f64 {
        self.recv + MARGIN
    }

    /// The cap exceeded when this sample (after `prev`, None for the first) is a breach.
    pub fn over(&self, prev: Option<&Sample>, caps: &CapHistory) -> Option<u64> {
        if self.in_use <= prev.map_or(0, |p| p.in_use) {
            return None;
        }
        let from = prev.map_or(f64::NEG_INFINITY, |p| p.sent - MARGIN);
        caps.allowed(from, self.until()).filter(|&cap| self.in_use > cap)
    }
}

/// The admissions (by index) that are breaches, with the cap each exceeded.
pub fn over_capacity(caps: &CapHistory, admissions: &[Admission]) -> Vec<(usize, u64)> {
    admissions.iter().enumerate().filter_map(|(i, a)| Some((i, a.over(caps)?))).collect()
}

/// The server samples (by index) that are breaches, with the cap each exceeded.
pub fn server_over_capacity(caps: &CapHistory, samples: &[Sample]) -> Vec<(usize, u64)> {
    let prevs = std::iter::once(None).chain(samples.iter().map(Some));
    samples.iter().zip(prevs).enumerate().filter_map(|(i, (s, prev))| Some((i, s.over(prev, caps)?))).collect()
}

/// `5`, or `5 -> 20 at 3.1 s -> 8 at 6.0 s` when it changed.
pub fn describe(first: Option<u64>, changes: &[CapChange]) -> String {
    let mut s = first.map_or_else(|| "unknown".to_string(), |c| c.to_string());
    for c in changes {
        s.push_str(&format!(" -> {} at {:.1} s", c.to, c.at_seconds));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Readings every 0.25 s (answered 0.125 s later) from 0 to `until`, the cap `cap(t)`.
    fn polled(until: f64, cap: impl Fn(f64) -> u64) -> CapHistory {
        let mut h = CapHistory::default();
        for t in (0..).map(|k| f64::from(k) * 0.25).take_while(|&t| t <= until) {
            h.read(t, t + 0.125, cap(t));
        }
        h
    }

    fn samples(counts: &[(f64, u64)]) -> Vec<Sample> {
        counts.iter().map(|&(t, in_use)| Sample { sent: t, recv: t + 0.125, in_use }).collect()
    }

    fn admitted(earliest: f64, seen: f64, holding: u64) -> Admission {
        Admission { earliest, seen, holding }
    }

    /// People admitted one after another, `holding` after each (seen 0.1 s after a WAITING answer).
    fn admissions(at: &[(f64, u64)]) -> Vec<Admission> {
        at.iter().map(|&(t, h)| admitted(t - 0.1, t, h)).collect()
    }

    #[test]
    fn a_cap_raised_mid_run_is_no_breach() {
        let caps = polled(10.0, |t| if t < 3.0 { 5 } else { 20 });
        // Up to 5 inside before the raise, up to 20 from a little after it.
        let seen = admissions(&[(1.0, 5), (2.5, 5), (3.2, 9), (4.0, 20), (6.0, 20)]);
        assert_eq!(over_capacity(&caps, &seen), vec![]);
        // The swarm reading the cap once (before the run) would have failed this run.
        assert_eq!(over_capacity(&CapHistory::fixed(5), &seen), vec![(2, 5), (3, 5), (4, 5)]);
        assert_eq!(caps.changes(), vec![CapChange { at_seconds: 3.125, from: 5, to: 20 }]);
        assert_eq!(describe(caps.first(), &caps.changes()), "5 -> 20 at 3.1 s");
    }

    #[test]
    fn a_cap_raised_and_seen_late_is_no_breach() {
        // The back office answered slowly: the raise (after the reading sent at 2.75 s)
        // was first read at 4.5 s.
        let mut caps = polled(2.75, |_| 5);
        caps.read(3.0, 4.5, 20);
        // Promoted at 3.1 s under the new cap, seen at 3.2 s: before the raise was read.
        assert_eq!(over_capacity(&caps, &admissions(&[(3.2, 8)])), vec![]);
        // Promoted more than a margin before the reading at 2.75 s: the old cap held.
        assert_eq!(over_capacity(&caps, &admissions(&[(1.5, 8)])), vec![(0, 5)]);
    }

    #[test]
    fn a_cap_lowered_mid_run_with_people_leaving_slowly_is_no_breach() {
        let caps = polled(20.0, |t| if t < 5.0 { 20 } else { 5 });
        // 20 inside when the cap drops; they leave slowly, nobody admitted until 5 remain.
        let mut seen = admissions(&[(1.0, 10), (4.8, 20)]);
        // A promotion made just before the drop, seen just after it (still 20 inside).
        seen.push(admitted(4.7, 5.3, 20));
        // Later admissions, once fewer than 5 are inside.
        seen.extend(admissions(&[(14.0, 5), (16.0, 5)]));
        assert_eq!(over_capacity(&caps, &seen), vec![]);
        // The server's count: 20 when the cap dropped, then falling.
        let counts = [(4.2, 18), (4.5, 20), (5.1, 20), (5.4, 19), (8.0, 12), (12.0, 4), (14.0, 5)];
        assert_eq!(server_over_capacity(&caps, &samples(&counts)), vec![]);
    }

    #[test]
    fn an_excess_over_the_cap_in_force_is_a_breach() {
        let caps = polled(20.0, |t| if t < 5.0 { 20 } else { 5 });
        // Well after the drop, someone is admitted while 5 or more are already inside.
        let seen = admissions(&[(4.8, 20), (9.0, 6), (10.0, 8)]);
        assert_eq!(over_capacity(&caps, &seen), vec![(1, 5), (2, 5)]);
        // The server's count rising after the drop with more than 5 inside.
        let counts = [(4.5, 20), (8.0, 12), (9.0, 13), (9.3, 13)];
        assert_eq!(server_over_capacity(&caps, &samples(&counts)), vec![(2, 5)]);
        // With a cap that never changes, any count above it is a breach, the first sample's too.
        let fixed = polled(20.0, |_| 10);
        assert_eq!(over_capacity(&fixed, &admissions(&[(1.0, 10), (2.0, 11), (3.0, 11)])), vec![(1, 10), (2, 10)]);
        assert_eq!(server_over_capacity(&fixed, &samples(&[(0.0, 11)])), vec![(0, 10)]);
    }

    #[test]
    fn only_a_short_window_around_a_change_is_spared() {
        let caps = polled(20.0, |t| if t < 3.0 { 5 } else { 20 });
        // Admitted more than a margin before the raise: the old cap was in force.
        assert_eq!(over_capacity(&caps, &admissions(&[(1.5, 6)])), vec![(0, 5)]);
        // The higher cap is no excuse for a count above it.
        assert_eq!(over_capacity(&caps, &admissions(&[(3.2, 21)])), vec![(0, 20)]);
        // A raise followed by a drop: the higher cap spares only the time it may have been in force.
        let caps = polled(20.0, |t| if (3.0..6.0).contains(&t) { 20 } else { 5 });
        assert_eq!(over_capacity(&caps, &admissions(&[(4.0, 15), (9.0, 15)])), vec![(1, 5)]);
    }

    #[test]
    fn a_window_settles_once_a_reading_was_sent_after_it() {
        let mut caps = CapHistory::default();
        assert_eq!(caps.allowed(0.0, 1.0), None);
        caps.read(0.0, 0.05, 5);
        let a = admitted(0.9, 1.0, 8);
        assert!(!caps.settled(a.until()));
        caps.read(1.9, 1.95, 5);
        assert!(!caps.settled(a.until()));
        caps.read(2.2, 2.25, 10);
        assert!(caps.settled(a.until()));
        // Raised between 1.9 s and 2.25 s: within the margin of the admission's window.
        assert_eq!(a.over(&caps), None);
        assert!(CapHistory::fixed(5).settled(f64::MAX));
    }
}
