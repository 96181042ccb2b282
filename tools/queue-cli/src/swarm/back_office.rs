//! The back office read during a run (with an admin token): the soft cap in force
//! and the server's own `active + joining`, every 250 ms.

use super::{Shared, SwarmConfig};
use std::sync::Arc;
use std::time::{Duration, Instant};

async fn admin_info(http: &reqwest::Client, cfg: &SwarmConfig, token: &str) -> Result<serde_json::Value, String> {
    let url = format!("{}/api/admin/queues/{}", cfg.api.trim_end_matches('/'), cfg.queue);
    let resp =
        http.get(url).bearer_auth(token).timeout(Duration::from_secs(5)).send().await.map_err(|e| e.to_string())?;
    if !resp.status().is_success() {
        return Err(format!("back office answered {}", resp.status()));
    }
    let v: serde_json::Value = resp.json().await.map_err(|e| e.to_string())?;
    Ok(v["info"].clone())
}

/// How often the back office is read during a run.
const SERVER_READ_EVERY: Duration = Duration::from_millis(250);

/// One back-office reading: the soft cap in force and the server's own counts.
pub(super) async fn read_server(shared: &Shared, token: &str) {
    let sent = Instant::now();
    if let Ok(info) = admin_info(&shared.http, &shared.cfg, token).await {
        let in_use = info["active"].as_u64().unwrap_or(0) + info["joining"].as_u64().unwrap_or(0);
        let cap = info["soft_cap"].as_u64();
        let recv = Instant::now();
        shared.with(|l| l.server_read(sent, recv, cap, in_use));
    }
}

/// Reads the back office every [`SERVER_READ_EVERY`] until aborted.
pub(super) async fn follow_server(shared: Arc<Shared>, token: String) {
    loop {
        tokio::time::sleep(SERVER_READ_EVERY).await;
        read_server(&shared, &token).await;
    }
}
