//! Slow clients: how long a request head and a whole request may take, for every
//! HTTP server of the system (a slowloris client, one that sends its head or body a
//! byte at a time, is cut off instead of holding a connection and a task forever).
//!
//! - the head: `--header-timeout` (10 s) from the moment the connection is accepted
//!   or the previous response was sent; past it the connection is closed;
//! - the whole request, body included, up to the response's head: `--request-timeout`
//!   (10 s); past it the answer is 408 `{"error": "request_timeout"}` and the
//!   connection closes. What a response streams afterwards (a push stream, a
//!   WebSocket after its upgrade) is not limited by it.

use axum::extract::{ConnectInfo, Request};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::{Json, Router};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use std::future::Future;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tower::ServiceExt;

/// How long shutdown waits for requests in flight.
pub const DRAIN_LIMIT: Duration = Duration::from_secs(10);

/// The two limits, as flags every HTTP service takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::Args)]
pub struct HttpLimits {
    /// How long a client may take to send a request head (100ms to 5m).
    #[arg(long, env = "HEADER_TIMEOUT", default_value = "10s",
          value_parser = crate::duration(Duration::from_millis(100)..=Duration::from_secs(300)))]
    pub header_timeout: Duration,
    /// How long a whole request (head and body) may take until its answer begins;
    /// past it, 408 (100ms to 5m).
    #[arg(long, env = "REQUEST_TIMEOUT", default_value = "10s",
          value_parser = crate::duration(Duration::from_millis(100)..=Duration::from_secs(300)))]
    pub request_timeout: Duration,
}

impl Default for HttpLimits {
    fn default() -> Self {
        HttpLimits { header_timeout: Duration::from_secs(10), request_timeout: Duration::from_secs(10) }
    }
}

/// `router` with every request bounded by `limit` until its response head (408 past it).
pub fn with_request_timeout<S: Clone + Send + Sync + 'static>(router: Router<S>, limit: Duration) -> Router<S> {
    router.layer(axum::middleware::from_fn(move |req: Request, next: Next| async move {
        match tokio::time::timeout(limit, next.run(req)).await {
            Ok(resp) => resp,
            Err(_) => request_timed_out(limit),
        }
    }))
}

/// The 408 a request past `--request-timeout` gets.
pub fn request_timed_out(limit: Duration) -> Response {
    let message = format!("the request took longer than {} to arrive", humantime::format_duration(limit));
    let mut resp =
        (StatusCode::REQUEST_TIMEOUT, Json(serde_json::json!({ "error": "request_timeout", "message": message })))
            .into_response();
    resp.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
    resp
}

/// The next connection (no Nagle delay), or None once `shutdown` completes. A failed
/// accept (out of file descriptors and the like) is logged and retried after a pause
/// instead of spinning.
pub async fn accept(
    listener: &TcpListener,
    mut shutdown: std::pin::Pin<&mut impl Future<Output = ()>>,
) -> Option<(TcpStream, std::net::SocketAddr)> {
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((tcp, peer)) => {
                    let _ = tcp.set_nodelay(true);
                    return Some((tcp, peer));
                }
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            _ = shutdown.as_mut() => return None,
        }
    }
}

/// The HTTP/1.1 server settings every service uses: keep-alive, request heads bounded
/// by `limits.header_timeout`.
pub fn http1(limits: HttpLimits) -> hyper::server::conn::http1::Builder {
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new()).header_read_timeout(limits.header_timeout).keep_alive(true);
    http
}

/// Serves `router` over HTTP/1.1 (with upgrades, for WebSockets) on `listener` until
/// `shutdown` completes, then finishes the requests in flight (at most
/// [`DRAIN_LIMIT`]). Handlers may ask for the peer's address with
/// `ConnectInfo<SocketAddr>`; request heads are bounded by `limits.header_timeout`
/// (whole requests by [`with_request_timeout`], which the router applies itself).
pub async fn serve(
    listener: TcpListener,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
    limits: HttpLimits,
) -> std::io::Result<()> {
    let http = std::sync::Arc::new(http1(limits));
    serve_with(listener, shutdown, move |tcp, peer, closing| {
        serve_connection(http.clone(), router.clone(), TokioIo::new(tcp), peer, closing)
    })
    .await
}

