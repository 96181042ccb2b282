//! SSE fan-out measurement (run by bench/api-bench.sh, not a test).
//!
//! Enters STREAMS users into a closed queue, opens one push stream per user against a
//! running queue-api over plain TCP (a hand-written GET, a small read buffer per
//! stream, so the load side stays light), spread over several loopback source
//! addresses so that ephemeral ports do not run out, waits for every first `position`
//! event, then makes the head of the line leave and announces it: every stream's rank
//! changes, and the time until all STREAMS streams have their new `position` is the
//! fan-out time. Also reports the api's QUEUE.WATCH calls for it (from its /metrics;
//! 0 when the change log alone carried it), the api's memory per stream (RSS after
//! opening minus before, over STREAMS) and this tool's own RSS.
//!
//! usage: sse_fanout <api host:port> <valkey url> [streams] [api pid]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpSocket;
use tokio::sync::Semaphore;

fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status.lines().find_map(|l| l.strip_prefix("VmRSS:")).and_then(|v| v.trim().trim_end_matches(" kB").parse().ok())
}

async fn watch_calls(api: &str) -> u64 {
    let m = reqwest::get(format!("http://{api}/metrics")).await.unwrap().text().await.unwrap();
    m.lines().find_map(|l| l.strip_prefix("queue_api_watch_calls_total ")).and_then(|v| v.parse().ok()).unwrap_or(0)
}

/// Source addresses the streams are spread over (127.0.0.1 ..).
const SOURCES: usize = 8;
const NEEDLE: &[u8] = b"event: position";

