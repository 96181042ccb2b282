//! Proxy mode's logic, written once: the phases of one request that both transports
//! ([`super::fast`], [`super::general`]) call, and nothing else does (as Pingora's
//! `ProxyHttp` phases are called by each of its protocols):
//!
//! 1. [`request_filter`]: the decision ([`crate::decide`]): the gate answers itself
//!    (a path it cannot read, the way to the waiting room) or forwards (an admitted
//!    person, a visitor let straight in, a request that passes), with a
//!    [`Ctx`] that the later phases read;
//! 2. [`Ctx::upstream_request_filter`]: the headers to the app: hop-by-hop headers
//!    dropped, `X-Forwarded-*` and `X-Real-IP` the gate's own, `X-Queue-User` and
//!    `X-Queue-Name` for an admitted person (a client's own copies dropped);
//! 3. [`Ctx::response_filter`]: the app's answer for the client: hop-by-hop headers
//!    dropped, the app's `Queue-Sold` taken off (reported for an admitted person,
//!    [`crate::sales`]), and for an admitted person the app's `Queue-Session: end`
//!    settled (the session ended, the cookie cleared) or a renewed token set;
//! 4. [`Ctx::fail_to_proxy`]: the gate's own answer when the app gives none to pass
//!    on (502, 504), counted, and settled as any other answer to that person.
//!
//! A transport reads and writes the bytes; what a request gets is decided here, so
//! the two paths answer alike.

use crate::answer::{self, Convention};
use crate::decide::{Decision, Incoming};
use crate::i18n::Msg;
use crate::sessions::{Session, State, Verified};
use crate::{now_ms, EndReason, Gate};
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, StatusCode, Uri};
use axum::response::Response;
use service_kit::ClientAddrs;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

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

/// What the decision leaves a request.
pub enum Step {
    /// The gate's own answer: 400 for a path it cannot read, or the way to the
    /// waiting room.
    Answer(Response),
    /// To the app, with what the later phases need.
    Forward(Ctx),
}

/// What the phases after the decision know of one forwarded request (Pingora's
/// per-request context).
pub struct Ctx {
    /// The request's Accept and Accept-Language (the form and language of an error
    /// page) and its Cookie headers (the `lang` cookie; for an admitted person, the
    /// queue's token that an ended session clears): kept before the request's headers
    /// go to the app.
    kept: HeaderMap,
    /// Whether the client came over HTTPS (the cookie is then Secure).
    https: bool,
    /// An admitted person's verified token, and the Set-Cookie with a fresh token
    /// when theirs nears expiry.
    admitted: Option<(Arc<Verified>, Option<HeaderValue>)>,
}

/// The decision phase: `path` is the request's path as sent (no query), `target` its
/// path and query (where the waiting room sends the person back to). A visitor
/// without a token is let straight in when there is room ([`crate::straight`]: one
/// Valkey call), the cookie set on the app's answer.
pub async fn request_filter(gate: &Gate, origin: &Origin, path: &str, target: &str, headers: &HeaderMap) -> Step {
    let incoming =
        Incoming { host: &origin.host, path, headers, client: origin.client, https: origin.https, renew: true };
    match gate.decide(&incoming, now_ms()) {
        Decision::BadPath => Step::Answer(answer::error(
            StatusCode::BAD_REQUEST,
            "bad_path",
            "This path cannot be read.",
            Msg::BadPath,
            headers,
        )),
        Decision::Refuse { queue, outcome, hosted } => {
            if let Some(p) = gate.straight_through(&queue, outcome, headers, origin.client, origin.https).await {
                return Step::Forward(Ctx::new(headers, origin.https, Some((p.verified, Some(p.cookie)))));
            }
            Step::Answer(gate.to_waiting_room(&queue, outcome, target, headers, Convention::Redirect, hosted))
        }
        Decision::Pass(_) => Step::Forward(Ctx::new(headers, origin.https, None)),
        Decision::Admit { verified, renewed, .. } => {
            Step::Forward(Ctx::new(headers, origin.https, Some((verified, renewed))))
        }
    }
}

/// Why the app gave no answer to pass on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// The request's path cannot be joined to the upstream's URL (400).
    Unforwardable,
    Unreachable,
    /// An answer that cannot be passed on (a head or framing that cannot be read, on
    /// either path; a 101 unasked on the fast path).
    BadAnswer,
    /// 101 to a request that asked for no upgrade (the general path).
    UnaskedUpgrade,
    Timeout,
}

impl Ctx {
    fn new(headers: &HeaderMap, https: bool, admitted: Option<(Arc<Verified>, Option<HeaderValue>)>) -> Ctx {
        let mut kept = HeaderMap::new();
        for name in [header::ACCEPT, header::ACCEPT_LANGUAGE] {
            if let Some(v) = headers.get(&name) {
                kept.insert(name, v.clone());
            }
        }
        for c in headers.get_all(header::COOKIE) {
            kept.append(header::COOKIE, c.clone());
        }
        Ctx { kept, https, admitted }
    }

