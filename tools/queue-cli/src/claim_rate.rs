//! `claim-rate`: how many claims a second one gate or one chat-server instance takes,
//! and how long each takes, for `bench/claim-rate.sh`. Tickets are minted in bulk
//! first, straight in Valkey (the queue paused, `QUEUE.ENTER` of every user, then
//! `QUEUE.PROMOTE` with room for all), then claimed `--conc` at a time through the
//! service: `GET /gate/claim?queue=&ticketId=` at the gate, the WebSocket handshake
//! `GET /gameserver?ticketId=&queue=&holder=` at chat-server (closed right after).
//! Only the claims are timed. Prints one line, `claim-rate: ...`, with the rate, the
//! latency percentiles and what each claim got.

use crate::stats::Percentiles;
use futures_util::{stream, SinkExt, StreamExt};
use queue_client::{QueueClient, Status};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Which service claims.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Service {
    /// The gate: `GET <url>/gate/claim?queue=&ticketId=`.
    Gate,
    /// chat-server: the WebSocket handshake `GET <url>/gameserver?ticketId=&queue=&holder=`.
    Chat,
}

#[derive(clap::Args, Debug, Clone)]
pub struct ClaimRateArgs {
    /// Which service claims the tickets.
    #[arg(long, value_enum)]
    pub service: Service,
    /// The service's address, like http://127.0.0.1:8090.
    #[arg(long)]
    pub url: String,
    /// Valkey, where the tickets are minted (the service's own primary).
    #[arg(long, default_value = "redis://127.0.0.1:6379/")]
    pub valkey_url: String,
    /// A queue used for this run only (its settings are changed: soft_cap, ticket_ttl,
    /// session_lease).
    #[arg(long)]
    pub queue: String,
    /// How many tickets to mint and claim (1 to 1,000,000).
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub claims: u64,
    /// Claims in flight at once (1 to 4096).
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u64).range(1..=4096))]
    pub conc: u64,
}

/// What one claim got.
enum Outcome {
    Admitted,
    /// 503 `not_durable`: the replicas did not confirm in time (the claim stands).
    NotDurable,
    /// Any other answer: status and a short body.
    Refused(u16, String),
    /// No answer.
    Failed(String),
}

/// The run's figures.
#[derive(Debug, Default)]
pub struct Report {
    pub claims: usize,
    pub admitted: usize,
    pub not_durable: usize,
    pub refused: usize,
    pub failed: usize,
    pub secs: f64,
    /// Every claim's latency, microseconds.
    pub latency_us: Percentiles,
    /// The first refusal or failure seen, for the message.
    pub first_problem: Option<String>,
}

impl Report {
    pub fn per_sec(&self) -> f64 {
        if self.secs > 0.0 {
            self.claims as f64 / self.secs
        } else {
            0.0
        }
    }
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "claim-rate: claims {} secs {:.3} per_sec {:.0} p50_us {:.0} p99_us {:.0} max_us {:.0} admitted {} not_durable {} refused {} failed {}",
            self.claims,
            self.secs,
            self.per_sec(),
            self.latency_us.p50,
            self.latency_us.p99,
            self.latency_us.max,
            self.admitted,
            self.not_durable,
            self.refused,
            self.failed
        )
    }
}

/// Mints and claims; exit code 0 when every claim was admitted or answered
/// `not_durable`, 1 when any was refused otherwise or got no answer, 2 when the run
/// could not start (bad arguments, Valkey unreachable, minting failed).
pub async fn main(args: ClaimRateArgs) -> u8 {
    if let Err(e) = check_url(&args.url) {
        eprintln!("error: {e}");
        return 2;
    }
    if queue_core::keys::check_queue(args.queue.as_bytes()).is_err() {
        eprintln!("error: {:?} is not a valid queue name", args.queue);
        return 2;
    }
    let tickets = match mint(&args).await {
        Ok(t) => t,
        Err(e) => {
            eprintln!("error: minting tickets: {e}");
            return 2;
        }
    };
    let report = claim_all(&args, tickets).await;
    println!("{report}");
    if let Some(p) = &report.first_problem {
        eprintln!("first refusal or failure: {p}");
    }
    u8::from(report.refused + report.failed > 0)
}

