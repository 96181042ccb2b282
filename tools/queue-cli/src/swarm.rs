//! Virtual users (seed 003) arriving at a steady rate, each on a real journey: enter,
//! follow the position (push stream or polling), abandon while waiting or claim the
//! ticket at chat-server, chat a while and leave, so capacity recycles. A ledger
//! shared by all of them audits what they see:
//!
//! - **FIFO inversions.** (a) A waiting user's rank never rises (nobody is put ahead
//!   of them): checked on every update, in the order one user's updates arrive.
//!   (b) When user B learns it was promoted, the earliest user A that surely entered
//!   before B (A's entry answer arrived before B's entry request left) and is still
//!   following its place is asked for its standing; if the answer, requested after
//!   B's promotion was seen, still says WAITING, someone jumped the line.
//! - **Over capacity.** The swarm counts the users holding a ticket or a session,
//!   adding one only after a promotion is seen and removing one before a session is
//!   given back, so its count never exceeds the server's. With an admin token the
//!   back office is read every 250 ms, for the soft cap in force (an operator may
//!   change it during the run) and the server's own `active + joining`. A count is
//!   judged against the caps that may have been in force when the last admission it
//!   holds was made, so that only a real breach counts ([`crate::capacity`]).
//! - **Double claims.** Some users open two handshakes with one ticket at once, and
//!   everyone tries the used ticket again after leaving: every extra admission counts.
//!
//! It also grades the estimated wait: for every user who waited and was promoted,
//! |predicted - actual| / actual of the estimate given at entry and of the first one
//! given at rank 10 or better (waits under a second count as one second, the
//! estimate's own unit); estimates that were missing (null) are counted apart.

use crate::api::{Api, ApiError, Polled, Via};
use crate::capacity::{self, Admission, CapChange, CapHistory, Sample};
use crate::chat::{self, Handshake, Incoming};
use crate::gate::{Gate, GateReport};
use crate::outage::{self, Outage, OutageLog};
use crate::stats::Percentiles;
use queue_client::{Standing, Status};
use rand::{Rng, SeedableRng};
use serde::Serialize;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What the swarm does; see `queue-cli swarm --help` for each field.
#[derive(Debug, Clone)]
pub struct SwarmConfig {
    pub api: String,
    pub chat: String,
    pub queue: String,
    pub users: usize,
    pub rate: f64,
    pub abandon: f64,
    pub leave_politely: f64,
    pub abandon_within: Duration,
    pub stay: Duration,
    pub messages: u32,
    pub race: f64,
    pub replay: f64,
    pub polling: f64,
    pub poll_every: Duration,
    pub soft_cap: Option<u64>,
    pub admin_token: Option<String>,
    pub timeout: Duration,
    pub nickname_prefix: String,
    pub forwarded_for: bool,
    pub seed: u64,
    /// Chaos runs: users retry through outages and note them here (see [`crate::outage`]);
    /// `None`: any failure is an error, as in a plain swarm.
    pub outages: Option<Arc<OutageLog>>,
}

/// The end-of-run report. `fifo_inversions`, `over_capacity` and `double_claims` must be 0.
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
    pub duration_seconds: f64,
    /// This process's own CPU time (user + system) over the run, in seconds.
    pub own_cpu_seconds: f64,
    /// This process's peak resident memory (VmHWM), in KiB.
    pub own_peak_rss_kib: u64,
    /// Walking through a gate (`--gate`): what the users saw there.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gate: Option<GateReport>,
    pub first_errors: Vec<String>,
}

/// CPU seconds (user + system) this process has used so far (Linux /proc; 0 elsewhere).
fn own_cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name (which may hold spaces): utime is the 14th field.
    let rest = stat.rsplit_once(") ").map(|(_, r)| r).unwrap_or("");
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // In `rest`, field 3 (state) is index 0, so utime (14) is 11 and stime (15) is 12.
    (ticks(11) + ticks(12)) / 100.0
}

/// Peak resident memory of this process in KiB (Linux /proc; 0 elsewhere).
fn own_peak_rss_kib() -> u64 {
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
        if let Some(g) = &self.gate {
            write!(f, "{g}")?;
        }
        for e in &self.first_errors {
            writeln!(f, "  error: {e}")?;
        }
        Ok(())
    }
}

