use clap::{Args, Parser, Subcommand};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use queue_cli::{chaos, gate, join, swarm, verify};
use std::process::ExitCode;
use std::time::Duration;

/// queue-cli: walk through the waiting room as one person, or as a crowd.
#[derive(Parser)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Args, Clone)]
struct Target {
    /// queue-api's address.
    #[arg(long, env = "API_URL", default_value = "http://127.0.0.1:8080")]
    api: String,
    /// chat-server's address (the handshake goes to <chat>/gameserver).
    #[arg(long, env = "CHAT_URL", default_value = "http://127.0.0.1:8081")]
    chat: String,
    /// The queue to stand in.
    #[arg(long, default_value = "default")]
    queue: String,
}

#[derive(Subcommand)]
enum Command {
    /// Claims per second through one gate or one chat-server, for bench/claim-rate.sh:
    /// tickets minted in Valkey, then claimed through the service (exit 1 when a claim
    /// was refused or got no answer).
    ClaimRate(queue_cli::claim_rate::ClaimRateArgs),
    /// Status polls as fast as many keep-alive connections make them, for
    /// bench/poll-follow.sh (load, not a person).
    PollLoad(queue_cli::poll_load::PollLoadArgs),
    /// Push streams at scale and probes for bench/push-scale.sh (load, not a person).
    Watch(queue_cli::push_scale::WatchArgs),
    /// One person: enter, watch the position, then chat with the ticket (lines from stdin;
    /// /status asks how many are in the room, /quit or end of input leaves).
    Join {
        #[command(flatten)]
        target: Target,
        /// The name shown in the chat (1 to 32 bytes).
        #[arg(long)]
        nickname: String,
        /// Poll the status instead of the push stream.
        #[arg(long)]
        polling: bool,
        /// Seconds between polls.
        #[arg(long, default_value_t = 1.0)]
        poll_secs: f64,
        /// Give up after waiting this many seconds.
        #[arg(long, default_value_t = 3600.0)]
        max_wait_secs: f64,
    },
    /// Checks a queue's fair opening from its published proof: SHA-256(seed) equals
    /// the commitment, and every rank is the one the seed gives; with lanes, lane by
    /// lane (the counts add up, nobody twice, each lane's run in the seed's order) (exit
    /// 0; 1 on any mismatch; 2 before the opening or when queue-api cannot be reached).
    Verify {
        #[arg(long, env = "API_URL", default_value = "http://127.0.0.1:8080")]
        api: String,
        #[arg(long, default_value = "default")]
        queue: String,
        /// Also print where this userId was placed, and in which lane (fails if it is
        /// not in the opening).
        #[arg(long)]
        user_id: Option<String>,
    },
    /// The chaos run: starts its own stack (valkey-server with the module or the Lua library and AOF, two
    /// queue-managers, queue-api, chat-server) on free loopback ports, runs a swarm
    /// through it and kills -9 / restarts / SIGSTOPs the services on a seeded schedule;
    /// prints what users saw and how long each recovery took, the audits and the
    /// held-slots check. Exit 0 pass, 1 an audit failed, 2 users unfinished or the
    /// stack did not come back.
    Chaos {
        /// How many virtual users.
        #[arg(long, default_value_t = 2000)]
        users: usize,
        /// Arrivals per second (faults fall within the arrivals).
        #[arg(long, default_value_t = 20.0)]
        rate: f64,
        /// The queue's soft cap (small, so that a line forms).
        #[arg(long, default_value_t = 40)]
        soft_cap: u64,
        /// Mean seconds an admitted user stays in the chat.
        #[arg(long, default_value_t = 2.0)]
        stay_secs: f64,
        /// kill -9 and restarts of each of queue-api, chat-server and the leading manager.
        #[arg(long, default_value_t = 3)]
        kills: u32,
        /// kill -9 and AOF restarts of valkey-server (appendfsync everysec, always, ...).
        #[arg(long, default_value_t = 3)]
        valkey_restarts: u32,
        /// SIGSTOPs of the leading queue-manager, each for twice its lease plus a second.
        #[arg(long, default_value_t = 1)]
        stops: u32,
        /// The queue's ticket_ttl, ms.
        #[arg(long, default_value_t = 8000)]
        ticket_ttl_ms: u64,
        /// The queue's session_lease, ms (chat-server heartbeats every second).
        #[arg(long, default_value_t = 5000)]
        session_lease_ms: u64,
        /// The queue's abandon_after, ms.
        #[arg(long, default_value_t = 30000)]
        abandon_after_ms: u64,
        /// The managers' leader lease, ms.
        #[arg(long, default_value_t = 2000)]
        lease_ms: u64,
        /// The first fault comes this many seconds after the start.
        #[arg(long, default_value_t = 5.0)]
        first_fault_secs: f64,
        /// Seed for the schedule and the crowd.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Stop the swarm after this many seconds whatever the state.
        #[arg(long, default_value_t = 600.0)]
        timeout_secs: f64,
        /// Where queue-api, queue-manager and chat-server are (default: beside this binary).
        #[arg(long)]
        bin_dir: Option<std::path::PathBuf>,
        /// The module (default: libvalkey_queue.so in --bin-dir).
        #[arg(long)]
        module: Option<std::path::PathBuf>,
        /// The backend: `module` (loaded by valkey-server) or `lua` (the Lua library,
        /// which the services install with FUNCTION LOAD; kept in the AOF).
        #[arg(long, default_value = "module", value_parser = ["module", "lua"])]
        backend: String,
        /// The valkey-server to run.
        #[arg(long, default_value = "valkey-server")]
        valkey_server: String,
    },
    /// Jepsen's method: record a history of virtual users against a Valkey cluster under
    /// a fault (`history run`), check a history against the safety rules (`history check`).
    #[command(subcommand)]
    History(queue_cli::history::HistoryCommand),
    /// Virtual users arriving at a rate, each on the same journey; prints a report and exits
    /// 1 if the audit found FIFO inversions, over-capacity or double claims (with lanes,
    /// codes and identities also lane inversions, codes used beyond their uses or refused
    /// wrongly, accounts with two places), 2 if users did not finish (errors, drops, timeout).
    Swarm {
        #[command(flatten)]
        target: Target,
        /// How many virtual users.
        #[arg(long, default_value_t = 100)]
        users: usize,
        /// Arrivals per second.
        #[arg(long, default_value_t = 20.0)]
        rate: f64,
        /// Share of users who give up while waiting (close the page).
        #[arg(long, default_value_t = 0.1)]
        abandon: f64,
        /// Share of abandoners who click "Leave the line" (DELETE /api/queue/entry), giving
        /// the place back at once; the others just close the page and lapse.
        #[arg(long, default_value_t = 0.5)]
        leave_politely: f64,
        /// Abandoners give up at a random moment within this many seconds of entering.
        #[arg(long, default_value_t = 5.0)]
        abandon_within_secs: f64,
        /// Mean seconds an admitted user stays in the chat (uniform from half to 1.5 times).
        #[arg(long, default_value_t = 2.0)]
        stay_secs: f64,
        /// Chat messages each admitted user sends while inside.
        #[arg(long, default_value_t = 2)]
        messages: u32,
        /// Share of users who open two handshakes with their ticket at once.
        #[arg(long, default_value_t = 0.2)]
        race: f64,
        /// Share of users who try their used ticket again after leaving.
        #[arg(long, default_value_t = 1.0)]
        replay: f64,
        /// Share of users who poll the status instead of using the push stream.
        #[arg(long, default_value_t = 0.1)]
        polling: f64,
        /// Seconds between polls.
        #[arg(long, default_value_t = 1.0)]
        poll_secs: f64,
        /// The queue's soft cap for the over-capacity audit, for the whole run (without
        /// it, the cap in force is read from the back office throughout the run when
        /// --admin-token is given).
        #[arg(long)]
        soft_cap: Option<u64>,
        /// queue-api's admin token: reads the soft cap in force and the server's own
        /// counts from the back office every 250 ms.
        #[arg(long, env = "ADMIN_TOKEN")]
        admin_token: Option<String>,
        /// Stop after this many seconds whatever the state.
        #[arg(long, default_value_t = 300.0)]
        timeout_secs: f64,
        /// Nicknames are this prefix plus the user's number.
        #[arg(long, default_value = "v")]
        nickname_prefix: String,
        /// Do not send a distinct X-Forwarded-For per user (each user is one address to a
        /// queue-api trusting loopback as a proxy: --trusted-proxies 127.0.0.1).
        #[arg(long)]
        no_forwarded_for: bool,
        /// Seed for the dice (who abandons, races, polls; how long each stays).
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
        /// No progress bar.
        #[arg(long)]
        quiet: bool,
        #[command(flatten)]
        gate: Box<gate::GateArgs>,
        #[command(flatten)]
        access: Box<AccessArgs>,
    },
}

