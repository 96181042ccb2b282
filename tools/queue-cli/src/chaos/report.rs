//! The chaos run's findings: each fault's outcome from what the monitors recorded, the
//! held-slots check, and the report as text.

use super::faults::FaultRecord;
use super::monitors::{Hold, Probe};
use super::plan::{Fault, Service};
use super::SLACK;
use crate::outage::Outage;
use crate::swarm;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Per fault: what the probes, the sampler and the users saw from its start until
/// the next fault's.
#[derive(Debug, Clone)]
pub struct FaultOutcome {
    pub record: FaultRecord,
    pub probe_failures: usize,
    /// From the fault's start to the answer of the first probe entry sent after it
    /// that went through.
    pub entry_ok_after: Option<Duration>,
    /// The longest a probe entry sent in this fault's time waited for its answer.
    pub slowest_probe: Option<Duration>,
    /// From the fault's start to the first rise of the promoted counter seen after it.
    pub promotion_after: Option<Duration>,
    /// Managers: from the fault's start to a manager reporting that it leads.
    pub leader_after: Option<Duration>,
    /// Per kind: how many times, and how many users.
    pub users_saw: BTreeMap<Outage, (usize, usize)>,
}

/// Per kind: how many events, and how many distinct users met them.
pub(super) fn tally<'a>(
    events: impl Iterator<Item = &'a (Instant, usize, Outage)>,
) -> BTreeMap<Outage, (usize, usize)> {
    let mut users: BTreeMap<Outage, std::collections::HashSet<usize>> = BTreeMap::new();
    let mut counts: BTreeMap<Outage, usize> = BTreeMap::new();
    for (_, who, what) in events {
        *counts.entry(*what).or_insert(0) += 1;
        users.entry(*what).or_default().insert(*who);
    }
    counts.into_iter().map(|(k, n)| (k, (n, users[&k].len()))).collect()
}

/// "stream lost 900 (412 users), ..." or "nothing".
fn describe(t: &BTreeMap<Outage, (usize, usize)>) -> String {
    if t.is_empty() {
        return "nothing".into();
    }
    let parts: Vec<String> = t
        .iter()
        .map(
            |(k, (n, u))| {
                if n == u {
                    format!("{} {n}", k.as_str())
                } else {
                    format!("{} {n} ({u} users)", k.as_str())
                }
            },
        )
        .collect();
    parts.join(", ")
}

fn secs_after(t: Instant, from: Instant) -> Duration {
    t.saturating_duration_since(from)
}

/// Works out each fault's outcome from what the monitors recorded.
pub(super) fn outcomes(
    records: &[FaultRecord],
    probes: &[Probe],
    promoted: &[(Instant, u64)],
    leaders: &[(Instant, [Option<bool>; 2])],
    events: &[(Instant, usize, Outage)],
    end: Instant,
) -> Vec<FaultOutcome> {
    records
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let until = records.get(i + 1).map(|n| n.at).unwrap_or(end);
            let within = |t: Instant| t >= r.at && t < until;
            let probe_failures = probes.iter().filter(|p| within(p.sent) && !p.ok).count();
            let entry_ok_after = probes.iter().find(|p| p.sent >= r.at && p.ok).map(|p| secs_after(p.answered, r.at));
            let slowest_probe = probes.iter().filter(|p| within(p.sent)).map(|p| p.answered - p.sent).max();
            let promotion_after =
                promoted.windows(2).find(|w| w[1].0 >= r.at && w[1].1 > w[0].1).map(|w| secs_after(w[1].0, r.at));
            let leader_after = match r.fault {
                Fault::Kill(Service::Manager) | Fault::StopLeader => leaders
                    .iter()
                    .find(|(t, l)| *t >= r.at + Duration::from_millis(50) && l.contains(&Some(true)))
                    .map(|(t, _)| secs_after(*t, r.at)),
                _ => None,
            };
            let users_saw = tally(events.iter().filter(|(t, _, _)| within(*t)));
            FaultOutcome {
                record: r.clone(),
                probe_failures,
                entry_ok_after,
                slowest_probe,
                promotion_after,
                leader_after,
                users_saw,
            }
        })
        .collect()
}

