//! The three services over any store: a cluster (`--cluster`, seed nodes) or a
//! TLS-only server (`rediss://`, a private CA, a client certificate), given as the
//! common Valkey flags every service takes.

use crate::{spawn, Service, StackOptions, ADMIN_TOKEN};

/// queue-api, queue-manager and chat-server started with the same Valkey flags.
pub struct Services {
    pub api: Service,
    pub chat: Service,
    pub manager: Service,
}

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

impl Services {
    /// Starts the three services with `valkey` (e.g. `--valkey-url a,b,c --cluster`),
    /// the manager serving `queues`, and waits until each is ready.
    pub async fn start(valkey: &[String], queues: &[String], opts: &StackOptions) -> Services {
        Services::start_each([valkey.to_vec(), valkey.to_vec(), valkey.to_vec()], queues, opts).await
    }

    /// Starts the services each with its own Valkey flags: chat-server's,
    /// queue-manager's and queue-api's, in that order.
    pub async fn start_each(valkey: [Vec<String>; 3], queues: &[String], opts: &StackOptions) -> Services {
        let [chat_flags, manager_flags, api_flags] = valkey;
        let s = |v: &str| v.to_string();
        let chat = spawn("chat-server", &[chat_flags, vec![s("--queue"), queues[0].clone()]].concat(), |h| {
            h["valkey"] == "up" && h["room"] == "up"
        })
        .await;
        let manager_args =
            [manager_flags, vec![s("--queues"), queues.join(","), s("--tick"), format!("{}ms", opts.manager_tick_ms)]]
                .concat();
        let manager = spawn("queue-manager", &manager_args, |h| h["leader"] == true).await;
        let api_args = [
            api_flags,
            vec![
                s("--chat-url"),
                chat.url(),
                s("--admin-token"),
                s(ADMIN_TOKEN),
                s("--trust-proxy"),
                s("--push-tick"),
                format!("{}ms", opts.push_tick_ms),
            ],
        ]
        .concat();
        let api = spawn("queue-api", &api_args, |h| h["valkey"] == "up").await;
        Services { api, chat, manager }
    }

    /// Whether every service process is still running.
    pub fn all_running(&mut self) -> bool {
        [&mut self.api, &mut self.chat, &mut self.manager].iter_mut().all(|s| s.child.try_wait().unwrap().is_none())
    }
}

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
