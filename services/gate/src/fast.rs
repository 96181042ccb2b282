//! The proxy's fast path: the plain requests of proxy mode (most of them) read,
//! decided and forwarded on the client connection's own task, the request head
//! written to the app as it came with the gate's headers applied, the answer's head
//! read and relayed with its body as the app framed it, over a pool of kept-alive
//! connections to the app. No second HTTP codec, router or channel between tasks on
//! the way: that is where the general path spends most of its time per request.
//!
//! Anything else goes to the general path ([`crate::proxy`], hyper and the router) for
//! the rest of the connection, from the request that is not plain on: the gate's own
//! endpoints (`/gate...`, `/.well-known/`), upgrades (WebSockets), `Expect`, request
//! bodies sent chunked or larger than [`MAX_BODY`] (streamed there), HTTP/1.0,
//! absolute or unusual request targets, heads that are malformed or too large (hyper
//! answers them). Both paths decide, forward and answer alike; the integration tests
//! run every proxy behaviour through both.

use crate::answer::{self, Convention};
use crate::decide::{Decision, Incoming};
use crate::proxy::{self, Origin, UpstreamFailure, QUEUE_NAME, QUEUE_USER};
use crate::sessions::Verified;
use crate::{now_ms, Gate};
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Uri};
use axum::response::Response;
use bytes::{Buf, Bytes, BytesMut};
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::watch;

/// Headers a plain request may have; more go to the general path.
const MAX_HEADERS: usize = 64;
/// The largest request head read here (hyper answers larger ones: 431).
const MAX_HEAD: usize = 64 * 1024;
/// The largest request body read whole before forwarding (as nginx buffers small
/// bodies); larger ones are streamed by the general path.
pub const MAX_BODY: usize = 64 * 1024;
/// How long a kept-alive connection to the app waits in the pool at most (apps close
/// idle ones after a few seconds; one closed meanwhile is seen when taken).
const POOL_IDLE: Duration = Duration::from_secs(30);
/// Idle connections to the app kept at most.
const POOL_MAX: usize = 1024;
/// How long connecting to the app may take (as the general path's client).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// The route label of proxied requests in `http_server_requests_seconds` (as the
/// router labels its fallback).
const ROUTE: &str = "unmatched";

/// The app as the fast path reaches it: plain HTTP only.
pub struct Upstream {
    /// `host:port`, to connect to.
    addr: String,
    /// The Host header for requests that came without one.
    authority: String,
    /// The base URL's path, before every forwarded path.
    prefix: String,
    /// Kept-alive connections, the most recently used last.
    idle: Mutex<Vec<(TcpStream, Instant)>>,
}

impl Upstream {
    /// The fast path's view of `--upstream` (None for a scheme it does not speak).
    pub fn of(base: &Uri) -> Option<Upstream> {
        if base.scheme_str() != Some("http") {
            return None;
        }
        let authority = base.authority()?;
        let addr = format!("{}:{}", authority.host(), authority.port_u16().unwrap_or(80));
        Some(Upstream {
            addr,
            authority: authority.as_str().to_string(),
            prefix: base.path().trim_end_matches('/').to_string(),
            idle: Mutex::new(Vec::new()),
        })
    }

    /// An idle connection still open with nothing to read: one the app closed, or that
    /// carries bytes past its last answer, is dropped (the reactor knows it readable, so
    /// a quiet connection costs no call).
    fn take(&self) -> Option<TcpStream> {
        loop {
            let (conn, since) = self.idle.lock().unwrap().pop()?;
            if since.elapsed() >= POOL_IDLE {
                continue;
            }
            match conn.try_read(&mut [0u8; 1]) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Some(conn),
                _ => continue,
            }
        }
    }

    fn put(&self, conn: TcpStream) {
        let mut idle = self.idle.lock().unwrap();
        if idle.len() >= POOL_MAX {
            idle.remove(0);
        }
        idle.push((conn, Instant::now()));
    }

    async fn connect(&self) -> io::Result<TcpStream> {
        let conn = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(&self.addr))
            .await
            .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "connect timed out"))??;
        conn.set_nodelay(true)?;
        Ok(conn)
    }
}

/// A plain request's head, owned.
struct Head {
    method: Method,
    /// The request target as sent (origin form: path and query).
    target: String,
    headers: HeaderMap,
    /// Bytes of the head.
    len: usize,
    /// Bytes of the body (Content-Length).
    body: usize,
    /// Whether it came with a Content-Length (then the app gets one, of the body read).
    length: bool,
    /// The client asked to close after this request.
    close: bool,
}