/// How long `hold` stayed past the later of its start and the last fault that began
/// before it was given back.
pub fn held_past_fault(hold: &Hold, fault_starts: &[Instant]) -> Duration {
    let last_fault = fault_starts.iter().filter(|t| **t <= hold.gone).max().copied();
    let from = last_fault.map_or(hold.first_seen, |f| f.max(hold.first_seen));
    hold.gone.saturating_duration_since(from)
}

/// The chaos run's findings.
pub struct ChaosReport {
    pub seed: u64,
    pub started: Instant,
    pub duration: Duration,
    pub outcomes: Vec<FaultOutcome>,
    pub swarm: swarm::Report,
    pub events: BTreeMap<Outage, (usize, usize)>,
    pub holds: usize,
    pub holds_too_long: Vec<(Hold, Duration)>,
    pub longest_hold: Duration,
    pub hold_bound: Duration,
    pub samples_failed: u64,
    pub stack_failures: Vec<String>,
    pub log_dir: Option<PathBuf>,
}

impl ChaosReport {
    pub fn passed(&self) -> bool {
        self.swarm.clean()
            && self.holds_too_long.is_empty()
            && self.swarm.unfinished == 0
            && self.stack_failures.is_empty()
    }

    /// 0 passed; 1 an audit failed (FIFO, capacity, double claims, slots held too long);
    /// 2 users left unfinished or the stack did not come back.
    pub fn exit_code(&self) -> u8 {
        if !self.swarm.clean() || !self.holds_too_long.is_empty() {
            1
        } else if self.swarm.unfinished > 0 || !self.stack_failures.is_empty() {
            2
        } else {
            0
        }
    }
}

fn opt_secs(d: Option<Duration>) -> String {
    d.map(|d| format!("{:.2}", d.as_secs_f64())).unwrap_or_else(|| "-".into())
}

