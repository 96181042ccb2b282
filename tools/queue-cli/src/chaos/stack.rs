//! The stack a chaos run owns: valkey-server (with the module or not, and AOF), two
//! queue-managers, queue-api and chat-server as testkit child processes on ports
//! chosen up front (a restart reuses them), and waiting for each to answer.

use super::plan::Fsync;
use super::valkey::{query, valkey_conn};
use super::{ChaosConfig, ADMIN_TOKEN};
use std::path::PathBuf;
use std::time::{Duration, Instant};
use testkit::free_port;
use testkit::process::Proc;

/// The stack: each part a testkit [`Proc`] (a restartable child process logging into
/// the run's directory) on a port chosen up front, so that a restart reuses it.
pub(super) struct Stack {
    pub(super) dir: PathBuf,
    pub(super) keep_dir: bool,
    pub(super) valkey_port: u16,
    pub(super) api_port: u16,
    pub(super) chat_port: u16,
    pub(super) manager_ports: [u16; 2],
    pub(super) valkey: Proc,
    pub(super) api: Proc,
    pub(super) chat: Proc,
    pub(super) managers: [Proc; 2],
}

impl Drop for Stack {
    fn drop(&mut self) {
        for m in &self.managers {
            m.signal("CONT");
        }
        self.api.kill9();
        self.chat.kill9();
        for m in &mut self.managers {
            m.kill9();
        }
        self.valkey.kill9();
        if !self.keep_dir {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

pub(super) fn valkey_args(cfg: &ChaosConfig, port: u16, dir: &std::path::Path, fsync: Fsync) -> Vec<String> {
    [
        "--port",
        &port.to_string(),
        "--bind",
        "127.0.0.1",
        "--dir",
        &dir.display().to_string(),
        "--save",
        "",
        "--appendonly",
        "yes",
        "--appendfsync",
        fsync.as_str(),
    ]
    .iter()
    .map(|s| s.to_string())
    .chain(cfg.module.iter().flat_map(|m| ["--loadmodule".to_string(), m.display().to_string()]))
    .collect()
}

impl Stack {
    pub(super) fn valkey_url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.valkey_port)
    }

    pub(super) fn build(cfg: &ChaosConfig) -> Result<Stack, String> {
        let stamp = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos();
        let dir = std::env::temp_dir().join(format!("queue-chaos-{}-{stamp}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
        let (vp, ap, cp) = (free_port(), free_port(), free_port());
        let mp = [free_port(), free_port()];
        let url = format!("redis://127.0.0.1:{vp}/");
        let bin = |n: &str| cfg.bin_dir.join(n);
        let s = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let lease = format!("{}ms", cfg.manager_lease.as_millis());
        let manager = |i: usize| {
            Proc::new(
                &format!("queue-manager-{i}"),
                bin("queue-manager"),
                s(&["--valkey-url", &url, "--listen", &format!("127.0.0.1:{}", mp[i]), "--lease", &lease]),
                &dir,
            )
        };
        Ok(Stack {
            valkey: Proc::new("valkey", &cfg.valkey_server, valkey_args(cfg, vp, &dir, Fsync::EverySec), &dir),
            api: Proc::new(
                "queue-api",
                bin("queue-api"),
                s(&[
                    "--valkey-url",
                    &url,
                    "--listen",
                    &format!("127.0.0.1:{ap}"),
                    "--chat-url",
                    &format!("http://127.0.0.1:{cp}/"),
                    "--admin-token",
                    ADMIN_TOKEN,
                    "--trust-proxy",
                ]),
                &dir,
            ),
            chat: Proc::new(
                "chat-server",
                bin("chat-server"),
                s(&["--valkey-url", &url, "--listen", &format!("127.0.0.1:{cp}"), "--heartbeat", "1s"]),
                &dir,
            ),
            managers: [manager(0), manager(1)],
            dir,
            keep_dir: false,
            valkey_port: vp,
            api_port: ap,
            chat_port: cp,
            manager_ports: mp,
        })
    }
}

pub(super) async fn wait_http_ok(http: &reqwest::Client, url: &str, limit: Duration) -> Option<Instant> {
    let until = Instant::now() + limit;
    while Instant::now() < until {
        if let Ok(r) = http.get(url).timeout(Duration::from_millis(500)).send().await {
            if r.status().is_success() {
                return Some(Instant::now());
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    None
}

pub(super) async fn wait_valkey(url: &str, limit: Duration) -> Option<Instant> {
    let until = Instant::now() + limit;
    while Instant::now() < until {
        if let Ok(mut c) = valkey_conn(url).await {
            if query::<String>(&mut c, &redis::cmd("PING")).await.is_ok() {
                return Some(Instant::now());
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    None
}