/// Lanes, access codes and identities for `queue-cli swarm`.
#[derive(clap::Args, Debug)]
struct AccessArgs {
    /// Give the queue these lanes, in admission order, before the run (comma-separated,
    /// e.g. presale,general; needs --admin-token). FIFO is then audited within each lane,
    /// and the lanes' order across them.
    #[arg(long, value_delimiter = ',')]
    lanes: Vec<String>,
    /// Upload this many access codes for the first lane before the run (needs --lanes).
    #[arg(long, default_value_t = 0)]
    codes: usize,
    /// Uses of each code (1 to 1,000,000).
    #[arg(long, default_value_t = 1)]
    code_uses: u64,
    /// Share of users who enter with a code (each code handed out exactly its uses; users
    /// past that get one beyond its uses).
    #[arg(long, default_value_t = 0.0)]
    presale: f64,
    /// Share of users who enter with a code handed out once more than its uses.
    #[arg(long, default_value_t = 0.0)]
    code_reuse: f64,
    /// Share of users who enter with a code never uploaded (needs --lanes).
    #[arg(long, default_value_t = 0.0)]
    code_unknown: f64,
    /// The app's login: a PKCS#8 private key (PEM or DER; P-256, Ed25519 or RSA), made
    /// (P-256, ES256) and written here when the file does not exist. Every user is then
    /// an account entering with a token it signs.
    #[arg(long)]
    identity_key: Option<std::path::PathBuf>,
    /// Write the key's public JWKS here (queue-api's --identity-jwks).
    #[arg(long)]
    identity_jwks_out: Option<std::path::PathBuf>,
    /// The tokens' issuer (queue-api's --identity-issuer).
    #[arg(long, default_value = "https://login.swarm.invalid")]
    identity_issuer: String,
    /// The tokens' audience (queue-api's --identity-audience).
    #[arg(long, default_value = "waiting-room")]
    identity_audience: String,
    /// Second tabs send the token in this cookie, as the page does (queue-api's
    /// --identity-cookie); without it, in the Authorization header.
    #[arg(long)]
    identity_cookie: Option<String>,
    /// Share of logged-in users who open a second tab, which must find the same place.
    #[arg(long, default_value_t = 0.2)]
    second_tab: f64,
    /// Only make (or read) the key and write the JWKS, then exit.
    #[arg(long, requires = "identity_key")]
    keys_only: bool,
}

