//! Injecting one fault into the stack (kill -9 and restart, a Valkey restart from its
//! AOF with the counters read on either side, a SIGSTOP of the leader) and what
//! happened, as a [`FaultRecord`].

use super::monitors::is_leader;
use super::plan::{Fault, Service};
use super::stack::{valkey_args, wait_http_ok, wait_valkey, Stack};
use super::valkey::{queue_info, valkey_conn, COUNTERS};
use super::ChaosConfig;
use rand::Rng;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// One fault as it happened.
#[derive(Debug, Clone)]
pub struct FaultRecord {
    pub fault: Fault,
    pub target: String,
    pub at: Instant,
    /// Restarted (or SIGCONT) at.
    pub restored: Instant,
    /// Answering again (health check, PING) at.
    pub ready: Option<Instant>,
    /// Valkey: counters that went back over the restart (name, by how much).
    pub lost: Vec<(String, i64)>,
    pub counters_read: bool,
}

pub(super) async fn counters(url: &str) -> Option<BTreeMap<String, i64>> {
    let mut c = valkey_conn(url).await.ok()?;
    queue_info(&mut c).await.ok()
}

/// Which manager leads now (by its metrics), else the first.
async fn leader_index(http: &reqwest::Client, stack: &Stack) -> usize {
    for _ in 0..10 {
        for (i, p) in stack.manager_ports.iter().enumerate() {
            if is_leader(http, *p).await == Some(true) {
                return i;
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    0
}

pub(super) async fn inject(
    cfg: &ChaosConfig,
    stack: &mut Stack,
    http: &reqwest::Client,
    fault: Fault,
    rng: &mut rand::rngs::StdRng,
) -> Result<FaultRecord, String> {
    let down = Duration::from_millis(rng.random_range(500..1500));
    let health = |port: u16| format!("http://127.0.0.1:{port}/healthz");
    let mut lost = Vec::new();
    let mut counters_read = false;
    let (target, at, restored, ready) = match fault {
        Fault::Kill(svc) => {
            let (proc_, url) = match svc {
                Service::Api => (&mut stack.api, health(stack.api_port)),
                Service::Chat => (&mut stack.chat, health(stack.chat_port)),
                Service::Manager => {
                    let i = leader_index(http, stack).await;
                    (&mut stack.managers[i], health(stack.manager_ports[i]))
                }
            };
            let at = Instant::now();
            proc_.kill9();
            tokio::time::sleep(down).await;
            proc_.spawn()?;
            let restored = Instant::now();
            let target = proc_.name.clone();
            (target, at, restored, wait_http_ok(http, &url, Duration::from_secs(30)).await)
        }
        Fault::Valkey(fsync) => {
            let url = stack.valkey_url();
            let before = counters(&url).await;
            let at = Instant::now();
            stack.valkey.kill9();
            tokio::time::sleep(down).await;
            stack.valkey.args = valkey_args(cfg, stack.valkey_port, &stack.dir, fsync);
            stack.valkey.spawn()?;
            let restored = Instant::now();
            let ready = wait_valkey(&url, Duration::from_secs(30)).await;
            if let (Some(b), Some(a)) = (before, counters(&url).await) {
                counters_read = true;
                for name in COUNTERS {
                    let d = b.get(name).copied().unwrap_or(0) - a.get(name).copied().unwrap_or(0);
                    if d > 0 {
                        lost.push((name.to_string(), d));
                    }
                }
            }
            ("valkey".to_string(), at, restored, ready)
        }
        Fault::StopLeader => {
            let i = leader_index(http, stack).await;
            let at = Instant::now();
            stack.managers[i].signal("STOP");
            tokio::time::sleep(cfg.manager_lease * 2 + Duration::from_secs(1)).await;
            stack.managers[i].signal("CONT");
            let restored = Instant::now();
            (stack.managers[i].name.clone(), at, restored, Some(restored))
        }
    };
    Ok(FaultRecord { fault, target, at, restored, ready, lost, counters_read })
}
