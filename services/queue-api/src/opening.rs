//! `GET /api/queue/opening?queue=`: the proof of a queue's fair opening (docs/commands.md, "A
//! verifiably fair opening"): before it the commitment, after it the seed and the
//! placed order as idHashes, from which `queue-cli verify` recomputes every rank. In a
//! queue with lanes `lanes` says how many entrants each lane has, lanes in order: the
//! lengths of the order's consecutive runs, one per lane (an empty list without lanes).

use crate::error::ApiError;
use crate::AppState;
use axum::extract::{Query, State};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};
use std::sync::Arc;

/// Most idHashes asked for in one call while collecting the order.
const PAGE: u64 = 10_000;

#[derive(Debug, Deserialize)]
pub struct OpeningQuery {
    queue: Option<String>,
}

pub async fn opening(
    State(state): State<Arc<AppState>>,
    Query(q): Query<OpeningQuery>,
) -> Result<Json<Value>, ApiError> {
    let queue = q.queue.unwrap_or_else(|| crate::routes::DEFAULT_QUEUE.to_string());
    queue_core::keys::check_queue(queue.as_bytes())
        .map_err(|e| ApiError::BadRequest(e.to_string().trim_start_matches("ERR ").to_string()))?;
    let client = state.valkey.client().await?;
    state.declared.check(&client, &queue).await?;
    let o = client.opening(&queue).await?;
    let mut v = json!({
        "queue": queue,
        "opensAt": o.opens_at,
        "commitment": o.commitment,
        "state": o.state,
        "entrants": o.entrants,
        "lanes": o.lanes.iter().map(|(lane, n)| json!({ "lane": lane, "entrants": n })).collect::<Vec<_>>(),
    });
    if o.state == "open" {
        let mut order: Vec<String> = Vec::with_capacity(o.entrants as usize);
        // Bounded: at most entrants / PAGE + 1 pages.
        while (order.len() as u64) < o.entrants {
            let page = client.opening_proof(&queue, order.len() as u64, PAGE).await?;
            if page.is_empty() {
                break;
            }
            order.extend(page);
        }
        v["seed"] = json!(o.seed);
        v["openedAt"] = json!(o.opened_at);
        v["order"] = json!(order);
    }
    Ok(Json(v))
}
