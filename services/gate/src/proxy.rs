//! Reverse-proxy mode (`--upstream`): every request that is not the gate's own is
//! decided ([`crate::decide`]) and, when it may pass, forwarded with its body
//! streamed both ways (never buffered), hop-by-hop headers dropped,
//! `X-Forwarded-For/-Proto/-Host` set and WebSocket upgrades (no other) carried through.
//! The waiting room is served the same way under `/gate/room/` from `--queue-api`.

use crate::answer::{self, Convention};
use crate::decide::{Decision, Incoming};
use crate::sessions::{Session, State, Verified};
use crate::{now_ms, EndReason, Gate};
use axum::body::Body;
use axum::extract::{ConnectInfo, Request, State as AxumState};
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use service_kit::ClientAddrs;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Instant;

/// The client the gate forwards with (a keep-alive pool per upstream).
pub type HttpClient = Client<HttpConnector, Body>;

/// The response header by which the app ends the person's session.
pub const QUEUE_SESSION: &str = "queue-session";
/// Headers the gate sets for the app; a client's own copies are dropped.
pub const QUEUE_USER: &str = "x-queue-user";
pub const QUEUE_NAME: &str = "x-queue-name";

/// Headers meaningful for one connection only (RFC 9110 7.6.1), never forwarded.
const HOP_BY_HOP: [HeaderName; 8] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
];

pub fn client() -> HttpClient {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    connector.set_connect_timeout(Some(std::time::Duration::from_secs(5)));
    Client::builder(TokioExecutor::new())
        .pool_idle_timeout(std::time::Duration::from_secs(60))
        .pool_max_idle_per_host(1024)
        .build(connector)
}

/// The original request's host, scheme and client address, as far as the gate may
/// believe the headers (`trusted`: the peer is a proxy of ours, `--trusted-proxies`,
/// `--trust-proxy`, or any caller in forward-auth mode).
pub struct Origin {
    pub host: String,
    pub https: bool,
    /// The client's address: the connection's other end, or behind trusted proxies
    /// what they say (`service_kit::client_addr`: the rightmost X-Forwarded-For
    /// entry that is not a proxy of ours); None when they say nothing: never the
    /// proxy's own address, which would put everyone behind it in its network.
    pub client: Option<IpAddr>,
    /// The address of the connection's other end (a proxy of ours when trusted).
    pub peer: IpAddr,
    /// Whether the peer is a proxy of ours, whose X-Forwarded-* headers count.
    pub trusted: bool,
}

impl Origin {
    pub fn of(headers: &HeaderMap, uri: &Uri, peer: SocketAddr, addrs: &ClientAddrs) -> Origin {
        let peer = service_kit::client_addr::canonical_ip(peer.ip());
        let trusted = addrs.peer_trusted(peer);
        let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
        let forwarded_host = if trusted { text("x-forwarded-host") } else { None };
        let host = forwarded_host
            .or_else(|| text("host"))
            .or_else(|| uri.authority().map(|a| a.as_str()))
            .unwrap_or("")
            .to_string();
        let https = trusted && text("x-forwarded-proto").is_some_and(|p| p.eq_ignore_ascii_case("https"));
        Origin { host, https, client: addrs.client(headers, peer), peer, trusted }
    }
}

