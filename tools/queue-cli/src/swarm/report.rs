//! The swarm's end-of-run report: what the audits found, the waits and the graded
//! estimates, the swarm's own CPU time and memory, and the report as text.

use crate::capacity::{self, CapChange};
use crate::gate::GateReport;
use crate::stats::Percentiles;
use serde::Serialize;

/// One band of the time still to wait (see `Report::eta_error_by_remaining`).
#[derive(Debug, Clone, Default, Serialize)]
pub struct EtaBand {
    pub remaining: String,
    /// Its share of the person-seconds graded.
    pub share: f64,
    pub error: Percentiles,
    /// The share of its seconds whose figure was longer than the time still to wait.
    pub too_long_share: f64,
}

/// The end-of-run report. `fifo_inversions` (within each lane), `over_capacity` and
/// `double_claims` must be 0, and the `lanes` audits clean.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Report {
    pub users: usize,
    pub entered: u64,
    pub admitted_at_once: u64,
    pub promoted: u64,
    pub admitted: u64,
    pub abandoned: u64,
    pub abandoned_by_leaving: u64,
    pub left: u64,
    pub dropped: u64,
    pub unfinished: u64,
    pub errors: u64,
    pub rate_limited: u64,
    pub stream_users: u64,
    pub polling_users: u64,
    pub messages_sent: u64,
    pub messages_echoed: u64,
    pub fifo_inversions: u64,
    pub rank_rises: u64,
    pub fifo_audits: u64,
    pub over_capacity: u64,
    /// The soft cap at the start (given, or read from the back office).
    pub soft_cap: Option<u64>,
    /// The changes of the soft cap read from the back office during the run (none when
    /// `--soft-cap` fixed it).
    pub soft_cap_changes: Vec<CapChange>,
    pub max_holding: u64,
    pub server_samples: u64,
    pub server_over_capacity: u64,
    pub server_max_in_use: u64,
    pub double_claims: u64,
    pub claim_races: u64,
    pub reuse_refused: u64,
    pub claim_refused: u64,
    pub wait_seconds: Percentiles,
    pub slot_to_promotion_seconds: Percentiles,
    /// |predicted - actual| / actual of the estimate given at entry.
    pub eta_error_at_entry: Percentiles,
    /// The same for the first estimate given at rank 10 or better.
    pub eta_error_at_rank10: Percentiles,
    /// Estimates graded as missing: null while the user waited.
    pub eta_missing: u64,
    /// |shown - actual| / actual of every estimate people were shown while waiting,
    /// per person-second (n: seconds graded): the figure on screen at each second of a
    /// wait against the time still to wait then. Goal: p50 at most 0.25.
    pub eta_error_shown: Percentiles,
    /// The share of waiting person-seconds with no estimate on screen.
    pub eta_shown_missing_share: f64,
    /// Figures a person saw per minute of waiting (n: people), counting each change.
    /// Goal: p50 at most 3.
    pub eta_figures_per_minute: Percentiles,
    /// `eta_error_shown` broken down by the time still to wait: where the error comes
    /// from (the last seconds of a wait, or its long middle).
    pub eta_error_by_remaining: Vec<EtaBand>,
    pub duration_seconds: f64,
    /// This process's own CPU time (user + system) over the run, in seconds.
    pub own_cpu_seconds: f64,
    /// This process's peak resident memory (VmHWM), in KiB.
    pub own_peak_rss_kib: u64,
    /// Lanes, access codes and identities (`--lanes`, `--codes`, `--identity-key`):
    /// what their audits found.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lanes: Option<LaneReport>,
    /// Walking through a gate (`--gate`): what the users saw there.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gate: Option<GateReport>,
    pub first_errors: Vec<String>,
}