/// The service's address must be plain http:// (or ws:// for chat-server).
fn check_url(url: &str) -> Result<(), String> {
    let parsed = url::Url::parse(url).map_err(|e| format!("bad --url {url:?}: {e}"))?;
    match parsed.scheme() {
        "http" | "ws" => Ok(()),
        other => Err(format!("--url must be http:// (got {other}://)")),
    }
}

/// `claims` tickets in `queue`: the queue paused (soft_cap 0) while everyone enters,
/// then promoted with room for all, each user's ticket read back with QUEUE.RANKS.
async fn mint(args: &ClaimRateArgs) -> Result<Vec<String>, String> {
    let client = QueueClient::connect(&args.valkey_url).await.map_err(|e| e.to_string())?;
    let e = |e: queue_client::ClientError| e.to_string();
    // Tickets and sessions outlive the run: nothing expires under the bench's feet.
    client
        .config_set(&args.queue, &[("soft_cap", 0), ("ticket_ttl", 3_600_000), ("session_lease", 3_600_000)])
        .await
        .map_err(e)?;
    let users: Vec<String> = (0..args.claims).map(|i| format!("cr-{i}")).collect();
    let entered: Vec<Result<_, _>> = stream::iter(users.iter())
        .map(|u| {
            let client = client.clone();
            let queue = args.queue.clone();
            async move { client.enter(&queue, u, u).await }
        })
        .buffer_unordered(64)
        .collect()
        .await;
    for r in entered {
        r.map_err(e)?;
    }
    let cap = i64::try_from(args.claims).unwrap_or(i64::MAX).saturating_mul(2).min(10_000_000);
    client.config_set(&args.queue, &[("soft_cap", cap)]).await.map_err(e)?;
    for _ in 0..1000 {
        let step = client.promote(&args.queue, Some(100_000)).await.map_err(e)?;
        if step.waiting == 0 {
            break;
        }
    }
    let mut tickets = Vec::with_capacity(users.len());
    for chunk in users.chunks(1000) {
        for s in client.ranks(&args.queue, chunk).await.map_err(e)? {
            match (s.status, s.ticket_id) {
                (Status::Promoted, Some(t)) => tickets.push(t),
                (status, _) => return Err(format!("{} was not promoted ({status:?})", s.user_id)),
            }
        }
    }
    Ok(tickets)
}

/// Claims every ticket, `conc` at a time, timing each claim.
async fn claim_all(args: &ClaimRateArgs, tickets: Vec<String>) -> Report {
    let tickets = Arc::new(tickets);
    let next = Arc::new(AtomicUsize::new(0));
    let results = Arc::new(Mutex::new(Vec::with_capacity(tickets.len())));
    let http = crate::gate::http_client();
    let started = Instant::now();
    let workers: Vec<_> = (0..args.conc)
        .map(|w| {
            let (tickets, next, results, http) = (tickets.clone(), next.clone(), results.clone(), http.clone());
            let (service, url, queue) = (args.service, args.url.trim_end_matches('/').to_string(), args.queue.clone());
            tokio::spawn(async move {
                let mut mine = Vec::new();
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(ticket) = tickets.get(i) else { break };
                    let t0 = Instant::now();
                    let outcome = match service {
                        Service::Gate => claim_at_gate(&http, &url, &queue, ticket).await,
                        Service::Chat => claim_at_chat(&url, &queue, ticket, &format!("h{w}-{i}")).await,
                    };
                    mine.push((t0.elapsed(), outcome));
                }
                results.lock().expect("no worker panics holding the lock").extend(mine);
            })
        })
        .collect();
    for w in workers {
        let _ = w.await;
    }
    let secs = started.elapsed().as_secs_f64();
    let results = std::mem::take(&mut *results.lock().expect("the workers are done"));
    let mut report = Report { claims: results.len(), secs, ..Report::default() };
    let mut sample = Vec::with_capacity(results.len());
    for (took, outcome) in results {
        sample.push(took.as_secs_f64() * 1e6);
        let problem = match outcome {
            Outcome::Admitted => {
                report.admitted += 1;
                None
            }
            Outcome::NotDurable => {
                report.not_durable += 1;
                None
            }
            Outcome::Refused(code, body) => {
                report.refused += 1;
                Some(format!("{code} {body}"))
            }
            Outcome::Failed(e) => {
                report.failed += 1;
                Some(e)
            }
        };
        if report.first_problem.is_none() {
            report.first_problem = problem;
        }
    }
    report.latency_us = Percentiles::of(sample);
    report
}

