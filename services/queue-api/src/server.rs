//! The accept loop: HTTP/1.1 only, one small task per connection.
//!
//! axum's own `serve` speaks HTTP/1.1 and HTTP/2 on every connection (hyper-util's
//! auto connection), so each connection's task carries the state of both protocols
//! for as long as it lives. Browsers reach this service over HTTP/1.1 (EventSource,
//! fetch), so it serves that alone.
//!
//! Push streams live as long as a wait and are the most numerous connections, so
//! they do not stay in hyper at all: hyper keeps an 8 KiB read buffer and an 8 KiB
//! write buffer per connection for its whole life (not configurable below that). The
//! first bytes of each connection are read here; a `GET /api/queue/stream` request
//! still goes through the router (rate limit, stream limits, lookup: the same
//! handler, the same refusals), but its response is written straight to the socket,
//! close-delimited (`connection: close`), with no buffer beyond the event being
//! written. Every other connection is handed to hyper with the bytes already read.
//! bench/README.md has the figures. The client address reaches handlers as
//! `ConnectInfo<SocketAddr>`, as with axum's serve.

use axum::extract::ConnectInfo;
use axum::Router;
use futures_util::StreamExt;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::server::graceful::Watcher;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tower::ServiceExt;
// How long shutdown waits for connections still open (streams end by themselves).
use service_kit::http::DRAIN_LIMIT;

type Http1 = hyper::server::conn::http1::Builder;

/// How long a request head already on its way may still take once shutdown begins.
const HEAD_GRACE_AT_SHUTDOWN: Duration = Duration::from_millis(500);

/// Serves `router` on `listener` until `shutdown` resolves, then lets the requests in
/// flight finish (at most [`DRAIN_LIMIT`]).
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: service_kit::http::HttpLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new()).header_read_timeout(limits.header_timeout).keep_alive(true);
    let graceful = GracefulShutdown::new();
    // Connections still reading their first request head are not in hyper yet, so
    // its graceful shutdown cannot close them: this tells them. (Clients open
    // connections they never use: browsers preconnect, and HTTP client pools race a
    // new connection against a pooled one coming free and keep the loser idle.)
    let (closing_tx, closing) = tokio::sync::watch::channel(false);
    tokio::pin!(shutdown);
    while let Some((tcp, peer)) = service_kit::http::accept(&listener, shutdown.as_mut()).await {
        let watcher = graceful.watcher();
        tokio::spawn(connection(
            tcp,
            peer,
            router.clone(),
            http.clone(),
            watcher,
            closing.clone(),
            limits.header_timeout,
        ));
    }
    drop(listener);
    let _ = closing_tx.send(true);
    if tokio::time::timeout(DRAIN_LIMIT, graceful.shutdown()).await.is_err() {
        tracing::warn!("connections still open at shutdown were dropped");
    }
    Ok(())
}

/// The request line that is served outside hyper.
const STREAM_PREFIX: &[u8] = b"GET /api/queue/stream";
/// Largest request head read here (a larger one goes to hyper, which refuses it).
const MAX_HEAD: usize = 8 * 1024;
/// A write to a stream's client that takes longer than this ends the stream.
const STREAM_WRITE_TIMEOUT: Duration = Duration::from_secs(30);

async fn connection(
    mut tcp: TcpStream,
    peer: SocketAddr,
    router: Router,
    http: Http1,
    watcher: Watcher,
    mut closing: tokio::sync::watch::Receiver<bool>,
    header_timeout: Duration,
) {
    // Read until the request line shows the connection is not a stream, or the
    // stream request's head is complete.
    let mut head: Vec<u8> = Vec::new();
    let read_head = async {
        loop {
            let n = head.len().min(STREAM_PREFIX.len());
            if head[..n] != STREAM_PREFIX[..n] || head.len() > MAX_HEAD {
                return false;
            }
            if head.len() >= STREAM_PREFIX.len() && head.windows(4).any(|w| w == b"\r\n\r\n") {
                return true;
            }
            head.reserve(512);
            match tcp.read_buf(&mut head).await {
                Ok(0) | Err(_) => return false,
                Ok(_) => {}
            }
        }
    };
    // A head not complete soon after shutdown begins is dropped with its connection:
    // no request on it has been taken yet.
    let is_stream = tokio::select! {
        read = tokio::time::timeout(header_timeout, read_head) => match read {
            Ok(s) => s,
            Err(_) => return,
        },
        _ = async {
            let _ = closing.wait_for(|c| *c).await;
            tokio::time::sleep(HEAD_GRACE_AT_SHUTDOWN).await;
        } => return,
    };
    drop(closing);
    if is_stream {
        if let Some(req) = parse_head(&head, peer) {
            drop(head);
            // Boxed, like hyper's branch: this task's own future stays small, and a
            // stream's holds only what a stream needs.
            Box::pin(serve_stream(tcp, router, req)).await;
            return;
        }
    }
    if head.is_empty() {
        return; // closed before sending anything
    }
    let service = hyper::service::service_fn(move |mut req: hyper::Request<Incoming>| {
        req.extensions_mut().insert(ConnectInfo(peer));
        router.clone().oneshot(req.map(axum::body::Body::new))
    });
    let io = Rewind { prefix: head, at: 0, inner: tcp };
    if let Err(e) = Box::pin(watcher.watch(http.serve_connection(TokioIo::new(io), service))).await {
        tracing::debug!(error = %e, "connection ended with an error");
    }
}