impl AccessArgs {
    /// Checks the options and reads (or makes) the key: a clear message when they do not fit.
    fn into_access(self, admin_token: bool) -> Result<swarm::Access, String> {
        for (name, share) in [
            ("--presale", self.presale),
            ("--code-reuse", self.code_reuse),
            ("--code-unknown", self.code_unknown),
            ("--second-tab", self.second_tab),
        ] {
            if !(0.0..=1.0).contains(&share) {
                return Err(format!("{name} must be a share from 0 to 1"));
            }
        }
        if self.presale + self.code_reuse + self.code_unknown > 1.0 {
            return Err("--presale, --code-reuse and --code-unknown must add up to 1 at most".into());
        }
        if self.lanes.iter().any(|l| l.trim().is_empty()) {
            return Err("--lanes must name each lane (e.g. presale,general)".into());
        }
        if !self.lanes.is_empty() && !admin_token {
            return Err("--lanes needs --admin-token (the lanes and codes are set up through the back office)".into());
        }
        if self.codes > 0 && self.lanes.is_empty() {
            return Err("--codes needs --lanes (codes are for a lane)".into());
        }
        if (self.presale > 0.0 || self.code_reuse > 0.0) && self.codes == 0 {
            return Err("--presale and --code-reuse need --codes".into());
        }
        if self.code_unknown > 0.0 && self.lanes.is_empty() {
            return Err("--code-unknown needs --lanes".into());
        }
        if !(1..=1_000_000).contains(&self.code_uses) {
            return Err("--code-uses must be from 1 to 1000000".into());
        }
        let login = match &self.identity_key {
            Some(path) => {
                let login = swarm::Login::load_or_create(path, &self.identity_issuer, &self.identity_audience)?;
                if let Some(out) = &self.identity_jwks_out {
                    login.write_jwks(out)?;
                }
                Some(std::sync::Arc::new(login))
            }
            None if self.identity_jwks_out.is_some() => return Err("--identity-jwks-out needs --identity-key".into()),
            None => None,
        };
        Ok(swarm::Access {
            lanes: self.lanes.iter().map(|l| l.trim().to_string()).collect(),
            codes: self.codes,
            code_uses: self.code_uses,
            presale: self.presale,
            code_reuse: self.code_reuse,
            code_unknown: self.code_unknown,
            login,
            identity_cookie: self.identity_cookie,
            second_tab: self.second_tab,
        })
    }
}

