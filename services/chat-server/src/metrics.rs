//! Prometheus metrics with seed 000's chat-server names (`chatserver.current_users`
//! becomes `chatserver_current_users`), in the text format.

use axum::extract::{MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::Response;
use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Upper bounds of the received-frame size histogram, in bytes.
const SIZE_BUCKETS: [u64; 10] = [32, 64, 128, 256, 512, 1024, 2048, 4096, 16_384, 65_536];
/// Upper bounds of the HTTP duration histogram, in seconds.
const HTTP_BUCKETS: [f64; 10] = [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0];

/// Handshake refusals by reason (the `error` code of the refusal).
const REFUSALS: [&str; 11] = [
    "upgrade_required",
    "bad_upgrade",
    "bad_query",
    "bad_queue",
    "missing_ticket",
    "invalid_ticket",
    "expired_ticket",
    "already_connected",
    "full",
    "unavailable",
    "shutting_down",
];

#[derive(Default)]
struct HttpHistogram {
    counts: [u64; HTTP_BUCKETS.len()],
    count: u64,
    sum: f64,
}

#[derive(Default)]
pub struct Metrics {
    pub connections: AtomicU64,
    pub disconnections: AtomicU64,
    /// Data frames received from clients.
    pub messages_received: AtomicU64,
    /// Frames sent to clients.
    pub messages_sent: AtomicU64,
    /// Frames this instance published to its rooms.
    pub messages_broadcast: AtomicU64,
    pub idle_disconnects: AtomicU64,
    pub rate_limited: AtomicU64,
    pub malformed: AtomicU64,
    pub oversized: AtomicU64,
    pub leases_lost: AtomicU64,
    /// Frames a slow client missed (its room feed overflowed).
    pub lagged: AtomicU64,
    refused: [AtomicU64; REFUSALS.len()],
    size_buckets: [AtomicU64; SIZE_BUCKETS.len()],
    size_count: AtomicU64,
    size_sum: AtomicU64,
    http: Mutex<BTreeMap<(String, String, u16), HttpHistogram>>,
}

impl Metrics {
    pub fn inc(c: &AtomicU64) {
        c.fetch_add(1, Ordering::Relaxed);
    }

    pub fn add(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Ordering::Relaxed);
    }

    /// A refused handshake, by its error code.
    pub fn refused(&self, code: &str) {
        if let Some(i) = REFUSALS.iter().position(|r| *r == code) {
            Metrics::inc(&self.refused[i]);
        }
    }

    pub fn observe_size(&self, bytes: usize) {
        let bytes = bytes as u64;
        if let Some(i) = SIZE_BUCKETS.iter().position(|b| bytes <= *b) {
            self.size_buckets[i].fetch_add(1, Ordering::Relaxed);
        }
        self.size_count.fetch_add(1, Ordering::Relaxed);
        self.size_sum.fetch_add(bytes, Ordering::Relaxed);
    }

    fn observe_http(&self, method: &str, route: &str, status: u16, seconds: f64) {
        let mut map = self.http.lock().unwrap();
        let h = map.entry((method.to_string(), route.to_string(), status)).or_default();
        for (i, b) in HTTP_BUCKETS.iter().enumerate() {
            if seconds <= *b {
                h.counts[i] += 1;
            }
        }
        h.count += 1;
        h.sum += seconds;
    }

    /// The text exposition; `current_users` is the sessions open on this instance
    /// (counted by the rooms, so it cannot drift).
    pub fn render(&self, current_users: usize) -> String {
        let mut out = String::new();
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let _ = writeln!(
            out,
            "# HELP chatserver_current_users Open sessions on this instance.\n\
             # TYPE chatserver_current_users gauge\nchatserver_current_users {}",
            current_users
        );
        let counters: [(&str, &str, &AtomicU64); 11] = [
            ("chatserver_connections_total", "WebSocket sessions opened.", &self.connections),
            ("chatserver_disconnections_total", "WebSocket sessions closed.", &self.disconnections),
            ("chatserver_messages_received_total", "Data frames received from clients.", &self.messages_received),
            ("chatserver_messages_sent_total", "Frames sent to clients.", &self.messages_sent),
            (
                "chatserver_messages_broadcast_total",
                "Frames this instance broadcast to a room (chat, system, presence).",
                &self.messages_broadcast,
            ),
            ("chatserver_idle_disconnects_total", "Sessions closed for inactivity.", &self.idle_disconnects),
            ("chatserver_rate_limited_total", "Client frames dropped for exceeding the rate.", &self.rate_limited),
            ("chatserver_malformed_frames_total", "Client frames answered with ERROR.", &self.malformed),
            ("chatserver_oversized_frames_total", "Connections closed for a frame too large.", &self.oversized),
            ("chatserver_leases_lost_total", "Sessions closed because their lease was gone.", &self.leases_lost),
            ("chatserver_lagged_frames_total", "Frames slow clients missed.", &self.lagged),
        ];
        for (name, help, c) in counters {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter\n{name} {}", load(c));
        }
        let auth: u64 = REFUSALS
            .iter()
            .zip(&self.refused)
            .filter(|(r, _)| {
                matches!(**r, "missing_ticket" | "invalid_ticket" | "expired_ticket" | "already_connected")
            })
            .map(|(_, c)| load(c))
            .sum();
        let _ = writeln!(
            out,
            "# HELP chatserver_auth_failures_total Handshakes refused for the ticket (401, 409).\n\
             # TYPE chatserver_auth_failures_total counter\nchatserver_auth_failures_total {auth}"
        );
        let _ = writeln!(
            out,
            "# HELP chatserver_handshakes_refused_total Handshakes refused, by reason.\n\
             # TYPE chatserver_handshakes_refused_total counter"
        );
        for (r, c) in REFUSALS.iter().zip(&self.refused) {
            let _ = writeln!(out, "chatserver_handshakes_refused_total{{reason=\"{r}\"}} {}", load(c));
        }
        let _ = writeln!(
            out,
            "# HELP chatserver_message_size_bytes Size of the data frames received.\n\
             # TYPE chatserver_message_size_bytes histogram"
        );
        let mut cumulative = 0;
        for (b, c) in SIZE_BUCKETS.iter().zip(&self.size_buckets) {
            cumulative += load(c);
            let _ = writeln!(out, "chatserver_message_size_bytes_bucket{{le=\"{b}\"}} {cumulative}");
        }
        let count = load(&self.size_count);
        let _ = writeln!(out, "chatserver_message_size_bytes_bucket{{le=\"+Inf\"}} {count}");
        let _ = writeln!(out, "chatserver_message_size_bytes_sum {}", load(&self.size_sum));
        let _ = writeln!(out, "chatserver_message_size_bytes_count {count}");
        let _ =
            writeln!(out, "# HELP http_server_requests_seconds HTTP request duration (handshakes until the upgrade).");
        let _ = writeln!(out, "# TYPE http_server_requests_seconds histogram");
        for ((method, route, status), h) in self.http.lock().unwrap().iter() {
            let labels = format!("method=\"{method}\",uri=\"{route}\",status=\"{status}\"");
            for (i, b) in HTTP_BUCKETS.iter().enumerate() {
                let _ = writeln!(out, "http_server_requests_seconds_bucket{{{labels},le=\"{b}\"}} {}", h.counts[i]);
            }
            let _ = writeln!(out, "http_server_requests_seconds_bucket{{{labels},le=\"+Inf\"}} {}", h.count);
            let _ = writeln!(out, "http_server_requests_seconds_sum{{{labels}}} {}", h.sum);
            let _ = writeln!(out, "http_server_requests_seconds_count{{{labels}}} {}", h.count);
        }
        out
    }
}

