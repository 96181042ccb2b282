//! `watch streams`: this process's share of the push streams of a line of people
//! named `p-0000000` .., spread evenly over the line and over the queue-api
//! instances, from several loopback source addresses; the events counted by name in a
//! one-line JSON status file rewritten four times a second.

use super::sse_tcp::Sse;
use super::StreamsArgs;
use std::net::Ipv4Addr;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;

#[derive(Default)]
struct Counters {
    opened: AtomicU64,
    open: AtomicU64,
    ended: AtomicU64,
    refused: AtomicU64,
    errors: AtomicU64,
    failed: AtomicU64,
    events: AtomicU64,
    position: AtomicU64,
    promoted: AtomicU64,
    unknown: AtomicU64,
    other: AtomicU64,
}

impl Counters {
    fn json(&self) -> String {
        let f = |a: &AtomicU64| a.load(Relaxed);
        serde_json::json!({
            "opened": f(&self.opened), "open": f(&self.open), "ended": f(&self.ended),
            "refused": f(&self.refused), "errors": f(&self.errors), "failed": f(&self.failed),
            "events": f(&self.events), "position": f(&self.position), "promoted": f(&self.promoted),
            "unknown": f(&self.unknown), "other": f(&self.other),
        })
        .to_string()
    }
}

fn write_status(path: &str, text: &str) {
    let tmp = format!("{path}.tmp");
    if std::fs::write(&tmp, text).is_ok() {
        let _ = std::fs::rename(&tmp, path);
    }
}

async fn one_stream(
    api: SocketAddr,
    source: Ipv4Addr,
    queue: String,
    user: String,
    c: Arc<Counters>,
    gate: Arc<Semaphore>,
) {
    let mut permit = Some(gate.acquire_owned().await.expect("open"));
    let mut tries = 0;
    let mut s = loop {
        tries += 1;
        match Sse::open(api, source, &queue, &user).await {
            Ok(s) => break s,
            Err(e) => {
                if e.starts_with("status") { &c.refused } else { &c.errors }.fetch_add(1, Relaxed);
                if tries >= 10 {
                    c.failed.fetch_add(1, Relaxed);
                    return;
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    };
    let mut first = true;
    while let Some(ev) = s.next().await {
        if first {
            first = false;
            permit.take();
            c.opened.fetch_add(1, Relaxed);
            c.open.fetch_add(1, Relaxed);
        }
        c.events.fetch_add(1, Relaxed);
        match ev.name.as_str() {
            "position" => &c.position,
            "promoted" => &c.promoted,
            "unknown" => &c.unknown,
            _ => &c.other,
        }
        .fetch_add(1, Relaxed);
    }
    if !first {
        c.open.fetch_sub(1, Relaxed);
        c.ended.fetch_add(1, Relaxed);
    } else {
        c.failed.fetch_add(1, Relaxed);
    }
}

/// The user a stream watches: stream g of `total`, spread evenly over the line.
pub fn person(g: u64, total: u64, line: u64) -> String {
    format!("p-{:07}", g * line / total.max(1))
}

pub(super) async fn streams(a: StreamsArgs) -> Result<(), String> {
    let instances = a.api.len() as u64;
    let total = instances * a.per_instance;
    let c = Arc::new(Counters::default());
    let gate = Arc::new(Semaphore::new(a.opening.max(1)));
    let mut mine = 0u64;
    for g in (a.part..total).step_by(a.parts.max(1) as usize) {
        let api = a.api[(g % instances) as usize];
        let n = (g / a.parts.max(1)) % u64::from(a.sources.max(1));
        let source = Ipv4Addr::new(127, 0, 0, a.source_base.wrapping_add(n as u8));
        tokio::spawn(one_stream(api, source, a.queue.clone(), person(g, total, a.line), c.clone(), gate.clone()));
        mine += 1;
    }
    let started = Instant::now();
    let status = a.status.clone();
    loop {
        write_status(&status, &format!("{{\"streams\":{mine},{}", &c.json()[1..]));
        if started.elapsed() >= Duration::from_secs(a.max_secs) {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