enum Parsed {
    Plain(Head),
    /// More bytes needed.
    Partial,
    /// For the general path.
    Other,
}

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
    let Some(upstream) = gate.fast.as_ref() else { return };
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
                match parse_request(&buf) {
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
            let rest = Rewind { pre: buf.split().freeze(), inner: tcp };
            let io = hyper_util::rt::TokioIo::new(rest);
            service_kit::http::serve_connection(http, router, io, peer, closing).await;
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

/// Whether `buf` may hold a whole head: an empty line (CRLF or a bare LF, as httparse
/// reads them) ending after `from`.
fn head_ends(buf: &[u8], from: usize) -> bool {
    if buf.ends_with(b"\r\n\r\n") {
        return true; // the usual case: a head read whole, nothing after it
    }
    let rest = &buf[from.saturating_sub(3)..];
    memchr::memmem::find(rest, b"\n\r\n").is_some() || memchr::memmem::find(rest, b"\n\n").is_some()
}

/// Reads a request head from `buf`; `Plain` only for what the fast path serves.
fn parse_request(buf: &[u8]) -> Parsed {
    if buf.is_empty() {
        return Parsed::Partial;
    }
    let mut slots = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut slots);
    let len = match req.parse(buf) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Parsed::Partial,
        Err(_) => return Parsed::Other,
    };
    let (Some(method), Some(target), Some(1)) = (req.method, req.path, req.version) else { return Parsed::Other };
    // A fragment is not sent (hyper drops it, and decides on the path before it).
    let own = target.starts_with("/gate") || target.starts_with("/.well-known/");
    if !target.starts_with('/') || target.contains('#') || own {
        return Parsed::Other;
    }
    // The target as hyper would take it (its character rules), for the same answers.
    if target.parse::<axum::http::uri::PathAndQuery>().is_err() {
        return Parsed::Other;
    }
    let Ok(method) = Method::from_bytes(method.as_bytes()) else { return Parsed::Other };
    if method == Method::CONNECT {
        return Parsed::Other;
    }
    let mut headers = HeaderMap::with_capacity(req.headers.len());
    let mut body = None;
    let mut close = false;
    for h in req.headers.iter() {
        let Ok(name) = HeaderName::from_bytes(h.name.as_bytes()) else { return Parsed::Other };
        let Ok(value) = HeaderValue::from_bytes(h.value) else { return Parsed::Other };
        if name == header::TRANSFER_ENCODING || name == header::UPGRADE || name == header::EXPECT {
            return Parsed::Other;
        }
        if name == header::CONTENT_LENGTH {
            let digits = value.as_bytes();
            if body.is_some() || digits.is_empty() || digits.len() > 7 || !digits.iter().all(u8::is_ascii_digit) {
                return Parsed::Other;
            }
            let n: usize = std::str::from_utf8(digits).ok().and_then(|d| d.parse().ok()).unwrap_or(usize::MAX);
            if n > MAX_BODY {
                return Parsed::Other;
            }
            body = Some(n);
        }
        if name == header::CONNECTION {
            close |=
                value.to_str().map(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case("close"))).unwrap_or(false);
        }
        headers.append(name, value);
    }
    let length = body.is_some();
    Parsed::Plain(Head { method, target: target.to_string(), headers, len, body: body.unwrap_or(0), length, close })
}

/// Decides and answers one request; false when the connection must close.
async fn serve_one(
    gate: &Gate,
    upstream: &Upstream,
    head: &mut Head,
    body: Bytes,
    peer: SocketAddr,
    client: &mut TcpStream,
    ubuf: &mut BytesMut,
) -> bool {
    let started = Instant::now();
    let span = service_kit::metrics::request_span(head.method.as_str(), ROUTE, &head.headers);
    let config = &gate.config;
    let origin = Origin::of(&head.headers, &Uri::from_static("/"), peer, &config.client_addrs);
    let path = head.target.split('?').next().unwrap_or("/");
    let incoming = Incoming {
        host: &origin.host,
        path,
        headers: &head.headers,
        client: origin.client,
        https: origin.https,
        renew: true,
    };
    let is_head = head.method == Method::HEAD;
    let (status, keep) = match gate.decide(&incoming, now_ms()) {
        Decision::BadPath => {
            let resp = answer::error(StatusCode::BAD_REQUEST, "bad_path", "This path cannot be read.", &head.headers);
            write_answer(client, resp, head.close, is_head).await
        }
        Decision::Refuse { queue, outcome } => {
            let resp = gate.to_waiting_room(&queue, outcome, &head.target, &head.headers, Convention::Redirect);
            write_answer(client, resp, head.close, is_head).await
        }
        Decision::Pass(_) => forward(gate, upstream, head, body, &origin, None, client, ubuf).await,
        Decision::Admit { verified, renewed, .. } => {
            forward(gate, upstream, head, body, &origin, Some((&verified, renewed)), client, ubuf).await
        }
    };
    if let Some(span) = span {
        service_kit::metrics::end_request_span(&span, status);
    }
    gate.metrics.registry.record_http(head.method.as_str(), ROUTE, status, started);
    keep
}

