//! The ledger every virtual user writes into, and the audits it keeps: a waiting
//! rank never rising, the earliest surely-earlier waiter asked on each promotion
//! (FIFO), the users holding a ticket or a session against the caps in force
//! (capacity, [`crate::capacity`]), the waits, the free slot to promotion times and
//! the graded estimates.

use super::report::Report;
use super::Progress;
use crate::capacity::{Admission, CapHistory, Sample};
use std::collections::VecDeque;
use std::time::Instant;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Phase {
    Entering,
    Waiting,
    Holding,
    InChat,
    Done,
}

pub(super) struct Person {
    pub(super) phase: Phase,
    pub(super) entry_sent: Instant,
    pub(super) entry_recv: Option<Instant>,
    /// Stays in line until promoted (is not going to abandon).
    pub(super) steadfast: bool,
    pub(super) user_id: String,
    pub(super) forwarded_for: Option<String>,
    /// The estimate given at entry and the first at rank 10 or better (when, what).
    pub(super) eta_at_entry: Option<(Instant, Option<u64>)>,
    pub(super) eta_at_rank10: Option<(Instant, Option<u64>)>,
    /// Journeys started over (chaos runs): an audit picked before a restart is void.
    pub(super) generation: u32,
    /// The last WAITING answer of this journey (its entry request when none): the
    /// promotion came after it.
    pub(super) last_waiting: Option<Instant>,
    /// In a queue with lanes: the lane this person waits in (its index in the queue's
    /// order), as the entry's answer named it.
    pub(super) lane: Option<usize>,
    /// The app's login token this person is known by (with identities on).
    pub(super) token: Option<String>,
    /// A moment the server surely still had this person WAITING: the entry request, or
    /// the moment a later WAITING answer was surely asked for (a poll sent after the
    /// previous update). Unlike `last_waiting` a strict bound: a promotion came after it.
    pub(super) surely_waiting_at: Option<Instant>,
}

#[derive(Default)]
pub(super) struct Ledger {
    /// The start of the run: times in the capacity audit count from here.
    pub(super) epoch: Option<Instant>,
    pub(super) people: Vec<Person>,
    /// No one before this index is still waiting.
    pub(super) first_waiting: usize,
    pub(super) holding: u64,
    pub(super) frees: VecDeque<Instant>,
    pub(super) waits: Vec<f64>,
    pub(super) slot_to_promotion: Vec<f64>,
    pub(super) eta_entry_errors: Vec<f64>,
    pub(super) eta_rank10_errors: Vec<f64>,
    /// Every estimate each waiting person was shown (entry, then every status poll or
    /// stream update while waiting), by person: when, what.
    pub(super) eta_readings: std::collections::HashMap<usize, Vec<(Instant, Option<u64>)>>,
    /// What a person saw, second by second, graded against the wait that followed.
    pub(super) eta_shown: ShownGrades,
    /// The soft caps read from the back office, and the one given up front if any.
    pub(super) caps: CapHistory,
    pub(super) given_cap: Option<CapHistory>,
    /// Promotions seen, by whom, and how many of them are judged so far.
    pub(super) admissions: Vec<(usize, Admission)>,
    pub(super) admissions_judged: usize,
    /// The server's counts from the back office, and how many are judged so far.
    pub(super) samples: Vec<Sample>,
    pub(super) samples_judged: usize,
    /// The queue's lanes in admission order (none: a queue without lanes).
    pub(super) lanes: Vec<String>,
    /// Every access code tried, with its uses and what the entries with it got.
    pub(super) codes: std::collections::BTreeMap<String, super::lanes::CodeTally>,
    pub(super) report: Report,
}

/// Whom to ask, after a promotion, whether they still wait (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Audit {
    pub(super) ahead: usize,
    pub(super) generation: u32,
    pub(super) user: String,
    pub(super) forwarded_for: Option<String>,
    pub(super) token: Option<String>,
    /// `ahead` waits in an earlier lane than the person promoted (else in the same one).
    pub(super) earlier_lane: bool,
}

/// |predicted - actual| / actual, waits under a second counting as one second.
fn eta_error(predicted: u64, actual: f64) -> f64 {
    let actual = actual.max(1.0);
    (predicted as f64 - actual).abs() / actual
}