impl std::fmt::Display for ChaosReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "chaos report (seed {}, {:.1} s, {} faults)",
            self.seed,
            self.duration.as_secs_f64(),
            self.outcomes.len()
        )?;
        writeln!(
            f,
            "  {:<44} {:>6} {:>6} {:>7} {:>7} {:>7} {:>7} {:>6}  what users saw (until the next fault)",
            "fault", "at s", "down s", "probe x", "slow s", "entry s", "promo s", "lead s"
        )?;
        for o in &self.outcomes {
            let r = &o.record;
            let at = r.at.saturating_duration_since(self.started);
            let saw = describe(&o.users_saw);
            writeln!(
                f,
                "  {:<44} {:>6.1} {:>6.2} {:>7} {:>7} {:>7} {:>7} {:>6}  {saw}",
                format!("{} ({})", r.fault, r.target),
                at.as_secs_f64(),
                r.restored.saturating_duration_since(r.at).as_secs_f64(),
                o.probe_failures,
                opt_secs(o.slowest_probe),
                opt_secs(o.entry_ok_after),
                opt_secs(o.promotion_after),
                opt_secs(o.leader_after),
            )?;
            if let Fault::Valkey(_) = r.fault {
                if !r.counters_read {
                    writeln!(f, "      counters not read around the restart: loss unknown")?;
                } else if r.lost.is_empty() {
                    writeln!(f, "      no counter went back over the restart (nothing acknowledged was lost)")?;
                } else {
                    let l: Vec<String> = r.lost.iter().map(|(k, n)| format!("{k} -{n}")).collect();
                    writeln!(f, "      LOST over the restart: {}", l.join(", "))?;
                }
            }
        }
        writeln!(
            f,
            "  (at: seconds into the run; down: until restarted/resumed; probe x: probe entries that \
             failed; slow: the longest a probe waited for its answer; entry/promo/lead: seconds from the fault until a probe entry sent after it was answered, the promoted \
             counter rose, a manager led)"
        )?;
        writeln!(f, "  users saw in all      {}", describe(&self.events))?;
        let mark = if self.holds_too_long.is_empty() { "ok" } else { "FAIL" };
        writeln!(
            f,
            "  slots held too long   {} [{mark}] ({} tickets and sessions seen, longest {:.1} s past its start or \
             the last fault, bound ticket_ttl + session_lease = {:.1} s + {:.1} s slack)",
            self.holds_too_long.len(),
            self.holds,
            self.longest_hold.as_secs_f64(),
            self.hold_bound.as_secs_f64(),
            SLACK.as_secs_f64()
        )?;
        for (h, d) in self.holds_too_long.iter().take(10) {
            let kind = if h.kind == 't' { "ticket" } else { "session" };
            writeln!(f, "      {kind} of {} held {:.1} s", h.user, d.as_secs_f64())?;
        }
        if self.samples_failed > 0 {
            writeln!(f, "  Valkey samples failed {} (while it was down)", self.samples_failed)?;
        }
        for e in &self.stack_failures {
            writeln!(f, "  stack: {e}")?;
        }
        write!(f, "{}", self.swarm)?;
        let mark = |ok: bool| if ok { "PASS" } else { "FAIL" };
        writeln!(
            f,
            "chaos: {} (audits {}, slots {}, users unfinished {}, ended with an error after retrying {})",
            mark(self.passed()),
            mark(self.swarm.clean()),
            mark(self.holds_too_long.is_empty()),
            self.swarm.unfinished,
            self.swarm.errors
        )?;
        if let Some(d) = &self.log_dir {
            writeln!(f, "  service logs kept in {}", d.display())?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hold_is_measured_from_the_last_fault_before_its_end() {
        let t0 = Instant::now();
        let s = |n: u64| t0 + Duration::from_secs(n);
        let hold = |first, gone| Hold { kind: 's', user: "u".into(), first_seen: s(first), gone: s(gone) };
        let faults = [s(10), s(30)];
        // Taken before the fault at 10, given back at 20: 10 s past the fault.
        assert_eq!(held_past_fault(&hold(2, 20), &faults), Duration::from_secs(10));
        // Taken after it: from its own start.
        assert_eq!(held_past_fault(&hold(12, 15), &faults), Duration::from_secs(3));
        // No fault before its end: its whole length.
        assert_eq!(held_past_fault(&hold(1, 9), &faults), Duration::from_secs(8));
        // Spans both faults: from the later one.
        assert_eq!(held_past_fault(&hold(5, 50), &faults), Duration::from_secs(20));
    }

    #[test]
    fn recovery_times_come_from_the_first_success_after_each_fault() {
        let t0 = Instant::now();
        let ms = |n: u64| t0 + Duration::from_millis(n);
        let rec = |fault, at| FaultRecord {
            fault,
            target: "x".into(),
            at: ms(at),
            restored: ms(at + 500),
            ready: Some(ms(at + 700)),
            lost: vec![],
            counters_read: true,
        };
        let records = [rec(Fault::Kill(Service::Api), 1000), rec(Fault::StopLeader, 5000)];
        let probe = |sent, answered, ok| Probe { sent: ms(sent), answered: ms(answered), ok };
        let probes = [
            probe(900, 905, true),
            probe(1100, 1102, false),
            probe(1300, 1302, false),
            probe(1500, 1950, true),
            probe(5100, 5103, true),
        ];
        let promoted = [(ms(800), 10), (ms(1200), 10), (ms(2000), 12), (ms(5200), 12), (ms(6400), 13)];
        let leaders = [(ms(5020), [Some(true), None]), (ms(5200), [None, Some(false)]), (ms(8000), [None, Some(true)])];
        let events = [
            (ms(1200), 4, Outage::EntryRetried),
            (ms(1250), 4, Outage::EntryRetried),
            (ms(1260), 9, Outage::EntryRetried),
            (ms(5500), 4, Outage::StreamLost),
        ];
        let o = outcomes(&records, &probes, &promoted, &leaders, &events, ms(10_000));
        assert_eq!(o[0].probe_failures, 2);
        assert_eq!(o[0].entry_ok_after, Some(Duration::from_millis(950)), "until the answer came");
        assert_eq!(o[0].slowest_probe, Some(Duration::from_millis(450)));
        assert_eq!(o[0].promotion_after, Some(Duration::from_millis(1000)));
        assert_eq!(o[0].leader_after, None, "not a manager fault");
        assert_eq!(o[0].users_saw.get(&Outage::EntryRetried), Some(&(3, 2)));
        assert_eq!(describe(&o[0].users_saw), "entry retried 3 (2 users)");
        assert_eq!(o[1].entry_ok_after, Some(Duration::from_millis(103)));
        assert_eq!(o[1].promotion_after, Some(Duration::from_millis(1400)));
        // The sample 20 ms after the SIGSTOP still came from the stopped leader: skipped.
        assert_eq!(o[1].leader_after, Some(Duration::from_millis(3000)));
        assert_eq!(describe(&o[1].users_saw), "stream lost 1");
    }
}
