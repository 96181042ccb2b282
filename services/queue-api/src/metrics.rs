//! Prometheus metrics with seed 000's queue-api names, in the text format.

use axum::extract::{MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::Response;
use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

const BUCKETS: [f64; 10] = [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0];

#[derive(Default)]
struct Histogram {
    counts: [u64; BUCKETS.len()],
    count: u64,
    sum: f64,
}

#[derive(Default)]
pub struct Metrics {
    pub entry_requests: AtomicU64,
    pub status_requests: AtomicU64,
    pub leave_requests: AtomicU64,
    pub promoted_users: AtomicU64,
    pub rate_limited: AtomicU64,
    pub sse_streams: AtomicI64,
    pub ranks_calls: AtomicU64,
    http: Mutex<BTreeMap<(String, String, u16), Histogram>>,
}

impl Metrics {
    pub fn inc(c: &AtomicU64) {
        c.fetch_add(1, Ordering::Relaxed);
    }

    fn observe(&self, method: &str, route: &str, status: u16, seconds: f64) {
        let mut map = self.http.lock().unwrap();
        let h = map.entry((method.to_string(), route.to_string(), status)).or_default();
        for (i, b) in BUCKETS.iter().enumerate() {
            if seconds <= *b {
                h.counts[i] += 1;
            }
        }
        h.count += 1;
        h.sum += seconds;
    }

    pub fn render(&self) -> String {
        let mut out = String::new();
        let counter = |out: &mut String, name: &str, help: &str, v: u64| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter\n{name} {v}");
        };
        counter(
            &mut out,
            "queue_entry_requests_total",
            "Queue entry requests.",
            self.entry_requests.load(Ordering::Relaxed),
        );
        counter(
            &mut out,
            "queue_status_requests_total",
            "Queue status requests.",
            self.status_requests.load(Ordering::Relaxed),
        );
        counter(
            &mut out,
            "queue_leave_requests_total",
            "Requests to leave the line (DELETE /api/queue/entry).",
            self.leave_requests.load(Ordering::Relaxed),
        );
        counter(
            &mut out,
            "queue_promoted_users_total",
            "Users seen promoted (by status polls and push streams).",
            self.promoted_users.load(Ordering::Relaxed),
        );
        counter(
            &mut out,
            "queue_api_rate_limited_total",
            "Requests refused by the per-address rate limit.",
            self.rate_limited.load(Ordering::Relaxed),
        );
        counter(
            &mut out,
            "queue_api_ranks_calls_total",
            "QUEUE.RANKS calls made for push streams.",
            self.ranks_calls.load(Ordering::Relaxed),
        );
        let _ = writeln!(
            out,
            "# HELP queue_api_sse_streams Open push streams.\n# TYPE queue_api_sse_streams gauge\nqueue_api_sse_streams {}",
            self.sse_streams.load(Ordering::Relaxed)
        );
        let _ = writeln!(out, "# HELP http_server_requests_seconds HTTP request duration.");
        let _ = writeln!(out, "# TYPE http_server_requests_seconds histogram");
        for ((method, route, status), h) in self.http.lock().unwrap().iter() {
            let labels = format!("method=\"{method}\",uri=\"{route}\",status=\"{status}\"");
            for (i, b) in BUCKETS.iter().enumerate() {
                let _ = writeln!(out, "http_server_requests_seconds_bucket{{{labels},le=\"{b}\"}} {}", h.counts[i]);
            }
            let _ = writeln!(out, "http_server_requests_seconds_bucket{{{labels},le=\"+Inf\"}} {}", h.count);
            let _ = writeln!(out, "http_server_requests_seconds_sum{{{labels}}} {}", h.sum);
            let _ = writeln!(out, "http_server_requests_seconds_count{{{labels}}} {}", h.count);
        }
        out
    }
}

/// Middleware timing every request by its route pattern (not its raw path, so
/// user ids never become label values).
pub async fn track(State(metrics): State<Arc<Metrics>>, req: Request, next: Next) -> Response {
    let route = req.extensions().get::<MatchedPath>().map_or("unmatched".to_string(), |p| p.as_str().to_string());
    let method = req.method().to_string();
    let start = Instant::now();
    let resp = next.run(req).await;
    metrics.observe(&method, &route, resp.status().as_u16(), start.elapsed().as_secs_f64());
    resp
}
