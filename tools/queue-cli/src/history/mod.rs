//! `history run` and `history check`: Jepsen's method on the waiting room. The
//! recorder drives virtual users against a Valkey cluster through `queue-client` in
//! cluster mode (as the services do) and writes every call as the client saw it
//! (invoke, then ok / fail / unknown) as JSON lines, while one fault hits the shard
//! serving the queue; the checker reads such a history and reports every violation
//! of the safety rules, never one that an operation of unknown outcome could explain.
//!
//! The files: this one (flags, the run), [`record`] (the history's lines),
//! [`workload`] (the users and the promoter), [`claim`] (plain or durable claims),
//! [`faults`] (the cluster and the fault), [`check`] (the rules).

pub mod check;
pub mod claim;
pub mod faults;
pub mod record;
pub mod workload;

use claim::Claimer;
use clap::{Args, Subcommand};
use faults::{Fault, Setup};
use queue_client::{ConnectOptions, QueueClient};
use record::{Meta, Recorder};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use testkit::Backend;
use workload::Ctx;

/// `queue-cli history ...`
#[derive(Subcommand)]
pub enum HistoryCommand {
    /// Starts a 3 + 3 Valkey cluster (or uses --seeds), runs virtual users against it
    /// while one fault hits the queue's shard, and writes the history as JSON lines;
    /// then checks it (exit 1 on a violation, 2 when the run could not be made).
    Run(RunArgs),
    /// Checks a history: every violation of the five rules (exit 1 if any).
    Check(CheckArgs),
}

#[derive(Args, Clone, Debug)]
pub struct RunArgs {
    /// Where to write the history (JSON lines).
    #[arg(long)]
    pub out: PathBuf,
    /// The fault injected into the queue's shard, once, --fault-at-secs into the run.
    #[arg(long, value_enum, default_value = "none")]
    pub fault: Fault,
    /// `module` (loaded by every node) or `lua` (the Lua library).
    #[arg(long, default_value = "module", value_parser = ["module", "lua"])]
    pub backend: String,
    /// Durable claims: acknowledged only once a replica confirmed them.
    #[arg(long)]
    pub durable: bool,
    /// An existing cluster's nodes (comma-separated URLs) instead of starting one
    /// (then --fault must be none).
    #[arg(long, value_delimiter = ',')]
    pub seeds: Vec<String>,
    #[arg(long, default_value = "history")]
    pub queue: String,
    /// How many virtual users.
    #[arg(long, default_value_t = 40)]
    pub users: usize,
    /// The run's length, fault and healing included (it stops by itself).
    #[arg(long, default_value_t = 20.0)]
    pub duration_secs: f64,
    #[arg(long, default_value_t = 5.0)]
    pub fault_at_secs: f64,
    #[arg(long, default_value_t = 8)]
    pub soft_cap: u64,
    /// The hard cap of sessions (the over-cap rule checks it).
    #[arg(long, default_value_t = 10)]
    pub hard_cap: u64,
    #[arg(long, default_value_t = 8000)]
    pub ticket_ttl_ms: u64,
    #[arg(long, default_value_t = 3000)]
    pub session_lease_ms: u64,
    #[arg(long, default_value_t = 15000)]
    pub abandon_after_ms: u64,
    /// One call's limit before its outcome is unknown.
    #[arg(long, default_value_t = 1000)]
    pub response_timeout_ms: u64,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

#[derive(Args, Clone, Debug)]
pub struct CheckArgs {
    /// The history (JSON lines written by `history run`).
    pub file: PathBuf,
    /// Print the report as JSON (counts and every violation).
    #[arg(long)]
    pub json: bool,
}

/// Runs a history subcommand; the process exit code.
pub async fn main(cmd: HistoryCommand) -> u8 {
    match cmd {
        HistoryCommand::Check(a) => match check_file(&a.file) {
            Ok(report) => {
                if a.json {
                    println!("{}", serde_json::to_string(&report).expect("a report serializes"));
                } else {
                    print!("{}", text(&report));
                }
                u8::from(!report.violations.is_empty())
            }
            Err(e) => {
                eprintln!("history check: {e}");
                2
            }
        },
        HistoryCommand::Run(a) => match run(a.clone()).await {
            Ok(()) => match check_file(&a.out) {
                Ok(report) => {
                    print!("{}", text(&report));
                    u8::from(!report.violations.is_empty())
                }
                Err(e) => {
                    eprintln!("history check: {e}");
                    2
                }
            },
            Err(e) => {
                eprintln!("history run: {e}");
                2
            }
        },
    }
}

/// Reads and checks a history file.
pub fn check_file(path: &std::path::Path) -> Result<check::Report, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    check::check(&record::parse(&text)?)
}

/// The report as text: the counts, then every violation.
pub fn text(r: &check::Report) -> String {
    let m = &r.meta;
    let mut out = format!(
        "history: fault {} backend {} durable {}: {} ops, {} ok, {} fail, {} unknown, {} claims acknowledged\n",
        m.fault,
        m.backend,
        if m.durable { "on" } else { "off" },
        r.ops,
        r.ok,
        r.fail,
        r.unknown,
        r.claims_ok
    );
    for rule in check::Rule::ALL {
        out += &format!("  {:<17} {}\n", rule.name(), r.count(rule));
    }
    for v in &r.violations {
        out += &format!("  VIOLATION {}: {}\n", v.rule.name(), v.what);
    }
    out
}