/// Accepts connections on `listener` until `shutdown` completes, each served by
/// `handle` in a task of its own; then tells them to finish (the receiver turns true:
/// finish the request in flight and close) and waits for them, [`DRAIN_LIMIT`] at most.
pub async fn serve_with<H, F>(
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
    handle: H,
) -> std::io::Result<()>
where
    H: Fn(TcpStream, std::net::SocketAddr, tokio::sync::watch::Receiver<bool>) -> F,
    F: Future<Output = ()> + Send + 'static,
{
    // Each connection holds a sender, so the receiver learns when the last one is gone.
    let (closing_tx, closing) = tokio::sync::watch::channel(false);
    let (live, mut all_gone) = tokio::sync::mpsc::channel::<()>(1);
    tokio::pin!(shutdown);
    while let Some((tcp, peer)) = accept(&listener, shutdown.as_mut()).await {
        let served = handle(tcp, peer, closing.clone());
        let live = live.clone();
        tokio::spawn(async move {
            let _live = live;
            served.await;
        });
    }
    drop(listener);
    let _ = closing_tx.send(true);
    drop(live);
    if tokio::time::timeout(DRAIN_LIMIT, all_gone.recv()).await.is_err() {
        tracing::warn!("connections still open at shutdown were dropped");
    }
    Ok(())
}

/// Serves one connection (`io`, from `peer`) with `router` until it ends; once
/// `closing` turns true, the request in flight is finished and the connection closed.
pub async fn serve_connection<I>(
    http: std::sync::Arc<hyper::server::conn::http1::Builder>,
    router: Router,
    io: I,
    peer: std::net::SocketAddr,
    closing: tokio::sync::watch::Receiver<bool>,
) where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    serve_connection_by(http, router, io, peer, closing, None).await
}

/// [`serve_connection`], the connection closed at `first_head_by` if its first
/// request head has not come whole by then (hyper's `header_read_timeout` counts
/// from when hyper begins reading, not from when the connection was accepted).
async fn serve_connection_by<I>(
    http: std::sync::Arc<hyper::server::conn::http1::Builder>,
    router: Router,
    io: I,
    peer: std::net::SocketAddr,
    mut closing: tokio::sync::watch::Receiver<bool>,
    first_head_by: Option<tokio::time::Instant>,
) where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    use std::sync::atomic::{AtomicBool, Ordering};
    // Set once hyper has read a request head whole (it calls the service then).
    let headed = std::sync::Arc::new(AtomicBool::new(false));
    let seen = headed.clone();
    let service = hyper::service::service_fn(move |mut req: hyper::Request<Incoming>| {
        seen.store(true, Ordering::Relaxed);
        req.extensions_mut().insert(ConnectInfo(peer));
        router.clone().oneshot(req.map(axum::body::Body::new))
    });
    let conn = http.serve_connection(io, service).with_upgrades();
    tokio::pin!(conn);
    let first_head_late = async {
        if let Some(by) = first_head_by {
            tokio::time::sleep_until(by).await;
            if !headed.load(Ordering::Relaxed) {
                return;
            }
        }
        std::future::pending::<()>().await
    };
    let first = tokio::select! {
        ended = conn.as_mut() => Some(ended),
        _ = async { let _ = closing.wait_for(|c| *c).await; } => None,
        _ = first_head_late => {
            tracing::debug!("the first request head took longer than the header timeout");
            return;
        }
    };
    let ended = match first {
        Some(ended) => ended,
        None => {
            conn.as_mut().graceful_shutdown();
            conn.await
        }
    };
    if let Err(e) = ended {
        tracing::debug!(error = %e, "connection ended with an error");
    }
}

/// Serves one connection whose first bytes (`read`) were already taken from `tcp`
/// (to see who serves it) with `router`, as [`serve_connection`] does: hyper reads
/// them again first. `first_head_by`: the connection is closed then if the request
/// head those bytes began has not come whole (the reader's header timeout, which
/// hyper's own would start again).
pub async fn serve_rewound(
    http: std::sync::Arc<hyper::server::conn::http1::Builder>,
    router: Router,
    read: impl Into<bytes::Bytes>,
    tcp: TcpStream,
    peer: std::net::SocketAddr,
    closing: tokio::sync::watch::Receiver<bool>,
    first_head_by: Option<tokio::time::Instant>,
) {
    let io = TokioIo::new(crate::rewind::Rewind::new(read, tcp));
    serve_connection_by(http, router, io, peer, closing, first_head_by).await
}

