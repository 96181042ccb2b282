//! How queue-api is served: HTTP/1.1 only, one small task per connection.
//!
//! axum's own `serve` speaks HTTP/1.1 and HTTP/2 on every connection (hyper-util's
//! auto connection), so each connection's task carries the state of both protocols
//! for as long as it lives. Browsers reach this service over HTTP/1.1 (EventSource,
//! fetch), so it serves that alone.
//!
//! Push streams live as long as a wait and are the most numerous connections, so
//! they do not stay in hyper at all: hyper keeps an 8 KiB read buffer and an 8 KiB
//! write buffer per connection for its whole life (not configurable below that).
//! `service_kit::http::serve_peeking` reads each connection's request line and asks
//! [`served_outside_hyper`] (by method and path); a stream request still goes
//! through the router (rate limit, stream limits, lookup: the same handler, the same
//! refusals), but its response is written straight to the socket, close-delimited
//! (`connection: close`), with no buffer beyond the event being written
//! ([`answer`], then [`write_events`]). Every other connection is handed to hyper with the bytes
//! already read. bench/README.md has the figures. The client address reaches
//! handlers as `ConnectInfo<SocketAddr>`, as with axum's serve.

use axum::http::Method;
use axum::Router;
use futures_util::StreamExt;
use std::future::Future;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tower::ServiceExt;

/// Serves `router` on `listener` until `shutdown` resolves, then lets the requests in
/// flight finish (at most `service_kit::http::DRAIN_LIMIT`; streams end by themselves).
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: service_kit::http::HttpLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    service_kit::http::serve_peeking(listener, router, limits, shutdown, served_outside_hyper, |tcp, router, req| {
        // Boxed apart: the request, the router's future and the response head are
        // freed once the head is written; what stays for the stream's life is the
        // socket and the body alone.
        let answering = Box::pin(answer(tcp, router, req));
        async move {
            if let Some((tcp, body)) = answering.await {
                write_events(tcp, body).await
            }
        }
    })
    .await
}

/// The route of push streams (as the router names it).
const STREAM_PATH: &str = "/api/queue/stream";
/// A write to a stream's client that takes longer than this ends the stream.
const STREAM_WRITE_TIMEOUT: Duration = Duration::from_secs(30);

/// Whether a connection whose first request is `method` `path` is served outside
/// hyper: the push stream's.
fn served_outside_hyper(method: &str, path: &str) -> bool {
    method == Method::GET.as_str() && path == STREAM_PATH
}

/// Runs `req` through the router and writes its answer to the socket directly: a
/// refusal (or any answer but an event stream) whole, closing the connection, then
/// None; an event stream's head, then the socket and the stream's body, for
/// [`write_events`]. The connection closes after either.
async fn answer(
    mut tcp: TcpStream,
    router: Router,
    req: axum::extract::Request,
) -> Option<(TcpStream, axum::body::Body)> {
    let Ok(resp) = router.oneshot(req).await;
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
        let bytes = axum::body::to_bytes(body, 1024 * 1024).await.ok()?;
        out.extend_from_slice(format!("content-length: {}\r\nconnection: close\r\n\r\n", bytes.len()).as_bytes());
        out.extend_from_slice(&bytes);
        let _ = tokio::time::timeout(STREAM_WRITE_TIMEOUT, async {
            tcp.write_all(&out).await?;
            tcp.shutdown().await
        })
        .await;
        return None;
    }
    out.extend_from_slice(b"connection: close\r\n\r\n");
    matches!(tokio::time::timeout(STREAM_WRITE_TIMEOUT, tcp.write_all(&out)).await, Ok(Ok(()))).then_some((tcp, body))
}

/// Writes an event stream's `body` to `tcp` as it comes, until it ends, a write
/// takes longer than [`STREAM_WRITE_TIMEOUT`] or the client closes its side.
async fn write_events(mut tcp: TcpStream, body: axum::body::Body) {
    let mut data = body.into_data_stream();
    let (mut rd, mut wr) = tcp.split();
    let mut probe = [0u8; 16];
    loop {
        // The next event, taken out of the wait before it is written: the wait's
        // state and the write's are never held at once (a stream's task is sized
        // for the larger of the two, not their sum).
        let bytes = tokio::select! {
            chunk = data.next() => match chunk {
                Some(Ok(bytes)) => bytes,
                _ => break,
            },
            // The client closing its side ends the stream (what it sends is ignored).
            read = rd.read(&mut probe) => match read {
                Ok(0) | Err(_) => return,
                Ok(_) => continue,
            },
        };
        // Boxed, for the time of a write only: its timer is not part of what a
        // stream keeps while it waits.
        if !matches!(Box::pin(tokio::time::timeout(STREAM_WRITE_TIMEOUT, wr.write_all(&bytes))).await, Ok(Ok(()))) {
            return;
        }
    }
    let _ = tokio::time::timeout(Duration::from_secs(1), wr.shutdown()).await;
}