/// One stream: counts `position` events, bumping `first` at the first and `second` at
/// the second, then closes.
async fn one_stream(
    api: std::net::SocketAddr,
    i: usize,
    user: String,
    first: Arc<AtomicUsize>,
    second: Arc<AtomicUsize>,
    opening: Arc<Semaphore>,
) {
    let permit = opening.acquire_owned().await.unwrap();
    let mut tcp = loop {
        let sock = TcpSocket::new_v4().unwrap();
        sock.bind(format!("127.0.0.{}:0", 1 + i % SOURCES).parse().unwrap()).unwrap();
        match sock.connect(api).await {
            Ok(s) => break s,
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    };
    let req = format!(
        "GET /api/queue/stream?userId={user}&queue=fanout HTTP/1.1\r\nHost: bench\r\nAccept: text/event-stream\r\n\r\n"
    );
    tcp.write_all(req.as_bytes()).await.unwrap();
    let mut buf = vec![0u8; 1024];
    let mut carry = 0usize;
    let mut seen = 0;
    let mut permit = Some(permit);
    loop {
        let n = match tcp.read(&mut buf[carry..]).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        let end = carry + n;
        let mut at = 0;
        while let Some(p) = buf[at..end].windows(NEEDLE.len()).position(|w| w == NEEDLE) {
            at += p + NEEDLE.len();
            seen += 1;
            if seen == 1 {
                permit.take();
                first.fetch_add(1, Ordering::Relaxed);
            } else if seen == 2 {
                // Stays open (the instance stays at its limit for the refusals below).
                second.fetch_add(1, Ordering::Relaxed);
            }
        }
        // Keep a needle's length of the tail, in case the needle was cut.
        let keep = (end - at).min(NEEDLE.len() - 1);
        buf.copy_within(end - keep..end, 0);
        carry = keep;
    }
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (api, valkey) = (args[1].clone(), args[2].clone());
    let n: usize = args.get(3).map_or(10_000, |s| s.parse().unwrap());
    let pid: Option<u32> = args.get(4).map(|s| s.parse().unwrap());
    let addr: std::net::SocketAddr = api.parse().unwrap();
    let qc = queue_client::QueueClient::connect(&valkey).await.unwrap();
    let queue = "fanout";
    qc.config_set(queue, &[("soft_cap", 0), ("abandon_after", 0)]).await.unwrap();
    let users: Vec<String> = (0..=n).map(|i| format!("fan-{i:06}")).collect();
    for chunk in users.chunks(1000) {
        let futs = chunk.iter().map(|u| qc.enter(queue, u, "nick"));
        for r in futures_util::future::join_all(futs).await {
            r.unwrap();
        }
    }
    // Settle, then the api's memory before any stream.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rss_before = pid.and_then(rss_kib);
    let first = Arc::new(AtomicUsize::new(0));
    let second = Arc::new(AtomicUsize::new(0));
    let opening = Arc::new(Semaphore::new(256));
    let opened = Instant::now();
    // Stream for everyone but the head, who will leave.
    for (i, u) in users.iter().enumerate().skip(1) {
        tokio::spawn(one_stream(addr, i, u.clone(), first.clone(), second.clone(), opening.clone()));
    }
    while first.load(Ordering::Relaxed) < n {
        assert!(opened.elapsed() < Duration::from_secs(600), "only {} streams opened", first.load(Ordering::Relaxed));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let open_secs = opened.elapsed().as_secs_f64();
    tokio::time::sleep(Duration::from_millis(1500)).await; // let the tick-driven refreshes settle
    let (api_rss, per_stream) = match (rss_before, pid.and_then(rss_kib)) {
        (Some(a), Some(b)) => (format!("{b}"), format!("{:.2}", (b.saturating_sub(a)) as f64 / n as f64)),
        _ => ("n/a".into(), "n/a".into()),
    };
    let calls_before = watch_calls(&api).await;
    let start = Instant::now();
    qc.leave(queue, &users[0]).await.unwrap();
    let event = queue_client::events::QueueEvent {
        queue: queue.into(),
        promoted: 0,
        waiting: n as u64,
        at_ms: 0,
        branding: false,
    };
    qc.publish_event(&event).await.unwrap();
    while second.load(Ordering::Relaxed) < n {
        assert!(start.elapsed() < Duration::from_secs(60), "only {} updates arrived", second.load(Ordering::Relaxed));
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let fanout = start.elapsed();
    let calls = watch_calls(&api).await - calls_before;
    let own = rss_kib(std::process::id()).unwrap_or(0);
    // The instance holds --max-streams (the bench sets it to STREAMS): more are refused.
    let mut refused = std::collections::BTreeMap::<String, usize>::new();
    for i in 0..100 {
        let sock = TcpSocket::new_v4().unwrap();
        sock.bind(format!("127.0.0.{}:0", 1 + i % SOURCES).parse().unwrap()).unwrap();
        let Ok(mut tcp) = sock.connect(addr).await else { continue };
        let req = format!(
            "GET /api/queue/stream?userId={}&queue=fanout HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n",
            users[1]
        );
        tcp.write_all(req.as_bytes()).await.unwrap();
        let mut head = vec![0u8; 512];
        let n = tokio::time::timeout(Duration::from_secs(5), tcp.read(&mut head))
            .await
            .ok()
            .and_then(|r| r.ok())
            .unwrap_or(0);
        let text = String::from_utf8_lossy(&head[..n]);
        let status = text.split(' ').nth(1).unwrap_or("none").to_string();
        let retry = text.lines().any(|l| l.to_ascii_lowercase().starts_with("retry-after:"));
        *refused.entry(format!("{status}{}", if retry { "+retry-after" } else { "" })).or_default() += 1;
    }
    let refusals: Vec<String> = refused.iter().map(|(k, v)| format!("{k}:{v}")).collect();
    println!(
        "streams={n} open_all_s={open_secs:.2} fanout_ms={:.1} watch_calls_during_fanout={calls} api_rss_kib={api_rss} api_kib_per_stream={per_stream} load_tool_rss_kib={own} over_limit={}",
        fanout.as_secs_f64() * 1e3,
        refusals.join(",")
    );
}
