//! Reverse-proxy mode's way to the app: each client connection has its own upstream
//! HTTP/1 connection ([`Link`]), opened at its first forwarded request and kept for
//! the requests that follow on it (HTTP/1 keep-alive), closed with it. The upstream
//! connection is driven by the client connection's own task ([`serve`]), so a
//! forwarded request crosses no pool, no channel between tasks and no other thread:
//! what the app answers is read, and written to the client, in the same poll.

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{Request, Response, Uri};
use axum::Router;
use hyper::body::Incoming;
use hyper::client::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use service_kit::http::{HttpLimits, DRAIN_LIMIT};
use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tower::ServiceExt;

/// How long opening an upstream connection may take (past it: 502).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

type Driver = Pin<Box<dyn Future<Output = ()> + Send>>;

/// The upstream connection of one client connection: a request extension in proxy
/// mode. Requests on a client connection come one at a time, so the connection is
/// never shared.
#[derive(Default)]
pub struct Link {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// The idle connection's sender (taken by the request using it).
    sender: Option<http1::SendRequest<Body>>,
    /// The connection's I/O, polled by the client connection's task.
    driver: Option<Driver>,
    /// That task, woken when a new connection is to be driven.
    waker: Option<Waker>,
}

impl Link {
    /// Drives the upstream connection's I/O; called by the client connection's task
    /// whenever it is polled.
    pub fn poll(&self, cx: &mut Context<'_>) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(driver) = state.driver.as_mut() {
            if driver.as_mut().poll(cx).is_ready() {
                state.driver = None;
            }
        }
        if !state.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
            state.waker = Some(cx.waker().clone());
        }
    }

    fn take(&self) -> Option<http1::SendRequest<Body>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).sender.take()
    }

    /// Keeps the connection for the next request, unless it was handed over to a
    /// WebSocket (101) or is closed.
    fn keep(&self, sender: http1::SendRequest<Body>, resp: &Response<Incoming>) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if resp.status() == axum::http::StatusCode::SWITCHING_PROTOCOLS {
            // The connection becomes the tunnel's: its driver hands it over on its
            // own task, which outlives the client connection's (ended by its upgrade).
            if let Some(driver) = state.driver.take() {
                tokio::spawn(driver);
            }
        } else if !sender.is_closed() {
            state.sender = Some(sender);
        }
    }

    /// Opens a connection to `base`'s authority; the one before it (closed, or left
    /// unusable by a request given up on) is dropped.
    async fn connect(&self, base: &Uri) -> Result<http1::SendRequest<Body>, BoxError> {
        let host = base.host().ok_or("no host")?;
        let host = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
        let port = base.port_u16().unwrap_or(80);
        let tcp = match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect((host, port))).await {
            Ok(tcp) => tcp?,
            Err(_) => return Err(format!("no connection within {CONNECT_TIMEOUT:?}").into()),
        };
        tcp.set_nodelay(true)?;
        let (sender, conn) = http1::Builder::new().handshake(TokioIo::new(tcp)).await?;
        let driver = Box::pin(async move {
            if let Err(e) = conn.with_upgrades().await {
                tracing::debug!(error = %e, "upstream connection ended with an error");
            }
        });
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.sender = None;
        state.driver = Some(driver);
        if let Some(w) = &state.waker {
            w.wake_by_ref();
        }
        Ok(sender)
    }

    /// Sends `req` (origin-form, with its Host) over this link's connection to
    /// `base`: the kept one when it is still open, else a new one. A request the kept
    /// connection could not take (closed by the app meanwhile) goes on a new one.
    pub async fn request(&self, base: &Uri, mut req: Request<Body>) -> Result<Response<Incoming>, BoxError> {
        if let Some(mut sender) = self.take() {
            // Waits for the previous answer to be read to its end (it has: the client
            // only sends its next request after it).
            if sender.ready().await.is_ok() {
                match sender.try_send_request(req).await {
                    Ok(resp) => {
                        self.keep(sender, &resp);
                        return Ok(resp);
                    }
                    Err(mut e) => match e.take_message() {
                        Some(unsent) => req = unsent,
                        None => return Err(e.into_error().into()),
                    },
                }
            }
        }
        let mut sender = self.connect(base).await?;
        let resp = sender.send_request(req).await?;
        self.keep(sender, &resp);
        Ok(resp)
    }
}

/// Serves `router` over HTTP/1.1 (with upgrades) on `listener` until `shutdown`
/// completes, then finishes the requests in flight (at most [`DRAIN_LIMIT`]), as
/// `service_kit::http::serve` does; with `links`, each connection's requests carry
/// its [`Link`] (as an `Arc<Link>` extension), driven by the connection's task.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
    limits: HttpLimits,
    links: bool,
) -> std::io::Result<()> {
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new()).header_read_timeout(limits.header_timeout).keep_alive(true);
    let (closing_tx, closing) = tokio::sync::watch::channel(false);
    let (live, mut all_gone) = tokio::sync::mpsc::channel::<()>(1);
    tokio::pin!(shutdown);
    while let Some((tcp, peer)) = service_kit::http::accept(&listener, shutdown.as_mut()).await {
        let router = router.clone();
        let link = links.then(|| Arc::new(Link::default()));
        let for_requests = link.clone();
        let service = hyper::service::service_fn(move |mut req: Request<Incoming>| {
            req.extensions_mut().insert(ConnectInfo(peer));
            if let Some(link) = &for_requests {
                req.extensions_mut().insert(link.clone());
            }
            router.clone().oneshot(req.map(Body::new))
        });
        let conn = http.serve_connection(TokioIo::new(tcp), service).with_upgrades();
        let (mut closing, live) = (closing.clone(), live.clone());
        tokio::spawn(async move {
            let _live = live;
            tokio::pin!(conn);
            let closed = async move {
                let _ = closing.wait_for(|c| *c).await;
            };
            tokio::pin!(closed);
            let mut draining = false;
            let ended = poll_fn(|cx| {
                if !draining && closed.as_mut().poll(cx).is_ready() {
                    draining = true;
                    conn.as_mut().graceful_shutdown();
                }
                // The app's side first: what it answered reaches the handler and the
                // client in this same poll; then what the handler sent it goes out.
                if let Some(link) = &link {
                    link.poll(cx);
                }
                if let Poll::Ready(ended) = conn.as_mut().poll(cx) {
                    return Poll::Ready(ended);
                }
                if let Some(link) = &link {
                    link.poll(cx);
                }
                Poll::Pending
            })
            .await;
            if let Err(e) = ended {
                tracing::debug!(error = %e, "connection ended with an error");
            }
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
