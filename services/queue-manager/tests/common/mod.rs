//! Shared by the manager's integration tests: managers run in-process (on a port the
//! test bound) or as the real binary, against testkit servers; a tiny HTTP client for
//! /healthz and /metrics; bounded polls.
#![allow(dead_code)]

use queue_manager::leader::LEADER_KEY;
use queue_manager::Config;
use std::future::Future;
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use testkit::{Client, ValkeyServer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
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

/// The manager binary as a child process; killed on drop.
pub struct Process {
    pub child: Child,
    pub addr: SocketAddr,
}

impl Process {
    /// Starts `queue-manager` on a free port with the test settings plus `extra` flags,
    /// logging into the server's temp dir.
    pub fn start(server: &ValkeyServer, lease_ms: u64, extra: &[&str]) -> Process {
        let port = testkit::free_port();
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let log = std::fs::File::create(server.dir().join(format!("manager-{port}.log"))).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_queue-manager"))
            .args(["--valkey-url", &server.url(), "--listen", &addr.to_string(), "--tick", "100ms"])
            .args(["--lease", &format!("{lease_ms}ms"), "--discover-every", "200ms", "--queues", ""])
            .args(extra)
            .env("RUST_LOG", "queue_manager=debug,info")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start queue-manager");
        Process { child, addr }
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
        let ok = Command::new("kill").arg(format!("-{name}")).arg(self.child.id().to_string()).status().unwrap();
        assert!(ok.success(), "kill -{name}");
    }

    /// Waits for the process to exit; its status.
    pub fn wait_exit(&mut self, deadline: Duration) -> Option<std::process::ExitStatus> {
        testkit::wait_for(deadline, || self.child.try_wait().ok().flatten())
    }

    pub async fn healthz(&self) -> Option<serde_json::Value> {
        healthz(self.addr).await
    }

    pub async fn is_leader(&self) -> bool {
        self.healthz().await.is_some_and(|h| h["leader"] == serde_json::Value::Bool(true))
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

/// GET over a fresh loopback connection: (status code, body).
pub async fn http_get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
        let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.ok()?;
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).await.ok()?;
        let text = String::from_utf8(raw).ok()?;
        let (head, body) = text.split_once("\r\n\r\n")?;
        let code = head.split_whitespace().nth(1)?.parse().ok()?;
        Some((code, body.to_string()))
    };
    tokio::time::timeout(Duration::from_secs(5), exchange).await.ok().flatten()
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
