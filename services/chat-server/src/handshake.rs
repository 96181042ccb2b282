//! `GET /gameserver?ticketId=&queue=&presence=1&holder=`: the ticket is claimed before the upgrade, so
//! a refusal is an ordinary HTTP response the client can see (seed 000: 401 for a
//! missing, unknown, expired or used ticket, 409 for a user already connected, 503
//! when the room is full or Valkey is unreachable).
//!
//! Durable claims (`--durable-replicas`): the claim is acknowledged once the replicas
//! hold it. A client that names itself with the optional `holder` parameter (a random
//! value it keeps for this ticket) gets 503 `not_durable` with Retry-After when they
//! do not confirm in time, and its retry with the same ticket and holder gets in; a
//! client without `holder` (seed 000's) is claimed under a holder only this server
//! knows and let in even then, as before durable claims (counted by
//! `chatserver_claims_not_durable_total`). Without durable claims `holder` is ignored.
//!
//! The upgrade is done here rather than with axum's WebSocket extractor to reach
//! tungstenite's raw frames: a large frame (the presence snapshot of a big room) is
//! sent in fragments, so no socket keeps a buffer the size of the largest frame it
//! ever sent.

use crate::conn_limit::Refusal;
use crate::error::HandshakeError;
use crate::lease::LeaseGuard;
use crate::{session, AppState};
use axum::body::Body;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, Request, State};
use axum::http::{header, HeaderMap, HeaderName, StatusCode, Version};
use axum::response::{IntoResponse, Response};
use futures_util::{SinkExt, StreamExt};
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;
use queue_client::{Claim, ClientError, QueueClient};
use serde::Deserialize;
use service_kit::ClientAddr;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::oneshot;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::frame::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::Role;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::{Message, Utf8Bytes};
use tokio_tungstenite::WebSocketStream;
use tracing::Instrument;

#[derive(Deserialize)]
pub struct Params {
    #[serde(rename = "ticketId")]
    ticket_id: Option<String>,
    queue: Option<String>,
    /// `presence=1` (or `true`): also send the presence frames and ERROR notices.
    presence: Option<String>,
    /// Optional: who claims (1-64 characters from the ticket id's), for durable
    /// claims: the retry of a claim not confirmed in time must name the same holder.
    holder: Option<String>,
}

pub async fn gameserver(
    State(state): State<Arc<AppState>>,
    ClientAddr(ip): ClientAddr,
    params: Result<Query<Params>, QueryRejection>,
    req: Request,
) -> Response {
    let handshake = match params {
        Ok(Query(params)) => accept(&state, ip, params, req).await,
        Err(_) => Err(HandshakeError::BadQuery),
    };
    match handshake {
        Ok(resp) => resp,
        Err(e) => {
            state.metrics.refused(e);
            tracing::debug!(reason = e.code(), "handshake refused");
            let mut resp = e.into_response();
            if e == HandshakeError::TooManyTicketFailures {
                let wait = state.ticket_failures.blocked(ip, Instant::now()).unwrap_or(1);
                resp.headers_mut().insert(header::RETRY_AFTER, wait.into());
            }
            resp
        }
    }
}

fn has_token(headers: &HeaderMap, name: HeaderName, token: &str) -> bool {
    headers
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| t.trim().eq_ignore_ascii_case(token))
}

