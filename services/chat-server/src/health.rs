//! The health signal the queue-manager adapts admission to: every few seconds, for
//! each queue this instance serves, field `<instance id>` of hash `queue:{Q}:health`
//! is set to `{"load": sessions/capacity, "latencyMs": ..., "expiresAtMs": ...}`.
//! Each reading carries its own expiry (a hash has no per-field TTL on Valkey 8.0),
//! so a dead instance stops counting by itself; a clean shutdown removes its field.

use crate::frames::now_ms;
use crate::AppState;
use serde::Serialize;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Recent latency: the slowest round trip (own broadcast back through Valkey, or a
/// heartbeat call) since the last reading; the previous reading when there was none.
#[derive(Default)]
pub struct Latency {
    /// Milliseconds + 1 of the slowest sample since the last take; 0 = no sample.
    worst: AtomicU64,
    last: AtomicU64,
}

impl Latency {
    pub fn record(&self, ms: u64) {
        self.worst.fetch_max(ms.saturating_add(1), Ordering::Relaxed);
    }

    /// The reading for this period.
    pub fn take(&self) -> u64 {
        match self.worst.swap(0, Ordering::Relaxed) {
            0 => self.last.load(Ordering::Relaxed),
            w => {
                self.last.store(w - 1, Ordering::Relaxed);
                w - 1
            }
        }
    }
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Reading {
    pub load: f64,
    pub latency_ms: u64,
    pub expires_at_ms: u64,
}

/// The queues to report on: the default one and every room served.
fn served(state: &AppState) -> BTreeSet<String> {
    let mut queues: BTreeSet<String> = state.rooms.queues().into_iter().collect();
    queues.insert(state.config.queue.clone());
    queues
}

/// Publishes a reading every `health_interval` until shutdown.
pub async fn signal_loop(state: Arc<AppState>) {
    let state = &state;
    crate::every_tick(state, state.config.health_interval, || async move {
        let Some(client) = state.store.client().await else { return };
        let reading = Reading {
            load: state.rooms.local_sessions() as f64 / state.config.capacity as f64,
            latency_ms: state.latency.take(),
            expires_at_ms: now_ms() + state.config.health_ttl.as_millis() as u64,
        };
        let value = serde_json::to_string(&reading).expect("a reading serializes");
        for queue in served(state) {
            if let Err(e) = client.set_health(&queue, &state.instance_id, &value).await {
                tracing::debug!(queue, error = %e, "health signal not written");
            }
        }
    })
    .await;
}

/// Removes this instance's readings (clean shutdown).
pub async fn withdraw(state: &AppState) {
    let Some(client) = state.store.client().await else { return };
    for queue in served(state) {
        if let Err(e) = client.remove_health(&queue, &state.instance_id).await {
            tracing::warn!(queue, error = %e, "health signal not withdrawn; it expires by itself");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_is_the_worst_sample_else_the_last_reading() {
        let l = Latency::default();
        assert_eq!(l.take(), 0);
        l.record(3);
        l.record(12);
        l.record(0);
        assert_eq!(l.take(), 12);
        assert_eq!(l.take(), 12, "no new sample: keep the last reading");
        l.record(0);
        assert_eq!(l.take(), 0);
    }

    #[test]
    fn reading_has_the_managers_field_names() {
        let r = Reading { load: 0.25, latency_ms: 7, expires_at_ms: 99 };
        assert_eq!(serde_json::to_string(&r).unwrap(), r#"{"load":0.25,"latencyMs":7,"expiresAtMs":99}"#);
    }
}
