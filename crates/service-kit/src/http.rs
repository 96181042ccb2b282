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
    mut closing: tokio::sync::watch::Receiver<bool>,
) where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let service = hyper::service::service_fn(move |mut req: hyper::Request<Incoming>| {
        req.extensions_mut().insert(ConnectInfo(peer));
        router.clone().oneshot(req.map(axum::body::Body::new))
    });
    let conn = http.serve_connection(io, service).with_upgrades();
    tokio::pin!(conn);
    let first = tokio::select! {
        ended = conn.as_mut() => Some(ended),
        _ = async { let _ = closing.wait_for(|c| *c).await; } => None,
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