/// The fallback route in proxy mode.
pub async fn forward(
    AxumState(gate): AxumState<Arc<Gate>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    req: Request,
) -> Response {
    let origin = Origin::of(req.headers(), req.uri(), peer, &gate.config.client_addrs);
    let incoming = Incoming {
        host: &origin.host,
        path: req.uri().path(),
        headers: req.headers(),
        client: origin.client,
        https: origin.https,
        renew: true,
    };
    let decision = gate.decide(&incoming, now_ms());
    let upstream = gate.config.upstream.clone().expect("proxy mode has an upstream");
    match decision {
        Decision::BadPath => {
            answer::error(StatusCode::BAD_REQUEST, "bad_path", "This path cannot be read.", req.headers())
        }
        Decision::Refuse { queue, outcome } => {
            let back = req.uri().path_and_query().map_or("/", |p| p.as_str()).to_string();
            gate.to_waiting_room(&queue, outcome, &back, req.headers(), Convention::Redirect)
        }
        Decision::Pass(_) => {
            let path = req_path(req.uri());
            send(&gate, req, &upstream, path, &origin, None).await
        }
        Decision::Admit { verified, renewed, .. } => {
            let path = req_path(req.uri());
            let admitted = Admitted {
                queue: verified.claims.aud.clone(),
                user: verified.claims.sub.clone(),
                session: verified.session.clone(),
            };
            // Only the cookie is needed afterwards (to clear the queue's token).
            let mut request_cookies = HeaderMap::new();
            for c in req.headers().get_all(header::COOKIE) {
                request_cookies.append(header::COOKIE, c.clone());
            }
            let mut resp = send(&gate, req, &upstream, path, &origin, Some(&admitted)).await;
            settle_admitted(&gate, resp.headers_mut(), &verified, renewed, &request_cookies, origin.https);
            resp
        }
    }
}

/// An admitted person's answer from the app: its `Queue-Session: end` ends their
/// session here and in Valkey and clears the queue's token from the cookie
/// (`request_cookies`: the request's Cookie headers); otherwise a renewed token goes
/// with it.
pub(crate) fn settle_admitted(
    gate: &Gate,
    headers: &mut HeaderMap,
    verified: &Verified,
    renewed: Option<HeaderValue>,
    request_cookies: &HeaderMap,
    https: bool,
) {
    let (queue, user) = (&verified.claims.aud, &verified.claims.sub);
    let ends = headers.remove(QUEUE_SESSION).is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"end"));
    if ends {
        if verified.session.finish(State::Ended) {
            gate.end_session(queue, user, EndReason::App);
        }
        headers.append(header::SET_COOKIE, gate.cookie_with(request_cookies, queue, None, https, now_ms() / 1000));
    } else if let Some(cookie) = renewed {
        headers.append(header::SET_COOKIE, cookie);
    }
}

/// Why the app gave no answer to pass on.
#[derive(Debug, Clone, Copy)]
pub(crate) enum UpstreamFailure {
    Unreachable,
    /// An answer that cannot be passed on (101 unasked, framing that cannot be read).
    BadAnswer,
    Timeout,
}

/// The gate's own 502 / 504 page (JSON for clients that do not take HTML: `accept`).
pub(crate) fn upstream_failed(why: UpstreamFailure, accept: &HeaderMap) -> Response {
    let (status, code, message) = match why {
        UpstreamFailure::Unreachable => (
            StatusCode::BAD_GATEWAY,
            "upstream_unreachable",
            "The site behind the waiting room could not be reached. Please try again in a moment.",
        ),
        UpstreamFailure::BadAnswer => (
            StatusCode::BAD_GATEWAY,
            "upstream_answer",
            "The site behind the waiting room answered in an unexpected way.",
        ),
        UpstreamFailure::Timeout => (
            StatusCode::GATEWAY_TIMEOUT,
            "upstream_timeout",
            "The site behind the waiting room took too long to answer. Please try again in a moment.",
        ),
    };
    answer::error(status, code, message, accept)
}

fn req_path(uri: &Uri) -> String {
    uri.path_and_query().map_or("/", |p| p.as_str()).to_string()
}

/// `/gate/room/*`: the waiting room, from queue-api, same-origin.
pub async fn room(
    AxumState(gate): AxumState<Arc<Gate>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    req: Request,
) -> Response {
    let Some(api) = gate.config.queue_api.clone() else {
        return answer::error(
            StatusCode::NOT_FOUND,
            "no_waiting_room",
            "This gate serves no waiting room (start it with --queue-api).",
            req.headers(),
        );
    };
    let rest = req.uri().path().strip_prefix("/gate/room").unwrap_or("/");
    if rest.is_empty() {
        let query = req.uri().query().map(|q| format!("?{q}")).unwrap_or_default();
        let to =
            HeaderValue::from_str(&format!("/gate/room/{query}")).unwrap_or(HeaderValue::from_static("/gate/room/"));
        return (StatusCode::MOVED_PERMANENTLY, [(header::LOCATION, to)]).into_response();
    }
    if !room_path(rest) {
        return answer::error(StatusCode::NOT_FOUND, "not_found", "No such page of the waiting room.", req.headers());
    }
    // Someone still admitted to the queue goes back to the app, not into line again.
    if let Some(back) = crate::readmit::back_to_app(&gate, rest, &req) {
        return back;
    }
    let path = match req.uri().query() {
        Some(q) => format!("{rest}?{q}"),
        None => rest.to_string(),
    };
    let origin = Origin::of(req.headers(), req.uri(), peer, &gate.config.client_addrs);
    send(&gate, req, &api, path, &origin, None).await
}