/// The largest first request head [`serve_peeking`] reads itself; a larger one goes
/// to hyper, which refuses it.
const MAX_PEEK: usize = 8 * 1024;
/// How long a first request head already on its way may still take once shutdown
/// begins (one not begun is dropped at once).
const HEAD_GRACE_AT_SHUTDOWN: Duration = Duration::from_millis(500);

/// Serves `router` as [`serve`] does, except for connections whose first request
/// `outside` picks (by its method and path, read from the request line): those are
/// handed whole to `serve_outside`, with that request (its head; a body, if any, is
/// left on the socket) and the socket, so that a long-lived answer (a push stream)
/// can be written without hyper's per-connection buffers. Every other connection is
/// served by hyper from its first byte ([`serve_rewound`]), as soon as its request
/// line shows it is not one of them.
pub async fn serve_peeking<P, S, F>(
    listener: TcpListener,
    router: Router,
    limits: HttpLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
    outside: P,
    serve_outside: S,
) -> std::io::Result<()>
where
    P: Fn(&str, &str) -> bool + Clone + Send + Sync + 'static,
    S: Fn(TcpStream, Router, Request) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = ()> + Send + 'static,
{
    let http = std::sync::Arc::new(http1(limits));
    serve_with(listener, shutdown, move |mut tcp, peer, closing| {
        let (router, http, outside, serve_outside) =
            (router.clone(), http.clone(), outside.clone(), serve_outside.clone());
        // The first head, whoever reads it, comes within the header timeout from the
        // accept: peeking does not give a slow client a second one in hyper.
        let first_head_by = tokio::time::Instant::now() + limits.header_timeout;
        async move {
            // Boxed too: the peek's state (the head read so far, its timers) is freed
            // once it is done, and the connection's task is not sized for it.
            let peeked = Box::pin(peek(&mut tcp, peer, closing.clone(), first_head_by, &outside)).await;
            match peeked {
                Peeked::Gone => {}
                Peeked::Outside(req) => {
                    drop(closing);
                    // Boxed, like hyper's branch: the connection's task stays small,
                    // and each branch holds only what it needs.
                    Box::pin(serve_outside(tcp, router, *req)).await
                }
                Peeked::Hyper(read) => {
                    let io = TokioIo::new(crate::rewind::Rewind::new(read, tcp));
                    Box::pin(serve_connection_by(http, router, io, peer, closing, Some(first_head_by))).await
                }
            }
        }
    })
    .await
}

/// Who serves a connection, once its first bytes are read.
enum Peeked {
    /// Closed, too slow with its head, or shutting down before it sent one.
    Gone,
    /// hyper, with the bytes read so far.
    Hyper(bytes::Bytes),
    /// The caller, with the first request (its head whole).
    Outside(Box<Request>),
}

/// Reads `tcp` until its request line says who serves it, and for a request served
/// outside hyper until its head is whole, by `first_head_by`.
async fn peek<P: Fn(&str, &str) -> bool>(
    tcp: &mut TcpStream,
    peer: std::net::SocketAddr,
    mut closing: tokio::sync::watch::Receiver<bool>,
    first_head_by: tokio::time::Instant,
    outside: &P,
) -> Peeked {
    use tokio::io::AsyncReadExt;
    let mut head = bytes::BytesMut::new();
    let mut idle_closing = closing.clone();
    // Some(answer), or None: hyper, with `head`.
    let read_head = async {
        loop {
            match look(&head, peer, outside) {
                Look::More if head.len() <= MAX_PEEK => {}
                Look::Outside(req) => return Some(Peeked::Outside(req)),
                Look::More | Look::Hyper => return None,
            }
            head.reserve(512);
            let idle = head.is_empty();
            let read = tokio::select! {
                read = tcp.read_buf(&mut head) => read,
                // A connection that sent nothing yet ends at once on shutdown.
                _ = idle_closing.wait_for(|c| *c), if idle => return Some(Peeked::Gone),
            };
            match read {
                Ok(0) | Err(_) => return None,
                Ok(_) => {}
            }
        }
    };
    // A head not whole soon after shutdown begins is dropped with its connection:
    // no request on it has been taken yet.
    let peeked = tokio::select! {
        read = tokio::time::timeout_at(first_head_by, read_head) => read.unwrap_or(Some(Peeked::Gone)),
        _ = async {
            let _ = closing.wait_for(|c| *c).await;
            tokio::time::sleep(HEAD_GRACE_AT_SHUTDOWN).await;
        } => Some(Peeked::Gone),
    };
    match peeked {
        Some(peeked) => peeked,
        None if head.is_empty() => Peeked::Gone, // closed before sending anything
        None => Peeked::Hyper(head.freeze()),
    }
}

