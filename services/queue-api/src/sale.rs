//! A sale's end in the back office (docs/commands.md, "A sale's end"): the app
//! reports what it sold (`POST .../inventory {"sold": n}`), and the operator's
//! message to everyone waiting (`PUT .../message {"text": "..."}`). Each is one
//! command in Valkey; a change of the sold-out state or of the message writes one
//! `state` entry of the change log, which every instance's push streams show.
//! Closing time and the inventory set by hand are settings (`PUT
//! /api/admin/queues/{queue}`, admin.rs).

use crate::admin::{audit, integer, queue_body, AdminQueue};
use crate::error::ApiError;
use crate::extract::JsonBody;
use axum::http::StatusCode;
use axum::Json;
use queue_core::config::MAX_MESSAGE_LEN;
use serde_json::{json, Map, Value};

/// The most units one report may sell (the engine's bound, `QUEUE.SOLD`).
pub const MAX_SOLD: i64 = 1_000_000_000_000;

/// A body as sent: any JSON object (its fields are checked here, by name).
type Body = Result<JsonBody<Map<String, Value>>, ApiError>;

fn at(status: StatusCode, field: &str, message: impl Into<String>) -> ApiError {
    ApiError::AtField(status, field.into(), message.into())
}

/// Fields other than `allowed` are refused, so that a typo changes nothing.
fn only(body: &Map<String, Value>, allowed: &[&str]) -> Result<(), ApiError> {
    match body.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(k) => {
            Err(at(StatusCode::BAD_REQUEST, k, format!("unknown field {k}; this body takes {}", allowed.join(", "))))
        }
        None => Ok(()),
    }
}

/// `POST /api/admin/queues/{queue}/inventory` `{"sold": n, "userId": "..."}`: the app
/// reports `n` units sold (0 to 10^12); with `userId`, that person inside has bought
/// and no longer counts against the inventory. The inventory goes down by `n`, never
/// below 0; at 0 the queue is sold out. Answers like GET.
pub async fn sold(AdminQueue { state, queue }: AdminQueue, body: Body) -> Result<Json<Value>, ApiError> {
    let JsonBody(body) = body?;
    only(&body, &["sold", "userId"])?;
    let n = match body.get("sold") {
        None | Some(Value::Null) => {
            return Err(at(StatusCode::UNPROCESSABLE_ENTITY, "sold", "sold is required: the units sold"))
        }
        Some(v) => integer(v).ok_or_else(|| at(StatusCode::UNPROCESSABLE_ENTITY, "sold", "sold must be an integer"))?,
    };
    if !(0..=MAX_SOLD).contains(&n) {
        return Err(at(StatusCode::BAD_REQUEST, "sold", format!("sold must be from 0 to {MAX_SOLD}")));
    }
    let user = match body.get("userId") {
        None | Some(Value::Null) => None,
        Some(Value::String(u)) if queue_core::keys::check_user(u.as_bytes()).is_ok() => Some(u.clone()),
        Some(_) => {
            return Err(at(StatusCode::UNPROCESSABLE_ENTITY, "userId", "userId must be a userId the queue gave"))
        }
    };
    let client = state.valkey.client().await?;
    state.declared.check(&client, &queue).await?;
    let left = client.sold(&queue, n as u64, user.as_deref()).await?;
    audit(&state, &queue, "sold", json!({ "sold": n, "userId": user, "left": left }));
    Ok(Json(queue_body(&state, &client, &queue).await?))
}

/// `PUT /api/admin/queues/{queue}/message` `{"text": "..."}`: the message everyone
/// waiting sees (at most 500 bytes, no control characters; empty clears it). One
/// write in Valkey; every open stream shows it within a second. Answers like GET.
pub async fn message(AdminQueue { state, queue }: AdminQueue, body: Body) -> Result<Json<Value>, ApiError> {
    let JsonBody(body) = body?;
    only(&body, &["text"])?;
    let text = match body.get("text") {
        None => {
            return Err(at(StatusCode::UNPROCESSABLE_ENTITY, "text", "text is required (empty clears the message)"))
        }
        Some(Value::Null) => String::new(),
        Some(Value::String(t)) => t.trim().to_string(),
        Some(_) => return Err(at(StatusCode::UNPROCESSABLE_ENTITY, "text", "text must be a string")),
    };
    if text.len() > MAX_MESSAGE_LEN {
        return Err(at(
            StatusCode::UNPROCESSABLE_ENTITY,
            "text",
            format!("the message must be at most {MAX_MESSAGE_LEN} bytes (it has {})", text.len()),
        ));
    }
    if text.chars().any(char::is_control) {
        return Err(at(
            StatusCode::UNPROCESSABLE_ENTITY,
            "text",
            "the message must not hold control characters (line breaks included)",
        ));
    }
    let client = state.valkey.client().await?;
    state.declared.check(&client, &queue).await?;
    let was = client.info(&queue).await?.message;
    if was != text {
        client.config_set_text(&queue, queue_core::config::MESSAGE, &text).await?;
    }
    audit(&state, &queue, "message", json!({ "from": was, "to": text }));
    Ok(Json(queue_body(&state, &client, &queue).await?))
}
