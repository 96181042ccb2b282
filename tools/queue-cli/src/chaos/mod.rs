//! The chaos run: the whole system on loopback, owned by this process (valkey-server
//! with the module and AOF, two queue-managers, queue-api, chat-server, as child
//! processes on free ports), a swarm of virtual users through it, and faults injected
//! on a seeded random schedule while the swarm runs:
//!
//! - `kill -9` of queue-api, chat-server and the leading queue-manager, each restarted
//!   after a random pause;
//! - `kill -9` of valkey-server, restarted on the same port and directory from its
//!   AOF, alternately with `appendfsync everysec` and `always`; the queue's counters
//!   are read just before the kill and just after the restart, and any that went
//!   back (acknowledged writes lost) are reported;
//! - `SIGSTOP` of the leading queue-manager for longer than its lease, then `SIGCONT`.
//!
//! Meanwhile a probe enters (and leaves at once) every 200 ms through queue-api,
//! a sampler reads the queue's state from Valkey every 250 ms (the promoted counter,
//! every ticket holder and session), and both managers' `/metrics` say who leads.
//! The report gives, per fault, what users saw (the swarm's retries by kind, see
//! [`crate::outage`]), how long until a probe entry went through again, until the
//! next promotion, and (for the managers) until a leader promoted again; then the
//! swarm's own audits (FIFO, capacity, double claims) and the held-slots check: every
//! ticket or session seen held is given back within `ticket_ttl + session_lease`
//! (plus the manager's tick and the sampling period) of when it was taken or of the
//! last fault before its end, whichever is later.
//!
//! The files: this one (the settings and the run), [`plan`] (which faults, when),
//! [`stack`] (the processes), [`valkey`] (what is read from Valkey), [`monitors`]
//! (probes, samples, leaders), [`faults`] (injecting one), [`report`] (the findings).

mod faults;
mod monitors;
mod plan;
mod report;
mod stack;
mod valkey;

pub use faults::FaultRecord;
pub use monitors::{Hold, Probe};
pub use plan::{schedule, Fault, Fsync, Service};
pub use report::{held_past_fault, ChaosReport, FaultOutcome};

use crate::outage::OutageLog;
use crate::swarm::{self, SwarmConfig};
use faults::inject;
use monitors::{leader_loop, probe_loop, sample_loop, Monitor};
use rand::SeedableRng;
use report::{outcomes, tally};
use stack::{wait_http_ok, wait_valkey, Stack};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use valkey::LUA;

/// What a chaos run does; see `queue-cli chaos --help`.
#[derive(Debug, Clone)]
pub struct ChaosConfig {
    pub users: usize,
    pub rate: f64,
    pub soft_cap: u64,
    pub stay: Duration,
    /// `kill -9` and restart of each of queue-api, chat-server and the leading manager.
    pub kills: u32,
    /// `kill -9` and AOF restarts of valkey-server (everysec, always, everysec, ...).
    pub valkey_restarts: u32,
    /// SIGSTOPs of the leading queue-manager.
    pub stops: u32,
    pub ticket_ttl: Duration,
    pub session_lease: Duration,
    pub abandon_after: Duration,
    pub manager_lease: Duration,
    /// Faults fall between this long after the start and the last arrival.
    pub first_fault_after: Duration,
    pub seed: u64,
    pub timeout: Duration,
    /// Where queue-api, queue-manager and chat-server are (target/release).
    pub bin_dir: PathBuf,
    /// The module (libvalkey_queue.so); None: the Lua library (the services install it).
    pub module: Option<PathBuf>,
    pub valkey_server: String,
}

const QUEUE: &str = "default";
const ADMIN_TOKEN: &str = "chaos-admin";
/// The manager's tick (its default) plus the sampling period: how late a slot the
/// rules give back may be seen given back.
const SLACK: Duration = Duration::from_millis(1500);

async fn start_stack(cfg: &ChaosConfig, stack: &mut Stack, http: &reqwest::Client) -> Result<(), String> {
    stack.valkey.spawn()?;
    let url = stack.valkey_url();
    wait_valkey(&url, Duration::from_secs(20)).await.ok_or("valkey-server did not answer PING")?;
    // The client finds the backend (and installs the Lua library where there is no module).
    let qc = queue_client::QueueClient::connect(&url).await.map_err(|e| format!("connecting: {e}"))?;
    LUA.store(qc.backend() == queue_client::Backend::Lua, std::sync::atomic::Ordering::Relaxed);
    let ms = |d: Duration| d.as_millis() as i64;
    let settings = [
        ("soft_cap", cfg.soft_cap as i64),
        ("ticket_ttl", ms(cfg.ticket_ttl)),
        ("session_lease", ms(cfg.session_lease)),
        ("abandon_after", ms(cfg.abandon_after)),
    ];
    qc.config_set(QUEUE, &settings).await.map_err(|e| format!("QUEUE.CONFIG: {e}"))?;
    stack.chat.spawn()?;
    for m in &mut stack.managers {
        m.spawn()?;
    }
    stack.api.spawn()?;
    let checks = [
        ("queue-api", stack.api_port),
        ("chat-server", stack.chat_port),
        ("queue-manager-0", stack.manager_ports[0]),
        ("queue-manager-1", stack.manager_ports[1]),
    ];
    for (name, port) in checks {
        let url = format!("http://127.0.0.1:{port}/healthz");
        wait_http_ok(http, &url, Duration::from_secs(30)).await.ok_or(format!("{name} did not come up"))?;
    }
    Ok(())
}

