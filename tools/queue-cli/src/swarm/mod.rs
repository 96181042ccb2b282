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
//! - **Lanes, access codes, accounts** ([`lanes`]): with `--lanes` the queue is given
//!   ordered lanes, with `--codes` access codes for its first lane, and a share of the
//!   users enter with a code (some with one already used up, some with one never
//!   uploaded). The FIFO audit then holds within each lane, and a promotion from a later
//!   lane asks the earliest steadfast waiter who surely entered an earlier lane before
//!   that promotion (its entry answer came before a WAITING answer of the promoted
//!   person that was surely asked for after it); every code's entries are counted against
//!   its uses. With `--identity-key` every user is an account with the app's login
//!   token ([`identity`]), and some open a second tab, which must find the same place.
//!
//! It also grades the estimated wait: for every user who waited and was promoted,
//! |predicted - actual| / actual of the estimate given at entry and of the first one
//! given at rank 10 or better (waits under a second count as one second, the
//! estimate's own unit); estimates that were missing (null) are counted apart.
//!
//! The files: this one (the settings, the crowd and the run), [`journey`] (one user's
//! journey), [`chat_session`] (its time in the chat), [`ledger`] (the ledger and its
//! audits), [`lanes`] (the audits of lanes, codes and accounts), [`identity`] (the
//! app's login played by the swarm), [`back_office`] (the readings of the cap in force,
//! the lanes and codes set up), [`report`] (the report).

mod back_office;
mod chat_session;
pub mod identity;
mod journey;
mod lanes;
mod ledger;
mod report;

pub use identity::Login;
pub use report::{LaneReport, Report};

use crate::api::Api;
use crate::capacity::CapHistory;
use crate::gate::{Gate, GateReport};
use crate::outage::OutageLog;
use crate::stats::Percentiles;
use back_office::{follow_server, read_server};
use journey::journey;
use ledger::{Ledger, Person, Phase};
use rand::{Rng, SeedableRng};
use report::{own_cpu_seconds, own_peak_rss_kib};
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
    /// Lanes, access codes and identities (none by default).
    pub access: Access,
}

/// Lanes, access codes and identities for a run; see `queue-cli swarm --help`.
#[derive(Debug, Clone, Default)]
pub struct Access {
    /// The lanes the queue is given before the run (needs the admin token); none: the
    /// queue is left as it is, and audited as a queue without lanes.
    pub lanes: Vec<String>,
    /// Access codes uploaded for the first lane, and the uses of each.
    pub codes: usize,
    pub code_uses: u64,
    /// Shares of the users entering with a good code, with a code beyond its uses, and
    /// with a code never uploaded.
    pub presale: f64,
    pub code_reuse: f64,
    pub code_unknown: f64,
    /// The app's login: every user an account with a token signed by it.
    pub login: Option<Arc<Login>>,
    /// Second tabs send the token in this cookie (as the page does) rather than the header.
    pub identity_cookie: Option<String>,
    /// Share of logged-in users who open a second tab.
    pub second_tab: f64,
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

/// One virtual user's dice, thrown up front so a seed replays the same crowd.
struct Plan {
    abandon_after: Option<Duration>,
    /// Abandons by leaving the line rather than by going silent.
    polite: bool,
    polling: bool,
    stay: Duration,
    race: bool,
    replay: bool,
    /// The access code this user enters with.
    code: Option<String>,
    /// The login token of this user's account.
    token: Option<String>,
    second_tab: bool,
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
    let mut ledger = Ledger {
        epoch: Some(started_at),
        given_cap: cfg.soft_cap.map(CapHistory::fixed),
        lanes: cfg.access.lanes.clone(),
        ..Ledger::default()
    };
    // This run's codes and accounts: fresh names each run, so that codes used up and
    // places held by an earlier run on the same queue play no part.
    let tag: u32 = rand::rng().random();
    let codes: Vec<String> = (0..cfg.access.codes).map(|i| format!("P{tag:08x}-{i}")).collect();
    if !cfg.access.lanes.is_empty() || cfg.access.login.is_some() {
        let r = ledger.report.lanes.get_or_insert_default();
        r.lanes = cfg.access.lanes.clone();
    }
    let setup = match &cfg.admin_token {
        Some(token) if !cfg.access.lanes.is_empty() => setup_lanes(&cfg, token, &codes).await,
        _ => Ok(None),
    };
    let codes_used_before = match setup {
        Ok(used) => used,
        Err(e) => {
            ledger.run_error(format!("setting up lanes and codes: {e}"));
            let mut report = std::mem::take(&mut ledger.report);
            (report.users, report.unfinished) = (cfg.users, cfg.users as u64);
            return report;
        }
    };
    if !codes.is_empty() {
        ledger.codes_uploaded(&codes, cfg.access.code_uses);
    }
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
            code: None,
            token: None,
            second_tab: false,
        })
        .collect();
    let plans = hand_out_access(&cfg, plans, &codes, tag);

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
                    lane: None,
                    token: plan.token.clone(),
                    surely_waiting_at: None,
                });
                if plan.token.is_some() {
                    l.report.lanes.get_or_insert_default().identified_users += 1;
                }
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

    if let (Some(token), Some(before)) = (&cfg.admin_token, codes_used_before) {
        let used = back_office::codes_used(&shared.http, &cfg, token).await;
        let mut l = shared.ledger.lock().unwrap();
        match used {
            Ok(after) => l.judge_codes(Some(after.saturating_sub(before))),
            Err(e) => {
                l.run_error(format!("reading the codes' counts: {e}"));
                l.judge_codes(None);
            }
        }
    } else if !shared.ledger.lock().unwrap().codes.is_empty() {
        shared.ledger.lock().unwrap().judge_codes(None);
    }
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
    report.eta_error_shown = l.eta_shown.percentiles();
    report.eta_error_by_remaining = l.eta_shown.by_remaining();
    let (shown, none) = (l.eta_shown.seconds, l.eta_shown.missing_seconds);
    report.eta_shown_missing_share = if shown + none > 0 { none as f64 / (shown + none) as f64 } else { 0.0 };
    report.eta_figures_per_minute = Percentiles::of(std::mem::take(&mut l.eta_shown.per_minute));
    report.duration_seconds = started_at.elapsed().as_secs_f64();
    report.own_cpu_seconds = own_cpu_seconds() - cpu_at_start;
    report.own_peak_rss_kib = own_peak_rss_kib();
    if shared.gate.is_some() {
        report.gate.get_or_insert_default();
    }
    report
}