/// The paths of queue-api that the waiting room needs (`rest`: the path after
/// `/gate/room`): its page, the page's script, styles, proof-of-work worker, brand,
/// messages and template assets, and the public queue API. queue-api's back office
/// (`/admin`, `/api/admin/...`), metrics, health and API document are not the
/// public's, and are 404 here. The path must be plain (no escapes, dot segments or
/// doubled slashes), so that queue-api reads the same path as this check.
pub fn room_path(rest: &str) -> bool {
    if crate::rules::normalize_path(rest).as_deref() != Some(rest) {
        return false;
    }
    matches!(rest, "/" | "/app.js" | "/app.css" | "/pow-worker.js" | "/brand.css")
        || ["/i18n/", "/assets/", "/api/queue/"].iter().any(|p| rest.len() > p.len() && rest.starts_with(p))
}

/// Who an admitted request is for.
pub struct Admitted {
    pub queue: String,
    pub user: String,
    /// Their session here: a WebSocket tunnel it opens lives as long as the session.
    pub session: Arc<Session>,
}

/// Forwards `req` to `base` + `path_and_query`; maps failures to 502/504.
async fn send(
    gate: &Gate,
    mut req: Request,
    base: &Uri,
    path_and_query: String,
    origin: &Origin,
    admitted: Option<&Admitted>,
) -> Response {
    let upgrade = is_upgrade(req.headers()).then(|| hyper::upgrade::on(&mut req));
    let target = match join(base, &path_and_query) {
        Ok(u) => u,
        Err(_) => {
            return answer::error(StatusCode::BAD_REQUEST, "bad_path", "This path cannot be forwarded.", req.headers())
        }
    };
    let original_host = req.headers().get(header::HOST).cloned();
    let (mut parts, body) = req.into_parts();
    // What an error page needs of the request: whether it takes HTML.
    let mut accept = HeaderMap::new();
    if let Some(a) = parts.headers.get(header::ACCEPT) {
        accept.insert(header::ACCEPT, a.clone());
    }
    prepare_request_headers(&mut parts.headers, upgrade.is_some(), origin, original_host);
    if let Some(a) = admitted {
        if let (Ok(u), Ok(q)) = (HeaderValue::from_str(&a.user), HeaderValue::from_str(&a.queue)) {
            parts.headers.insert(QUEUE_USER, u);
            parts.headers.insert(QUEUE_NAME, q);
        }
    }
    parts.uri = target;
    parts.version = axum::http::Version::HTTP_11;
    let outgoing = axum::http::Request::from_parts(parts, body);
    let started = Instant::now();
    let answered = tokio::time::timeout(gate.config.upstream_timeout, gate.http.request(outgoing)).await;
    gate.metrics.upstream.record(started.elapsed().as_secs_f64());
    let mut resp = match answered {
        Ok(Ok(resp)) => resp,
        Ok(Err(e)) => {
            gate.metrics.upstream_errors.increment(1);
            tracing::warn!(upstream = %base, error = %e, "upstream unreachable");
            return upstream_failed(UpstreamFailure::Unreachable, &accept);
        }
        Err(_) => {
            gate.metrics.upstream_timeouts.increment(1);
            tracing::warn!(upstream = %base, timeout = ?gate.config.upstream_timeout, "upstream too slow");
            return upstream_failed(UpstreamFailure::Timeout, &accept);
        }
    };
    if resp.status() == StatusCode::SWITCHING_PROTOCOLS {
        if upgrade.is_none() {
            tracing::warn!(upstream = %base, "upstream switched protocols unasked");
            return answer::error(
                StatusCode::BAD_GATEWAY,
                "upstream_upgrade",
                "The site behind the waiting room answered in an unexpected way.",
                &accept,
            );
        }
        if let Some(client_side) = upgrade {
            let upstream_side = hyper::upgrade::on(&mut resp);
            let session = admitted.map(|a| a.session.clone());
            let tick = gate.config.tick;
            tokio::spawn(async move {
                match tokio::try_join!(client_side, upstream_side) {
                    Ok((c, u)) => tunnel(TokioIo::new(c), TokioIo::new(u), session, tick).await,
                    Err(e) => tracing::debug!(error = %e, "upgrade not completed"),
                }
            });
        }
        let (mut parts, body) = resp.into_parts();
        strip_hop_by_hop(&mut parts.headers, true);
        return Response::from_parts(parts, Body::new(body));
    }
    let (mut parts, body) = resp.into_parts();
    strip_hop_by_hop(&mut parts.headers, false);
    Response::from_parts(parts, Body::new(body))
}