/// How the app's answer ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    /// No body (HEAD, 204, 304).
    Empty,
    Length(u64),
    Chunked,
    /// Until the app closes the connection.
    Close,
}

/// The app's answer head.
struct RespHead {
    status: StatusCode,
    headers: HeaderMap,
    len: usize,
    framing: Framing,
    /// The app closes its connection after this answer.
    close: bool,
}

#[allow(clippy::too_many_arguments)]
async fn forward(
    gate: &Gate,
    upstream: &Upstream,
    head: &mut Head,
    body: Bytes,
    origin: &Origin,
    admitted: Option<(&Arc<Verified>, Option<HeaderValue>)>,
    client: &mut TcpStream,
    ubuf: &mut BytesMut,
) -> (StatusCode, bool) {
    // What an error page, and the cookie of an ended session, need of the request.
    let mut kept = HeaderMap::new();
    for name in [header::ACCEPT, header::COOKIE] {
        for v in head.headers.get_all(&name) {
            kept.append(name.clone(), v.clone());
        }
    }
    let mut headers = std::mem::take(&mut head.headers);
    let host = headers.get(header::HOST).cloned();
    proxy::prepare_request_headers(&mut headers, false, origin, host.clone());
    // The body's length is the gate's to say: exactly the bytes it read and sends.
    headers.remove(header::CONTENT_LENGTH);
    if head.length {
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from(body.len()));
    }
    if let Some((verified, _)) = &admitted {
        let claims = &verified.claims;
        if let (Ok(u), Ok(q)) = (HeaderValue::from_str(&claims.sub), HeaderValue::from_str(&claims.aud)) {
            headers.insert(QUEUE_USER, u);
            headers.insert(QUEUE_NAME, q);
        }
    }
    let mut out = Vec::with_capacity(head.len + 256 + body.len());
    out.extend_from_slice(head.method.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(upstream.prefix.as_bytes());
    out.extend_from_slice(head.target.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
    if host.is_none() {
        put_header(&mut out, "host", upstream.authority.as_bytes());
    }
    for (name, value) in &headers {
        put_header(&mut out, name.as_str(), value.as_bytes());
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(&body);

    let started = Instant::now();
    let is_head = head.method == Method::HEAD;
    let retry = idempotent(&head.method);
    // An error answer still carries a renewed token (as the general path's does).
    let renewed_cookie = admitted.as_ref().and_then(|(_, r)| r.clone());
    let answered =
        tokio::time::timeout(gate.config.upstream_timeout, exchange(upstream, &out, ubuf, is_head, retry)).await;
    gate.metrics.upstream.record(started.elapsed().as_secs_f64());
    let (mut conn, resp) = match answered {
        Ok(Ok(got)) => got,
        Ok(Err(e)) => {
            gate.metrics.upstream_errors.increment(1);
            tracing::warn!(upstream = %upstream.addr, error = %e, "upstream unreachable");
            let why = if e.kind() == io::ErrorKind::InvalidData {
                UpstreamFailure::BadAnswer
            } else {
                UpstreamFailure::Unreachable
            };
            let mut resp = proxy::upstream_failed(why, &kept);
            resp.headers_mut().extend(renewed_cookie.map(|c| (header::SET_COOKIE, c)));
            return write_answer(client, resp, head.close, is_head).await;
        }
        Err(_) => {
            gate.metrics.upstream_timeouts.increment(1);
            tracing::warn!(upstream = %upstream.addr, timeout = ?gate.config.upstream_timeout, "upstream too slow");
            let mut resp = proxy::upstream_failed(UpstreamFailure::Timeout, &kept);
            resp.headers_mut().extend(renewed_cookie.map(|c| (header::SET_COOKIE, c)));
            return write_answer(client, resp, head.close, is_head).await;
        }
    };

    // The answer's head for the client: hop-by-hop headers dropped, the session
    // header taken, cookies added; the body framed as the app framed it.
    let status = resp.status;
    let mut headers = resp.headers;
    proxy::strip_hop_by_hop(&mut headers, false);
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
        headers.insert(header::DATE, http_date());
    }
    if let Some((verified, renewed)) = admitted {
        proxy::settle_admitted(gate, &mut headers, verified, renewed, &kept, origin.https);
    }
    let close = head.close || resp.framing == Framing::Close;
    let mut out = Vec::with_capacity(256 + ubuf.len());
    status_line(&mut out, status);
    for (name, value) in &headers {
        put_header(&mut out, name.as_str(), value.as_bytes());
    }
    if resp.framing == Framing::Chunked {
        out.extend_from_slice(b"transfer-encoding: chunked\r\n");
    }
    if close {
        out.extend_from_slice(b"connection: close\r\n");
    }
    out.extend_from_slice(b"\r\n");
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

/// Sends the request and reads the answer's head, on a kept-alive connection or a
/// new one. A kept-alive connection the app had closed meanwhile (nothing read back)
/// is tried again on a new one when that cannot do a request twice: the request was
/// not written, or its method is idempotent.
async fn exchange(
    upstream: &Upstream,
    request: &[u8],
    ubuf: &mut BytesMut,
    is_head: bool,
    idempotent: bool,
) -> io::Result<(TcpStream, RespHead)> {
    let mut pooled = upstream.take();
    loop {
        let reused = pooled.is_some();
        let mut conn = match pooled.take() {
            Some(conn) => conn,
            None => upstream.connect().await?,
        };
        ubuf.clear();
        let written = conn.write_all(request).await;
        let unsent = written.is_err();
        let read = match written {
            Ok(()) => read_response_head(&mut conn, ubuf, is_head).await,
            Err(e) => Err(e),
        };
        match read {
            Ok(head) => return Ok((conn, head)),
            Err(e) if reused && ubuf.is_empty() && (unsent || idempotent) && stale(&e) => continue,
            Err(e) => return Err(e),
        }
    }
}

/// Errors of a connection closed under us.
fn stale(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::UnexpectedEof
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::BrokenPipe
            | io::ErrorKind::ConnectionAborted
    )
}

fn idempotent(m: &Method) -> bool {
    matches!(*m, Method::GET | Method::HEAD | Method::OPTIONS | Method::PUT | Method::DELETE | Method::TRACE)
}

fn invalid(why: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, why.to_string())
}