enum Look {
    More,
    Hyper,
    Outside(Box<Request>),
}

/// What `head` (the first bytes of a connection) says: the request line, parsed,
/// asked of `outside` (method, path without the query); a request it picks, once its
/// head is whole. Anything httparse cannot read goes to hyper, which answers it.
fn look<P: Fn(&str, &str) -> bool>(head: &[u8], peer: std::net::SocketAddr, outside: &P) -> Look {
    let mut slots = [httparse::EMPTY_HEADER; 64];
    let mut req = httparse::Request::new(&mut slots);
    let whole = match req.parse(head) {
        Ok(httparse::Status::Complete(_)) => true,
        Ok(httparse::Status::Partial) => false,
        Err(_) => return Look::Hyper,
    };
    // httparse fills in the method and the target as soon as it has read them.
    let (Some(method), Some(target)) = (req.method, req.path) else { return Look::More };
    let path = target.split('?').next().unwrap_or(target);
    if !outside(method, path) {
        return Look::Hyper;
    }
    if !whole {
        return Look::More;
    }
    let mut builder = axum::http::Request::builder().method(method).uri(target);
    for h in req.headers.iter() {
        builder = builder.header(h.name, h.value);
    }
    match builder.body(axum::body::Body::empty()) {
        Ok(mut request) => {
            request.extensions_mut().insert(ConnectInfo(peer));
            Look::Outside(Box::new(request))
        }
        Err(_) => Look::Hyper,
    }
}

/// The Bearer token of `Authorization`, if any (the scheme in any case, RFC 9110 11.1).
pub fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim()).filter(|t| !t.is_empty())
}

