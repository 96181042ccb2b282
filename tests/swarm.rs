//! `queue-cli swarm` against the whole system, on both backends: a few hundred
//! virtual users through a small soft cap, some abandoning, all racing and reusing
//! tickets, every entry paying a proof of work; the report's audits must all be zero. And the audit can fail: told a soft
//! cap lower than the server's, the swarm reports the breach and exits 1. A cap an operator raises during the run is
//! followed (no breach).

use e2e::{client_binary, e2e_tests, Stack, StackOptions, ADMIN_TOKEN, CROWD};
use serde_json::Value;
use testkit::Backend;

e2e_tests!(three_hundred_users_through_a_soft_cap_of_ten);

async fn swarm(stack: &Stack, extra: &[&str]) -> (Option<i32>, Value, String) {
    let out = tokio::process::Command::new(client_binary())
        .args(["swarm", "--api", &stack.api.url(), "--chat", &stack.chat.url(), "--json", "--quiet"])
        .args(extra)
        .output()
        .await
        .expect("run queue-cli swarm");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let report: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("report is not JSON ({e}): {}\n{stderr}", String::from_utf8_lossy(&out.stdout)));
    (out.status.code(), report, stderr)
}

fn n(report: &Value, field: &str) -> u64 {
    report[field].as_u64().unwrap_or_else(|| panic!("{field} missing in {report:#}"))
}

async fn three_hundred_users_through_a_soft_cap_of_ten(backend: Backend) {
    // Short ticket and silence limits so abandoners' places come back within the run.
    let opts = StackOptions { soft_cap: 10, ticket_ttl_ms: 3000, abandon_after_ms: 2000, ..Default::default() };
    let stack = Stack::start(backend, opts).await;
    stack.call("QUEUE.CONFIG", &[&stack.queue, "SET", "pow_difficulty", "10"]);
    let args: Vec<&str> = ["--users", "300", "--rate", "100"]
        .into_iter()
        .chain(CROWD)
        .chain(["--admin-token", ADMIN_TOKEN, "--timeout-secs", "240"])
        .collect();
    let (code, r, stderr) = swarm(&stack, &args).await;
    let summary = format!("{r:#}\n{stderr}");
    for zero in ["fifo_inversions", "rank_rises", "over_capacity", "server_over_capacity", "double_claims"] {
        assert_eq!(n(&r, zero), 0, "{zero}: {summary}");
    }
    for zero in ["unfinished", "errors", "dropped", "claim_refused"] {
        assert_eq!(n(&r, zero), 0, "{zero}: {summary}");
    }
    assert_eq!(code, Some(0), "{summary}");
    assert_eq!(n(&r, "entered"), 300, "{summary}");
    assert_eq!(n(&r, "admitted") + n(&r, "abandoned"), 300, "everyone chatted or gave up: {summary}");
    assert!(n(&r, "abandoned") > 0 && n(&r, "claim_races") > 0 && n(&r, "polling_users") > 0, "{summary}");
    let polite = n(&r, "abandoned_by_leaving");
    assert!(polite > 0 && polite < n(&r, "abandoned"), "some abandoners leave, some go silent: {summary}");
    assert_eq!(n(&r, "reuse_refused"), n(&r, "admitted"), "every used ticket was refused again: {summary}");
    assert_eq!(n(&r, "left"), n(&r, "admitted"), "{summary}");
    assert_eq!(n(&r, "soft_cap"), 10, "read from the back office: {summary}");
    assert!(n(&r, "max_holding") >= 5 && n(&r, "max_holding") <= 10, "the cap was reached, not passed: {summary}");
    assert!(n(&r, "server_samples") > 0 && n(&r, "server_max_in_use") <= 10, "{summary}");
    assert!(n(&r, "messages_echoed") > 0, "{summary}");
    assert_eq!(r["wait_seconds"]["count"].as_u64(), Some(n(&r, "admitted")), "{summary}");
    let graded = r["eta_error_at_entry"]["count"].as_u64().unwrap() + n(&r, "eta_missing");
    assert!(graded > 0, "estimates given at entry were graded: {summary}");
    // Every entry was first refused for want of a proof of work, then solved.
    let metrics = reqwest::get(format!("{}/metrics", stack.api.url())).await.unwrap().text().await.unwrap();
    let refused = metrics
        .lines()
        .find_map(|l| l.strip_prefix("queue_api_pow_refused_total{reason=\"missing\"} "))
        .and_then(|v| v.parse::<f64>().ok());
    assert!(refused.is_some_and(|n| n >= 300.0), "every entry paid a proof of work: {refused:?}");
    stack.eventually("every session to end", |s| s.info()["active"] == 0).await;
    let info = stack.info();
    assert_eq!(info["claimed"] as u64, n(&r, "admitted"), "the server counted the same claims: {info:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_soft_cap_breach_is_reported() {
    let stack = Stack::start(Backend::Module, StackOptions { soft_cap: 6, ..Default::default() }).await;
    let args = ["--users", "30", "--rate", "60", "--stay-secs", "1", "--abandon", "0", "--soft-cap", "2"];
    let (code, r, stderr) = swarm(&stack, &args).await;
    assert!(n(&r, "over_capacity") > 0 && n(&r, "max_holding") > 2, "{r:#}\n{stderr}");
    assert_eq!(code, Some(1), "a breach fails the run: {r:#}");
}

/// An operator raises the soft cap while a line waits: the swarm follows the cap through
/// the back office, so the admissions the higher cap allows are no breach.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cap_raised_during_a_run_is_followed() {
    let stack = Stack::start(Backend::Module, StackOptions { soft_cap: 3, ..Default::default() }).await;
    let flags =
        "--users 40 --rate 20 --stay-secs 1 --abandon 0 --race 0 --polling 0.2 --poll-secs 0.3 --timeout-secs 60";
    let args: Vec<&str> = flags.split_whitespace().chain(["--admin-token", ADMIN_TOKEN]).collect();
    let raise = async {
        // Once a line has formed behind the cap of 3, raise it to 12.
        let deadline = std::time::Instant::now() + e2e::WAIT;
        while stack.info()["waiting"] < 10 {
            assert!(std::time::Instant::now() < deadline, "no line formed: {:?}", stack.info());
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        let url = format!("{}/api/admin/queues/{}", stack.api.url(), stack.queue);
        let body = serde_json::json!({ "soft_cap": 12 });
        let resp = reqwest::Client::new().put(url).bearer_auth(ADMIN_TOKEN).json(&body).send().await.unwrap();
        assert!(resp.status().is_success(), "raising the cap: {}", resp.status());
    };
    let ((code, r, stderr), ()) = tokio::join!(swarm(&stack, &args), raise);
    let summary = format!("{r:#}\n{stderr}");
    assert!(n(&r, "max_holding") > 3, "the raised cap let more in: {summary}");
    assert_eq!(n(&r, "over_capacity"), 0, "{summary}");
    assert_eq!(n(&r, "server_over_capacity"), 0, "{summary}");
    assert_eq!(code, Some(0), "{summary}");
    assert_eq!(n(&r, "soft_cap"), 3, "the cap at the start: {summary}");
    let changes = r["soft_cap_changes"].as_array().unwrap_or_else(|| panic!("soft_cap_changes: {summary}"));
    assert!(changes.iter().any(|c| c["from"] == 3 && c["to"] == 12), "the raise was seen: {summary}");
}