/// The estimates people were shown, graded per person-second: at each second of a
/// wait, the figure on screen (the last one received) against the time still to wait
/// then. A person-second rather than a reading, because that is what a person lives
/// with: a figure that stayed up for a minute weighs sixty times one replaced at once,
/// and a stream that pushes an update at every rank change counts no more than a page
/// that polls. Errors are kept in a histogram of thousandths (memory bounded however
/// many people and seconds), exact above 10 (rare) in a list.
#[derive(Default)]
pub(super) struct ShownGrades {
    all: ErrorHistogram,
    /// The same seconds split by the time still to wait (see [`REMAINING_BANDS`]),
    /// with how many of them showed more than that time (an estimate too long).
    bands: [(ErrorHistogram, u64); REMAINING_BANDS.len()],
    /// Person-seconds with a figure shown, and with none (null: no estimate).
    pub(super) seconds: u64,
    pub(super) missing_seconds: u64,
    /// For each person graded: the figures shown per minute of the wait (a change
    /// back to an earlier figure counts as another; "none" is a figure too), a wait
    /// under a minute counting as one minute.
    pub(super) per_minute: Vec<f64>,
}

/// The bands of the time still to wait the error is broken down by (lower bounds in
/// seconds): which part of a wait the error comes from.
pub(super) const REMAINING_BANDS: [(u64, &str); 5] =
    [(0, "under 10 s"), (10, "10-30 s"), (30, "30-60 s"), (60, "1-2 min"), (120, "2 min or more")];

/// Errors in a histogram of thousandths (memory bounded however many people and
/// seconds), exact above 10 (rare) in a list.
#[derive(Default)]
struct ErrorHistogram {
    buckets: Vec<u64>,
    above: Vec<f64>,
    count: u64,
}

const SHOWN_BUCKETS: usize = 10_000;

impl ErrorHistogram {
    fn add(&mut self, error: f64) {
        self.count += 1;
        let i = (error * 1000.0).round();
        if i < SHOWN_BUCKETS as f64 {
            if self.buckets.is_empty() {
                self.buckets = vec![0; SHOWN_BUCKETS];
            }
            self.buckets[i as usize] += 1;
        } else {
            self.above.push(error);
        }
    }

    fn percentiles(&self) -> crate::stats::Percentiles {
        let count = self.count as usize;
        if count == 0 {
            return crate::stats::Percentiles::default();
        }
        let mut above = self.above.clone();
        above.sort_by(f64::total_cmp);
        let at = |p: f64| {
            let rank = (((p / 100.0) * count as f64).ceil() as u64).clamp(1, count as u64);
            let mut seen = 0;
            for (i, n) in self.buckets.iter().enumerate() {
                seen += n;
                if seen >= rank {
                    return i as f64 / 1000.0;
                }
            }
            above[(rank - seen - 1) as usize]
        };
        crate::stats::Percentiles { count, p50: at(50.0), p90: at(90.0), p99: at(99.0), max: at(100.0) }
    }
}

impl ShownGrades {
    /// Grades one person's readings (time order) against a promotion at `end`.
    pub(super) fn grade(&mut self, readings: &[(Instant, Option<u64>)], end: Instant) {
        let Some(&(start, _)) = readings.first() else { return };
        let mut i = 0;
        let mut at = start;
        while at < end {
            while i + 1 < readings.len() && readings[i + 1].0 <= at {
                i += 1;
            }
            match readings[i].1 {
                Some(eta) => {
                    self.seconds += 1;
                    let remaining = end.duration_since(at).as_secs_f64();
                    let error = eta_error(eta, remaining);
                    self.all.add(error);
                    let band = REMAINING_BANDS.iter().rposition(|b| remaining >= b.0 as f64).unwrap_or(0);
                    self.bands[band].0.add(error);
                    if eta as f64 > remaining.max(1.0) {
                        self.bands[band].1 += 1;
                    }
                }
                None => self.missing_seconds += 1,
            }
            at += std::time::Duration::from_secs(1);
        }
        let mut figures: Vec<Option<u64>> = readings.iter().filter(|r| r.0 <= end).map(|r| r.1).collect();
        figures.dedup();
        let minutes = (end.duration_since(start).as_secs_f64() / 60.0).max(1.0);
        self.per_minute.push(figures.len() as f64 / minutes);
    }

    /// The errors' percentiles (n: person-seconds graded).
    pub(super) fn percentiles(&self) -> crate::stats::Percentiles {
        self.all.percentiles()
    }