fn secs(s: f64) -> Duration {
    Duration::try_from_secs_f64(s.max(0.0)).unwrap_or(Duration::MAX)
}

#[tokio::main]
async fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Join { target, nickname, polling, poll_secs, max_wait_secs } => {
            let cfg = join::JoinConfig {
                api: target.api,
                chat: target.chat,
                queue: target.queue,
                nickname,
                polling,
                poll_every: secs(poll_secs),
                max_wait: secs(max_wait_secs),
            };
            let input = tokio::io::BufReader::new(tokio::io::stdin());
            match join::run(cfg, input, &mut std::io::stdout()).await {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("error: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Chaos {
            users,
            rate,
            soft_cap,
            stay_secs,
            kills,
            valkey_restarts,
            stops,
            ticket_ttl_ms,
            session_lease_ms,
            abandon_after_ms,
            lease_ms,
            first_fault_secs,
            seed,
            timeout_secs,
            bin_dir,
            module,
            backend,
            valkey_server,
        } => {
            if rate <= 0.0 || !rate.is_finite() {
                eprintln!("error: --rate must be a positive number");
                return ExitCode::from(64);
            }
            let _ = rlimit::increase_nofile_limit(u64::MAX);
            let bin_dir = bin_dir
                .or_else(|| std::env::current_exe().ok()?.parent().map(|p| p.to_path_buf()))
                .unwrap_or_else(|| "target/release".into());
            let module = (backend == "module").then(|| module.unwrap_or_else(|| bin_dir.join("libvalkey_queue.so")));
            let cfg = chaos::ChaosConfig {
                users,
                rate,
                soft_cap,
                stay: secs(stay_secs),
                kills,
                valkey_restarts,
                stops,
                ticket_ttl: Duration::from_millis(ticket_ttl_ms),
                session_lease: Duration::from_millis(session_lease_ms),
                abandon_after: Duration::from_millis(abandon_after_ms),
                manager_lease: Duration::from_millis(lease_ms),
                first_fault_after: secs(first_fault_secs),
                seed,
                timeout: secs(timeout_secs),
                bin_dir,
                module,
                valkey_server,
            };
            let run = chaos::run(cfg);
            tokio::select! {
                r = run => match r {
                    Ok(report) => {
                        print!("{report}");
                        ExitCode::from(report.exit_code())
                    }
                    Err(e) => {
                        eprintln!("error: {e}");
                        ExitCode::from(2)
                    }
                },
                _ = tokio::signal::ctrl_c() => {
                    eprintln!("interrupted: stopping the stack");
                    ExitCode::from(130)
                }
            }
        }
        Command::Watch(args) => queue_cli::push_scale::run(args).await,
        Command::ClaimRate(args) => ExitCode::from(queue_cli::claim_rate::main(args).await),
        Command::PollLoad(args) => ExitCode::from(queue_cli::poll_load::main(args).await),
        Command::History(cmd) => ExitCode::from(queue_cli::history::main(cmd).await),
        Command::Verify { api, queue, user_id } => ExitCode::from(verify::run(&api, &queue, user_id.as_deref()).await),
        Command::Swarm {
            target,
            users,
            rate,
            abandon,
            leave_politely,
            abandon_within_secs,
            stay_secs,
            messages,
            race,
            replay,
            polling,
            poll_secs,
            soft_cap,
            admin_token,
            timeout_secs,
            nickname_prefix,
            no_forwarded_for,
            seed,
            json,
            quiet,
            gate,
            access,
        } => {
            let keys_only = access.keys_only;
            let access = match (*access).into_access(admin_token.is_some()) {
                Ok(a) => a,
                Err(e) => {
                    eprintln!("error: {e}");
                    return ExitCode::from(64);
                }
            };
            if keys_only {
                if let Some(login) = &access.login {
                    eprintln!("key ready: {login:?}");
                }
                return ExitCode::SUCCESS;
            }
            if rate <= 0.0 || !rate.is_finite() {
                eprintln!("error: --rate must be a positive number");
                return ExitCode::from(64);
            }
            let _ = rlimit::increase_nofile_limit(u64::MAX);
            let gate = match (*gate).into_gate() {
                Ok(g) => g,
                Err(e) => {
                    eprintln!("error: {e}");
                    return ExitCode::from(64);
                }
            };
            let cfg = swarm::SwarmConfig {
                api: target.api,
                chat: target.chat,
                queue: target.queue,
                users,
                rate,
                abandon,
                leave_politely,
                abandon_within: secs(abandon_within_secs),
                stay: secs(stay_secs),
                messages,
                race,
                replay,
                polling,
                poll_every: secs(poll_secs),
                soft_cap,
                admin_token,
                timeout: secs(timeout_secs),
                nickname_prefix,
                forwarded_for: !no_forwarded_for,
                seed,
                outages: None,
                access,
            };
            let bar = ProgressBar::with_draw_target(Some(users as u64), ProgressDrawTarget::stderr());
            if quiet {
                bar.set_draw_target(ProgressDrawTarget::hidden());
            }
            bar.set_style(
                ProgressStyle::with_template("{elapsed:>4} [{bar:30}] {pos}/{len} done  {msg}")
                    .expect("a valid template")
                    .progress_chars("=> "),
            );
            let b = bar.clone();
            let report = swarm::run_through(cfg, gate, move |p| {
                b.set_position(p.finished as u64);
                b.set_message(format!(
                    "arrived {} · waiting {} · holding {} · in chat {} · admitted {} · abandoned {}{}",
                    p.started,
                    p.waiting,
                    p.holding,
                    p.in_chat,
                    p.admitted,
                    p.abandoned,
                    if p.violations > 0 { format!(" · VIOLATIONS {}", p.violations) } else { String::new() }
                ));
            })
            .await;
            bar.finish_and_clear();
            if json {
                println!("{}", serde_json::to_string_pretty(&report).expect("the report serializes"));
            } else {
                print!("{report}");
            }
            if !report.clean() {
                ExitCode::from(1)
            } else if !report.complete() {
                ExitCode::from(2)
            } else {
                ExitCode::SUCCESS
            }
        }
    }
}