/// The request of a complete head, or None when it cannot be read (hyper answers it).
fn parse_head(head: &[u8], peer: SocketAddr) -> Option<axum::extract::Request> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut req = httparse::Request::new(&mut headers);
    let httparse::Status::Complete(_) = req.parse(head).ok()? else { return None };
    let mut builder = axum::http::Request::builder().method(req.method?).uri(req.path?);
    for h in req.headers.iter() {
        builder = builder.header(h.name, h.value);
    }
    let mut request = builder.body(axum::body::Body::empty()).ok()?;
    request.extensions_mut().insert(ConnectInfo(peer));
    Some(request)
}

/// Runs the request through the router and writes its response to the socket
/// directly: the event stream as it comes, ending when it ends or the client goes;
/// a refusal (or any other answer) whole. The connection closes after either.
async fn serve_stream(mut tcp: TcpStream, router: Router, req: axum::extract::Request) {
    // Boxed: the router's future is freed once the response head is known.
    let Ok(resp) = Box::pin(router.oneshot(req)).await;
    let (parts, body) = resp.into_parts();
    let streaming = parts.status == axum::http::StatusCode::OK
        && parts
            .headers
            .get(axum::http::header::CONTENT_TYPE)
            .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
    let mut out = format!("HTTP/1.1 {} {}\r\n", parts.status.as_u16(), parts.status.canonical_reason().unwrap_or(""))
        .into_bytes();
    for (name, value) in parts.headers.iter() {
        if matches!(name.as_str(), "content-length" | "transfer-encoding" | "connection") {
            continue;
        }
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    if !streaming {
        let Ok(bytes) = axum::body::to_bytes(body, 1024 * 1024).await else { return };
        out.extend_from_slice(format!("content-length: {}\r\nconnection: close\r\n\r\n", bytes.len()).as_bytes());
        out.extend_from_slice(&bytes);
        let _ = tokio::time::timeout(STREAM_WRITE_TIMEOUT, async {
            tcp.write_all(&out).await?;
            tcp.shutdown().await
        })
        .await;
        return;
    }
    out.extend_from_slice(b"connection: close\r\n\r\n");
    // Not kept for the stream's life (its headers and extensions are on the heap).
    drop(parts);
    if !matches!(tokio::time::timeout(STREAM_WRITE_TIMEOUT, tcp.write_all(&out)).await, Ok(Ok(()))) {
        return;
    }
    drop(out);
    let mut data = body.into_data_stream();
    let (mut rd, mut wr) = tcp.split();
    let mut probe = [0u8; 16];
    loop {
        tokio::select! {
            chunk = data.next() => match chunk {
                Some(Ok(bytes)) => {
                    if !matches!(tokio::time::timeout(STREAM_WRITE_TIMEOUT, wr.write_all(&bytes)).await, Ok(Ok(()))) {
                        return;
                    }
                }
                _ => break,
            },
            // The client closing its side ends the stream (what it sends is ignored).
            read = rd.read(&mut probe) => match read {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            },
        }
    }
    let _ = tokio::time::timeout(Duration::from_secs(1), wr.shutdown()).await;
}

/// The socket with the bytes already read from it put back in front.
struct Rewind {
    prefix: Vec<u8>,
    at: usize,
    inner: TcpStream,
}

impl AsyncRead for Rewind {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        if self.at < self.prefix.len() {
            let n = buf.remaining().min(self.prefix.len() - self.at);
            let at = self.at;
            buf.put_slice(&self.prefix[at..at + n]);
            self.at += n;
            if self.at == self.prefix.len() {
                self.prefix = Vec::new();
                self.at = 0;
            }
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for Rewind {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