    /// The error by the time still to wait: each band's share of the graded seconds,
    /// its percentiles, and the share of its seconds that showed too long a wait.
    pub(super) fn by_remaining(&self) -> Vec<super::report::EtaBand> {
        let total = self.seconds.max(1) as f64;
        REMAINING_BANDS
            .iter()
            .zip(&self.bands)
            .map(|(&(_, name), (h, over))| super::report::EtaBand {
                remaining: name.to_string(),
                share: h.count as f64 / total,
                error: h.percentiles(),
                too_long_share: *over as f64 / h.count.max(1) as f64,
            })
            .collect()
    }
}

impl Ledger {
    /// `who` was shown `eta` at `at` while waiting (the entry's answer starts over).
    pub(super) fn eta_shown(&mut self, who: usize, at: Instant, eta: Option<u64>, entry: bool) {
        let readings = self.eta_readings.entry(who).or_default();
        if entry {
            readings.clear();
        }
        readings.push((at, eta));
    }

    pub(super) fn error(&mut self, who: usize, what: impl std::fmt::Display) {
        self.report.errors += 1;
        if self.report.first_errors.len() < 10 {
            self.report.first_errors.push(format!("user {who}: {what}"));
        }
    }

    /// An error about the run as a whole rather than one user.
    pub(super) fn run_error(&mut self, what: impl std::fmt::Display) {
        self.report.errors += 1;
        if self.report.first_errors.len() < 10 {
            self.report.first_errors.push(what.to_string());
        }
    }

    pub(super) fn anyone_waiting(&mut self) -> bool {
        while self.first_waiting < self.people.len()
            && matches!(self.people[self.first_waiting].phase, Phase::Done | Phase::Holding | Phase::InChat)
        {
            self.first_waiting += 1;
        }
        self.people[self.first_waiting..].iter().any(|p| p.phase == Phase::Waiting && p.steadfast)
    }

    /// Seconds since the start of the run.
    pub(super) fn at(&self, t: Instant) -> f64 {
        self.epoch.map_or(0.0, |e| t.saturating_duration_since(e).as_secs_f64())
    }

    /// A back-office reading: its request left at `sent`, the answer came at `recv`.
    pub(super) fn server_read(&mut self, sent: Instant, recv: Instant, soft_cap: Option<u64>, in_use: u64) {
        let (sent, recv) = (self.at(sent), self.at(recv));
        if let Some(cap) = soft_cap {
            self.caps.read(sent, recv, cap);
        }
        let r = &mut self.report;
        r.server_samples += 1;
        r.server_max_in_use = r.server_max_in_use.max(in_use);
        self.samples.push(Sample { sent, recv, in_use });
        self.judge_capacity(false);
    }

    /// Judges the promotions seen and the server's counts against the caps that may
    /// have been in force, those whose verdict no later reading can change (all of
    /// them when `all`: the run is over).
    pub(super) fn judge_capacity(&mut self, all: bool) {
        let caps = self.given_cap.as_ref().unwrap_or(&self.caps);
        let mut breaches = Vec::new();
        while let Some((who, a)) = self.admissions.get(self.admissions_judged) {
            if !all && !caps.settled(a.until()) {
                break;
            }
            if let Some(cap) = a.over(caps) {
                let h = a.holding;
                breaches.push((*who, format!("{h} users hold tickets or sessions, over the soft cap {cap} in force")));
            }
            self.admissions_judged += 1;
        }
        let caps = &self.caps;
        while let Some(s) = self.samples.get(self.samples_judged) {
            if !all && !caps.settled(s.until()) {
                break;
            }
            let prev = self.samples_judged.checked_sub(1).map(|i| &self.samples[i]);
            if s.over(prev, caps).is_some() {
                self.report.server_over_capacity += 1;
            }
            self.samples_judged += 1;
        }
        for (who, e) in breaches {
            self.report.over_capacity += 1;
            self.error(who, e);
        }
    }