/// The audits of lanes, access codes and accounts ([`super::lanes`]). `lane_inversions`,
/// `wrong_lanes`, `code_overuses`, `code_wrongly_refused`, `code_bad_refusals`,
/// `codes_miscounted` and `two_places` must be 0.
#[derive(Debug, Clone, Default, Serialize)]
pub struct LaneReport {
    /// The queue's lanes in admission order (empty: none).
    pub lanes: Vec<String>,
    /// Promotions from a later lane checked against a waiter of an earlier one.
    pub lane_audits: u64,
    /// Promoted from a later lane while someone surely in an earlier one still waited.
    pub lane_inversions: u64,
    /// Entries answered with another lane than the code (or its absence) gives.
    pub wrong_lanes: u64,
    /// Codes uploaded for the run, and the uses of each.
    pub codes: u64,
    pub code_uses: u64,
    /// Entries with a code: all, let in, refused with 403 `code_invalid`.
    pub code_entries: u64,
    pub code_accepted: u64,
    pub code_refused: u64,
    /// Refusals the codes' uses called for (tries beyond the uses, unknown codes).
    pub code_refusals_expected: u64,
    /// People let in beyond a code's uses (or with a code never uploaded).
    pub code_overuses: u64,
    /// Entries refused while their code still had uses left.
    pub code_wrongly_refused: u64,
    /// Code entries refused otherwise than with 403 `code_invalid`.
    pub code_bad_refusals: u64,
    /// The uses the server counted as consumed during the run (with an admin token).
    pub server_codes_used: Option<u64>,
    /// 1 when that count does not match the entries the swarm saw let in.
    pub codes_miscounted: u64,
    /// Users who entered with the app's login token, and those who opened a second tab.
    pub identified_users: u64,
    pub second_tabs: u64,
    /// Second tabs that got another place than the first (or none, or one moved back).
    pub two_places: u64,
}

impl LaneReport {
    pub fn violations(&self) -> u64 {
        self.lane_inversions
            + self.wrong_lanes
            + self.code_overuses
            + self.code_wrongly_refused
            + self.code_bad_refusals
            + self.codes_miscounted
            + self.two_places
    }
}

impl std::fmt::Display for LaneReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mark = |n: u64| if n == 0 { "ok" } else { "FAIL" };
        if !self.lanes.is_empty() {
            writeln!(
                f,
                "  lane inversions       {} [{}] (lanes {}, {} audits; {} wrong lanes [{}])",
                self.lane_inversions,
                mark(self.lane_inversions),
                self.lanes.join(","),
                self.lane_audits,
                self.wrong_lanes,
                mark(self.wrong_lanes)
            )?;
        }
        if self.code_entries > 0 || self.codes > 0 {
            writeln!(
                f,
                "  codes used over uses  {} [{}] ({} codes x {} uses; {} entries: {} let in, {} refused, {} refusals due)",
                self.code_overuses,
                mark(self.code_overuses),
                self.codes,
                self.code_uses,
                self.code_entries,
                self.code_accepted,
                self.code_refused,
                self.code_refusals_expected
            )?;
            let server = self.server_codes_used.map_or("not read".into(), |u| format!("{u} uses consumed"));
            writeln!(
                f,
                "  codes refused wrongly {} [{}] ({} refused with uses left, {} not as 403 code_invalid; server: {server}{})",
                self.code_wrongly_refused + self.code_bad_refusals,
                mark(self.code_wrongly_refused + self.code_bad_refusals + self.codes_miscounted),
                self.code_wrongly_refused,
                self.code_bad_refusals,
                if self.codes_miscounted > 0 { ", MISCOUNTED" } else { "" }
            )?;
        }
        if self.identified_users > 0 {
            writeln!(
                f,
                "  accounts, two places  {} [{}] ({} users logged in, {} second tabs)",
                self.two_places,
                mark(self.two_places),
                self.identified_users,
                self.second_tabs
            )?;
        }
        Ok(())
    }
}

/// CPU seconds (user + system) this process has used so far (Linux /proc; 0 elsewhere).
pub(super) fn own_cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name (which may hold spaces): utime is the 14th field.
    let rest = stat.rsplit_once(") ").map(|(_, r)| r).unwrap_or("");
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // In `rest`, field 3 (state) is index 0, so utime (14) is 11 and stime (15) is 12.
    (ticks(11) + ticks(12)) / 100.0
}

/// Peak resident memory of this process in KiB (Linux /proc; 0 elsewhere).
pub(super) fn own_peak_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

impl Report {
    /// True when every audit came out clean.
    pub fn clean(&self) -> bool {
        self.fifo_inversions == 0
            && self.over_capacity == 0
            && self.server_over_capacity == 0
            && self.double_claims == 0
            && self.lanes.as_ref().is_none_or(|l| l.violations() == 0)
            && self.gate.as_ref().is_none_or(GateReport::clean)
    }

