//! `/gate/claim`: a promoted person's ticket is claimed once (TICKET.CLAIM, which
//! opens the session lease), the admission token is set as a cookie, and the person
//! goes back to the same-site page they came from. `/gate/leave`: the session ends at
//! once (SESSION.END, which promotes the next person in the same command) and the
//! cookie loses the queue's token.

use crate::answer::{self, wants_html};
use crate::lease::end_with;
use crate::proxy::Origin;
use crate::returns::return_or_root;
use crate::sessions::State as SessionState;
use crate::token::{Claims, ISSUER};
use crate::{now_ms, EndReason, EndRequest, Gate};
use axum::extract::{ConnectInfo, Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use queue_client::{ClientError, QueueError};
use serde::Deserialize;
use std::net::SocketAddr;
use std::sync::Arc;

/// Seconds a client is told to wait before trying again while Valkey is away.
pub const RETRY_AFTER_S: u32 = 2;

#[derive(Deserialize)]
pub struct ClaimQuery {
    queue: Option<String>,
    #[serde(rename = "ticketId")]
    ticket_id: Option<String>,
    #[serde(rename = "return")]
    back: Option<String>,
}

#[derive(Deserialize)]
pub struct LeaveQuery {
    queue: Option<String>,
    #[serde(rename = "return")]
    back: Option<String>,
}

/// Whether the client asks for JSON explicitly (an app, not a browser navigation).
fn wants_json(headers: &HeaderMap) -> bool {
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).unwrap_or("");
    accept.contains("application/json") && !accept.contains("text/html")
}

/// Whether the gate may believe the X-Forwarded-* headers: --trust-proxy, or
/// forward-auth mode (where a proxy is always in front).
fn trusted(gate: &Gate) -> bool {
    gate.config.trust_proxy || gate.config.upstream.is_none()
}

fn unavailable(headers: &HeaderMap, what: &str) -> Response {
    let mut resp = answer::error(
        StatusCode::SERVICE_UNAVAILABLE,
        "unavailable",
        &format!("{what} The waiting room's store is unreachable; please try again in a moment."),
        headers,
    );
    resp.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_S));
    resp
}

/// A new session id: 128 random bits.
fn new_session_id() -> String {
    let mut bytes = [0u8; 16];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut bytes).expect("system randomness");
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