    /// `who` was seen promoted: count it, and pick whom to audit (see the module docs):
    /// the earliest steadfast waiter of the same lane who surely entered before `who`'s
    /// entry request left (FIFO within the lane), and, in a queue with lanes, the
    /// earliest steadfast waiter of an earlier lane who surely entered before the
    /// promotion (no lane inversion).
    pub(super) fn promoted(&mut self, who: usize, now: Instant) -> Vec<Audit> {
        self.report.promoted += 1;
        self.holding += 1;
        self.report.max_holding = self.report.max_holding.max(self.holding);
        let me = &self.people[who];
        let earliest = self.at(me.last_waiting.unwrap_or(me.entry_sent));
        let admission = Admission { earliest, seen: self.at(now), holding: self.holding };
        self.admissions.push((who, admission));
        self.judge_capacity(false);
        let me = &self.people[who];
        let entered = me.entry_recv.unwrap_or(now);
        let (sent, lane) = (me.entry_sent, me.lane);
        let promoted_after = me.surely_waiting_at.unwrap_or(sent);
        for (given, errors) in
            [(me.eta_at_entry, &mut self.eta_entry_errors), (me.eta_at_rank10, &mut self.eta_rank10_errors)]
        {
            match given {
                Some((at, Some(eta))) => errors.push(eta_error(eta, now.duration_since(at).as_secs_f64())),
                Some((_, None)) => self.report.eta_missing += 1,
                None => {}
            }
        }
        if let Some(readings) = self.eta_readings.remove(&who) {
            self.eta_shown.grade(&readings, now);
        }
        self.waits.push(now.duration_since(entered).as_secs_f64());
        if let Some(freed) = self.frees.pop_front() {
            self.slot_to_promotion.push(now.duration_since(freed).as_secs_f64());
        }
        self.people[who].phase = Phase::Holding;
        self.anyone_waiting();
        let audit = |(i, p): (usize, &Person), earlier_lane| Audit {
            ahead: i,
            generation: p.generation,
            user: p.user_id.clone(),
            forwarded_for: p.forwarded_for.clone(),
            token: p.token.clone(),
            earlier_lane,
        };
        let waits = |p: &Person| p.phase == Phase::Waiting && p.steadfast;
        let from = self.first_waiting.min(who);
        let mut audits: Vec<Audit> = self.people[from..who]
            .iter()
            .enumerate()
            .find(|(_, p)| waits(p) && p.lane == lane && p.entry_recv.is_some_and(|r| r < sent))
            .map(|(i, p)| audit((from + i, p), false))
            .into_iter()
            .collect();
        // Someone who entered an earlier lane after `who` did still goes first: look
        // past `who` too, at anyone surely in line before the promotion.
        if let Some(mine) = lane.filter(|&l| l > 0) {
            let earlier = self.people[self.first_waiting..]
                .iter()
                .enumerate()
                .filter(|&(i, p)| {
                    self.first_waiting + i != who
                        && waits(p)
                        && p.lane.is_some_and(|l| l < mine)
                        && p.entry_recv.is_some_and(|r| r < promoted_after)
                })
                .min_by_key(|(_, p)| p.entry_recv);
            audits.extend(earlier.map(|(i, p)| audit((self.first_waiting + i, p), true)));
        }
        audits
    }

    /// A ticket or session held by `who` is given back (or was refused).
    pub(super) fn release(&mut self, now: Instant) {
        self.holding = self.holding.saturating_sub(1);
        if self.anyone_waiting() {
            self.frees.push_back(now);
        }
    }

