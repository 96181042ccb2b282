//! Prometheus metrics with seed 000's queue-api names, plus the HTTP request
//! histogram (`http_server_requests_seconds`, by the service kit).

use queue_client::{Standing, Status};
use service_kit::metrics::{Counter, Gauge, Registry};
use std::collections::HashSet;
use std::sync::Mutex;

/// Tickets remembered as counted at most; past that the memory starts afresh (a user
/// polling across that moment may be counted twice).
const COUNTED_TICKETS: usize = 100_000;

pub struct Metrics {
    registry: Registry,
    pub entry_requests: Counter,
    pub status_requests: Counter,
    pub status_from_follower: Counter,
    pub status_from_valkey: Counter,
    pub status_held: Counter,
    pub status_held_read: Counter,
    pub pollers_refused: Counter,
    pub leave_requests: Counter,
    promoted_users: Counter,
    counted_tickets: Mutex<HashSet<String>>,
    pub rate_limited: Counter,
    pub watch_calls: Counter,
    pub log_reads: Counter,
    pub log_resets: Counter,
    pub sse_streams: Gauge,
    pub pow_challenges: Counter,
    pub streams_refused: Counter,
    pub line_full: Counter,
    pub code_refused: Counter,
}

impl Default for Metrics {
    fn default() -> Self {
        let r = Registry::default();
        Metrics {
            entry_requests: r.counter("queue_entry_requests_total", "Queue entry requests."),
            status_requests: r.counter("queue_status_requests_total", "Queue status requests."),
            pollers_refused: r.counter(
                "queue_api_pollers_refused_total",
                "Polls whose person was not registered with the push follower: --max-pollers reached.",
            ),
            status_from_follower: r.counter(
                "queue_api_status_from_follower_total",
                "Status polls answered from the push follower (no Valkey call).",
            ),
            status_from_valkey: r.counter(
                "queue_api_status_from_valkey_total",
                "Status polls read from Valkey (batched QUEUE.RANKS): a first poll, the follower not current, or --status-from-follower false.",
            ),
            status_held: r.counter(
                "queue_api_status_held_total",
                "Status polls held for the push follower's registration of their person (--poll-hold).",
            ),
            status_held_read: r.counter(
                "queue_api_status_held_read_total",
                "Status polls held, then read from Valkey: the registration did not answer within --poll-hold, or found them not waiting.",
            ),
            leave_requests: r
                .counter("queue_leave_requests_total", "Requests to leave the line (DELETE /api/queue/entry)."),
            promoted_users: r.counter(
                "queue_promoted_users_total",
                "Users seen promoted (by entry, status polls or push streams), each ticket once.",
            ),
            counted_tickets: Mutex::new(HashSet::new()),
            rate_limited: r.counter("queue_api_rate_limited_total", "Requests refused by the per-address rate limit."),
            watch_calls: r.counter(
                "queue_api_watch_calls_total",
                "QUEUE.WATCH calls made for push streams (registrations and this instance's lease).",
            ),
            log_reads: r.counter(
                "queue_api_log_reads_total",
                "Reads of the queues' change logs for what their changes channels missed.",
            ),
            log_resets: r.counter(
                "queue_api_log_resets_total",
                "Times every push stream of a queue was checked again (a gap in its change log, a reset).",
            ),
            sse_streams: r.gauge("queue_api_sse_streams", "Open push streams."),
            pow_challenges: r.counter("queue_api_pow_challenges_total", "Proof-of-work challenges handed out."),
            streams_refused: r.counter(
                "queue_api_streams_refused_total",
                "Push streams refused by --max-streams or --max-streams-per-addr.",
            ),
            line_full: r.counter(
                "queue_api_line_full_total",
                "Entries refused because the queue held its max_waiting people (503).",
            ),
            code_refused: r.counter(
                "queue_api_code_refused_total",
                "Entries refused for an access code unknown or used up (403 code_invalid).",
            ),
            registry: r,
        }
    }
}

impl Metrics {
    /// Counts a user seen promoted, once per ticket however often it is seen.
    pub fn promoted(&self, s: &Standing) {
        let Some(ticket) = s.ticket_id.as_ref().filter(|_| s.status == Status::Promoted) else {
            return;
        };
        let mut seen = self.counted_tickets.lock().unwrap();
        if seen.len() >= COUNTED_TICKETS {
            seen.clear();
        }
        if seen.insert(ticket.clone()) {
            self.promoted_users.increment(1);
        }
    }

    /// Where the series live (rendered at /metrics).
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Back-office changes, by action (settings, brand, pause, resume).
    pub fn admin_change(&self, action: &'static str) -> Counter {
        self.registry.counter_with(
            "queue_api_admin_changes_total",
            "Changes made through the back office, by action (each also an audit line in the logs).",
            &[("action", action)],
        )
    }

    /// Entries refused for their proof of work, by reason (missing, expired,
    /// too_easy, malformed, forged, unsolved, used).
    pub fn pow_refused(&self, reason: &'static str) -> Counter {
        self.registry.counter_with(
            "queue_api_pow_refused_total",
            "Entries refused for their proof of work, by reason.",
            &[("reason", reason)],
        )
    }

    /// Fetches of the identity keys from `--identity-jwks-url`, by result (`ok`,
    /// `failed`: the last good keys stayed).
    pub fn jwks_fetches(&self) -> crate::jwks::FetchCounters {
        let counter = |result| {
            self.registry.counter_with(
                "queue_api_identity_jwks_fetches_total",
                "Fetches of the identity keys from --identity-jwks-url, by result (failed: the last good keys stay).",
                &[("result", result)],
            )
        };
        crate::jwks::FetchCounters { ok: counter("ok"), failed: counter("failed") }
    }

    /// Identity tokens refused, by reason (`expired`, `bad_signature`, ...).
    pub fn identity_refused(&self, reason: &'static str) -> Counter {
        self.registry.counter_with(
            "queue_api_identity_refused_total",
            "Identity tokens refused, by reason.",
            &[("reason", reason)],
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn standing(status: Status, ticket: Option<&str>) -> Standing {
        Standing {
            status,
            rank: 0,
            user_id: "u".into(),
            nickname: None,
            ticket_id: ticket.map(Into::into),
            estimated_wait_seconds: None,
            opens_at: None,
            lane: None,
        }
    }

    #[test]
    fn promoted_users_count_each_ticket_once() {
        let m = Metrics::default();
        for _ in 0..3 {
            m.promoted(&standing(Status::Promoted, Some("1.a")));
        }
        m.promoted(&standing(Status::Waiting, None));
        m.promoted(&standing(Status::Promoted, Some("2.b")));
        assert!(m.registry().render().contains("queue_promoted_users_total 2\n"));
    }
}