/// A live view for the progress bar.
#[derive(Debug, Clone, Copy, Default)]
pub struct Progress {
    pub started: usize,
    pub finished: usize,
    pub waiting: usize,
    pub holding: u64,
    pub in_chat: usize,
    pub admitted: u64,
    pub abandoned: u64,
    pub violations: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Entering,
    Waiting,
    Holding,
    InChat,
    Done,
}

struct Person {
    phase: Phase,
    entry_sent: Instant,
    entry_recv: Option<Instant>,
    /// Stays in line until promoted (is not going to abandon).
    steadfast: bool,
    user_id: String,
    forwarded_for: Option<String>,
    /// The estimate given at entry and the first at rank 10 or better (when, what).
    eta_at_entry: Option<(Instant, Option<u64>)>,
    eta_at_rank10: Option<(Instant, Option<u64>)>,
    /// Journeys started over (chaos runs): an audit picked before a restart is void.
    generation: u32,
    /// The last WAITING answer of this journey (its entry request when none): the
    /// promotion came after it.
    last_waiting: Option<Instant>,
}

#[derive(Default)]
struct Ledger {
    /// The start of the run: times in the capacity audit count from here.
    epoch: Option<Instant>,
    people: Vec<Person>,
    /// No one before this index is still waiting.
    first_waiting: usize,
    holding: u64,
    frees: VecDeque<Instant>,
    waits: Vec<f64>,
    slot_to_promotion: Vec<f64>,
    eta_entry_errors: Vec<f64>,
    eta_rank10_errors: Vec<f64>,
    /// The soft caps read from the back office, and the one given up front if any.
    caps: CapHistory,
    given_cap: Option<CapHistory>,
    /// Promotions seen, by whom, and how many of them are judged so far.
    admissions: Vec<(usize, Admission)>,
    admissions_judged: usize,
    /// The server's counts from the back office, and how many are judged so far.
    samples: Vec<Sample>,
    samples_judged: usize,
    report: Report,
}

/// |predicted - actual| / actual, waits under a second counting as one second.
fn eta_error(predicted: u64, actual: f64) -> f64 {
    let actual = actual.max(1.0);
    (predicted as f64 - actual).abs() / actual
}

impl Ledger {
    fn error(&mut self, who: usize, what: impl std::fmt::Display) {
        self.report.errors += 1;
        if self.report.first_errors.len() < 10 {
            self.report.first_errors.push(format!("user {who}: {what}"));
        }
    }

    fn anyone_waiting(&mut self) -> bool {
        while self.first_waiting < self.people.len()
            && matches!(self.people[self.first_waiting].phase, Phase::Done | Phase::Holding | Phase::InChat)
        {
            self.first_waiting += 1;
        }
        self.people[self.first_waiting..].iter().any(|p| p.phase == Phase::Waiting && p.steadfast)
    }

    /// Seconds since the start of the run.
    fn at(&self, t: Instant) -> f64 {
        self.epoch.map_or(0.0, |e| t.saturating_duration_since(e).as_secs_f64())
    }

    /// A back-office reading: its request left at `sent`, the answer came at `recv`.
    fn server_read(&mut self, sent: Instant, recv: Instant, soft_cap: Option<u64>, in_use: u64) {
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
    fn judge_capacity(&mut self, all: bool) {
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
    /// (index, generation, userId, forwarded-for).
    fn promoted(&mut self, who: usize, now: Instant) -> Option<(usize, u32, String, Option<String>)> {
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
        let sent = me.entry_sent;
        for (given, errors) in
            [(me.eta_at_entry, &mut self.eta_entry_errors), (me.eta_at_rank10, &mut self.eta_rank10_errors)]
        {
            match given {
                Some((at, Some(eta))) => errors.push(eta_error(eta, now.duration_since(at).as_secs_f64())),
                Some((_, None)) => self.report.eta_missing += 1,
                None => {}
            }
        }
        self.waits.push(now.duration_since(entered).as_secs_f64());
        if let Some(freed) = self.frees.pop_front() {
            self.slot_to_promotion.push(now.duration_since(freed).as_secs_f64());
        }
        self.people[who].phase = Phase::Holding;
        self.anyone_waiting();
        let from = self.first_waiting.min(who);
        let (i, ahead) = self.people[from..who]
            .iter()
            .enumerate()
            .find(|(_, p)| p.phase == Phase::Waiting && p.steadfast && p.entry_recv.is_some_and(|r| r < sent))?;
        Some((from + i, ahead.generation, ahead.user_id.clone(), ahead.forwarded_for.clone()))
    }

    /// A ticket or session held by `who` is given back (or was refused).
    fn release(&mut self, now: Instant) {
        self.holding = self.holding.saturating_sub(1);
        if self.anyone_waiting() {
            self.frees.push_back(now);
        }
    }

    fn progress(&self, started: usize) -> Progress {
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
            violations: r.fifo_inversions + r.over_capacity + r.server_over_capacity + r.double_claims,
        }
    }
}

/// One virtual user's dice, thrown up front so a seed replays the same crowd.
struct Plan {
    abandon_after: Option<Duration>,
    /// Abandons by leaving the line rather than by going silent.
    polite: bool,
    polling: bool,
    stay: Duration,
    race: bool,
    replay: bool,
}

struct Shared {
    cfg: SwarmConfig,
    http: reqwest::Client,
    ledger: Mutex<Ledger>,
    deadline: Instant,
    gate: Option<Gate>,
}

impl Shared {
    fn with<T>(&self, f: impl FnOnce(&mut Ledger) -> T) -> T {
        f(&mut self.ledger.lock().unwrap())
    }