    pub(super) fn progress(&self, started: usize) -> Progress {
        let count = |ph| self.people.iter().filter(|p| p.phase == ph).count();
        let r = &self.report;
        Progress {
            started,
            finished: count(Phase::Done),
            waiting: count(Phase::Waiting),
            holding: self.holding,
            in_chat: count(Phase::InChat),
            admitted: r.admitted,
            abandoned: r.abandoned,
            violations: r.fifo_inversions
                + r.over_capacity
                + r.server_over_capacity
                + r.double_claims
                + r.lanes.as_ref().map_or(0, super::report::LaneReport::violations),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn person(ledger: &mut Ledger, user: &str, sent: Instant, recv: Instant, steadfast: bool) {
        ledger.people.push(Person {
            phase: Phase::Waiting,
            entry_sent: sent,
            entry_recv: Some(recv),
            steadfast,
            user_id: user.into(),
            forwarded_for: None,
            eta_at_entry: None,
            eta_at_rank10: None,
            generation: 0,
            last_waiting: None,
            lane: None,
            token: None,
            surely_waiting_at: None,
        });
    }

    #[test]
    fn estimates_are_graded_against_the_wait_that_followed() {
        let mut l = Ledger::default();
        let t0 = Instant::now();
        person(&mut l, "a", t0, t0, true);
        person(&mut l, "b", t0, t0, true);
        l.people[0].eta_at_entry = Some((t0, Some(10)));
        l.people[0].eta_at_rank10 = Some((t0 + Duration::from_secs(4), Some(2)));
        l.people[1].eta_at_entry = Some((t0, None));
        l.promoted(0, t0 + Duration::from_secs(8));
        l.promoted(1, t0 + Duration::from_millis(500));
        assert_eq!(l.eta_entry_errors, vec![0.25]);
        assert_eq!(l.eta_rank10_errors, vec![0.5]);
        assert_eq!(l.report.eta_missing, 1);
        assert_eq!(eta_error(1, 0.2), 0.0, "a wait under a second counts as one");
    }

    #[test]
    fn the_error_is_broken_down_by_the_time_still_to_wait() {
        // "20 s" shown for the last 20 s of a wait: remaining 20..10 s falls in the
        // 10-30 s band (too long from 19 s on), 9..1 s under 10 s (all too long).
        let t0 = Instant::now();
        let mut g = ShownGrades::default();
        g.grade(&[(t0, Some(20))], t0 + Duration::from_secs(20));
        let bands = g.by_remaining();
        assert_eq!(bands.len(), REMAINING_BANDS.len());
        assert_eq!((bands[0].error.count, bands[1].error.count), (9, 11));
        assert!(bands[2..].iter().all(|b| b.error.count == 0));
        assert_eq!((bands[0].share, bands[1].share), (9.0 / 20.0, 11.0 / 20.0));
        assert_eq!(bands[0].too_long_share, 1.0);
        assert_eq!(bands[1].too_long_share, 10.0 / 11.0);
        assert!((bands[1].error.p50 - eta_error(20, 15.0)).abs() <= 0.0005);
    }

    #[test]
    fn every_figure_shown_is_graded_per_person_second() {
        let mut l = Ledger::default();
        let t0 = Instant::now();
        let s = |secs: u64| t0 + Duration::from_secs(secs);
        person(&mut l, "a", t0, t0, true);
        person(&mut l, "b", t0, t0, true);
        // a: 60 s shown at entry, unknown at 10 s, 40 at 20 s, 20 at 40 s; promoted at 60 s.
        l.eta_shown(0, s(0), Some(60), true);
        l.eta_shown(0, s(10), None, false);
        l.eta_shown(0, s(20), Some(40), false);
        l.eta_shown(0, s(40), Some(20), false);
        l.promoted(0, s(60));
        let g = &l.eta_shown;
        assert_eq!((g.seconds, g.missing_seconds), (50, 10));
        // Seconds 0-9: 60 against 60..51 to go; 20-39: 40 against 40..21; 40-59: 20
        // against 20..1 (the last second counts as one).
        let mut want: Vec<f64> = (0..10).map(|k| eta_error(60, 60.0 - k as f64)).collect();
        want.extend((20..40).map(|k| eta_error(40, 60.0 - k as f64)));
        want.extend((40..60).map(|k| eta_error(20, 60.0 - k as f64)));
        let want = crate::stats::Percentiles::of(want);
        let got = g.percentiles();
        assert_eq!(got.count, 50);
        for (a, b) in [(got.p50, want.p50), (got.p90, want.p90), (got.max, want.max)] {
            assert!((a - b).abs() <= 0.0005, "{a} against {b}");
        }
        // Four figures (60, none, 40, 20) in one minute.
        assert_eq!(g.per_minute, vec![4.0]);
        // b: one figure all along, the same one repeated; re-entering starts over.
        l.eta_shown(1, s(0), Some(999), true);
        l.eta_shown(1, s(0), Some(120), true);
        for k in 1..12 {
            l.eta_shown(1, s(k * 10), Some(120), false);
        }
        l.promoted(1, s(120));
        assert_eq!(l.eta_shown.per_minute, vec![4.0, 0.5]);
        assert_eq!(l.eta_shown.seconds, 50 + 120);
        // An error above the histogram's range is kept exactly.
        let mut g = ShownGrades::default();
        g.grade(&[(t0, Some(100))], t0 + Duration::from_millis(1500));
        assert_eq!(g.percentiles().max, 99.0);
        assert_eq!(g.percentiles().p50, eta_error(100, 1.5));
    }

    #[test]
    fn the_audit_asks_the_earliest_steadfast_waiter_who_surely_entered_first() {
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        let mut l = Ledger::default();
        person(&mut l, "a", ms(0), ms(5), false); // will abandon: not asked
        person(&mut l, "b", ms(1), ms(30), true); // answered after c asked: order unknown
        person(&mut l, "c", ms(20), ms(25), true);
        person(&mut l, "d", ms(40), ms(45), true);
        // d promoted: b is the earliest steadfast waiter who entered before d's request.
        let asked: Vec<_> = l.promoted(3, ms(50)).into_iter().map(|a| (a.ahead, a.user)).collect();
        assert_eq!(asked, vec![(1, "b".to_string())]);
        // c promoted: b's entry answer came after c's request left, so no one is surely ahead.
        assert_eq!(l.promoted(2, ms(60)), vec![]);
        assert_eq!(l.report.promoted, 2);
    }

    #[test]
    fn holding_more_than_the_soft_cap_is_a_breach_and_frees_time_the_next_promotion() {
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        let mut l = Ledger { epoch: Some(t0), given_cap: Some(CapHistory::fixed(2)), ..Ledger::default() };
        for u in ["a", "b", "c", "d"] {
            person(&mut l, u, ms(0), ms(1), true);
        }
        l.promoted(0, ms(10));
        l.promoted(1, ms(10));
        assert_eq!((l.report.over_capacity, l.report.max_holding), (0, 2));
        l.promoted(2, ms(10));
        assert_eq!((l.report.over_capacity, l.holding), (1, 3));
        l.release(ms(100)); // d still waits: the freed place is timed
        l.promoted(3, ms(350));
        assert_eq!(l.slot_to_promotion, vec![0.25]);
        l.release(ms(400)); // nobody waits any more: nothing to time
        assert!(l.frees.is_empty());
    }
}

#[cfg(test)]
mod capacity_tests {
    use super::*;
    use crate::capacity::CapChange;
    use std::time::Duration;

    /// People promoted one after another and nobody leaving, the back office read every
    /// 250 ms; the cap goes from 2 to `raised` at 1 s.
    fn run_with_cap_raised_to(raised: u64) -> Report {
        let t0 = Instant::now();
        let at = |s: f64| t0 + Duration::from_secs_f64(s);
        let mut l = Ledger { epoch: Some(t0), ..Ledger::default() };
        let cap = |s: f64| if s < 1.0 { 2 } else { raised };
        let mut reading = 0.0;
        for who in 0..5 {
            // Promoted at 0.2, 0.5 (up to the cap of 2), then 1.6, 1.9, 2.2 s.
            let seen = if who < 2 { 0.2 + 0.3 * who as f64 } else { 1.0 + 0.3 * who as f64 };
            while reading < seen {
                l.server_read(at(reading), at(reading + 0.01), Some(cap(reading)), 0);
                reading += 0.25;
            }
            l.people.push(Person {
                phase: Phase::Waiting,
                entry_sent: at(0.0),
                entry_recv: Some(at(0.0)),
                steadfast: true,
                user_id: format!("u{who}"),
                forwarded_for: None,
                eta_at_entry: None,
                eta_at_rank10: None,
                generation: 0,
                last_waiting: Some(at(seen - 0.1)),
                lane: None,
                token: None,
                surely_waiting_at: None,
            });
            l.promoted(who, at(seen));
        }
        l.judge_capacity(true);
        l.report.soft_cap_changes = l.caps.changes();
        l.report.soft_cap = l.caps.first();
        std::mem::take(&mut l.report)
    }

    #[test]
    fn the_ledger_follows_a_raised_cap_and_still_catches_an_excess() {
        let r = run_with_cap_raised_to(10);
        assert_eq!((r.over_capacity, r.max_holding), (0, 5), "{:?}", r.first_errors);
        assert_eq!(r.soft_cap_changes, vec![CapChange { at_seconds: 1.01, from: 2, to: 10 }]);
        let text = r.to_string();
        assert!(text.contains("soft cap 2 -> 10 at 1.0 s"), "{text}");
        // Raised to 3 only: the fourth and fifth promotions went over it.
        let r = run_with_cap_raised_to(3);
        assert_eq!(r.over_capacity, 2, "{:?}", r.first_errors);
        assert!(r.first_errors[0].contains("over the soft cap 3 in force"), "{:?}", r.first_errors);
    }
}