fn validate(a: &RunArgs) -> Result<(), String> {
    if !a.seeds.is_empty() && a.fault != Fault::None {
        return Err("--seeds runs against a cluster this run does not own: --fault must be none".into());
    }
    if a.users == 0 || a.users > 10_000 {
        return Err("--users must be 1 to 10000".into());
    }
    if !(a.duration_secs > 0.0 && a.duration_secs <= 3600.0) {
        return Err("--duration-secs must be more than 0 and at most 3600".into());
    }
    if !(a.fault_at_secs >= 0.0 && a.fault_at_secs < a.duration_secs) {
        return Err("--fault-at-secs must fall within the run".into());
    }
    if a.response_timeout_ms == 0 {
        return Err("--response-timeout-ms must be positive".into());
    }
    Ok(())
}

/// One recorded run: the cluster, the users, the fault, the final read.
pub async fn run(a: RunArgs) -> Result<(), String> {
    validate(&a)?;
    let backend = if a.backend == "lua" { Backend::Lua } else { Backend::Module };
    let file = std::fs::File::create(&a.out).map_err(|e| format!("{}: {e}", a.out.display()))?;
    let (setup, seeds) = if a.seeds.is_empty() {
        let fault = a.fault;
        let setup =
            tokio::task::spawn_blocking(move || Setup::start(fault, backend)).await.map_err(|e| e.to_string())??;
        let urls = setup.cluster.urls();
        (Some(setup), urls)
    } else {
        (None, a.seeds.clone())
    };
    // Times count from here: the cluster is up.
    let rec = Arc::new(Recorder::new(Box::new(std::io::BufWriter::new(file))));
    let options = ConnectOptions {
        response_timeout: Duration::from_millis(a.response_timeout_ms),
        connection_timeout: Duration::from_millis(a.response_timeout_ms.min(1000)),
        reconnect_retries: 3,
        reconnect_max_delay: Duration::from_secs(1),
    };
    let client = QueueClient::connect_cluster_with(&seeds, options).await.map_err(|e| format!("connect: {e}"))?;
    let settings = [
        ("soft_cap", a.soft_cap as i64),
        ("hard_cap", a.hard_cap as i64),
        ("ticket_ttl", a.ticket_ttl_ms as i64),
        ("session_lease", a.session_lease_ms as i64),
        ("abandon_after", a.abandon_after_ms as i64),
    ];
    client.config_set(&a.queue, &settings).await.map_err(|e| format!("QUEUE.CONFIG: {e}"))?;
    let claimer = Claimer::new(client.clone(), a.durable)?;
    rec.meta(Meta {
        queue: a.queue.clone(),
        backend: a.backend.clone(),
        fault: a.fault.name().to_string(),
        durable: a.durable,
        hard_cap: a.hard_cap,
        soft_cap: a.soft_cap,
        ticket_ttl_ms: a.ticket_ttl_ms,
        session_lease_ms: a.session_lease_ms,
        abandon_after_ms: a.abandon_after_ms,
        users: a.users,
        seed: a.seed,
    });
    let ctx = Arc::new(Ctx {
        client,
        claimer,
        rec: rec.clone(),
        queue: a.queue.clone(),
        stop: Default::default(),
        leave_share: 0.15,
        second_tab_share: 0.25,
    });
    let mut tasks = vec![tokio::spawn(workload::promoter(ctx.clone()))];
    for i in 0..a.users {
        tasks.push(tokio::spawn(workload::user(ctx.clone(), i, a.seed)));
    }
    // The fault, on a thread of its own (the cluster's calls block).
    let fault_task = setup.map(|mut setup| {
        let (rec, queue, fault, at) = (rec.clone(), a.queue.clone(), a.fault, a.fault_at_secs);
        tokio::task::spawn_blocking(move || {
            std::thread::sleep(Duration::from_secs_f64(at));
            let r = faults::inject(&mut setup, fault, &queue, &rec);
            (setup, r)
        })
    });
    tokio::time::sleep(Duration::from_secs_f64(a.duration_secs)).await;
    // The run ends once the fault healed, whatever its length.
    let kept = match fault_task {
        Some(t) => {
            let (setup, r) = t.await.map_err(|e| e.to_string())?;
            if let Err(e) = r {
                rec.note(format!("fault failed: {e}"));
                eprintln!("history run: the fault failed: {e}");
            }
            Some(setup)
        }
        None => None,
    };
    ctx.stop.store(true, Ordering::Relaxed);
    for t in tasks {
        let _ = tokio::time::timeout(Duration::from_secs(30), t).await;
    }
    rec.note("users stopped; final read");
    workload::final_read(&ctx, a.users).await;
    rec.flush();
    drop(kept);
    Ok(())
}
