//! The three services over any store (testkit's [`Services`]: a cluster, a TLS-only
//! server), and `queue-cli swarm` run through them with its audits.

use crate::ADMIN_TOKEN;

pub use testkit::stack::Services;

/// `queue-cli swarm`'s audits that must be zero.
pub const ZERO_AUDITS: [&str; 9] = [
    "fifo_inversions",
    "rank_rises",
    "over_capacity",
    "server_over_capacity",
    "double_claims",
    "unfinished",
    "errors",
    "dropped",
    "claim_refused",
];

/// Runs `queue-cli swarm` against `services` on `queue`; exit status, JSON report, stderr.
pub async fn swarm(services: &Services, queue: &str, extra: &[&str]) -> (Option<i32>, serde_json::Value, String) {
    let out = tokio::process::Command::new(crate::client_binary())
        .args(["swarm", "--api", &services.api.url(), "--chat", &services.chat.url(), "--json", "--quiet"])
        .args(["--queue", queue, "--admin-token", ADMIN_TOKEN])
        .args(extra)
        .output()
        .await
        .expect("run queue-cli swarm");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let report: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("report is not JSON ({e}): {}\n{stderr}", String::from_utf8_lossy(&out.stdout)));
    (out.status.code(), report, stderr)
}

/// A report's numeric field.
pub fn n(report: &serde_json::Value, field: &str) -> u64 {
    report[field].as_u64().unwrap_or_else(|| panic!("{field} missing in {report:#}"))
}

/// The audits about fairness and capacity (the others count availability: errors,
/// people who gave up after a refused entry).
pub const SAFETY_AUDITS: [&str; 5] =
    ["fifo_inversions", "rank_rises", "over_capacity", "server_over_capacity", "double_claims"];

/// Panics unless every safety audit of `report` is zero.
pub fn assert_safe(report: &serde_json::Value) {
    for zero in SAFETY_AUDITS {
        assert_eq!(n(report, zero), 0, "{zero}: {report:#}");
    }
}

/// Panics unless every audit of `report` is zero and the swarm exited 0.
pub fn assert_clean(code: Option<i32>, report: &serde_json::Value, stderr: &str) {
    let summary = format!("{report:#}\n{stderr}");
    for zero in ZERO_AUDITS {
        assert_eq!(n(report, zero), 0, "{zero}: {summary}");
    }
    assert_eq!(code, Some(0), "{summary}");
}
