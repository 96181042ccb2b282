//! The client side of `bench/chat-bench.sh` (a report, not a test): opens as many
//! WebSocket sessions as asked on a running chat-server, then reports the server's
//! memory per session and how long one MESSAGE_SEND takes to reach every session.
//!
//! It ends by sending the chat-server SIGTERM and timing the graceful shutdown.
//!
//! ```text
//! chat_bench <ws://host:port> <redis://valkey/> <sessions> <chat-server pid>
//! ```
//!
//! Joins are told to the room once per presence tick (a system line and a presence
//! batch per tick), so opening N sessions delivers O(N) frames (N² when every join
//! was told on its own); the report counts them (as received here and as the
//! server's chatserver_messages_sent_total says) and waits for them to settle before
//! measuring. The chat-server runs with --max-sessions N: 100 more handshakes then
//! show the refusal (close 1013) with the server at its limit.

use futures_util::{SinkExt, StreamExt};
use queue_client::QueueClient;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::Message;

/// Loopback source addresses the sessions are spread over.
const SOURCES: usize = 16;

/// chatserver_messages_sent_total of the server at `base` (ws://host:port).
async fn frames_sent(base: &str) -> u64 {
    let url = format!("{}/metrics", base.replacen("ws://", "http://", 1));
    let text = match reqwest::get(url).await {
        Ok(r) => r.text().await.unwrap_or_default(),
        Err(_) => String::new(),
    };
    text.lines()
        .find_map(|l| l.strip_prefix("chatserver_messages_sent_total "))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

const QUEUE: &str = "default";
const MARKER: &str = "fan-out-marker";

fn usage() -> ! {
    eprintln!("usage: chat_bench <ws://host:port> <redis://valkey/> <sessions> <chat-server pid>");
    std::process::exit(2)
}

/// Resident memory of a process, in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// Whether a process is still running (a zombie is not).
fn running(pid: u32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let state = stat.rsplit_once(") ").and_then(|(_, rest)| rest.chars().next());
    state.is_some_and(|c| c != 'Z' && c != 'X')
}

/// The soft limit on open files of this process.
fn open_files_limit() -> usize {
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap_or_default();
    limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .and_then(|l| l.split_whitespace().nth(3)?.parse().ok())
        .unwrap_or(1024)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

/// Waits until no frame arrived for `quiet`; how long that took.
async fn settle(frames: &AtomicU64, quiet: Duration, limit: Duration) -> Duration {
    let start = Instant::now();
    let mut last = frames.load(Ordering::Relaxed);
    let mut still_since = Instant::now();
    while start.elapsed() < limit {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = frames.load(Ordering::Relaxed);
        if now != last {
            last = now;
            still_since = Instant::now();
        } else if still_since.elapsed() >= quiet {
            break;
        }
    }
    still_since.duration_since(start)
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 5 {
        usage();
    }
    let (base, valkey) = (args[1].clone(), args[2].clone());
    let asked: usize = args[3].parse().unwrap_or_else(|_| usage());
    let pid: u32 = args[4].parse().unwrap_or_else(|_| usage());
    let limit = open_files_limit();
    let n = asked.min(limit.saturating_sub(100)).max(1);

    let qc = QueueClient::connect(&valkey).await.expect("connect to valkey");
    let room = n as i64 + 100;
    qc.config_set(QUEUE, &[("soft_cap", room), ("abandon_after", 0), ("ticket_ttl", 3_600_000)])
        .await
        .expect("configure the queue");

    let idle_rss = rss_kib(pid);
    let tickets: Vec<String> = futures_util::stream::iter(0..n)
        .map(|i| {
            let qc = qc.clone();
            async move {
                let s = qc.enter(QUEUE, &format!("bench-{i}"), &format!("user{i}")).await.expect("enter");
                s.ticket_id.expect("let in at once (the soft cap has room)")
            }
        })
        .buffer_unordered(64)
        .collect()
        .await;

    let sent_before = frames_sent(&base).await;
    let frames = Arc::new(AtomicU64::new(0));
    let (marks_tx, mut marks) = mpsc::unbounded_channel::<Instant>();
    let opening = Instant::now();
    let server: std::net::SocketAddr = base.trim_start_matches("ws://").parse().expect("ws://host:port");
    let sinks: Vec<_> = futures_util::stream::iter(tickets.into_iter().enumerate())
        .map(|(i, t)| {
            let url = format!("{base}/gameserver?ticketId={t}");
            let (frames, marks_tx) = (frames.clone(), marks_tx.clone());
            async move {
                // From one of SOURCES loopback addresses: a run right after another bench
                // finds that one's closed ports still in TIME_WAIT, and one source address
                // has only some 28,000 ephemeral ports.
                let sock = tokio::net::TcpSocket::new_v4().unwrap();
                sock.bind(format!("127.0.0.{}:0", 1 + i % SOURCES).parse().unwrap()).unwrap();
                let tcp = sock.connect(server).await.expect("connect");
                let config = WebSocketConfig::default().read_buffer_size(4096).write_buffer_size(0);
                let (ws, _) = tokio_tungstenite::client_async_with_config(url.as_str(), tcp, Some(config))
                    .await
                    .expect("handshake");
                let (sink, mut stream) = ws.split();
                let reader = tokio::spawn(async move {
                    let mut close = None;
                    // Reading on after a close lets tungstenite send its answer.
                    while let Some(Ok(msg)) = stream.next().await {
                        match msg {
                            Message::Text(t) => {
                                frames.fetch_add(1, Ordering::Relaxed);
                                if t.contains(MARKER) {
                                    let _ = marks_tx.send(Instant::now());
                                }
                            }
                            Message::Close(f) => close = f.map(|f| u16::from(f.code)),
                            _ => {}
                        }
                    }
                    close
                });
                (sink, reader)
            }
        })
        .buffer_unordered(32)
        .collect()
        .await;
    let opened = opening.elapsed();
    let storm = settle(&frames, Duration::from_secs(1), Duration::from_secs(600)).await;
    let storm_frames = frames.load(Ordering::Relaxed);
    let server_frames = frames_sent(&base).await - sent_before;
    let full_rss = rss_kib(pid);

    // One message from the first session, to everyone.
    let (mut sinks, readers): (Vec<_>, Vec<_>) = sinks.into_iter().unzip();
    let message = serde_json::json!({ "type": "MESSAGE_SEND", "payload": { "message": MARKER } }).to_string();
    let sent = Instant::now();
    sinks[0].send(Message::Text(message.into())).await.expect("send");
    let mut arrivals = Vec::with_capacity(n);
    while arrivals.len() < n {
        match tokio::time::timeout(Duration::from_secs(60), marks.recv()).await {
            Ok(Some(at)) => arrivals.push(at.duration_since(sent)),
            _ => break,
        }
    }
    arrivals.sort();

    // At the limit (--max-sessions N): 100 more handshakes, each with a fresh ticket.
    let mut over = std::collections::BTreeMap::<String, usize>::new();
    for i in 0..100 {
        let Ok(s) = qc.enter(QUEUE, &format!("over-{i}"), "over").await else { continue };
        let Some(t) = s.ticket_id else {
            *over.entry("no ticket".into()).or_default() += 1;
            continue;
        };
        let url = format!("{base}/gameserver?ticketId={t}");
        let outcome = match tokio_tungstenite::connect_async(url.as_str()).await {
            Ok((mut ws, _)) => loop {
                match tokio::time::timeout(Duration::from_secs(5), ws.next()).await {
                    Ok(Some(Ok(Message::Close(Some(f))))) => break format!("close {}", u16::from(f.code)),
                    Ok(Some(Ok(Message::Text(_)))) => break "admitted".to_string(),
                    Ok(Some(Ok(_))) => continue,
                    _ => break "no answer".to_string(),
                }
            },
            Err(tokio_tungstenite::tungstenite::Error::Http(r)) => format!("http {}", r.status().as_u16()),
            Err(e) => format!("error {e}"),
        };
        *over.entry(outcome).or_default() += 1;
    }
    let at_limit_rss = rss_kib(pid);

    // Graceful shutdown with every session open: each socket gets 1001, each lease
    // is ended (not left to lapse).
    let active = qc.info(QUEUE).await.map(|i| i.active).unwrap_or(0);
    let stopping = Instant::now();
    let killed = std::process::Command::new("kill").args(["-TERM", &pid.to_string()]).status();
    assert!(killed.is_ok_and(|s| s.success()), "could not signal the chat-server");
    let mut going_away = 0;
    for r in readers {
        if let Ok(Ok(Some(1001))) = tokio::time::timeout(Duration::from_secs(60), r).await {
            going_away += 1;
        }
    }
    let closed_in = stopping.elapsed();
    while running(pid) && stopping.elapsed() < Duration::from_secs(60) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let exited_in = stopping.elapsed();
    let left = qc.info(QUEUE).await.map(|i| i.active).unwrap_or(u64::MAX);
    drop(sinks);

    println!("sessions: {n} (asked {asked}; open-files limit {limit})");
    println!(
        "opened in {:.1} s ({:.0} handshakes/s); joins settled {:.1} s later; frames while joining: \
         {storm_frames} received, {server_frames} sent by the server ({:.2} per session)",
        opened.as_secs_f64(),
        n as f64 / opened.as_secs_f64(),
        storm.as_secs_f64(),
        server_frames as f64 / n as f64
    );
    println!(
        "chat-server RSS: {:.1} MiB before, {:.1} MiB with {n} sessions: {:.1} KiB per session",
        idle_rss as f64 / 1024.0,
        full_rss as f64 / 1024.0,
        full_rss.saturating_sub(idle_rss) as f64 / n as f64
    );
    if arrivals.is_empty() {
        println!("fan-out: the message reached nobody within 60 s");
    } else {
        println!(
            "fan-out of one MESSAGE_SEND to {} of {n} sessions: first {}, p50 {}, p99 {}, all {}",
            arrivals.len(),
            ms(arrivals[0]),
            ms(percentile(&arrivals, 0.5)),
            ms(percentile(&arrivals, 0.99)),
            ms(*arrivals.last().unwrap())
        );
    }
    let over: Vec<String> = over.iter().map(|(k, v)| format!("{k}: {v}")).collect();
    println!(
        "at the limit (--max-sessions {n}), 100 more handshakes: {}; chat-server RSS then {:.1} MiB",
        over.join(", "),
        at_limit_rss as f64 / 1024.0
    );
    println!(
        "SIGTERM with {active} sessions: {going_away} closed with 1001 within {}, process gone after {}, \
         {left} sessions left active",
        ms(closed_in),
        ms(exited_in)
    );
}