/// Reads the app's answer head into `ubuf` (interim 1xx answers skipped).
async fn read_response_head(conn: &mut TcpStream, ubuf: &mut BytesMut, is_head: bool) -> io::Result<RespHead> {
    loop {
        if let Some(head) = parse_response(ubuf, is_head)? {
            if head.status.is_informational() {
                if head.status == StatusCode::SWITCHING_PROTOCOLS {
                    return Err(invalid("the upstream switched protocols unasked"));
                }
                ubuf.advance(head.len);
                continue;
            }
            return Ok(head);
        }
        if ubuf.len() >= MAX_HEAD {
            return Err(invalid("the upstream's answer head is too large"));
        }
        ubuf.reserve(16 * 1024);
        if conn.read_buf(ubuf).await? == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
    }
}

fn parse_response(buf: &[u8], is_head: bool) -> io::Result<Option<RespHead>> {
    let mut slots = [httparse::EMPTY_HEADER; 100];
    let mut resp = httparse::Response::new(&mut slots);
    let len = match resp.parse(buf) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(invalid(&format!("the upstream's answer head: {e}"))),
    };
    let status = resp.code.and_then(|c| StatusCode::from_u16(c).ok()).ok_or_else(|| invalid("no status"))?;
    let mut headers = HeaderMap::with_capacity(resp.headers.len());
    let mut close = resp.version != Some(1);
    let mut length: Option<u64> = None;
    let mut chunked = None;
    for h in resp.headers.iter() {
        let name = HeaderName::from_bytes(h.name.as_bytes()).map_err(|_| invalid("a bad header name"))?;
        let value = HeaderValue::from_bytes(h.value).map_err(|_| invalid("a bad header value"))?;
        if name == header::CONTENT_LENGTH {
            let digits = value.as_bytes();
            if digits.is_empty() || digits.len() > 19 || !digits.iter().all(u8::is_ascii_digit) {
                return Err(invalid("a bad length"));
            }
            let n: u64 =
                value.to_str().ok().and_then(|v| v.trim().parse().ok()).ok_or_else(|| invalid("a bad length"))?;
            if length.is_some_and(|l| l != n) {
                return Err(invalid("two lengths"));
            }
            length = Some(n);
        } else if name == header::TRANSFER_ENCODING {
            // The last coding decides: chunked, or the body runs until the close.
            let last = value.to_str().ok().and_then(|v| v.rsplit(',').next()).map(str::trim);
            chunked = Some(last.is_some_and(|l| l.eq_ignore_ascii_case("chunked")));
        } else if name == header::CONNECTION {
            let tokens = value.to_str().unwrap_or("");
            close |= tokens.split(',').any(|t| t.trim().eq_ignore_ascii_case("close"));
        }
        headers.append(name, value);
    }
    let code = status.as_u16();
    let framing = if is_head || status.is_informational() || code == 204 || code == 304 {
        Framing::Empty
    } else {
        match (chunked, length) {
            (Some(true), _) => Framing::Chunked,
            (Some(false), _) => Framing::Close,
            (None, Some(n)) => Framing::Length(n),
            (None, None) => Framing::Close,
        }
    };
    if framing == Framing::Close {
        close = true;
    }
    Ok(Some(RespHead { status, headers, len, framing, close }))
}