/// Carries a WebSocket both ways. For an admitted person the tunnel lives as long as
/// their session: it is closed (both connections dropped) as soon as the session
/// ends here (the app's `Queue-Session: end`, `/gate/leave`, a lapsed lease found by
/// the tick, the longest session), and while it is open the person counts as seen
/// (their lease is renewed each tick, as chat-server holds it for its sockets).
async fn tunnel<C, U>(mut c: C, mut u: U, session: Option<Arc<Session>>, tick: std::time::Duration)
where
    C: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    U: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let copy = tokio::io::copy_bidirectional(&mut c, &mut u);
    let Some(session) = session else {
        let _ = copy.await;
        return;
    };
    tokio::pin!(copy);
    let mut every = tokio::time::interval(tick);
    loop {
        tokio::select! {
            _ = &mut copy => return,
            _ = session.until_finished() => {
                tracing::info!(queue = session.queue, user = session.user, "session over; WebSocket closed");
                return;
            }
            _ = every.tick() => session.hold(now_ms()),
        }
    }
}

/// Whether the request asks for a WebSocket, the one upgrade the gate carries through.
/// Any other (`h2c` above all: a raw tunnel past the gate's decisions to whatever the
/// app speaks) is dropped with the other hop-by-hop headers, and the request goes on
/// as a plain one.
fn is_upgrade(headers: &HeaderMap) -> bool {
    let mut upgrades = headers.get_all(header::UPGRADE).iter();
    let websocket = match (upgrades.next(), upgrades.next()) {
        (Some(v), None) => v.to_str().is_ok_and(|v| v.trim().eq_ignore_ascii_case("websocket")),
        _ => false,
    };
    websocket && connection_tokens(headers).any(|t| t.eq_ignore_ascii_case("upgrade"))
}

fn connection_tokens(headers: &HeaderMap) -> impl Iterator<Item = &str> {
    headers.get_all(header::CONNECTION).iter().filter_map(|v| v.to_str().ok()).flat_map(|v| v.split(',')).map(str::trim)
}

/// Drops hop-by-hop headers and those the Connection header names (never the message's
/// framing or its Host: `Connection: content-length` must not take a body's length
/// away); an upgrade keeps `Connection: upgrade` and `Upgrade`.
pub(crate) fn strip_hop_by_hop(headers: &mut HeaderMap, upgrade: bool) {
    let named: Vec<HeaderName> = connection_tokens(headers)
        .filter(|t| {
            !t.eq_ignore_ascii_case("upgrade")
                && !t.eq_ignore_ascii_case("close")
                && !t.eq_ignore_ascii_case("keep-alive")
                && !t.eq_ignore_ascii_case("content-length")
                && !t.eq_ignore_ascii_case("host")
        })
        .filter_map(|t| HeaderName::from_bytes(t.as_bytes()).ok())
        .collect();
    let upgrade_to = headers.get(header::UPGRADE).cloned();
    for name in HOP_BY_HOP.iter().chain(&named) {
        headers.remove(name);
    }
    if upgrade {
        if let Some(u) = upgrade_to {
            headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
            headers.insert(header::UPGRADE, u);
        }
    }
}

