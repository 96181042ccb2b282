//! `poll-load`: status polls as fast as `--conns` keep-alive connections make them, for
//! `bench/poll-follow.sh`. Each connection polls the people of `--users-file` (one
//! userId a line) at random, each poll at one of the `--api` instances at random,
//! for `--secs` seconds. Prints one line of JSON: polls made, how many
//! were answered 200 and 404, other answers and failures, and polls a second.

use rand::{Rng, SeedableRng};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug, Clone)]
pub struct PollLoadArgs {
    /// A queue-api instance, like http://127.0.0.1:8080 (repeat for several).
    #[arg(long = "api", required = true)]
    pub apis: Vec<String>,
    /// The queue polled.
    #[arg(long, default_value = "default")]
    pub queue: String,
    /// A file of userIds, one a line (empty lines are skipped).
    #[arg(long)]
    pub users_file: std::path::PathBuf,
    /// Connections polling at once (1 to 4096).
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=4096))]
    pub conns: u64,
    /// How long to poll, in seconds (more than 0, at most a day).
    #[arg(long, default_value_t = 10.0)]
    pub secs: f64,
}

/// What the polls got.
#[derive(Default)]
struct Counts {
    polls: AtomicU64,
    ok: AtomicU64,
    not_found: AtomicU64,
    other: AtomicU64,
    failed: AtomicU64,
}

/// Runs the polls; exit code 0, or 2 for a bad argument or no people to poll.
pub async fn main(args: PollLoadArgs) -> u8 {
    if !(args.secs > 0.0 && args.secs <= 86_400.0) {
        eprintln!("poll-load: --secs must be more than 0 and at most 86400");
        return 2;
    }
    let users: Vec<String> = match std::fs::read_to_string(&args.users_file) {
        Ok(text) => text.lines().map(str::trim).filter(|l| !l.is_empty()).map(str::to_string).collect(),
        Err(e) => {
            eprintln!("poll-load: cannot read {}: {e}", args.users_file.display());
            return 2;
        }
    };
    if users.is_empty() {
        eprintln!("poll-load: {} names nobody", args.users_file.display());
        return 2;
    }
    let bases: Vec<String> = args.apis.iter().map(|a| a.trim_end_matches('/').to_string()).collect();
    let client = match reqwest::Client::builder()
        .pool_max_idle_per_host(args.conns as usize)
        .timeout(Duration::from_secs(10))
        .build()
    {
        Ok(c) => c,
        Err(e) => {
            eprintln!("poll-load: {e}");
            return 2;
        }
    };
    let (users, bases) = (Arc::new(users), Arc::new(bases));
    let counts = Arc::new(Counts::default());
    let started = Instant::now();
    let stop = started + Duration::from_secs_f64(args.secs);
    let mut tasks = Vec::new();
    for k in 0..args.conns as usize {
        let (client, users, bases, counts, queue) =
            (client.clone(), users.clone(), bases.clone(), counts.clone(), args.queue.clone());
        tasks.push(tokio::spawn(async move {
            // Each connection picks the person and the instance at random, on its
            // own: connections that went through the same person in turn would
            // bunch up behind a poll held a moment (hub/mod.rs, `Hub::poll_held`)
            // and then hit the next one together, polling some people many times
            // more than others.
            let mut rng = rand::rngs::StdRng::seed_from_u64(k as u64);
            while Instant::now() < stop {
                let user = &users[rng.random_range(0..users.len())];
                let base = &bases[rng.random_range(0..bases.len())];
                let url = format!("{base}/api/queue/status?userId={user}&queue={queue}");
                counts.polls.fetch_add(1, Ordering::Relaxed);
                let got = match client.get(&url).send().await {
                    Ok(resp) => {
                        let code = resp.status().as_u16();
                        match resp.bytes().await {
                            Ok(_) => Some(code),
                            Err(_) => None,
                        }
                    }
                    Err(_) => None,
                };
                let counter = match got {
                    Some(200) => &counts.ok,
                    Some(404) => &counts.not_found,
                    Some(_) => &counts.other,
                    None => &counts.failed,
                };
                counter.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
    let secs = started.elapsed().as_secs_f64();
    let polls = counts.polls.load(Ordering::Relaxed);
    println!(
        "{}",
        serde_json::json!({
            "polls": polls,
            "ok": counts.ok.load(Ordering::Relaxed),
            "not_found": counts.not_found.load(Ordering::Relaxed),
            "other": counts.other.load(Ordering::Relaxed),
            "failed": counts.failed.load(Ordering::Relaxed),
            "polls_per_sec": (polls as f64 / secs).round(),
        })
    );
    0
}