/// Gives the queue its lanes and uploads `codes` for the first lane; the uses the server
/// counts as consumed before the run (None without codes).
async fn setup_lanes(cfg: &SwarmConfig, token: &str, codes: &[String]) -> Result<Option<u64>, String> {
    let http = Api::http_client();
    back_office::set_lanes(&http, cfg, token).await?;
    if codes.is_empty() {
        return Ok(None);
    }
    back_office::upload_codes(&http, cfg, token, &cfg.access.lanes[0], cfg.access.code_uses, codes).await?;
    back_office::codes_used(&http, cfg, token).await.map(Some)
}

/// Hands out codes, accounts and second tabs, with dice of their own (the crowd's other
/// dice stay what the seed made them). Good codes go round the list so each is handed
/// out exactly its uses; past that, and for the users chosen to reuse one, a code goes
/// out once more than its uses.
fn hand_out_access(cfg: &SwarmConfig, mut plans: Vec<Plan>, codes: &[String], tag: u32) -> Vec<Plan> {
    let a = &cfg.access;
    let mut rng = rand::rngs::StdRng::seed_from_u64(cfg.seed ^ 0x1a9e_5c0d);
    let slots = codes.len() as u64 * a.code_uses;
    let (mut handed, mut reused, mut unknown) = (0u64, 0usize, 0usize);
    let lifetime = cfg.timeout.as_secs() + 600;
    for (i, plan) in plans.iter_mut().enumerate() {
        let r: f64 = rng.random_range(0.0..1.0);
        if !codes.is_empty() && r < a.presale && handed < slots {
            plan.code = Some(codes[(handed % codes.len() as u64) as usize].clone());
            handed += 1;
        } else if !codes.is_empty() && r < a.presale + a.code_reuse {
            plan.code = Some(codes[reused % codes.len()].clone());
            reused += 1;
        } else if !a.lanes.is_empty() && r < a.presale + a.code_reuse + a.code_unknown {
            plan.code = Some(format!("X{tag:08x}-{unknown}"));
            unknown += 1;
        }
        if let Some(login) = &a.login {
            plan.token = Some(login.token(&format!("acct-{tag:08x}-{i}"), lifetime, None));
            plan.second_tab = rng.random_bool(a.second_tab.clamp(0.0, 1.0));
        }
    }
    plans
}
