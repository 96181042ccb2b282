//! Prometheus metrics with seed 000's queue-api names, plus the HTTP request
//! histogram (`http_server_requests_seconds`, by the service kit).

use service_kit::metrics::{Counter, Gauge, Registry};

pub struct Metrics {
    registry: Registry,
    pub entry_requests: Counter,
    pub status_requests: Counter,
    pub leave_requests: Counter,
    pub promoted_users: Counter,
    pub rate_limited: Counter,
    pub ranks_calls: Counter,
    pub line_calls: Counter,
    pub sse_streams: Gauge,
    pub streams_refused: Counter,
}

impl Default for Metrics {
    fn default() -> Self {
        let r = Registry::default();
        Metrics {
            entry_requests: r.counter("queue_entry_requests_total", "Queue entry requests."),
            status_requests: r.counter("queue_status_requests_total", "Queue status requests."),
            leave_requests: r
                .counter("queue_leave_requests_total", "Requests to leave the line (DELETE /api/queue/entry)."),
            promoted_users: r
                .counter("queue_promoted_users_total", "Users seen promoted (by status polls and push streams)."),
            rate_limited: r.counter("queue_api_rate_limited_total", "Requests refused by the per-address rate limit."),
            ranks_calls: r.counter("queue_api_ranks_calls_total", "QUEUE.RANKS calls made for push streams."),
            line_calls: r.counter("queue_api_line_calls_total", "QUEUE.LINE pages read for push streams."),
            sse_streams: r.gauge("queue_api_sse_streams", "Open push streams."),
            streams_refused: r.counter(
                "queue_api_streams_refused_total",
                "Push streams refused by --max-streams or --max-streams-per-addr.",
            ),
            registry: r,
        }
    }
}

impl Metrics {
    /// Where the series live (rendered at /metrics).
    pub fn registry(&self) -> &Registry {
        &self.registry
    }
}