/// Relays the answer's body after `out` (its head) to the client; `ubuf` holds what
/// was read past the head. True when the app's connection ended exactly at the
/// answer's end (it may carry another request).
async fn relay(
    conn: &mut TcpStream,
    client: &mut TcpStream,
    ubuf: &mut BytesMut,
    framing: Framing,
    mut out: Vec<u8>,
) -> io::Result<bool> {
    let mut scanner = Chunks::default();
    let mut left = match framing {
        Framing::Length(n) => n,
        _ => 0,
    };
    loop {
        // What of `ubuf` belongs to this answer, and whether the answer is complete.
        let (take, done) = match framing {
            Framing::Empty => (0, true),
            Framing::Length(_) => {
                let take = (ubuf.len() as u64).min(left) as usize;
                left -= take as u64;
                (take, left == 0)
            }
            Framing::Chunked => match scanner.feed(ubuf).map_err(|_| invalid("bad chunked framing"))? {
                Some(end) => (end, true),
                None => (ubuf.len(), false),
            },
            Framing::Close => (ubuf.len(), false),
        };
        out.extend_from_slice(&ubuf[..take]);
        ubuf.advance(take);
        if !out.is_empty() {
            client.write_all(&out).await?;
            out.clear();
        }
        if done {
            return Ok(ubuf.is_empty());
        }
        ubuf.clear();
        ubuf.reserve(16 * 1024);
        if conn.read_buf(ubuf).await? == 0 {
            return if framing == Framing::Close { Ok(false) } else { Err(io::ErrorKind::UnexpectedEof.into()) };
        }
    }
}

