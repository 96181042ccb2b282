//! The plain HTTP routes: the chat page, liveness and metrics.

use crate::AppState;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};
use std::sync::atomic::Ordering;
use std::sync::Arc;

type St = State<Arc<AppState>>;

/// The chat page: takes `?ticketId=` (and `?queue=`) and joins the room.
pub async fn page() -> Html<&'static str> {
    Html(include_str!("../static/index.html"))
}

pub async fn metrics(State(state): St) -> Response {
    let text = state.metrics.render(state.rooms.local_sessions());
    ([(header::CONTENT_TYPE, service_kit::metrics::CONTENT_TYPE)], text).into_response()
}

/// Liveness with the store's and the room feed's state; 200 even while Valkey is
/// down (the service itself is fine and recovers by itself).
pub async fn healthz(State(state): St) -> Json<Value> {
    let client = state.store.client().await;
    let (valkey, refused) = queue_client::QueueClient::health(client.as_ref()).await;
    let room = if state.room_feed_up.load(Ordering::SeqCst) { "up" } else { "down" };
    let mut health = json!({
        "status": if state.shutting_down() { "stopping" } else { "ok" },
        "valkey": valkey,
        "room": room,
        "instanceId": state.instance_id,
        "sessions": state.rooms.local_sessions(),
    });
    if let Some(refused) = refused {
        health["refused"] = refused.into();
    }
    Json(health)
}

pub async fn not_found() -> Response {
    (StatusCode::NOT_FOUND, Json(json!({ "error": "not_found", "message": "no such route" }))).into_response()
}