/// Runs the whole chaos run; `Err` when the stack could not be started.
pub async fn run(cfg: ChaosConfig) -> Result<ChaosReport, String> {
    let http = crate::api::Api::http_client();
    let mut stack = Stack::build(&cfg)?;
    if let Err(e) = start_stack(&cfg, &mut stack, &http).await {
        stack.keep_dir = true;
        return Err(format!("{e}; logs in {}", stack.dir.display()));
    }
    let started = Instant::now();
    let log = Arc::new(OutageLog::new(cfg.ticket_ttl, 4));
    let swarm_cfg = SwarmConfig {
        api: format!("http://127.0.0.1:{}", stack.api_port),
        chat: format!("http://127.0.0.1:{}", stack.chat_port),
        queue: QUEUE.into(),
        users: cfg.users,
        rate: cfg.rate,
        abandon: 0.1,
        leave_politely: 0.5,
        abandon_within: Duration::from_secs(5),
        stay: cfg.stay,
        messages: 2,
        race: 0.2,
        replay: 1.0,
        polling: 0.1,
        poll_every: Duration::from_secs(1),
        soft_cap: Some(cfg.soft_cap),
        admin_token: Some(ADMIN_TOKEN.into()),
        timeout: cfg.timeout,
        nickname_prefix: "c".into(),
        forwarded_for: true,
        seed: cfg.seed,
        outages: Some(log.clone()),
        access: Default::default(),
    };
    let mon = Arc::new(Mutex::new(Monitor::default()));
    let monitors = [
        tokio::spawn(probe_loop(mon.clone(), http.clone(), swarm_cfg.api.clone())),
        tokio::spawn(sample_loop(mon.clone(), stack.valkey_url())),
        tokio::spawn(leader_loop(mon.clone(), http.clone(), stack.manager_ports)),
    ];
    let arrivals = Duration::from_secs_f64(cfg.users as f64 / cfg.rate.max(0.001));
    let plan = schedule(cfg.kills, cfg.valkey_restarts, cfg.stops, cfg.first_fault_after, arrivals, cfg.seed);
    let swarm_task = tokio::spawn(swarm::run(swarm_cfg, |_| {}));

    let mut records = Vec::new();
    let mut stack_failures = Vec::new();
    let mut rng = rand::rngs::StdRng::seed_from_u64(cfg.seed ^ 0x5eed);
    for (offset, fault) in &plan {
        tokio::time::sleep_until((started + *offset).into()).await;
        if swarm_task.is_finished() {
            stack_failures.push(format!("the swarm ended before {fault} was injected"));
            break;
        }
        match inject(&cfg, &mut stack, &http, *fault, &mut rng).await {
            Ok(r) => {
                eprintln!(
                    "[{:6.1} s] {fault} ({}): back after {:.2} s{}",
                    r.at.duration_since(started).as_secs_f64(),
                    r.target,
                    r.restored.duration_since(r.at).as_secs_f64(),
                    if r.ready.is_some() { "" } else { ", NOT answering" }
                );
                if r.ready.is_none() {
                    stack_failures.push(format!("{} did not answer after {fault}", r.target));
                }
                records.push(r);
            }
            Err(e) => stack_failures.push(format!("{fault}: {e}")),
        }
    }
    let swarm_report = swarm_task.await.map_err(|e| format!("the swarm failed: {e}"))?;
    let swarm_end = Instant::now();

    // Drain: every slot still held must be given back within the bound after the
    // last fault (or its start); wait for that, or until nothing is held.
    let bound = cfg.ticket_ttl + cfg.session_lease;
    let last = records.last().map(|r| r.restored).unwrap_or(started).max(swarm_end - bound.min(swarm_end - started));
    let drain_until = last + bound + SLACK + Duration::from_secs(1);
    while Instant::now() < drain_until {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let m = mon.lock().unwrap();
        if m.open_holds.is_empty() && m.promoted.last().is_some_and(|(t, _)| *t > swarm_end) {
            break;
        }
    }
    for m in monitors {
        m.abort();
    }
    for p in [&mut stack.api, &mut stack.chat, &mut stack.valkey] {
        if p.exited() {
            stack_failures.push(format!("{} exited by itself", p.name));
        }
    }
    let end = Instant::now();
    let mut m = mon.lock().unwrap();
    let open: Vec<((char, String), Instant)> = m.open_holds.drain().collect();
    for ((kind, user), first_seen) in open {
        m.holds.push(Hold { kind, user, first_seen, gone: end });
    }
    let events = log.events();
    let fault_starts: Vec<Instant> = records.iter().map(|r| r.at).collect();
    let mut holds_too_long = Vec::new();
    let mut longest = Duration::ZERO;
    for h in &m.holds {
        let d = held_past_fault(h, &fault_starts);
        longest = longest.max(d);
        if d > bound + SLACK {
            holds_too_long.push((h.clone(), d));
        }
    }
    let totals = tally(events.iter());
    let report = ChaosReport {
        seed: cfg.seed,
        started,
        duration: end - started,
        outcomes: outcomes(&records, &m.probes, &m.promoted, &m.leaders, &events, swarm_end),
        swarm: swarm_report,
        events: totals,
        holds: m.holds.len(),
        holds_too_long,
        longest_hold: longest,
        hold_bound: bound,
        samples_failed: m.samples_failed,
        stack_failures,
        log_dir: None,
    };
    drop(m);
    let mut report = report;
    if !report.passed() {
        stack.keep_dir = true;
        report.log_dir = Some(stack.dir.clone());
    }
    Ok(report)
}