pub async fn claim(
    State(gate): State<Arc<Gate>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    uri: Uri,
    headers: HeaderMap,
    query: Result<Query<ClaimQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let Ok(Query(q)) = query else {
        return answer::error(StatusCode::BAD_REQUEST, "bad_query", "The query string cannot be read.", &headers);
    };
    let (Some(queue), Some(ticket)) = (q.queue.as_deref(), q.ticket_id.as_deref()) else {
        gate.metrics.claim("bad_request");
        return answer::error(StatusCode::BAD_REQUEST, "bad_request", "queue and ticketId are required.", &headers);
    };
    if queue_core::keys::check_queue(queue.as_bytes()).is_err()
        || queue_core::keys::check_ticket(ticket.as_bytes()).is_err()
    {
        gate.metrics.claim("bad_request");
        return answer::error(
            StatusCode::BAD_REQUEST,
            "bad_request",
            "queue or ticketId is not a valid name.",
            &headers,
        );
    }
    let back = return_or_root(q.back.as_deref());
    let Some(client) = gate.store.client().await else {
        gate.metrics.claim("unavailable");
        gate.health.down(now_ms(), &"not connected yet");
        return unavailable(&headers, "Your ticket is kept.");
    };
    let claimed = client.claim(queue, ticket).await;
    let now = now_ms();
    let refusal = |status: StatusCode, code: &'static str, message: &str| {
        gate.metrics.claim(code);
        let mut resp = answer::error(status, code, message, &headers);
        if wants_html(&headers) {
            let room = gate.waiting_room_url(queue, &back);
            resp = answer::error_with_link(status, message, &room, "Back to the waiting room");
        }
        resp
    };
    let claim = match claimed {
        Ok(c) => c,
        Err(ClientError::Refused(QueueError::NoTicket)) => {
            return refusal(StatusCode::UNAUTHORIZED, "invalid_ticket", "This ticket is unknown or was already used.")
        }
        Err(ClientError::Refused(QueueError::TicketExpired)) => {
            return refusal(StatusCode::UNAUTHORIZED, "expired_ticket", "This ticket has expired; please queue again.")
        }
        Err(ClientError::Refused(QueueError::AlreadyInside)) => {
            return refusal(
                StatusCode::CONFLICT,
                "already_inside",
                "You are already inside (in another tab or device).",
            )
        }
        Err(ClientError::Refused(QueueError::HardCap)) => {
            let mut resp = refusal(
                StatusCode::SERVICE_UNAVAILABLE,
                "full",
                "It is full right now; your ticket is kept, try again shortly.",
            );
            resp.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_S));
            return resp;
        }
        Err(e) if e.is_unavailable() => {
            gate.metrics.claim("unavailable");
            gate.health.down(now, &e);
            tracing::warn!(queue, error = %e, "claim refused: Valkey unreachable");
            return unavailable(&headers, "Your ticket is kept.");
        }
        Err(e) => {
            tracing::warn!(queue, error = %e, "claim failed");
            return refusal(StatusCode::BAD_REQUEST, "bad_request", &e.to_string());
        }
    };
    gate.health.up();
    gate.metrics.claim("ok");
    let now_s = now / 1000;
    let mut exp = now_s + gate.config.token_ttl.as_secs();
    if let Some(max) = gate.config.rules.settings(queue).max_session {
        exp = exp.min(now_s + max.as_secs().max(1));
    }
    let claims = Claims {
        iss: ISSUER.to_string(),
        aud: queue.to_string(),
        sub: claim.user_id.clone(),
        sid: new_session_id(),
        iat: now_s,
        exp,
        auth_time: now_s,
    };
    let token = gate.config.keys.sign(&claims);
    gate.table.session_for(&claims, now);
    tracing::info!(queue, user = claim.user_id, "ticket claimed; admitted");
    let origin = Origin::of(&headers, &uri, peer, trusted(&gate), gate.config.client_ip_header.as_ref());
    let cookie = gate.cookie_with(&headers, queue, Some(token.clone()), origin.https, now_s);
    let mut resp = if wants_json(&headers) {
        axum::Json(serde_json::json!({
            "queue": queue,
            "userId": claim.user_id,
            "token": token,
            "expiresAt": exp,
            "return": back,
        }))
        .into_response()
    } else {
        let to = HeaderValue::from_str(&back).unwrap_or(HeaderValue::from_static("/"));
        (StatusCode::SEE_OTHER, [(header::LOCATION, to)]).into_response()
    };
    resp.headers_mut().insert(header::SET_COOKIE, cookie);
    answer::no_store(&mut resp);
    resp
}

pub async fn leave(
    State(gate): State<Arc<Gate>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    uri: Uri,
    headers: HeaderMap,
    query: Result<Query<LeaveQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let Ok(Query(q)) = query else {
        return answer::error(StatusCode::BAD_REQUEST, "bad_query", "The query string cannot be read.", &headers);
    };
    let now = now_ms();
    let mut left = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for token in crate::cookie::tokens(&headers, &gate.config.cookie_name) {
        let Ok(v) = gate.table.lookup(token, &gate.config.keys, now) else { continue };
        if q.queue.as_deref().is_some_and(|queue| queue != v.claims.aud) || !seen.insert(v.claims.sid.clone()) {
            continue;
        }
        if v.claims.exp > now / 1000 && v.session.finish(SessionState::Ended) {
            gate.metrics.ended(EndReason::Leave);
            let req = EndRequest { queue: v.claims.aud.clone(), user: v.claims.sub.clone(), reason: EndReason::Leave };
            match gate.store.client().await {
                Some(client) => {
                    end_with(&gate, &client, &req).await;
                }
                None => tracing::warn!(
                    queue = req.queue,
                    "SESSION.END skipped: Valkey not connected; the lease will lapse by itself"
                ),
            }
            left.push(v.claims.aud.clone());
        }
    }
    let origin = Origin::of(&headers, &uri, peer, trusted(&gate), gate.config.client_ip_header.as_ref());
    let cookie = match q.queue.as_deref() {
        Some(queue) => gate.cookie_with(&headers, queue, None, origin.https, now / 1000),
        None => gate.cookie.set(&[], 0, origin.https),
    };
    let back = return_or_root(q.back.as_deref());
    let mut resp = if wants_html(&headers) {
        let to = HeaderValue::from_str(&back).unwrap_or(HeaderValue::from_static("/"));
        (StatusCode::SEE_OTHER, [(header::LOCATION, to)]).into_response()
    } else {
        axum::Json(serde_json::json!({ "left": !left.is_empty(), "queues": left, "return": back })).into_response()
    };
    resp.headers_mut().insert(header::SET_COOKIE, cookie);
    answer::no_store(&mut resp);
    resp
}