async fn accept(
    state: &Arc<AppState>,
    ip: IpAddr,
    params: Params,
    mut req: Request,
) -> Result<Response, HandshakeError> {
    let headers = req.headers();
    if !has_token(headers, header::CONNECTION, "upgrade") || !has_token(headers, header::UPGRADE, "websocket") {
        return Err(HandshakeError::NotWebSocket);
    }
    if req.version() != Version::HTTP_11
        || headers.get(header::SEC_WEBSOCKET_VERSION).is_none_or(|v| v.as_bytes() != b"13")
    {
        return Err(HandshakeError::BadUpgrade);
    }
    let key = headers.get(header::SEC_WEBSOCKET_KEY).ok_or(HandshakeError::BadUpgrade)?.clone();
    let on_upgrade = req.extensions_mut().remove::<OnUpgrade>().ok_or(HandshakeError::BadUpgrade)?;
    let queue = match params.queue.filter(|q| !q.is_empty()) {
        Some(q) => queue_core::keys::check_queue(q.as_bytes()).map_err(|_| HandshakeError::BadQueue)?.to_string(),
        None => state.config.queue.clone(),
    };
    if state.shutting_down() {
        return Err(HandshakeError::ShuttingDown);
    }
    let extended = matches!(params.presence.as_deref(), Some("1" | "true"));
    let ticket = params.ticket_id.filter(|t| !t.is_empty()).ok_or(HandshakeError::MissingTicket)?;
    if state.ticket_failures.blocked(ip, Instant::now()).is_some() {
        return Err(HandshakeError::TooManyTicketFailures);
    }
    let guessed = |e: HandshakeError| {
        if e == HandshakeError::UnknownTicket {
            state.ticket_failures.failed(ip, Instant::now());
        }
        e
    };
    queue_core::keys::check_ticket(ticket.as_bytes()).map_err(|_| guessed(HandshakeError::UnknownTicket))?;
    let holder = match params.holder.filter(|h| !h.is_empty()) {
        Some(h) if queue_core::keys::check_ticket(h.as_bytes()).is_ok() => Some(h),
        Some(_) => return Err(HandshakeError::BadHolder),
        None => None,
    };
    // The limits come before the claim: a refused client keeps its ticket.
    let permit = match state.limits.acquire(ip) {
        Ok(permit) => permit,
        Err(why) => {
            let e = match why {
                Refusal::Full => HandshakeError::TooManySessions,
                Refusal::PerAddress => HandshakeError::TooManyFromAddress,
            };
            return refuse_with_1013(state, e, key.as_bytes(), on_upgrade);
        }
    };
    let client = state.store.client().await.ok_or(HandshakeError::Unavailable)?;
    let claim = claim_detached(state.clone(), client.clone(), queue.clone(), ticket, holder)
        .await
        .map_err(|e| guessed(e.into()))?;
    warn_if_lease_is_short(state, &queue, &claim);
    let lease = LeaseGuard::new(client, &queue, &claim.user_id);
    let tracked = state.sessions.enter();
    let (state, config) = (state.clone(), session::ws_config(&state.config));
    tokio::spawn(async move {
        let _tracked = tracked;
        let _permit = permit;
        match on_upgrade.await {
            Ok(upgraded) => {
                let ws = WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Server, Some(config)).await;
                session::run(ws, state, queue, claim, lease, extended).await;
            }
            Err(e) => {
                tracing::debug!(error = %e, "upgrade failed after the claim; ending the session");
                lease.end().await;
            }
        }
    });
    Ok(switching(key.as_bytes()))
}

fn switching(key: &[u8]) -> Response {
    Response::builder()
        .status(StatusCode::SWITCHING_PROTOCOLS)
        .header(header::CONNECTION, "upgrade")
        .header(header::UPGRADE, "websocket")
        .header(header::SEC_WEBSOCKET_ACCEPT, derive_accept_key(key))
        .body(Body::empty())
        .expect("a valid response")
}

/// Refusals with 1013 under way at most; past this a refusal is a plain 503.
const MAX_REFUSING: usize = 1024;
/// How long a refused socket waits for the client's answer to the close.
const REFUSAL_LINGER: Duration = Duration::from_secs(1);

