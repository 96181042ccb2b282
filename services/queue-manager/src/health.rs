//! The downstream servers' health signal: hash `queue:{<Q>}:health`, one field per
//! server instance, each value a JSON reading with its own expiry:
//! `{"load": 0.42, "latencyMs": 35, "expiresAtMs": 1733000000000}`.
//!
//! Expiry is per field (a hash has no per-field TTL on Valkey 8.0), so a server that
//! died stops counting once its reading expires, while the others still count.

use queue_client::{ClientError, QueueClient};
use serde::Deserialize;

/// One server's reading, or the worst of several.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Health {
    /// Load from 0 (idle) to 1 (full); values above 1 mean overloaded.
    pub load: f64,
    /// Message latency, in ms.
    pub latency_ms: u64,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Reading {
    #[serde(default)]
    load: f64,
    #[serde(default)]
    latency_ms: u64,
    expires_at_ms: u64,
}

/// The worst of the live readings (highest load, highest latency) at `now_ms`
/// (Unix ms); `None` when none is live. Unreadable values count as absent.
pub fn worst<'a>(values: impl IntoIterator<Item = &'a [u8]>, now_ms: u64) -> Option<Health> {
    values
        .into_iter()
        .filter_map(|v| serde_json::from_slice::<Reading>(v).ok())
        .filter(|r| r.expires_at_ms > now_ms && r.load.is_finite())
        .map(|r| Health { load: r.load.max(0.0), latency_ms: r.latency_ms })
        .reduce(|a, b| Health { load: a.load.max(b.load), latency_ms: a.latency_ms.max(b.latency_ms) })
}

/// Reads the queue's health hash and returns the worst live reading.
pub async fn read(client: &QueueClient, queue: &str, now_ms: u64) -> Result<Option<Health>, ClientError> {
    let readings = client.health_readings(queue).await?;
    Ok(worst(readings.values().map(String::as_bytes), now_ms))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reading(load: f64, latency: u64, expires: u64) -> Vec<u8> {
        format!(r#"{{"load":{load},"latencyMs":{latency},"expiresAtMs":{expires}}}"#).into_bytes()
    }

    #[test]
    fn worst_of_the_live_readings() {
        let values = [reading(0.3, 900, 2000), reading(0.8, 20, 2000), reading(0.99, 5000, 999)];
        let h = worst(values.iter().map(Vec::as_slice), 1000).unwrap();
        assert_eq!(h, Health { load: 0.8, latency_ms: 900 });
    }

    #[test]
    fn expired_or_unreadable_readings_are_absent() {
        let values = [reading(0.3, 1, 1000), b"not json".to_vec(), br#"{"load":0.1}"#.to_vec()];
        assert_eq!(worst(values.iter().map(Vec::as_slice), 1000), None);
        assert_eq!(worst(std::iter::empty(), 0), None);
    }

    #[test]
    fn missing_fields_default_to_zero() {
        let v = br#"{"expiresAtMs":5}"#.to_vec();
        assert_eq!(worst([v.as_slice()], 4), Some(Health { load: 0.0, latency_ms: 0 }));
    }
}