/// The value of the first cookie called `name` (quotes around it dropped).
pub fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(n, _)| *n == name)
        .map(|(_, v)| v.trim_matches('"'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::routing::post;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    async fn start(limits: HttpLimits) -> (SocketAddr, tokio::sync::oneshot::Sender<()>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let router = with_request_timeout(
            Router::new().route("/", post(|body: String| async move { body })),
            limits.request_timeout,
        );
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(serve(
            listener,
            router,
            async {
                let _ = stopped.await;
            },
            limits,
        ));
        (addr, stop)
    }

    /// Everything the server sends until it closes (bounded: a test fails rather than hangs).
    async fn until_closed(conn: &mut tokio::net::TcpStream) -> String {
        let mut all = Vec::new();
        tokio::time::timeout(Duration::from_secs(5), conn.read_to_end(&mut all)).await.expect("closed in time").ok();
        String::from_utf8_lossy(&all).into_owned()
    }

    use std::net::SocketAddr;

    #[test]
    fn the_request_line_says_who_serves_a_connection() {
        let peer: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let streams = |method: &str, path: &str| method == "GET" && path == "/stream";
        let look_at = |head: &str| look(head.as_bytes(), peer, &streams);
        assert!(matches!(look_at(""), Look::More));
        assert!(matches!(look_at("GET /str"), Look::More), "the target not read to its end");
        assert!(matches!(look_at("GET /other HTTP/1.1\r\n"), Look::Hyper), "known before the head ends");
        assert!(matches!(look_at("GET /streams HTTP/1.1\r\n\r\n"), Look::Hyper));
        assert!(matches!(look_at("POST /stream HTTP/1.1\r\n\r\n"), Look::Hyper));
        assert!(matches!(look_at("GET /stream?q=a HTTP/1.1\r\nHost: x\r\n"), Look::More), "picked: the whole head");
        let Look::Outside(req) = look_at("GET /stream?q=a HTTP/1.1\r\nHost: x\r\n\r\n") else { panic!("outside") };
        assert_eq!((req.uri().path(), req.uri().query()), ("/stream", Some("q=a")));
        assert_eq!(req.headers()["host"], "x");
        assert_eq!(req.extensions().get::<ConnectInfo<SocketAddr>>().map(|c| c.0), Some(peer));
        assert!(matches!(look_at("GET /stream HTTP/1.1\r\nBad Header: 1\r\n\r\n"), Look::Hyper), "hyper answers it");
    }

    #[tokio::test]
    async fn a_slow_head_is_cut_off() {
        let limits =
            HttpLimits { header_timeout: Duration::from_millis(300), request_timeout: Duration::from_secs(60) };
        let (addr, _stop) = start(limits).await;
        let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
        conn.write_all(b"POST / HTTP/1.1\r\nHost: x\r\n").await.unwrap();
        let started = std::time::Instant::now();
        let answer = until_closed(&mut conn).await;
        assert!(!answer.contains("200 OK"), "{answer}");
        assert!(started.elapsed() >= Duration::from_millis(250), "closed after the limit, not before");
        // A connection that sends nothing at all is cut off the same way.
        let mut silent = tokio::net::TcpStream::connect(addr).await.unwrap();
        until_closed(&mut silent).await;
    }

    /// A first head that peeking hands to hyper late (its target sent slowly) does not
    /// get a second header timeout there: it is closed within the one from the accept.
    #[tokio::test]
    async fn a_slow_first_head_gets_one_header_timeout_when_peeked() {
        let limits = HttpLimits { header_timeout: Duration::from_secs(1), request_timeout: Duration::from_secs(60) };
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let router = Router::new().route("/", axum::routing::get(|| async { "hyper" }));
        let (_stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let shutdown = async {
            let _ = stopped.await;
        };
        let streams = |method: &str, path: &str| method == "GET" && path == "/stream";
        tokio::spawn(serve_peeking(listener, router, limits, shutdown, streams, |_, _, _| async {}));

        let conn = tokio::net::TcpStream::connect(addr).await.unwrap();
        let started = std::time::Instant::now();
        let (mut rd, mut wr) = conn.into_split();
        // The target a byte every 50 ms (peeking waits for its end), handed to hyper
        // after about 0.95 s; then the rest of the head a byte every 50 ms, never ending.
        let writer = tokio::spawn(async move {
            let mut bytes = b"GET /".to_vec();
            bytes.extend_from_slice(&[b'x'; 18]);
            bytes.extend_from_slice(b" HTTP/1.1\r\n");
            let mut sent = 0;
            let step = tokio::time::Instant::now();
            for i in 0u32.. {
                let upto = if sent < 5 {
                    5
                } else if sent < 23 {
                    sent + 1
                } else {
                    bytes.len()
                };
                let next: &[u8] = if sent < bytes.len() { &bytes[sent..upto] } else { b"H" };
                if wr.write_all(next).await.is_err() || i > 200 {
                    return;
                }
                sent = sent.max(upto);
                tokio::time::sleep_until(step + Duration::from_millis(50) * (i + 1)).await;
            }
        });
        let mut all = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(5), rd.read_to_end(&mut all)).await.expect("closed in time");
        let took = started.elapsed();
        writer.abort();
        let answer = String::from_utf8_lossy(&all);
        assert!(!answer.contains("200"), "{answer}");
        assert!(took < Duration::from_millis(1800), "closed after {took:?}: one header timeout (1 s), not two");
    }

    #[tokio::test]
    async fn a_slow_body_gets_408() {
        let limits =
            HttpLimits { header_timeout: Duration::from_secs(60), request_timeout: Duration::from_millis(300) };
        let (addr, _stop) = start(limits).await;
        let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
        conn.write_all(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nonly ten b").await.unwrap();
        let answer = until_closed(&mut conn).await;
        assert!(answer.starts_with("HTTP/1.1 408") && answer.contains("request_timeout"), "{answer}");
        // A request in time is answered.
        let mut ok = tokio::net::TcpStream::connect(addr).await.unwrap();
        ok.write_all(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nConnection: close\r\n\r\nhi").await.unwrap();
        let answer = until_closed(&mut ok).await;
        assert!(answer.starts_with("HTTP/1.1 200") && answer.ends_with("hi"), "{answer}");
    }
}
