//! The back office's view of the gates (`GET /api/admin/gates`) with a real
//! `queue-gate` process on a real valkey-server: the gate describes itself at start
//! (mode, routes, bypass rules, nothing secret), the listing shows it and its routes
//! by queue, expired or unreadable descriptions are left out (and removed by the
//! gate), a stopped gate withdraws its description, and the endpoint needs the token.

use serde_json::Value;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use testkit::{Backend, ValkeyServer};

mod common;
use common::Api;

const TOKEN: &str = "gates-admin";
const SECRET: &str = "staff-only-0123456789";

/// A queue-gate process, killed when dropped.
struct Gate(Child);

impl Gate {
    fn start(valkey: &str) -> Gate {
        let port = testkit::free_port();
        let child = Command::new(testkit::release_binary("queue-gate"))
            .args(["--valkey-url", valkey, "--listen", &format!("127.0.0.1:{port}")])
            .args(["--upstream", "http://127.0.0.1:9", "--queue-api", "http://127.0.0.1:9"])
            .args(["--route", "/checkout=shop", "--route", "a.test/tickets/=concert", "--idle", "90s"])
            .args(["--bypass-secret", SECRET, "--bypass-network", "10.0.0.0/8"])
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .expect("start queue-gate");
        Gate(child)
    }

    /// SIGTERM, then waits for the process to end.
    fn stop(mut self) {
        let pid = self.0.id().to_string();
        assert!(Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
        let deadline = Instant::now() + Duration::from_secs(15);
        while self.0.try_wait().unwrap().is_none() {
            assert!(Instant::now() < deadline, "the gate did not stop on SIGTERM");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

async fn gates(api: &Api, token: Option<&str>) -> (u16, Value) {
    let mut req = api.http.get(api.url("/api/admin/gates"));
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let r = req.send().await.unwrap();
    (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
}

/// The listing once `done` holds of it (within 15 s).
async fn until(api: &Api, what: &str, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let (code, v) = gates(api, Some(TOKEN)).await;
        assert_eq!(code, 200, "{v}");
        if done(&v) {
            return v;
        }
        assert!(Instant::now() < deadline, "{what}: {v}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_back_office_sees_the_running_gates_and_their_routes() {
    let s = ValkeyServer::start(Backend::Module);
    let client = queue_client::QueueClient::connect(&s.url()).await.unwrap();
    let api = Api::start_admin(queue_api::Config::local(&s.url()), TOKEN).await;

    // The token is needed; without a gate the lists are empty.
    assert_eq!(gates(&api, None).await.0, 401);
    assert_eq!(gates(&api, Some("wrong")).await.0, 401);
    let (code, v) = gates(&api, Some(TOKEN)).await;
    assert_eq!(
        (code, v["gates"].as_array().map(Vec::len), v["routes"].as_array().map(Vec::len)),
        (200, Some(0), Some(0))
    );

    // A gate that died long ago, and junk: never listed, and removed by a live gate.
    client.set_gate("dead:1:1", r#"{"expiresAtMs": 1, "routes": [{"prefix": "/x", "queue": "shop"}]}"#).await.unwrap();
    client.set_gate("junk", "not json").await.unwrap();
    assert_eq!(until(&api, "nothing live", |_| true).await["gates"].as_array().unwrap().len(), 0);

    let gate = Gate::start(&s.url());
    let v = until(&api, "the gate to describe itself", |v| v["gates"].as_array().is_some_and(|g| g.len() == 1)).await;
    let g = &v["gates"][0];
    assert_eq!(g["mode"], "proxy", "{g}");
    assert!(g["listen"].as_str().unwrap().starts_with("127.0.0.1:"), "{g}");
    assert_eq!((g["waitingRoom"].clone(), g["servesRoom"].clone()), ("/gate/room/".into(), true.into()), "{g}");
    assert_eq!(g["sessions"]["idleMs"], 90_000, "{g}");
    assert_eq!(g["bypass"]["secret"], true, "{g}");
    assert_eq!(g["bypass"]["networks"], serde_json::json!(["10.0.0.0/8"]), "{g}");
    assert!(g["expiresAtMs"].as_u64().unwrap() > g["seenAtMs"].as_u64().unwrap(), "{g}");
    assert!(!v.to_string().contains(SECRET), "the bypass secret is shown: {v}");
    // Its routes, by queue.
    let routes: Vec<(String, Value, String)> = v["routes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["queue"].as_str().unwrap().into(), r["host"].clone(), r["prefix"].as_str().unwrap().into()))
        .collect();
    assert_eq!(
        routes,
        [
            ("concert".to_string(), Value::from("a.test"), "/tickets/".to_string()),
            ("shop".to_string(), Value::Null, "/checkout".to_string())
        ],
        "{v}"
    );
    assert_eq!(v["routes"][1]["gate"], g["instance"]);
    // The gate removed the expired and unreadable descriptions when it wrote its own.
    let stored = client.gate_descriptions().await.unwrap();
    assert_eq!(stored.keys().collect::<Vec<_>>(), [g["instance"].as_str().unwrap()], "{stored:?}");

    // Stopped, it withdraws its description.
    gate.stop();
    until(&api, "the stopped gate to be gone", |v| v["gates"].as_array().is_some_and(Vec::is_empty)).await;
    assert!(client.gate_descriptions().await.unwrap().is_empty());
    api.stop().await;
}