    /// True when every user finished its journey without an error.
    pub fn complete(&self) -> bool {
        self.unfinished == 0 && self.errors == 0 && self.dropped == 0
    }
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let cap = match self.soft_cap {
            Some(_) => capacity::describe(self.soft_cap, &self.soft_cap_changes),
            None => "unknown (give --soft-cap or --admin-token)".into(),
        };
        let mark = |n: u64| if n == 0 { "ok" } else { "FAIL" };
        writeln!(f, "swarm report ({:.1} s)", self.duration_seconds)?;
        let cores = if self.duration_seconds > 0.0 { self.own_cpu_seconds / self.duration_seconds } else { 0.0 };
        writeln!(
            f,
            "  swarm itself          {:.1} s of CPU ({:.2} of a core), peak RSS {:.1} MiB",
            self.own_cpu_seconds,
            cores,
            self.own_peak_rss_kib as f64 / 1024.0
        )?;
        writeln!(
            f,
            "  users                 {} ({} on push streams, {} polling)",
            self.users, self.stream_users, self.polling_users
        )?;
        writeln!(f, "  entered               {} ({} admitted at once)", self.entered, self.admitted_at_once)?;
        writeln!(f, "  promoted              {}", self.promoted)?;
        writeln!(f, "  admitted (chatted)    {}", self.admitted)?;
        writeln!(f, "  left after chatting   {}", self.left)?;
        writeln!(
            f,
            "  abandoned waiting     {} ({} clicked leave, the rest closed the page)",
            self.abandoned, self.abandoned_by_leaving
        )?;
        writeln!(f, "  dropped by the queue  {}", self.dropped)?;
        writeln!(
            f,
            "  unfinished / errors   {} / {} (rate limited {} times)",
            self.unfinished, self.errors, self.rate_limited
        )?;
        writeln!(f, "  messages              {} sent, {} came back", self.messages_sent, self.messages_echoed)?;
        writeln!(
            f,
            "  FIFO inversions       {} [{}] ({} rank rises, {} cross-user audits)",
            self.fifo_inversions,
            mark(self.fifo_inversions),
            self.rank_rises,
            self.fifo_audits
        )?;
        writeln!(
            f,
            "  over capacity         {} [{}] (most holding at once {}, soft cap {cap})",
            self.over_capacity,
            mark(self.over_capacity),
            self.max_holding
        )?;
        if self.server_samples > 0 {
            writeln!(
                f,
                "  server over capacity  {} [{}] ({} samples, most in use {})",
                self.server_over_capacity,
                mark(self.server_over_capacity),
                self.server_samples,
                self.server_max_in_use
            )?;
        }
        writeln!(
            f,
            "  double claims         {} [{}] ({} races, {} reuses refused)",
            self.double_claims,
            mark(self.double_claims),
            self.claim_races,
            self.reuse_refused
        )?;
        writeln!(f, "  wait (s)              {}", self.wait_seconds)?;
        writeln!(f, "  free slot -> promoted (s) {}", self.slot_to_promotion_seconds)?;
        writeln!(f, "  ETA error at entry    {}", self.eta_error_at_entry)?;
        writeln!(f, "  ETA error at rank 10  {}", self.eta_error_at_rank10)?;
        if self.eta_missing > 0 {
            writeln!(f, "  ETA missing           {} (no estimate while waiting)", self.eta_missing)?;
        }
        writeln!(
            f,
            "  ETA error as shown    {} [{}] (per person-second; none shown {:.1} %)",
            self.eta_error_shown,
            if self.eta_error_shown.p50 <= 0.25 { "ok" } else { "above 0.25" },
            self.eta_shown_missing_share * 100.0
        )?;
        writeln!(
            f,
            "  ETA figures a minute  {} [{}]",
            self.eta_figures_per_minute,
            if self.eta_figures_per_minute.p50 <= 3.0 { "ok" } else { "above 3" }
        )?;
        for b in &self.eta_error_by_remaining {
            writeln!(
                f,
                "    {:<14} {:>5.1} % of seconds, error p50 {:.3} p90 {:.3}, too long {:.0} %",
                b.remaining,
                b.share * 100.0,
                b.error.p50,
                b.error.p90,
                b.too_long_share * 100.0
            )?;
        }
        if let Some(l) = &self.lanes {
            write!(f, "{l}")?;
        }
        if let Some(g) = &self.gate {
            write!(f, "{g}")?;
        }
        for e in &self.first_errors {
            writeln!(f, "  error: {e}")?;
        }
        Ok(())
    }
}