pub(crate) fn prepare_request_headers(
    headers: &mut HeaderMap,
    upgrade: bool,
    origin: &Origin,
    host: Option<HeaderValue>,
) {
    let trusted = origin.trusted;
    strip_hop_by_hop(headers, upgrade);
    for h in [QUEUE_USER, QUEUE_NAME, crate::decide::BYPASS_HEADER] {
        headers.remove(h);
    }
    // The chain passed on ends in the gate's own answer: the client it read, then the
    // proxy it came through; nothing a client wrote further left goes on, so a service
    // behind the gate that trusts more proxies than the gate does reads the same client.
    // A client unknown (or the peer itself): the peer alone.
    let xff = match origin.client {
        Some(client) if trusted => format!("{client}, {}", origin.peer),
        _ => origin.peer.to_string(),
    };
    if let Ok(v) = HeaderValue::from_str(&xff) {
        headers.insert("x-forwarded-for", v);
    }
    // X-Real-IP is the gate's answer too, never what a client sent.
    match origin.client.map(|c| HeaderValue::from_str(&c.to_string())) {
        Some(Ok(v)) => {
            headers.insert("x-real-ip", v);
        }
        _ => {
            headers.remove("x-real-ip");
        }
    }
    if !(trusted && headers.contains_key("x-forwarded-proto")) {
        headers.insert("x-forwarded-proto", HeaderValue::from_static(if origin.https { "https" } else { "http" }));
    }
    if !(trusted && headers.contains_key("x-forwarded-host")) {
        if let Some(h) = host {
            headers.insert("x-forwarded-host", h);
        }
    }
}

/// `base` (scheme, authority, maybe a path) joined with the request's path and query.
fn join(base: &Uri, path_and_query: &str) -> Result<Uri, axum::http::Error> {
    let prefix = base.path().trim_end_matches('/');
    Uri::builder()
        .scheme(base.scheme_str().unwrap_or("http"))
        .authority(base.authority().map_or("", |a| a.as_str()))
        .path_and_query(format!("{prefix}{path_and_query}"))
        .build()
}

#[cfg(test)]
mod tests {
    use super::*;
    use service_kit::ProxyFlags;

    #[test]
    fn hop_by_hop_headers_go() {
        let mut h = HeaderMap::new();
        h.insert(header::CONNECTION, HeaderValue::from_static("keep-alive, x-secret"));
        h.insert("x-secret", HeaderValue::from_static("1"));
        h.insert("keep-alive", HeaderValue::from_static("timeout=5"));
        h.insert(header::TE, HeaderValue::from_static("trailers"));
        h.insert("x-kept", HeaderValue::from_static("1"));
        strip_hop_by_hop(&mut h, false);
        assert_eq!(h.keys().map(|k| k.as_str()).collect::<Vec<_>>(), ["x-kept"]);
        // The framing and the Host stay, whatever Connection names.
        let mut h = HeaderMap::new();
        h.insert(header::CONNECTION, HeaderValue::from_static("content-length, Host"));
        h.insert(header::CONTENT_LENGTH, HeaderValue::from_static("3"));
        h.insert(header::HOST, HeaderValue::from_static("shop.test"));
        strip_hop_by_hop(&mut h, false);
        assert!(h.contains_key(header::CONTENT_LENGTH) && h.contains_key(header::HOST) && h.len() == 2, "{h:?}");
        let mut up = HeaderMap::new();
        up.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
        up.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
        assert!(is_upgrade(&up));
        for other in ["h2c", "websocket, h2c", "TLS/1.2"] {
            let mut h = up.clone();
            h.insert(header::UPGRADE, HeaderValue::from_str(other).unwrap());
            assert!(!is_upgrade(&h), "{other}");
            strip_hop_by_hop(&mut h, false);
            assert!(!h.contains_key(header::UPGRADE), "{other}");
        }
        strip_hop_by_hop(&mut up, true);
        assert_eq!(up[header::UPGRADE], "websocket");
        assert_eq!(up[header::CONNECTION], "upgrade");
    }