    /// A request forwarded without a decision: the waiting room's, to queue-api.
    pub fn undecided(headers: &HeaderMap, https: bool) -> Ctx {
        Ctx::new(headers, https, None)
    }

    /// The admitted person's session here: a WebSocket tunnel lives as long as it.
    pub fn session(&self) -> Option<Arc<Session>> {
        self.admitted.as_ref().map(|(verified, _)| verified.session.clone())
    }

    /// The headers to the app (`host`: the request's Host, for X-Forwarded-Host).
    pub fn upstream_request_filter(
        &self,
        headers: &mut HeaderMap,
        upgrade: bool,
        origin: &Origin,
        host: Option<HeaderValue>,
    ) {
        prepare_request_headers(headers, upgrade, origin, host);
        if let Some((verified, _)) = &self.admitted {
            let claims = &verified.claims;
            if let (Ok(u), Ok(q)) = (HeaderValue::from_str(&claims.sub), HeaderValue::from_str(&claims.aud)) {
                headers.insert(QUEUE_USER, u);
                headers.insert(QUEUE_NAME, q);
            }
        }
    }

    /// The app's answer head for the client (`upgrade`: a 101 to a WebSocket, which
    /// keeps `Connection: upgrade` and `Upgrade`). The framing is the transport's.
    /// The app's `Queue-Sold` is taken off and, for an admitted person, reported.
    pub fn response_filter(&self, gate: &Gate, headers: &mut HeaderMap, upgrade: bool) {
        strip_hop_by_hop(headers, upgrade);
        let who = self.admitted.as_ref().map(|(v, _)| (v.claims.aud.as_str(), v.claims.sub.as_str()));
        gate.take_sold(headers, who);
        self.settle(gate, headers);
    }

    /// The gate's own answer when the app gave none to pass on (JSON for clients
    /// that do not take HTML), counted. The transport logs why.
    pub fn fail_to_proxy(&self, gate: &Gate, why: Failure) -> Response {
        match why {
            Failure::Unreachable | Failure::BadAnswer => gate.metrics.upstream_errors.increment(1),
            Failure::Timeout => gate.metrics.upstream_timeouts.increment(1),
            Failure::Unforwardable | Failure::UnaskedUpgrade => {}
        }
        let mut resp = failure_page(why, &self.kept);
        // An error answer still carries a renewed token.
        self.settle(gate, resp.headers_mut());
        resp
    }

    /// An admitted person's answer: its `Queue-Session: end` ends their session here
    /// and in Valkey and clears the queue's token from the cookie; otherwise a
    /// renewed token goes with it.
    fn settle(&self, gate: &Gate, headers: &mut HeaderMap) {
        let Some((verified, renewed)) = &self.admitted else { return };
        let (queue, user) = (&verified.claims.aud, &verified.claims.sub);
        let ends = headers.remove(QUEUE_SESSION).is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"end"));
        if ends {
            if verified.session.finish(State::Ended) {
                gate.end_session(queue, user, EndReason::App);
            }
            headers.append(header::SET_COOKIE, gate.cookie_with(&self.kept, queue, None, self.https, now_ms() / 1000));
        } else if let Some(cookie) = renewed {
            headers.append(header::SET_COOKIE, cookie.clone());
        }
    }
}

/// The gate's own 400 / 502 / 504 page.
fn failure_page(why: Failure, accept: &HeaderMap) -> Response {
    let (status, code, message, msg) = match why {
        Failure::Unforwardable => (StatusCode::BAD_REQUEST, "bad_path", "This path cannot be forwarded.", Msg::BadPath),
        Failure::Unreachable => (
            StatusCode::BAD_GATEWAY,
            "upstream_unreachable",
            "The site behind the waiting room could not be reached. Please try again in a moment.",
            Msg::Unreachable,
        ),
        Failure::BadAnswer => (
            StatusCode::BAD_GATEWAY,
            "upstream_answer",
            "The site behind the waiting room answered in an unexpected way.",
            Msg::BadAnswer,
        ),
        Failure::UnaskedUpgrade => (
            StatusCode::BAD_GATEWAY,
            "upstream_upgrade",
            "The site behind the waiting room answered in an unexpected way.",
            Msg::BadAnswer,
        ),
        Failure::Timeout => (
            StatusCode::GATEWAY_TIMEOUT,
            "upstream_timeout",
            "The site behind the waiting room took too long to answer. Please try again in a moment.",
            Msg::Timeout,
        ),
    };
    answer::error(status, code, message, msg, accept)
}

/// Whether the request asks for a WebSocket, the one upgrade the gate carries through.
/// Any other (`h2c` above all: a raw tunnel past the gate's decisions to whatever the
/// app speaks) is dropped with the other hop-by-hop headers, and the request goes on
/// as a plain one.
pub fn is_upgrade(headers: &HeaderMap) -> bool {
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
fn strip_hop_by_hop(headers: &mut HeaderMap, upgrade: bool) {
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

fn prepare_request_headers(headers: &mut HeaderMap, upgrade: bool, origin: &Origin, host: Option<HeaderValue>) {
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
}
