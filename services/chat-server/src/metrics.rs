//! Prometheus metrics with seed 000's chat-server names (`chatserver.current_users`
//! becomes `chatserver_current_users`), plus the HTTP request histogram
//! (`http_server_requests_seconds`, by the service kit).

use crate::error::HandshakeError;
use service_kit::metrics::{Counter, Gauge, Histogram, Registry};

/// Upper bounds of the received-frame size histogram, in bytes.
const SIZE_BUCKETS: [f64; 10] = [32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0, 16_384.0, 65_536.0];

const MESSAGE_SIZE: &str = "chatserver_message_size_bytes";

/// Handshake refusals by reason (the `error` code of the refusal).
const REFUSALS: [HandshakeError; 16] = [
    HandshakeError::NotWebSocket,
    HandshakeError::BadUpgrade,
    HandshakeError::BadQuery,
    HandshakeError::BadQueue,
    HandshakeError::MissingTicket,
    HandshakeError::BadHolder,
    HandshakeError::UnknownTicket,
    HandshakeError::ExpiredTicket,
    HandshakeError::AlreadyConnected,
    HandshakeError::Full,
    HandshakeError::Unavailable,
    HandshakeError::NotDurable,
    HandshakeError::ShuttingDown,
    HandshakeError::TooManySessions,
    HandshakeError::TooManyFromAddress,
    HandshakeError::TooManyTicketFailures,
];

pub struct Metrics {
    registry: Registry,
    /// Open sessions on this instance, set at each scrape from the rooms' count.
    current_users: Gauge,
    pub connections: Counter,
    pub disconnections: Counter,
    /// Data frames received from clients.
    pub messages_received: Counter,
    /// Frames sent to clients.
    pub messages_sent: Counter,
    /// Frames this instance published to its rooms.
    pub messages_broadcast: Counter,
    pub idle_disconnects: Counter,
    pub rate_limited: Counter,
    pub malformed: Counter,
    pub oversized: Counter,
    pub leases_lost: Counter,
    /// Frames a slow client missed (its room feed overflowed).
    pub lagged: Counter,
    auth_failures: Counter,
    /// Durable claims the replicas did not confirm in time.
    pub not_durable: Counter,
    refused: [Counter; REFUSALS.len()],
    message_size: Histogram,
}

impl Default for Metrics {
    fn default() -> Self {
        let r = Registry::new(&[(MESSAGE_SIZE, &SIZE_BUCKETS)]);
        Metrics {
            current_users: r.gauge("chatserver_current_users", "Open sessions on this instance."),
            connections: r.counter("chatserver_connections_total", "WebSocket sessions opened."),
            disconnections: r.counter("chatserver_disconnections_total", "WebSocket sessions closed."),
            messages_received: r.counter("chatserver_messages_received_total", "Data frames received from clients."),
            messages_sent: r.counter("chatserver_messages_sent_total", "Frames sent to clients."),
            messages_broadcast: r.counter(
                "chatserver_messages_broadcast_total",
                "Frames this instance broadcast to a room (chat, system, presence).",
            ),
            idle_disconnects: r.counter("chatserver_idle_disconnects_total", "Sessions closed for inactivity."),
            rate_limited: r.counter("chatserver_rate_limited_total", "Client frames dropped for exceeding the rate."),
            malformed: r.counter("chatserver_malformed_frames_total", "Client frames answered with ERROR."),
            oversized: r.counter("chatserver_oversized_frames_total", "Connections closed for a frame too large."),
            leases_lost: r.counter("chatserver_leases_lost_total", "Sessions closed because their lease was gone."),
            lagged: r.counter("chatserver_lagged_frames_total", "Frames slow clients missed."),
            not_durable: r.counter(
                "chatserver_claims_not_durable_total",
                "Durable claims the replicas did not confirm in time (503 not_durable with a holder; \
                 admitted anyway without one).",
            ),
            auth_failures: r.counter("chatserver_auth_failures_total", "Handshakes refused for the ticket (401, 409)."),
            refused: REFUSALS.map(|e| {
                r.counter_with(
                    "chatserver_handshakes_refused_total",
                    "Handshakes refused, by reason.",
                    &[("reason", e.code())],
                )
            }),
            message_size: r.histogram(MESSAGE_SIZE, "Size of the data frames received."),
            registry: r,
        }
    }
}

impl Metrics {
    /// Where the series live (rendered at /metrics).
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// A refused handshake.
    pub fn refused(&self, e: HandshakeError) {
        if let Some(i) = REFUSALS.iter().position(|r| *r == e) {
            self.refused[i].increment(1);
        }
        if e.is_auth_failure() {
            self.auth_failures.increment(1);
        }
    }

    pub fn observe_size(&self, bytes: usize) {
        self.message_size.record(bytes as f64);
    }

    /// The text exposition; `current_users` is the sessions open on this instance
    /// (counted by the rooms, so it cannot drift).
    pub fn render(&self, current_users: usize) -> String {
        self.current_users.set(current_users as f64);
        self.registry.render()
    }
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
        m.refused(HandshakeError::UnknownTicket);
        m.refused(HandshakeError::AlreadyConnected);
        m.refused(HandshakeError::Full);
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
