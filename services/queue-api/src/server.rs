//! The accept loop: HTTP/1.1 only, one small task per connection.
//!
//! axum's own `serve` speaks HTTP/1.1 and HTTP/2 on every connection (hyper-util's
//! auto connection), so each connection's task carries the state of both protocols
//! for as long as it lives; a push stream lives as long as its wait. Browsers reach
//! this service over HTTP/1.1 (EventSource, fetch), so serving that alone keeps an
//! open stream's connection at a fraction of the size (bench/README.md has the
//! figures). The client address reaches handlers as `ConnectInfo<SocketAddr>`, as
//! with axum's serve.

use axum::extract::ConnectInfo;
use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use std::future::Future;
use std::time::Duration;
use tokio::net::TcpListener;
use tower::ServiceExt;

/// A request head must arrive within this (slow-header clients hold no socket longer).
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);
/// How long shutdown waits for connections still open (streams end by themselves).
const DRAIN_LIMIT: Duration = Duration::from_secs(10);

/// Serves `router` on `listener` until `shutdown` resolves, then lets the requests in
/// flight finish (at most [`DRAIN_LIMIT`]).
pub async fn serve(
    listener: TcpListener,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new()).header_read_timeout(HEADER_READ_TIMEOUT).keep_alive(true);
    let graceful = GracefulShutdown::new();
    tokio::pin!(shutdown);
    loop {
        let (tcp, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors and the like: wait, do not spin.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = &mut shutdown => break,
        };
        let _ = tcp.set_nodelay(true);
        let router = router.clone();
        let service = hyper::service::service_fn(move |mut req: hyper::Request<Incoming>| {
            req.extensions_mut().insert(ConnectInfo(peer));
            router.clone().oneshot(req.map(axum::body::Body::new))
        });
        let conn = graceful.watch(http.serve_connection(TokioIo::new(tcp), service));
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "connection ended with an error");
            }
        });
    }
    drop(listener);
    if tokio::time::timeout(DRAIN_LIMIT, graceful.shutdown()).await.is_err() {
        tracing::warn!("connections still open at shutdown were dropped");
    }
    Ok(())
}