    fn api(&self, forwarded_for: Option<String>) -> Api {
        match &self.gate {
            Some(g) => Api::new(self.http.clone(), &g.room_base(), &self.cfg.queue, forwarded_for),
            None => Api::new(self.http.clone(), &self.cfg.api, &self.cfg.queue, forwarded_for),
        }
    }
}

/// A visit through a gate counts in the same ledger as a chat session.
impl crate::gate::Tally for Shared {
    fn gate(&self, f: &mut dyn FnMut(&mut GateReport)) {
        self.with(|l| f(l.report.gate.get_or_insert_default()))
    }
    fn admitted(&self, who: usize) {
        self.with(|l| {
            l.report.admitted += 1;
            l.people[who].phase = Phase::InChat;
        })
    }
    fn released(&self) {
        self.with(|l| l.release(Instant::now()))
    }
    fn claim_refused(&self) {
        self.with(|l| {
            l.report.claim_refused += 1;
            l.release(Instant::now());
        })
    }
    fn double_claim(&self, who: usize, what: &str) {
        self.with(|l| {
            l.report.double_claims += 1;
            l.error(who, what);
        })
    }
    fn reuse_refused(&self) {
        self.with(|l| l.report.reuse_refused += 1)
    }
    fn left(&self) {
        self.with(|l| l.report.left += 1)
    }
}

/// Runs the swarm to the end (or to `cfg.timeout`), calling `progress` about five times
/// a second.
pub async fn run(cfg: SwarmConfig, progress: impl Fn(Progress) + Send + Sync + 'static) -> Report {
    run_through(cfg, None, progress).await
}

/// [`run`], the users walking through `gate` when given (see [`crate::gate`]) instead of
/// claiming their tickets at chat-server.
pub async fn run_through(
    cfg: SwarmConfig,
    gate: Option<Gate>,
    progress: impl Fn(Progress) + Send + Sync + 'static,
) -> Report {
    let progress = Arc::new(progress);
    let started_at = Instant::now();
    let cpu_at_start = own_cpu_seconds();
    let ledger =
        Ledger { epoch: Some(started_at), given_cap: cfg.soft_cap.map(CapHistory::fixed), ..Ledger::default() };
    let shared = Arc::new(Shared {
        deadline: started_at + cfg.timeout,
        http: Api::http_client(),
        ledger: Mutex::new(ledger),
        cfg: cfg.clone(),
        gate,
    });
    // The cap in force before anyone arrives, then read throughout the run.
    if let Some(token) = &cfg.admin_token {
        read_server(&shared, token).await;
    }
    let mut rng = rand::rngs::StdRng::seed_from_u64(cfg.seed);
    let plans: Vec<Plan> = (0..cfg.users)
        .map(|_| Plan {
            abandon_after: rng
                .random_bool(cfg.abandon.clamp(0.0, 1.0))
                .then(|| cfg.abandon_within.mul_f64(rng.random_range(0.0..1.0))),
            polite: rng.random_bool(cfg.leave_politely.clamp(0.0, 1.0)),
            polling: rng.random_bool(cfg.polling.clamp(0.0, 1.0)),
            stay: cfg.stay.mul_f64(rng.random_range(0.5..1.5)),
            race: rng.random_bool(cfg.race.clamp(0.0, 1.0)),
            replay: rng.random_bool(cfg.replay.clamp(0.0, 1.0)),
        })
        .collect();

    let sampler = cfg.admin_token.clone().map(|token| tokio::spawn(follow_server(shared.clone(), token)));
    let started = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let ticker = {
        let (shared, started, progress) = (shared.clone(), started.clone(), progress.clone());
        tokio::spawn(async move {
            loop {
                let n = started.load(std::sync::atomic::Ordering::Relaxed);
                progress(shared.with(|l| l.progress(n)));
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        })
    };

    let mut tasks = tokio::task::JoinSet::new();
    let gap = Duration::from_secs_f64(1.0 / cfg.rate.max(0.001));
    let all = async {
        for (i, plan) in plans.into_iter().enumerate() {
            tokio::time::sleep_until((started_at + gap.mul_f64(i as f64)).into()).await;
            let forwarded_for =
                cfg.forwarded_for.then(|| format!("10.{}.{}.{}", (i >> 16) & 255, (i >> 8) & 255, i & 255));
            shared.with(|l| {
                l.people.push(Person {
                    phase: Phase::Entering,
                    entry_sent: Instant::now(),
                    entry_recv: None,
                    steadfast: plan.abandon_after.is_none(),
                    user_id: String::new(),
                    forwarded_for: forwarded_for.clone(),
                    eta_at_entry: None,
                    eta_at_rank10: None,
                    generation: 0,
                    last_waiting: None,
                });
                if plan.polling {
                    l.report.polling_users += 1;
                } else {
                    l.report.stream_users += 1;
                }
            });
            started.store(i + 1, std::sync::atomic::Ordering::Relaxed);
            tasks.spawn(journey(shared.clone(), i, plan, forwarded_for));
        }
        while tasks.join_next().await.is_some() {}
    };
    let timed_out = tokio::time::timeout(cfg.timeout, all).await.is_err();
    tasks.abort_all();
    while tasks.join_next().await.is_some() {}
    ticker.abort();
    if let Some(s) = sampler {
        s.abort();
    }
    let n = started.load(std::sync::atomic::Ordering::Relaxed);
    progress(shared.with(|l| l.progress(n)));

    let mut l = shared.ledger.lock().unwrap();
    l.judge_capacity(true);
    let mut report = std::mem::take(&mut l.report);
    report.users = cfg.users;
    report.unfinished = (cfg.users - l.people.iter().filter(|p| p.phase == Phase::Done).count()) as u64;
    if timed_out && report.first_errors.len() < 10 {
        report
            .first_errors
            .push(format!("timed out after {:?} with {} users unfinished", cfg.timeout, report.unfinished));
    }
    (report.soft_cap, report.soft_cap_changes) = match &l.given_cap {
        Some(given) => (given.first(), Vec::new()),
        None => (l.caps.first(), l.caps.changes()),
    };
    report.wait_seconds = Percentiles::of(std::mem::take(&mut l.waits));
    report.slot_to_promotion_seconds = Percentiles::of(std::mem::take(&mut l.slot_to_promotion));
    report.eta_error_at_entry = Percentiles::of(std::mem::take(&mut l.eta_entry_errors));
    report.eta_error_at_rank10 = Percentiles::of(std::mem::take(&mut l.eta_rank10_errors));
    report.duration_seconds = started_at.elapsed().as_secs_f64();
    report.own_cpu_seconds = own_cpu_seconds() - cpu_at_start;
    report.own_peak_rss_kib = own_peak_rss_kib();
    if shared.gate.is_some() {
        report.gate.get_or_insert_default();
    }
    report
}

async fn admin_info(http: &reqwest::Client, cfg: &SwarmConfig, token: &str) -> Result<serde_json::Value, String> {
    let url = format!("{}/api/admin/queues/{}", cfg.api.trim_end_matches('/'), cfg.queue);
    let resp =
        http.get(url).bearer_auth(token).timeout(Duration::from_secs(5)).send().await.map_err(|e| e.to_string())?;
    if !resp.status().is_success() {
        return Err(format!("back office answered {}", resp.status()));
    }
    let v: serde_json::Value = resp.json().await.map_err(|e| e.to_string())?;
    Ok(v["info"].clone())
}

/// How often the back office is read during a run.
const SERVER_READ_EVERY: Duration = Duration::from_millis(250);

/// One back-office reading: the soft cap in force and the server's own counts.
async fn read_server(shared: &Shared, token: &str) {
    let sent = Instant::now();
    if let Ok(info) = admin_info(&shared.http, &shared.cfg, token).await {
        let in_use = info["active"].as_u64().unwrap_or(0) + info["joining"].as_u64().unwrap_or(0);
        let cap = info["soft_cap"].as_u64();
        let recv = Instant::now();
        shared.with(|l| l.server_read(sent, recv, cap, in_use));
    }
}

/// Reads the back office every [`SERVER_READ_EVERY`] until aborted.
async fn follow_server(shared: Arc<Shared>, token: String) {
    loop {
        tokio::time::sleep(SERVER_READ_EVERY).await;
        read_server(&shared, &token).await;
    }
}

async fn journey(shared: Arc<Shared>, who: usize, plan: Plan, forwarded_for: Option<String>) {
    let outcome = walk(&shared, who, &plan, forwarded_for).await;
    shared.with(|l| {
        if let Err(e) = outcome {
            l.error(who, e);
        }
        l.people[who].phase = Phase::Done;
    });
}

/// Why a journey stopped before its end.
enum Stop {
    /// A clear error: the user is done.
    Error(String),
    /// Lost with a failing service (chaos runs only): the user starts over.
    Lost(Outage, String),
}

impl From<String> for Stop {
    fn from(e: String) -> Stop {
        Stop::Error(e)
    }
}

impl From<&str> for Stop {
    fn from(e: &str) -> Stop {
        Stop::Error(e.to_string())
    }
}

async fn walk(shared: &Arc<Shared>, who: usize, plan: &Plan, forwarded_for: Option<String>) -> Result<(), String> {
    let api = shared.api(forwarded_for);
    let nickname = format!("{}{who}", shared.cfg.nickname_prefix);
    let Some(log) = shared.cfg.outages.clone() else {
        return journey_once(shared, who, plan, &api, &nickname, None).await.map_err(|stop| match stop {
            Stop::Error(e) | Stop::Lost(_, e) => e,
        });
    };
    let mut round = 1;
    loop {
        // Each journey its own userId, chosen up front so that an entry sent again
        // after a lost answer moves the same person instead of entering a second one.
        let user_id = outage::random_user_id(&mut rand::rng());
        match journey_once(shared, who, plan, &api, &nickname, Some((&log, &user_id))).await {
            Ok(()) => return Ok(()),
            Err(Stop::Error(e)) => return Err(e),
            Err(Stop::Lost(what, e)) => {
                log.note(who, what);
                if round >= log.max_attempts {
                    return Err(format!("{e} (gave up after {round} journeys)"));
                }
                log.note(who, Outage::Reentered);
                shared.with(|l| {
                    let p = &mut l.people[who];
                    p.generation += 1;
                    p.steadfast = false;
                    p.phase = Phase::Entering;
                    (p.eta_at_entry, p.eta_at_rank10) = (None, None);
                });
                round += 1;
            }
        }
    }
}

/// A pause of 250-750 ms before trying again.
async fn back_off() {
    let ms = rand::rng().random_range(250..750);
    tokio::time::sleep(Duration::from_millis(ms)).await;
}

async fn journey_once(
    shared: &Arc<Shared>,
    who: usize,
    plan: &Plan,
    api: &Api,
    nickname: &str,
    chaos: Option<(&Arc<OutageLog>, &str)>,
) -> Result<(), Stop> {
    let cfg = &shared.cfg;
    if let Some(gate) = &shared.gate {
        gate.arrive(&**shared, &cfg.queue).await?;
    }
    let entry_sent = Instant::now();
    let user_id = chaos.map(|(_, id)| id.to_string());
    let entered = loop {
        let r = api
            .patiently(shared.deadline, || {
                let api = api.clone();
                let nickname = nickname.to_string();
                let user_id = user_id.clone();
                let shared = shared.clone();
                async move {
                    let r = api.enter_as(&nickname, user_id.as_deref()).await;
                    if matches!(r, Err(ApiError::RateLimited(_))) {
                        shared.with(|l| l.report.rate_limited += 1);
                    }
                    r
                }
            })
            .await;
        match (r, chaos) {
            (Err(e), Some((log, _))) if e.is_outage() && Instant::now() < shared.deadline => {
                log.note(who, Outage::EntryRetried);
                back_off().await;
            }
            (r, _) => break r.map_err(|e| format!("entry: {e}"))?,
        }
    };
    let now = Instant::now();
    shared.with(|l| {
        let p = &mut l.people[who];
        p.entry_sent = entry_sent;
        p.entry_recv = Some(now);
        p.user_id = entered.user_id.clone();
        p.phase = Phase::Waiting;
        p.last_waiting = (entered.status == Status::Waiting).then_some(now);
        if entered.status == Status::Waiting {
            p.eta_at_entry = Some((now, entered.estimated_wait_seconds));
            if entered.rank <= 10 {
                p.eta_at_rank10 = p.eta_at_entry;
            }
        }
        l.report.entered += 1;
    });

    let log = chaos.map(|(log, _)| log);
    let standing = match entered.status {
        Status::Promoted => {
            shared.with(|l| l.report.admitted_at_once += 1);
            entered
        }
        Status::Waiting => match wait(shared, who, plan, api, &entered, log).await? {
            Some(s) => s,
            None => return Ok(()), // abandoned
        },
        other => return Err(format!("entry answered {}", other.as_str()).into()),
    };
    if standing.status != Status::Promoted {
        if standing.status == Status::Unknown {
            shared.with(|l| l.report.dropped += 1);
            let e = "dropped from the line while following it".to_string();
            return Err(if chaos.is_some() { Stop::Lost(Outage::Dropped, e) } else { Stop::Error(e) });
        }
        return Err(format!("expected a ticket, got {}", standing.status.as_str()).into());
    }
    let promoted_at = Instant::now();
    let audit = shared.with(|l| l.promoted(who, promoted_at));
    if let Some((ahead, generation, user, ff)) = audit {
        tokio::spawn(audit_fifo(shared.clone(), who, ahead, generation, user, ff));
    }
    let ticket = standing.ticket_id.ok_or("promoted without a ticket")?;
    if let Some(gate) = &shared.gate {
        let (user, stay) = (&standing.user_id, plan.stay);
        return Ok(gate
            .visit(&**shared, who, cfg.seed, &cfg.queue, user, &ticket, plan.race, plan.replay, stay)
            .await?);
    }
    chat_session(shared, who, plan, nickname, &ticket, log, promoted_at).await
}

/// Follows the place in line; None when the user abandons first.
async fn wait(
    shared: &Arc<Shared>,
    who: usize,
    plan: &Plan,
    api: &Api,
    entered: &Standing,
    chaos: Option<&Arc<OutageLog>>,
) -> Result<Option<Standing>, String> {
    let mut last_rank = entered.rank;
    let mut last_waiting = None;
    let on_update = |s: &Standing, _via: Via| {
        let at = Instant::now();
        last_waiting = Some(at);
        if s.status == Status::Waiting && s.rank <= 10 {
            shared.with(|l| {
                let p = &mut l.people[who];
                p.eta_at_rank10.get_or_insert((at, s.estimated_wait_seconds));
            });
        }
        if s.rank > last_rank {
            let (was, now) = (last_rank, s.rank);
            shared.with(|l| {
                l.report.rank_rises += 1;
                l.report.fifo_inversions += 1;
                l.error(who, format_args!("rank rose from {was} to {now}"));
            });
        }
        last_rank = s.rank;
    };
    let (user, every, deadline) = (&entered.user_id, shared.cfg.poll_every, shared.deadline);
    let follow = async move {
        match chaos {
            Some(log) => follow_through_outages(who, api, user, plan.polling, every, deadline, log, on_update).await,
            None => api.follow(user, plan.polling, every, deadline, on_update).await,
        }
    };
    let result = match plan.abandon_after {
        None => follow.await,
        Some(after) => {
            tokio::select! {
                r = follow => r,
                _ = tokio::time::sleep(after) => {
                    // Either leaves the line, or closes the tab: the stream or polling
                    // just stops, and the queue drops the silent waiter after abandon_after.
                    let left = if !plan.polite {
                        false
                    } else {
                        match (api.leave(&entered.user_id).await, chaos) {
                            (Ok(left), _) => left,
                            // The click went nowhere: the page is closed instead.
                            (Err(e), Some(log)) if e.is_outage() => {
                                log.note(who, Outage::LeaveFailed);
                                false
                            }
                            (Err(e), _) => return Err(format!("leaving the line: {e}")),
                        }
                    };
                    shared.with(|l| {
                        l.report.abandoned += 1;
                        l.report.abandoned_by_leaving += u64::from(left);
                    });
                    return Ok(None);
                }
            }
        }
    };
    if let Some(at) = last_waiting {
        shared.with(|l| l.people[who].last_waiting = Some(at));
    }
    result.map(Some).map_err(|e| format!("following the line: {e}"))
}

/// Follows the place in line through outages (chaos runs): a push stream that cannot
/// be opened or breaks is noted, the status polled once, and the stream opened again
/// (polling users poll throughout); failed polls are noted and tried again, until
/// `deadline`.
#[allow(clippy::too_many_arguments)]
async fn follow_through_outages(
    who: usize,
    api: &Api,
    user: &str,
    polling_only: bool,
    poll_every: Duration,
    deadline: Instant,
    log: &OutageLog,
    mut on_update: impl FnMut(&Standing, Via),
) -> Result<Standing, ApiError> {
    let mut last_error = None;
    while Instant::now() < deadline {
        if !polling_only {
            match api.stream(user, deadline, &mut on_update).await {
                Ok(Some(done)) => return Ok(done),
                Ok(None) | Err(_) => log.note(who, Outage::StreamLost),
            }
        }
        match api.poll_once(user, &mut on_update).await {
            Polled::Done(s) => return Ok(s),
            Polled::Waiting => last_error = None,
            Polled::RateLimited => continue,
            Polled::Failed(e) => {
                log.note(who, Outage::PollFailed);
                last_error = Some(e);
            }
        }
        tokio::time::sleep(if polling_only { poll_every } else { poll_every.min(Duration::from_millis(500)) }).await;
    }
    Err(last_error.unwrap_or_else(|| ApiError::Transport("gave up waiting: deadline passed".into())))
}

/// Asks `user` (who surely entered before `who`) where it stands, after `who` was seen
/// promoted: still WAITING means the line was jumped. Void when `user` (person `ahead`)
/// started its journey over meanwhile (chaos runs).
async fn audit_fifo(
    shared: Arc<Shared>,
    who: usize,
    ahead: usize,
    generation: u32,
    user: String,
    forwarded_for: Option<String>,
) {
    let api = shared.api(forwarded_for);
    if let Ok(s) = api.status(&user).await {
        shared.with(|l| {
            if l.people[ahead].generation != generation {
                return;
            }
            l.report.fifo_audits += 1;
            if s.status == Status::Waiting {
                l.report.fifo_inversions += 1;
                l.error(
                    who,
                    format_args!("promoted while {user}, who entered earlier, still waits at rank {}", s.rank),
                );
            }
        });
    }
}

/// How long a chaos run's user waits for one handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Whether a failed handshake is a server's trouble a person would retry.
fn handshake_outage(h: &Handshake) -> bool {
    match h {
        Handshake::Admitted(_) => false,
        Handshake::Refused(code, _) => *code == 1013 || (500..=599).contains(code),
        Handshake::Failed(_) => true,
    }
}

#[allow(clippy::too_many_arguments)]
async fn chat_session(
    shared: &Arc<Shared>,
    who: usize,
    plan: &Plan,
    nickname: &str,
    ticket: &str,
    chaos: Option<&Arc<OutageLog>>,
    promoted_at: Instant,
) -> Result<(), Stop> {
    let cfg = &shared.cfg;
    let attempts = if plan.race { 2 } else { 1 };
    let connect = || async {
        match chaos {
            None => chat::connect(&cfg.chat, &cfg.queue, ticket).await,
            Some(_) => tokio::time::timeout(HANDSHAKE_TIMEOUT, chat::connect(&cfg.chat, &cfg.queue, ticket))
                .await
                .unwrap_or_else(|_| Handshake::Failed("handshake timed out".into())),
        }
    };
    if plan.race {
        shared.with(|l| l.report.claim_races += 1);
    }
    let (mut sockets, refusals) = loop {
        let handshakes = futures_util::future::join_all((0..attempts).map(|_| connect())).await;
        let all_outages = handshakes.iter().all(handshake_outage);
        let mut sockets = Vec::new();
        let mut refusals = Vec::new();
        for h in handshakes {
            match h {
                Handshake::Admitted(ws) => sockets.push(ws),
                Handshake::Refused(code, text) => refusals.push(format!("{code} {text}")),
                Handshake::Failed(e) => refusals.push(e),
            }
        }
        shared.with(|l| {
            if sockets.len() > 1 {
                l.report.double_claims += sockets.len() as u64 - 1;
                l.error(who, "one ticket opened two sessions at once");
            }
        });
        match chaos {
            // chat-server down or without Valkey: try again while the ticket lives.
            Some(log) if all_outages && Instant::now() < promoted_at + log.claim_for => {
                log.note(who, Outage::ClaimRetried);
                back_off().await;
            }
            _ => break (sockets, refusals),
        }
    };
    // Every session past the first (none when every handshake was refused).
    for extra in sockets.split_off(sockets.len().min(1)) {
        chat::leave(*extra).await;
    }
    let Some(ws) = sockets.pop() else {
        shared.with(|l| {
            l.report.claim_refused += 1;
            l.release(Instant::now());
        });
        let e = format!("the ticket was refused: {}", refusals.join("; "));
        return Err(if chaos.is_some() { Stop::Lost(Outage::TicketLost, e) } else { Stop::Error(e) });
    };
    shared.with(|l| {
        l.report.admitted += 1;
        l.people[who].phase = Phase::InChat;
    });

    let mut ws = *ws;
    let started = Instant::now();
    let end = started + plan.stay;
    let mut sent = 0u32;
    let gap = plan.stay / (cfg.messages + 1);
    let mut lost = None;
    loop {
        let next_send = started + gap * (sent + 1);
        let wake = if sent < cfg.messages { next_send.min(end) } else { end };
        tokio::select! {
            incoming = chat::next(&mut ws) => match incoming {
                Incoming::Frame(f) => {
                    if f.kind == "MESSAGE_RECEIVE" && f.payload["nickname"] == nickname {
                        shared.with(|l| l.report.messages_echoed += 1);
                    }
                }
                Incoming::Closed(c) => {
                    lost = Some(c);
                    break;
                }
            },
            _ = tokio::time::sleep_until(wake.into()) => {
                if Instant::now() >= end {
                    break;
                }
                sent += 1;
                if chat::send(&mut ws, chat::say(&format!("hello from {nickname} #{sent}"))).await {
                    shared.with(|l| l.report.messages_sent += 1);
                }
            }
        }
    }
    shared.with(|l| l.release(Instant::now()));
    if let Some(c) = lost {
        let e = format!("the chat session was closed by the server: {c:?}");
        return Err(if chaos.is_some() { Stop::Lost(Outage::SessionLost, e) } else { Stop::Error(e) });
    }
    chat::leave(ws).await;
    shared.with(|l| l.report.left += 1);

    if plan.replay {
        match connect().await {
            Handshake::Admitted(ws) => {
                shared.with(|l| {
                    l.report.double_claims += 1;
                    l.error(who, "a used ticket opened a second session");
                });
                chat::leave(*ws).await;
            }
            Handshake::Refused(401 | 409, _) => shared.with(|l| l.report.reuse_refused += 1),
            // A server in trouble admitted nobody: nothing to audit (chaos runs).
            h if chaos.is_some() && handshake_outage(&h) => {}
            Handshake::Refused(code, text) => {
                return Err(format!("reusing the ticket: unexpected {code} {text}").into())
            }
            Handshake::Failed(e) => return Err(format!("reusing the ticket: {e}").into()),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn the_audit_asks_the_earliest_steadfast_waiter_who_surely_entered_first() {
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        let mut l = Ledger::default();
        person(&mut l, "a", ms(0), ms(5), false); // will abandon: not asked
        person(&mut l, "b", ms(1), ms(30), true); // answered after c asked: order unknown
        person(&mut l, "c", ms(20), ms(25), true);
        person(&mut l, "d", ms(40), ms(45), true);
        // d promoted: b is the earliest steadfast waiter who entered before d's request.
        assert_eq!(l.promoted(3, ms(50)).map(|t| (t.0, t.2)), Some((1, "b".to_string())));
        // c promoted: b's entry answer came after c's request left, so no one is surely ahead.
        assert_eq!(l.promoted(2, ms(60)), None);
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
