//! The fast path: the plain requests of proxy mode (most of them) read, decided and
//! forwarded on the client connection's own task, the request head
//! written to the app as it came with the gate's headers applied, the answer's head
//! read and relayed with its body as the app framed it, over a pool of kept-alive
//! connections to the app. No second HTTP codec, router or channel between tasks on
//! the way: that is where the general path spends most of its time per request.
//! Forward-auth calls (`/gate/auth`, `/gate/auth/<path>`), in forward-auth mode as in
//! proxy mode, are read here too and answered by [`crate::auth::forward_auth`], the
//! router's own handler, written back without hyper.
//!
//! Anything else goes to the general path ([`super::general`], hyper and the router) for
//! the rest of the connection, from the request that is not plain on: the gate's other
//! endpoints (`/gate...`, `/.well-known/`), upgrades (WebSockets), `Expect`, request
//! bodies sent chunked or larger than [`MAX_BODY`] (streamed there), HTTP/1.0,
//! absolute or unusual request targets, heads that are malformed or too large (hyper
//! answers them). Both paths decide, forward and answer by the same phases
//! ([`super::phases`]); `tests/framing.rs` runs every case through both (the
//! general path alone with `--fast-path off`).
//!
//! One file per concern, as Pingora's `protocols/http/v1/`: this one the connection
//! loop and one request's way; [`request`] the client's request head; [`pool`] the
//! connections to the app; [`response`] the app's answer, its framing and relay;
//! [`chunks`] where a chunked body ends; [`writer`] the bytes written either way.

mod chunks;
mod pool;
mod request;
mod response;
mod writer;

pub use pool::Upstream;
pub use request::MAX_BODY;

use super::phases::{self, Ctx, Failure, Origin, Step};
use crate::{auth, Gate};
use axum::http::{header, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use bytes::{Buf, Bytes, BytesMut};
use request::{head_ends, parse_request, Head, Kind, Parsed};
use response::{relay, Framing};
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::task::Poll;
use std::time::Instant;
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use tokio::sync::watch;
use tracing::Instrument;
use writer::write_answer;

/// The largest head read here, the client's request's or the app's answer's (hyper
/// answers a larger request head: 431).
const MAX_HEAD: usize = 64 * 1024;
/// The route label of proxied requests in `http_server_requests_seconds` (as the
/// router labels its fallback).
const ROUTE: &str = "unmatched";
/// The route labels of forward-auth calls (as the router labels them).
const AUTH_ROUTE: &str = "/gate/auth";
const AUTH_ROUTE_ENVOY: &str = "/gate/auth/{*rest}";

/// Serves one client connection of proxy mode: plain requests here, the rest of the
/// connection by `router` (hyper) from the first request that is not plain.
pub async fn connection(
    gate: Arc<Gate>,
    router: axum::Router,
    http: Arc<hyper::server::conn::http1::Builder>,
    mut tcp: TcpStream,
    peer: SocketAddr,
    mut closing: watch::Receiver<bool>,
) {
    let upstream = gate.fast.as_ref();
    let mut buf = BytesMut::with_capacity(8 * 1024);
    let mut ubuf = BytesMut::with_capacity(16 * 1024);
    loop {
        // The next request head, within the header timeout from the last answer.
        let deadline = tokio::time::Instant::now() + gate.config.limits.header_timeout;
        // Parsed again only once a head's end may have come (a head sent a byte at a
        // time is not parsed once per byte).
        let mut scanned = 0;
        let head = loop {
            if head_ends(&buf, scanned) {
                match parse_request(&buf, upstream.is_some()) {
                    Parsed::Plain(head) => break Some(head),
                    Parsed::Other => break None,
                    Parsed::Partial => {}
                }
            }
            if buf.len() >= MAX_HEAD {
                break None;
            }
            scanned = buf.len();
            buf.reserve(8 * 1024);
            let idle = buf.is_empty();
            let read = tokio::select! {
                read = tokio::time::timeout_at(deadline, tcp.read_buf(&mut buf)) => read,
                _ = closing.wait_for(|c| *c), if idle => return,
            };
            match read {
                Ok(Ok(n)) if n > 0 => {}
                _ => return, // closed, failed, or too slow with its head (as hyper does)
            }
        };
        let Some(mut head) = head else {
            // The head still within this loop's header timeout (hyper's own would start
            // afresh).
            let by = Some(deadline);
            service_kit::http::serve_rewound(http, router, buf.split().freeze(), tcp, peer, closing, by).await;
            return;
        };
        // The body, read whole (it is small), within the request timeout.
        let limit = gate.config.limits.request_timeout;
        let whole = head.len + head.body;
        if buf.len() < whole {
            buf.reserve(whole - buf.len());
            let read_body = async {
                while buf.len() < whole {
                    if tcp.read_buf(&mut buf).await? == 0 {
                        return Err(io::ErrorKind::UnexpectedEof.into());
                    }
                }
                Ok::<_, io::Error>(())
            };
            match tokio::time::timeout(limit, read_body).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => return,
                Err(_) => {
                    let _ = write_answer(&mut tcp, service_kit::http::request_timed_out(limit), true, false).await;
                    return;
                }
            }
        }
        let request = buf.split_to(whole).freeze();
        let body = request.slice(head.len..);
        // Shutting down: this answer is the connection's last, and says so.
        head.close |= *closing.borrow();
        let keep = serve_one(&gate, upstream, &mut head, body, peer, &mut tcp, &mut ubuf).await;
        if !keep || head.close {
            return;
        }
    }
}