/// `GET /gate/claim`: admitted when the gate sets the admission cookie (303 to the
/// return path, or 200 with JSON).
async fn claim_at_gate(http: &reqwest::Client, gate: &str, queue: &str, ticket: &str) -> Outcome {
    let resp = http
        .get(format!("{gate}/gate/claim"))
        .query(&[("queue", queue), ("ticketId", ticket)])
        .header("accept", "application/json")
        .timeout(Duration::from_secs(10))
        .send()
        .await;
    let resp = match resp {
        Ok(r) => r,
        Err(e) => return Outcome::Failed(e.to_string()),
    };
    let code = resp.status().as_u16();
    let admitted = matches!(code, 200 | 303) && resp.headers().contains_key("set-cookie");
    let body = resp.text().await.unwrap_or_default();
    if admitted {
        Outcome::Admitted
    } else if code == 503 && body.contains("not_durable") {
        Outcome::NotDurable
    } else {
        Outcome::Refused(code, body.chars().take(200).collect())
    }
}

/// The handshake with `holder`, then the socket closed at once.
async fn claim_at_chat(chat: &str, queue: &str, ticket: &str, holder: &str) -> Outcome {
    let mut url = match crate::chat::gameserver_url(chat, queue, ticket) {
        Ok(u) => u,
        Err(e) => return Outcome::Failed(e),
    };
    url.push_str("&holder=");
    url.push_str(holder);
    let connect = tokio::time::timeout(Duration::from_secs(10), tokio_tungstenite::connect_async(url)).await;
    match connect {
        Ok(Ok((mut ws, _))) => {
            let _ = ws.close(None).await;
            let _ = ws.flush().await;
            Outcome::Admitted
        }
        Ok(Err(tokio_tungstenite::tungstenite::Error::Http(resp))) => {
            let code = resp.status().as_u16();
            let body = resp.body().as_ref().map(|b| String::from_utf8_lossy(b).into_owned()).unwrap_or_default();
            if code == 503 && body.contains("not_durable") {
                Outcome::NotDurable
            } else {
                Outcome::Refused(code, body.chars().take(200).collect())
            }
        }
        Ok(Err(e)) => Outcome::Failed(e.to_string()),
        Err(_) => Outcome::Failed("no answer in 10 s".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_addresses() {
        assert!(check_url("http://127.0.0.1:8090").is_ok());
        assert!(check_url("ws://127.0.0.1:8081").is_ok());
        assert!(check_url("https://example.com").is_err());
        assert!(check_url("not a url").is_err());
    }

    #[test]
    fn the_line_the_script_reads() {
        let r = Report {
            claims: 4,
            admitted: 3,
            not_durable: 1,
            secs: 2.0,
            latency_us: Percentiles::of(vec![10.0, 20.0, 30.0, 40.0]),
            ..Report::default()
        };
        assert_eq!(
            r.to_string(),
            "claim-rate: claims 4 secs 2.000 per_sec 2 p50_us 20 p99_us 40 max_us 40 admitted 3 not_durable 1 refused 0 failed 0"
        );
    }
}