/// A session limit is reached: the upgrade is taken and the socket closed at once with
/// 1013 (try again later) and the wait in the reason, the ticket left unclaimed. So
/// that a flood cannot pile up sockets being refused, past [`MAX_REFUSING`] of them
/// the refusal is a plain 503 with Retry-After instead.
fn refuse_with_1013(
    state: &Arc<AppState>,
    e: HandshakeError,
    key: &[u8],
    on_upgrade: OnUpgrade,
) -> Result<Response, HandshakeError> {
    if state.refusing.live() >= MAX_REFUSING {
        return Err(e);
    }
    state.metrics.refused(e);
    tracing::debug!(reason = e.code(), "session limit reached; closing with 1013");
    let refusing = state.refusing.enter();
    let reason = format!("{}; retry after {} s", e.message(), crate::error::LIMIT_RETRY_AFTER);
    tokio::spawn(async move {
        let _refusing = refusing;
        let Ok(upgraded) = on_upgrade.await else { return };
        let config = WebSocketConfig::default().read_buffer_size(256).write_buffer_size(0);
        let mut ws = WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Server, Some(config)).await;
        let close = CloseFrame { code: CloseCode::Again, reason: Utf8Bytes::from(reason) };
        let _ = tokio::time::timeout(REFUSAL_LINGER, async {
            ws.send(Message::Close(Some(close))).await?;
            while let Some(msg) = ws.next().await {
                msg?;
            }
            Ok::<(), tokio_tungstenite::tungstenite::Error>(())
        })
        .await;
    });
    Ok(switching(key))
}

/// A holder only this server knows, for a durable claim by a client that names none.
fn server_holder() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

/// The claim: as before without durable claims; with them, by the client's holder
/// (NotDurable when the replicas do not confirm in time), or for a client that names
/// none by a holder of this server's, let in even when not confirmed in time (its
/// retry could not get the ticket again).
async fn claim(
    state: &AppState,
    client: &QueueClient,
    queue: &str,
    ticket: &str,
    holder: Option<String>,
) -> Result<Claim, ClientError> {
    if !client.durability().is_on() {
        return client.claim(queue, ticket).await;
    }
    if let Some(h) = holder {
        let claimed = client.claim_as(queue, ticket, &h).await;
        if matches!(claimed, Err(ClientError::NotDurable(_))) {
            state.metrics.not_durable.increment(1);
        }
        return claimed;
    }
    let h = server_holder();
    match client.claim_as(queue, ticket, &h).await {
        Err(ClientError::NotDurable(why)) => {
            state.metrics.not_durable.increment(1);
            tracing::warn!(
                queue,
                why,
                "claim not confirmed by the replicas in time; admitted (the client names no holder)"
            );
            // The same holder gets the same claim again, without waiting.
            client.clone().with_durability(queue_client::Durability::OFF)?.claim_as(queue, ticket, &h).await
        }
        other => other,
    }
}

/// TICKET.CLAIM in a task of its own: if the client hangs up while the claim is on
/// its way, the claim still completes and its session is ended at once instead of
/// holding a slot until the lease runs out.
async fn claim_detached(
    state: Arc<AppState>,
    client: QueueClient,
    queue: String,
    ticket: String,
    holder: Option<String>,
) -> Result<Claim, ClientError> {
    let (tx, rx) = oneshot::channel();
    tokio::spawn(
        // The claim belongs to the handshake's trace (or to none, like it).
        queue_client::tracing_as_now(async move {
            let claimed = claim(&state, &client, &queue, &ticket, holder).await;
            if let Err(Ok(claim)) = tx.send(claimed) {
                tracing::debug!(queue, user = claim.user_id, "client left during the claim; ending its session");
                let _ = client.end_session(&queue, &claim.user_id).await;
            }
        })
        .instrument(tracing::Span::current()),
    );
    rx.await.unwrap_or_else(|_| Err(ClientError::Unavailable("the claim did not complete".into())))
}

/// A lease shorter than two heartbeats would lapse between them: say so, once.
fn warn_if_lease_is_short(state: &AppState, queue: &str, claim: &Claim) {
    static WARNED: AtomicBool = AtomicBool::new(false);
    if (claim.lease_ms as u128) < state.config.heartbeat.as_millis() * 2 && !WARNED.swap(true, Ordering::Relaxed) {
        tracing::warn!(
            queue,
            lease_ms = claim.lease_ms,
            heartbeat_ms = state.config.heartbeat.as_millis() as u64,
            "the queue's session_lease is shorter than two heartbeats: sessions may lose their lease"
        );
    }
}