/// Decides and answers one request; false when the connection must close.
async fn serve_one(
    gate: &Gate,
    upstream: Option<&Upstream>,
    head: &mut Head,
    body: Bytes,
    peer: SocketAddr,
    client: &mut TcpStream,
    ubuf: &mut BytesMut,
) -> bool {
    let started = Instant::now();
    let is_head = head.method == Method::HEAD;
    let (path, query) = match head.target.split_once('?') {
        Some((path, query)) => (path, Some(query)),
        None => (head.target.as_str(), None),
    };
    let (route, span, status, keep) = match (head.kind, upstream) {
        (Kind::Proxy, Some(upstream)) => {
            let span = service_kit::metrics::request_span(head.method.as_str(), ROUTE, &head.headers);
            let origin = Origin::of(&head.headers, &Uri::from_static("/"), peer, &gate.config.client_addrs);
            let (status, keep) = match phases::request_filter(gate, &origin, path, &head.target, &head.headers).await {
                Step::Answer(resp) => write_answer(client, resp, head.close, is_head).await,
                Step::Forward(ctx) => forward(gate, upstream, head, body, &origin, &ctx, client, ubuf).await,
            };
            (ROUTE, span, status, keep)
        }
        // The parser takes a request for the app only in proxy mode; were one to come
        // here without an app, it is not decided (as the router without a fallback).
        (Kind::Proxy, None) => {
            let (status, _) = write_answer(client, StatusCode::NOT_FOUND.into_response(), true, is_head).await;
            (ROUTE, None, status, false)
        }
        // A forward-auth call, answered as the router's /gate/auth answers it.
        (Kind::Auth, _) => {
            let route = if path == "/gate/auth" { AUTH_ROUTE } else { AUTH_ROUTE_ENVOY };
            let span = service_kit::metrics::request_span(head.method.as_str(), route, &head.headers);
            let answer = auth::forward_auth(gate, &head.method, path, query, &head.headers, peer);
            // Traced as the router traces its requests: the Valkey call of a straight
            // pass in the request's span, or not at all.
            let resp = match &span {
                Some(span) => own_answer(gate, answer.instrument(span.clone())).await,
                None => own_answer(gate, queue_client::untraced(answer)).await,
            };
            let (status, keep) = write_answer(client, resp, head.close, is_head).await;
            (route, span, status, keep)
        }
    };
    if let Some(span) = span {
        service_kit::metrics::end_request_span(&span, status);
    }
    gate.metrics.registry.record_http(head.method.as_str(), route, status, started);
    keep
}

