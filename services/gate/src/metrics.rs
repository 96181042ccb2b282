//! The gate's metrics (Prometheus text at `/gate/metrics`, and `/metrics` in
//! forward-auth mode): decisions by outcome, claims by outcome, the people inside per
//! queue as this instance sees them, upstream latency, heartbeats and leases lost,
//! sessions ended, Valkey's reachability.

use crate::decide::Outcome;
use crate::{EndReason, Gate};
use axum::extract::State;
use axum::response::Response;
use service_kit::metrics::{Counter, Gauge, Histogram, Registry};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

pub const DECISIONS: &str = "gate_decisions_total";
pub const CLAIMS: &str = "gate_claims_total";
pub const INSIDE: &str = "gate_sessions_inside";
pub const UPSTREAM: &str = "gate_upstream_seconds";

/// Upstream latency buckets (seconds): a proxy hop is sub-millisecond.
const UPSTREAM_BUCKETS: [f64; 12] = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0];

pub struct Metrics {
    pub registry: Registry,
    decisions: Vec<Counter>,
    pub upstream: Histogram,
    pub upstream_errors: Counter,
    pub upstream_timeouts: Counter,
    pub renewed: Counter,
    pub heartbeat_calls: Counter,
    pub leases_lost: Counter,
    ended: Vec<Counter>,
    pub valkey_up: Gauge,
    pub ends_pending: Gauge,
    inside: Mutex<BTreeMap<String, Gauge>>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let registry = Registry::new(&[(UPSTREAM, &UPSTREAM_BUCKETS[..])]);
        let decisions = Outcome::ALL
            .iter()
            .map(|o| registry.counter_with(DECISIONS, "Requests decided, by outcome.", &[("outcome", o.as_str())]))
            .collect();
        let ended = [EndReason::App, EndReason::Leave, EndReason::MaxSession]
            .iter()
            .map(|r| {
                registry.counter_with(
                    "gate_sessions_ended_total",
                    "Sessions the gate ended (SESSION.END), by why.",
                    &[("by", r.as_str())],
                )
            })
            .collect();
        Metrics {
            decisions,
            upstream: registry.histogram(UPSTREAM, "Time for the upstream to begin its answer."),
            upstream_errors: registry.counter("gate_upstream_errors_total", "Upstream connections that failed (502)."),
            upstream_timeouts: registry
                .counter("gate_upstream_timeouts_total", "Upstream answers past --upstream-timeout (504)."),
            renewed: registry.counter("gate_tokens_renewed_total", "Admission tokens renewed near their expiry."),
            heartbeat_calls: registry
                .counter("gate_heartbeat_calls_total", "SESSION.HEARTBEAT calls (one per queue per tick)."),
            leases_lost: registry.counter("gate_leases_lost_total", "Sessions whose lease was gone at renewal."),
            ended,
            valkey_up: registry.gauge("gate_valkey_up", "1 while Valkey answers the gate's calls."),
            ends_pending: registry
                .gauge("gate_ends_pending", "SESSION.END kept while Valkey is away, sent when it is back."),
            inside: Mutex::new(BTreeMap::new()),
            registry,
        }
    }

    pub fn decided(&self, outcome: Outcome) {
        self.decisions[outcome as usize].increment(1);
    }

    pub fn claim(&self, outcome: &'static str) {
        self.registry
            .counter_with(CLAIMS, "Ticket claims at /gate/claim, by outcome.", &[("outcome", outcome)])
            .increment(1);
    }

    /// A straight pass tried, by outcome (passed, room, limited, cross_site,
    /// no_address, unavailable, not_durable, error).
    pub fn straight(&self, outcome: &'static str) {
        self.registry
            .counter_with(
                "gate_straight_through_total",
                "Visitors without a token let straight in (passed) or sent to the room, by why.",
                &[("outcome", outcome)],
            )
            .increment(1);
    }

    /// A `Queue-Sold` header from the app, by outcome (reported, bad_value,
    /// not_admitted, dropped, unavailable, refused).
    pub fn sale(&self, outcome: &'static str) {
        self.registry
            .counter_with("gate_sales_total", "Queue-Sold headers from the app, by outcome.", &[("outcome", outcome)])
            .increment(1);
    }

    pub fn ended(&self, reason: EndReason) {
        self.ended[reason as usize].increment(1);
    }

    /// Sets the people inside per queue (queues no longer seen go to 0).
    pub fn set_inside(&self, counts: &BTreeMap<String, usize>) {
        let mut gauges = self.inside.lock().unwrap();
        for (queue, gauge) in gauges.iter() {
            if !counts.contains_key(queue) {
                gauge.set(0.0);
            }
        }
        for (queue, n) in counts {
            gauges
                .entry(queue.clone())
                .or_insert_with(|| {
                    self.registry.gauge_with(
                        INSIDE,
                        "People inside per queue, as seen by this instance (live, not idle).",
                        &[("queue", queue)],
                    )
                })
                .set(*n as f64);
        }
    }
}

pub async fn metrics(State(gate): State<Arc<Gate>>) -> Response {
    gate.metrics.registry.response()
}