/// Where a chunked body ends, read as it passes (RFC 9112 7.1): sizes in hex, chunk
/// extensions and trailers skipped.
#[derive(Debug, Default)]
struct Chunks {
    state: ChunkState,
    size: u64,
    /// Hex digits of the size line read so far.
    digits: u32,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum ChunkState {
    #[default]
    Size,
    Extension,
    SizeLf,
    Data,
    DataCr,
    DataLf,
    TrailerStart,
    Trailer,
    TrailerLf,
    EndLf,
}

impl Chunks {
    /// Reads `bytes` on; Some(n) when the body ends after the first n of them.
    fn feed(&mut self, bytes: &[u8]) -> Result<Option<usize>, ()> {
        use ChunkState::*;
        let mut i = 0;
        while i < bytes.len() {
            let b = bytes[i];
            match self.state {
                Size => match b {
                    b'0'..=b'9' | b'a'..=b'f' | b'A'..=b'F' => {
                        let digit = (b as char).to_digit(16).ok_or(())? as u64;
                        self.size = self.size.checked_mul(16).and_then(|s| s.checked_add(digit)).ok_or(())?;
                        self.digits += 1;
                    }
                    _ if self.digits == 0 => return Err(()),
                    b';' => self.state = Extension,
                    b'\r' => self.state = SizeLf,
                    _ => return Err(()),
                },
                Extension => match b {
                    b'\r' => self.state = SizeLf,
                    b'\n' | 0..=8 | 10..=31 | 127 => return Err(()),
                    _ => {}
                },
                SizeLf => {
                    if b != b'\n' {
                        return Err(());
                    }
                    self.state = if self.size == 0 { TrailerStart } else { Data };
                }
                Data => {
                    let n = (self.size).min((bytes.len() - i) as u64) as usize;
                    self.size -= n as u64;
                    i += n;
                    if self.size == 0 {
                        self.state = DataCr;
                    }
                    continue;
                }
                DataCr => self.state = if b == b'\r' { DataLf } else { return Err(()) },
                DataLf => {
                    if b != b'\n' {
                        return Err(());
                    }
                    self.state = Size;
                    self.digits = 0;
                }
                TrailerStart => {
                    self.state = match b {
                        b'\r' => EndLf,
                        b'\n' => return Err(()),
                        _ => Trailer,
                    }
                }
                Trailer => match b {
                    b'\r' => self.state = TrailerLf,
                    b'\n' => return Err(()),
                    _ => {}
                },
                TrailerLf => self.state = if b == b'\n' { TrailerStart } else { return Err(()) },
                EndLf => {
                    return if b == b'\n' { Ok(Some(i + 1)) } else { Err(()) };
                }
            }
            i += 1;
        }
        Ok(None)
    }
}

fn put_header(out: &mut Vec<u8>, name: &str, value: &[u8]) {
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

fn status_line(out: &mut Vec<u8>, status: StatusCode) {
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(status.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(status.canonical_reason().unwrap_or("").as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// The Date header's value now.
fn http_date() -> HeaderValue {
    HeaderValue::from_str(&httpdate::fmt_http_date(std::time::SystemTime::now())).expect("a date is ASCII")
}

/// Writes one of the gate's own answers (a whole body, none to a HEAD); returns its
/// status and whether the connection may carry another request.
async fn write_answer(client: &mut TcpStream, resp: Response, close: bool, is_head: bool) -> (StatusCode, bool) {
    let (parts, body) = resp.into_parts();
    let body = axum::body::to_bytes(body, usize::MAX).await.unwrap_or_default();
    let close =
        close || parts.headers.get(header::CONNECTION).is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"close"));
    let mut out = Vec::with_capacity(256 + body.len());
    status_line(&mut out, parts.status);
    for (name, value) in &parts.headers {
        if name != header::CONTENT_LENGTH && name != header::TRANSFER_ENCODING && name != header::CONNECTION {
            put_header(&mut out, name.as_str(), value.as_bytes());
        }
    }
    put_header(&mut out, "content-length", body.len().to_string().as_bytes());
    if !parts.headers.contains_key(header::DATE) {
        put_header(&mut out, "date", http_date().as_bytes());
    }
    if close {
        out.extend_from_slice(b"connection: close\r\n");
    }
    out.extend_from_slice(b"\r\n");
    if !is_head {
        out.extend_from_slice(&body);
    }
    let ok = client.write_all(&out).await.is_ok();
    (parts.status, ok && !close)
}

/// A connection with bytes already read from it put back in front, for the general
/// path to read the request the fast path did not serve.
struct Rewind {
    pre: Bytes,
    inner: TcpStream,
}

impl AsyncRead for Rewind {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        if !self.pre.is_empty() {
            let n = self.pre.len().min(buf.remaining());
            buf.put_slice(&self.pre[..n]);
            self.pre.advance(n);
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for Rewind {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ends(parts: &[&[u8]]) -> Result<Option<usize>, ()> {
        let mut c = Chunks::default();
        let mut seen = 0;
        for p in parts {
            if let Some(n) = c.feed(p)? {
                return Ok(Some(seen + n));
            }
            seen += p.len();
        }
        Ok(None)
    }

    #[test]
    fn chunked_bodies_end_where_they_end() {
        let body: &[u8] = b"5\r\nhello\r\n1A;ext=1\r\nabcdefghijklmnopqrstuvwxyz\r\n0\r\n\r\nGET / HTTP/1.1";
        let end = body.len() - b"GET / HTTP/1.1".len();
        assert_eq!(ends(&[body]), Ok(Some(end)));
        // Cut anywhere, the end is found at the same place.
        for cut in 1..end {
            assert_eq!(ends(&[&body[..cut], &body[cut..]]), Ok(Some(end)), "cut at {cut}");
        }
        assert_eq!(ends(&[b"0\r\nx-trailer: 1\r\n\r\n"]), Ok(Some(19)));
        assert_eq!(ends(&[b"5\r\nhel"]), Ok(None));
        for bad in [
            &b"5\r\nhelloX\r\n"[..],
            b"g\r\n",
            b"5\nhello",
            b"ffffffffffffffffff\r\n",
            b"\r\n",
            b";x\r\n",
            b"5 \r\nhello\r\n",
            b"0\r\nx-trailer: 1\n\r\n",
            b"0\r\n\n",
        ] {
            assert_eq!(ends(&[bad]), Err(()), "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn a_head_end_is_found_wherever_it_came() {
        let two = b"GET / HTTP/1.1\r\nHost: a\r\n\r\nGET /b HTTP/1.1\r\n";
        assert!(head_ends(two, 0));
        assert!(head_ends(b"GET / HTTP/1.1\n\n", 0), "bare LF, as httparse reads it");
        assert!(!head_ends(b"GET / HTTP/1.1\r\nHost: a\r\n", 0));
        // Read a byte at a time, each read scanned from where the last one ended.
        let head = b"GET / HTTP/1.1\r\nHost: a\r\n\r\n";
        let found = (1..=head.len()).find(|&n| head_ends(&head[..n], n - 1));
        assert_eq!(found, Some(head.len()));
    }

    #[test]
    fn only_plain_requests_are_served_here() {
        let plain = |r: &str| matches!(parse_request(r.as_bytes()), Parsed::Plain(_));
        assert!(plain("GET /checkout?x=1 HTTP/1.1\r\nHost: a\r\n\r\n"));
        assert!(plain("POST /buy HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabc"));
        for other in [
            "GET /gate/claim HTTP/1.1\r\nHost: a\r\n\r\n",
            "GET /.well-known/jwks.json HTTP/1.1\r\n\r\n",
            "GET / HTTP/1.0\r\n\r\n",
            "GET http://a/ HTTP/1.1\r\n\r\n",
            "GET /checkout#.css HTTP/1.1\r\n\r\n",
            "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
            "POST / HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc",
            "POST / HTTP/1.1\r\nContent-Length: +3\r\n\r\nabc",
            "POST / HTTP/1.1\r\nContent-Length: 1000000\r\n\r\n",
            "GET / HTTP/1.1\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\n",
            "GET / HTTP/1.1\r\nExpect: 100-continue\r\n\r\n",
            "CONNECT a:443 HTTP/1.1\r\n\r\n",
            "GET / HTTP/1.1\r\nBad Header: 1\r\n\r\n",
        ] {
            assert!(!plain(other), "{other:?}");
        }
        assert!(matches!(parse_request(b"GET / HTTP/1.1\r\nHost: a\r\n"), Parsed::Partial));
        let Parsed::Plain(h) = parse_request(b"GET / HTTP/1.1\r\nConnection: keep-alive, Close\r\n\r\n") else {
            panic!("plain")
        };
        assert!(h.close);
    }

    #[test]
    fn answers_are_framed_as_the_app_framed_them() {
        let framing = |r: &str, is_head: bool| parse_response(r.as_bytes(), is_head).unwrap().unwrap().framing;
        assert_eq!(framing("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", false), Framing::Length(5));
        assert_eq!(framing("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", true), Framing::Empty);
        assert_eq!(framing("HTTP/1.1 204 No Content\r\n\r\n", false), Framing::Empty);
        assert_eq!(
            framing("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\nContent-Length: 5\r\n\r\n", false),
            Framing::Chunked
        );
        assert_eq!(framing("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n", false), Framing::Close);
        assert_eq!(framing("HTTP/1.1 200 OK\r\n\r\n", false), Framing::Close);
        assert!(parse_response(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n", false).is_err());
        assert!(parse_response(b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n", false).is_err());
        assert!(parse_response(b"HTTP/1.1 200 OK\r\nContent-Length: +5\r\n\r\n", false).is_err());
        assert!(parse_response(b"HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\n", false).unwrap().unwrap().close);
    }
}
