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

/// A back-office call for the queue (`/api/admin/queues/{queue}{path}`), its JSON answer.
async fn admin_call(
    shared_http: &reqwest::Client,
    cfg: &SwarmConfig,
    token: &str,
    method: reqwest::Method,
    path: &str,
    body: Option<serde_json::Value>,
) -> Result<serde_json::Value, String> {
    let url = format!("{}/api/admin/queues/{}{path}", cfg.api.trim_end_matches('/'), cfg.queue);
    let mut r = shared_http.request(method.clone(), url).bearer_auth(token).timeout(Duration::from_secs(30));
    if let Some(b) = body {
        r = r.json(&b);
    }
    let resp = r.send().await.map_err(|e| format!("{method} {path}: {e}"))?;
    let status = resp.status();
    let text = resp.text().await.unwrap_or_default();
    if !status.is_success() {
        return Err(format!(
            "{method} /api/admin/queues/{}{path}: HTTP {status} {}",
            cfg.queue,
            crate::api::error_text(&text)
        ));
    }
    serde_json::from_str(&text).map_err(|e| format!("{method} {path}: unreadable answer: {e}"))
}

/// Gives the queue the lanes `cfg.access.lanes` (creating the queue when missing).
pub(super) async fn set_lanes(http: &reqwest::Client, cfg: &SwarmConfig, token: &str) -> Result<(), String> {
    let lanes = cfg.access.lanes.join(",");
    admin_call(http, cfg, token, reqwest::Method::PUT, "", Some(serde_json::json!({ "lanes": lanes }))).await?;
    Ok(())
}

/// Adds `codes` to `lane`, each with `uses`, 1,000 an upload.
pub(super) async fn upload_codes(
    http: &reqwest::Client,
    cfg: &SwarmConfig,
    token: &str,
    lane: &str,
    uses: u64,
    codes: &[String],
) -> Result<(), String> {
    for chunk in codes.chunks(1000) {
        let body = serde_json::json!({ "lane": lane, "uses": uses, "codes": chunk });
        admin_call(http, cfg, token, reqwest::Method::POST, "/codes", Some(body)).await?;
    }
    Ok(())
}

/// The uses the server counts as consumed, over all the queue's lanes.
pub(super) async fn codes_used(http: &reqwest::Client, cfg: &SwarmConfig, token: &str) -> Result<u64, String> {
    let v = admin_call(http, cfg, token, reqwest::Method::GET, "/codes", None).await?;
    let lanes = v["lanes"].as_array().ok_or("GET .../codes: no lanes in the answer")?;
    Ok(lanes.iter().map(|l| l["used"].as_u64().unwrap_or(0)).sum())
}