/// One of the gate's own answers, bounded by `--request-timeout` as the router bounds
/// them (408 past it); the timer is set only for an answer that waits (a straight
/// pass's Valkey call): a decision answered at once costs none.
async fn own_answer(gate: &Gate, answer: impl Future<Output = Response>) -> Response {
    let mut answer = std::pin::pin!(answer);
    match std::future::poll_fn(|cx| Poll::Ready(answer.as_mut().poll(cx))).await {
        Poll::Ready(resp) => resp,
        Poll::Pending => {
            let limit = gate.config.limits.request_timeout;
            tokio::time::timeout(limit, answer).await.unwrap_or_else(|_| service_kit::http::request_timed_out(limit))
        }
    }
}

/// Forwards one request to the app and relays its answer, the phases of `ctx`
/// applied; returns the answer's status and whether the connection may carry
/// another request.
#[allow(clippy::too_many_arguments)]
async fn forward(
    gate: &Gate,
    upstream: &Upstream,
    head: &mut Head,
    body: Bytes,
    origin: &Origin,
    ctx: &Ctx,
    client: &mut TcpStream,
    ubuf: &mut BytesMut,
) -> (StatusCode, bool) {
    let mut headers = std::mem::take(&mut head.headers);
    let host = headers.get(header::HOST).cloned();
    ctx.upstream_request_filter(&mut headers, false, origin, host.clone());
    // The body's length is the gate's to say: exactly the bytes it read and sends.
    headers.remove(header::CONTENT_LENGTH);
    if head.length {
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from(body.len()));
    }
    let authority = host.is_none().then_some(upstream.authority.as_str());
    let out = writer::request(&head.method, &upstream.prefix, &head.target, authority, &headers, &body);

    let started = Instant::now();
    let is_head = head.method == Method::HEAD;
    let answered =
        tokio::time::timeout(gate.config.upstream_timeout, upstream.exchange(&out, ubuf, &head.method)).await;
    gate.metrics.upstream.record(started.elapsed().as_secs_f64());
    let (mut conn, resp) = match answered {
        Ok(Ok(got)) => got,
        Ok(Err(e)) => {
            tracing::warn!(upstream = %upstream.addr, error = %e, "upstream unreachable");
            let why = if e.kind() == io::ErrorKind::InvalidData { Failure::BadAnswer } else { Failure::Unreachable };
            return write_answer(client, ctx.fail_to_proxy(gate, why), head.close, is_head).await;
        }
        Err(_) => {
            tracing::warn!(upstream = %upstream.addr, timeout = ?gate.config.upstream_timeout, "upstream too slow");
            return write_answer(client, ctx.fail_to_proxy(gate, Failure::Timeout), head.close, is_head).await;
        }
    };

    // The answer's head for the client: the phases' filter applied; the body framed
    // as the app framed it.
    let status = resp.status;
    let mut headers = resp.headers;
    ctx.response_filter(gate, &mut headers, false);
    // The length the gate relays is the one it says (one header, its own digits).
    match resp.framing {
        Framing::Chunked | Framing::Close => {
            headers.remove(header::CONTENT_LENGTH);
        }
        Framing::Length(n) => {
            headers.insert(header::CONTENT_LENGTH, HeaderValue::from(n));
        }
        Framing::Empty => {}
    }
    if !headers.contains_key(header::DATE) {
        headers.insert(header::DATE, writer::http_date());
    }
    let close = head.close || resp.framing == Framing::Close;
    let out = writer::response_head(status, &headers, resp.framing == Framing::Chunked, close, ubuf.len());
    ubuf.advance(resp.len);
    let relayed = relay(&mut conn, client, ubuf, resp.framing, out).await;
    match relayed {
        Ok(reusable) => {
            if reusable && !resp.close {
                upstream.put(conn);
            }
            (status, !close)
        }
        Err(e) => {
            tracing::debug!(error = %e, "a proxied answer was cut off");
            (status, false)
        }
    }
}
