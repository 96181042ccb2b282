//! SSE fan-out measurement (run by bench/api-bench.sh, not a test).
//!
//! Enters STREAMS users into a closed queue, opens one push stream per user against a
//! running queue-api, waits for every first `position` event, then makes the head of
//! the line leave and announces it: every stream's rank changes, and the time until
//! all STREAMS streams have their new `position` is the fan-out time. Also reports
//! how many QUEUE.RANKS calls the api made for it (from its /metrics).
//!
//! usage: sse_fanout <api base url> <valkey url> [streams] [api pid, to report its memory per stream]

use futures_util::StreamExt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn rss_kib(pid: Option<u32>) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{}/status", pid?)).ok()?;
    status.lines().find_map(|l| l.strip_prefix("VmRSS:")).and_then(|v| v.trim().trim_end_matches(" kB").parse().ok())
}

async fn ranks_calls(api: &str) -> u64 {
    let m = reqwest::get(format!("{api}/metrics")).await.unwrap().text().await.unwrap();
    m.lines().find_map(|l| l.strip_prefix("queue_api_ranks_calls_total ")).and_then(|v| v.parse().ok()).unwrap_or(0)
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (api, valkey) = (args[1].clone(), args[2].clone());
    let n: usize = args.get(3).map_or(10_000, |s| s.parse().unwrap());
    let pid: Option<u32> = args.get(4).map(|s| s.parse().unwrap());
    let rss_before = rss_kib(pid);
    let qc = queue_client::QueueClient::connect(&valkey).await.unwrap();
    let queue = "fanout";
    qc.config_set(queue, &[("soft_cap", 0), ("abandon_after", 0)]).await.unwrap();
    let users: Vec<String> = (0..=n).map(|i| format!("fan-{i:06}")).collect();
    for chunk in users.chunks(500) {
        let futs = chunk.iter().map(|u| qc.enter(queue, u, "nick"));
        for r in futures_util::future::join_all(futs).await {
            r.unwrap();
        }
    }
    let http = reqwest::Client::builder().pool_max_idle_per_host(0).build().unwrap();
    let first = Arc::new(AtomicUsize::new(0));
    let second = Arc::new(AtomicUsize::new(0));
    let opened = Instant::now();
    // Stream for everyone but the head, who will leave.
    for u in users.iter().skip(1) {
        let url = format!("{api}/api/queue/stream?userId={u}&queue={queue}");
        let (http, first, second) = (http.clone(), first.clone(), second.clone());
        tokio::spawn(async move {
            let resp = loop {
                match http.get(&url).send().await {
                    Ok(r) if r.status() == 200 => break r,
                    _ => tokio::time::sleep(Duration::from_millis(50)).await,
                }
            };
            let mut body = resp.bytes_stream();
            let mut seen = 0;
            while let Some(Ok(chunk)) = body.next().await {
                for _ in String::from_utf8_lossy(&chunk).matches("event: position") {
                    seen += 1;
                    if seen == 1 {
                        first.fetch_add(1, Ordering::Relaxed);
                    } else if seen == 2 {
                        second.fetch_add(1, Ordering::Relaxed);
                        return;
                    }
                }
            }
        });
    }
    while first.load(Ordering::Relaxed) < n {
        assert!(opened.elapsed() < Duration::from_secs(300), "only {} streams opened", first.load(Ordering::Relaxed));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let open_secs = opened.elapsed().as_secs_f64();
    let per_stream = match (rss_before, rss_kib(pid)) {
        (Some(a), Some(b)) => format!("{:.1}", (b.saturating_sub(a)) as f64 / n as f64),
        _ => "n/a".into(),
    };
    tokio::time::sleep(Duration::from_millis(1500)).await; // let the tick-driven refreshes settle
    let calls_before = ranks_calls(&api).await;
    let start = Instant::now();
    qc.leave(queue, &users[0]).await.unwrap();
    let event = queue_client::events::QueueEvent { queue: queue.into(), promoted: 0, waiting: n as u64, at_ms: 0 };
    qc.publish_event(&event).await.unwrap();
    while second.load(Ordering::Relaxed) < n {
        assert!(start.elapsed() < Duration::from_secs(60), "only {} updates arrived", second.load(Ordering::Relaxed));
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let fanout = start.elapsed();
    let calls = ranks_calls(&api).await - calls_before;
    println!(
        "streams={n} open_all_s={open_secs:.2} fanout_ms={:.1} ranks_calls_during_fanout={calls} api_kib_per_stream={per_stream}",
        fanout.as_secs_f64() * 1e3
    );
}