/// Middleware timing every request by its route pattern (never its raw path or
/// query, so ticket ids never become label values).
pub async fn track(State(metrics): State<Arc<Metrics>>, req: Request, next: Next) -> Response {
    let route = req.extensions().get::<MatchedPath>().map_or("unmatched".to_string(), |p| p.as_str().to_string());
    let method = req.method().to_string();
    let start = Instant::now();
    let resp = next.run(req).await;
    metrics.observe_http(&method, &route, resp.status().as_u16(), start.elapsed().as_secs_f64());
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_seed_names_and_a_cumulative_histogram() {
        let m = Metrics::default();
        m.observe_size(10);
        m.observe_size(100);
        m.observe_size(100_000);
        m.refused("invalid_ticket");
        m.refused("already_connected");
        m.refused("full");
        let text = m.render(0);
        for name in [
            "chatserver_current_users 0",
            "chatserver_connections_total 0",
            "chatserver_disconnections_total 0",
            "chatserver_messages_received_total 0",
            "chatserver_messages_sent_total 0",
            "chatserver_messages_broadcast_total 0",
            "chatserver_auth_failures_total 2",
            "chatserver_idle_disconnects_total 0",
            "chatserver_message_size_bytes_bucket{le=\"32\"} 1",
            "chatserver_message_size_bytes_bucket{le=\"128\"} 2",
            "chatserver_message_size_bytes_bucket{le=\"65536\"} 2",
            "chatserver_message_size_bytes_bucket{le=\"+Inf\"} 3",
            "chatserver_message_size_bytes_sum 100110",
            "chatserver_handshakes_refused_total{reason=\"full\"} 1",
        ] {
            assert!(text.contains(name), "{name} missing from:\n{text}");
        }
    }
}