    #[test]
    fn forwarded_headers() {
        let peer: SocketAddr = "10.0.0.9:5000".parse().unwrap();
        let mut h = HeaderMap::new();
        h.insert("x-forwarded-for", HeaderValue::from_static("1.2.3.4, 5.6.7.8"));
        h.insert("x-forwarded-proto", HeaderValue::from_static("https"));
        h.insert(header::HOST, HeaderValue::from_static("shop.test"));
        h.insert(QUEUE_USER, HeaderValue::from_static("spoofed"));
        h.insert("x-real-ip", HeaderValue::from_static("10.1.1.1"));
        let addrs = |trust: bool, header: Option<&str>| {
            ClientAddrs::new(&ProxyFlags {
                trust_proxy: trust,
                client_ip_header: header.map(|n| HeaderName::from_bytes(n.as_bytes()).unwrap()),
                ..ProxyFlags::default()
            })
        };
        let untrusted = Origin::of(&h, &Uri::from_static("/"), peer, &addrs(false, None));
        assert_eq!((untrusted.client, untrusted.https), (Some(peer.ip()), false));
        let trusted = Origin::of(&h, &Uri::from_static("/"), peer, &addrs(true, None));
        assert_eq!((trusted.client, trusted.https), (Some("5.6.7.8".parse().unwrap()), true), "X-Real-IP not named");
        let named = Origin::of(&h, &Uri::from_static("/"), peer, &addrs(true, Some("x-real-ip")));
        assert_eq!(named.client, Some("10.1.1.1".parse().unwrap()));
        h.append("x-real-ip", HeaderValue::from_static("10.2.2.2"));
        assert_eq!(
            Origin::of(&h, &Uri::from_static("/"), peer, &addrs(true, Some("x-real-ip"))).client,
            None,
            "two values"
        );
        let bare = Origin::of(&HeaderMap::new(), &Uri::from_static("/"), peer, &addrs(true, None));
        assert_eq!(bare.client, None, "never the proxy's own address");
        h.remove("x-real-ip");
        let mut out = h.clone();
        prepare_request_headers(&mut out, false, &untrusted, h.get(header::HOST).cloned());
        assert_eq!(out["x-forwarded-for"], "10.0.0.9");
        assert_eq!(out["x-forwarded-proto"], "http");
        assert_eq!(out["x-forwarded-host"], "shop.test");
        assert!(!out.contains_key(QUEUE_USER));
        let mut out = h.clone();
        prepare_request_headers(&mut out, false, &trusted, None);
        assert_eq!(out["x-forwarded-for"], "5.6.7.8, 10.0.0.9", "what the gate read, then its peer");
        assert_eq!(out["x-real-ip"], "5.6.7.8");
        // Several lines are one list; a client's own X-Real-IP never passes.
        let mut lines = HeaderMap::new();
        lines.append("x-forwarded-for", HeaderValue::from_static("6.6.6.6"));
        lines.append("x-forwarded-for", HeaderValue::from_static("198.51.100.4"));
        lines.insert("x-real-ip", HeaderValue::from_static("6.6.6.6"));
        let origin = Origin::of(&lines, &Uri::from_static("/"), peer, &addrs(true, None));
        let mut out = lines.clone();
        prepare_request_headers(&mut out, false, &origin, None);
        assert_eq!(out.get_all("x-forwarded-for").iter().collect::<Vec<_>>(), ["198.51.100.4, 10.0.0.9"]);
        assert_eq!(out["x-real-ip"], "198.51.100.4");
        let mut out = lines.clone();
        prepare_request_headers(&mut out, false, &untrusted, None);
        assert_eq!(out["x-real-ip"], "10.0.0.9", "an untrusted peer is the client");
    }

    #[test]
    fn joins_base_and_path() {
        let base: Uri = "http://127.0.0.1:3000/app/".parse().unwrap();
        assert_eq!(join(&base, "/x?y=1").unwrap().to_string(), "http://127.0.0.1:3000/app/x?y=1");
        let root: Uri = "http://127.0.0.1:3000".parse().unwrap();
        assert_eq!(join(&root, "/").unwrap().to_string(), "http://127.0.0.1:3000/");
    }
}
