//! Shared by the manager's integration tests: managers run in-process (on a port the
//! test bound) or as the real binary (testkit's harness), against testkit servers;
//! /healthz and /metrics over testkit's HTTP GET; bounded polls.
#![allow(dead_code)]

use queue_manager::leader::LEADER_KEY;
use queue_manager::Config;
use std::future::Future;
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use testkit::process::Proc;
use testkit::{Client, ValkeyServer};
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;

/// Runs an async test body on a two-thread runtime (the manager's tasks keep running
/// while the test blocks on a sync Valkey call).
pub fn block_on<F: Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap().block_on(f)
}

/// Fast settings for tests: 100 ms ticks, a 600 ms lease, discovery every 200 ms,
/// no fixed queue.
pub fn fast_config(server: &ValkeyServer) -> Config {
    let mut c = Config::local(server.url());
    c.tick = Duration::from_millis(100);
    c.lease = Duration::from_millis(600);
    c.discover_every = Duration::from_millis(200);
    c.queues = Vec::new();
    c
}

/// A manager running in this process.
pub struct Manager {
    pub addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<std::io::Result<()>>>,
    freeze: watch::Sender<bool>,
}

impl Manager {
    pub async fn start(mut config: Config) -> Manager {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let (freeze, frozen) = watch::channel(false);
        config.freeze = Some(frozen);
        let task = tokio::spawn(queue_manager::serve(listener, config, async move {
            let _ = stopped.await;
        }));
        Manager { addr, stop: Some(stop), task: Some(task), freeze }
    }

    /// Freezes (true) or thaws (false) its lease and promotion loops, as a paused
    /// process would be.
    pub fn freeze(&self, frozen: bool) {
        self.freeze.send_replace(frozen);
    }

    /// Graceful shutdown; returns once `serve` returned.
    pub async fn stop(mut self) {
        let _ = self.stop.take().unwrap().send(());
        let task = self.task.take().unwrap();
        let r = tokio::time::timeout(Duration::from_secs(10), task).await.expect("manager did not stop in time");
        r.unwrap().expect("manager run failed");
    }

    pub async fn healthz(&self) -> serde_json::Value {
        healthz(self.addr).await.expect("healthz")
    }

    pub async fn is_leader(&self) -> bool {
        self.healthz().await["leader"] == serde_json::Value::Bool(true)
    }

    pub async fn metrics(&self) -> String {
        http_get(self.addr, "/metrics").await.expect("metrics").1
    }
}

impl Drop for Manager {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// The manager binary as a child process (testkit's [`Proc`]: killed on drop),
/// logging into the server's temp dir.
pub struct Process {
    pub proc: Proc,
    pub addr: SocketAddr,
}

impl Process {
    /// Starts `queue-manager` on a free port with the test settings plus `extra` flags,
    /// logging into the server's temp dir.
    pub fn start(server: &ValkeyServer, lease_ms: u64, extra: &[&str]) -> Process {
        let port = testkit::free_port();
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let mut args: Vec<String> =
            ["--valkey-url", &server.url(), "--listen", &addr.to_string(), "--tick", "100ms"].map(String::from).into();
        args.extend(
            ["--lease", &format!("{lease_ms}ms"), "--discover-every", "200ms", "--queues", ""].map(String::from),
        );
        args.extend(extra.iter().map(|a| a.to_string()));
        let mut proc_ = Proc::new(&format!("manager-{port}"), env!("CARGO_BIN_EXE_queue-manager"), args, server.dir())
            .env("RUST_LOG", "queue_manager=debug,info");
        proc_.spawn().expect("start queue-manager");
        Process { proc: proc_, addr }
    }

    pub fn log(server: &ValkeyServer) -> String {
        let mut out = String::new();
        for entry in std::fs::read_dir(server.dir()).unwrap().flatten() {
            if entry.file_name().to_string_lossy().starts_with("manager-") {
                out += &format!("--- {:?}\n{}", entry.file_name(), std::fs::read_to_string(entry.path()).unwrap());
            }
        }
        out
    }

    pub fn signal(&self, name: &str) {
        assert!(self.proc.signal(name), "kill -{name}");
    }

    /// Waits for the process to exit; its status.
    pub fn wait_exit(&mut self, deadline: Duration) -> Option<std::process::ExitStatus> {
        self.proc.wait_exit(deadline)
    }

    pub async fn healthz(&self) -> Option<serde_json::Value> {
        healthz(self.addr).await
    }

    pub async fn is_leader(&self) -> bool {
        self.healthz().await.is_some_and(|h| h["leader"] == serde_json::Value::Bool(true))
    }
}

/// GET over a fresh loopback connection: (status code, body).
pub async fn http_get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    testkit::process::http_get(addr.port(), path).await
}

pub async fn healthz(addr: SocketAddr) -> Option<serde_json::Value> {
    let (code, body) = http_get(addr, "/healthz").await?;
    assert_eq!(code, 200, "{body}");
    serde_json::from_str(&body).ok()
}

/// Polls `probe` every 20 ms until it returns Some or `deadline` passes.
pub async fn eventually<T>(deadline: Duration, mut probe: impl AsyncFnMut() -> Option<T>) -> Option<T> {
    let end = Instant::now() + deadline;
    loop {
        if let Some(v) = probe().await {
            return Some(v);
        }
        if Instant::now() >= end {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `QUEUE.INFO` field as an integer.
pub fn info(c: &mut Client, queue: &str, field: &str) -> i64 {
    testkit::field_int(&c.info(queue), field)
}

/// Users `prefix-0..n` waiting in `queue`, none promoted: admission is paused
/// (soft_cap 0) while they enter, then the queue gets `pairs`.
pub fn waiting_users(c: &mut Client, queue: &str, prefix: &str, n: usize, pairs: &[(&str, i64)]) {
    c.config_set(queue, &[("soft_cap", 0)]);
    for i in 0..n {
        c.enter(queue, &format!("{prefix}-{i}"), "nick");
    }
    assert_eq!(info(c, queue, "promoted"), 0);
    if !pairs.is_empty() {
        c.config_set(queue, pairs);
    }
}

/// The lease key's value.
pub fn lease_holder(server: &ValkeyServer) -> Option<String> {
    redis::cmd("GET").arg(LEADER_KEY).query(&mut server.conn()).unwrap()
}

/// The holder another replica writes into the lease key.
pub const OTHER_REPLICA: &str = "other-replica";

/// Another replica takes the lease key (for a minute), as one would once ours let
/// it expire.
pub fn another_replica_takes_the_lease(server: &ValkeyServer) {
    let _: () =
        redis::cmd("SET").arg(LEADER_KEY).arg(OTHER_REPLICA).arg("PX").arg(60_000).query(&mut server.conn()).unwrap();
}
