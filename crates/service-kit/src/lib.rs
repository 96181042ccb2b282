//! What queue-api, queue-manager and chat-server share, so that each `main.rs` is a
//! few lines:
//!
//! - [`flags`]: the flags every service takes ([`Common`]: `--valkey-url`,
//!   `--listen`, `--log-format`), durations given with units (`--tick 500ms`), and
//!   the old spellings of renamed flags, still accepted;
//! - [`logging`]: tracing to stdout, `RUST_LOG` (default `info`), ANSI colours only
//!   on a terminal, text or JSON lines;
//! - [`shutdown_signal`], [`serve`]: SIGINT or SIGTERM, and an axum router served on
//!   a listener until then, finishing the requests in flight;
//! - [`client_addr`]: the client's address behind the proxies the operator names
//!   (`--trusted-proxies`, `--trust-proxy`, `--client-ip-header`), one way for all;
//! - [`html`]: escaping for the pages the services write themselves;
//! - [`http`]: how long a request head and a whole request may take (slow clients),
//!   the accept loop, and the peek-then-serve loop (a connection's first request line
//!   read, then served by hyper or by the caller);
//! - [`lang`]: a page's language from `Accept-Language` and a tag's best match;
//! - [`rewind`]: a connection with the bytes already read from it put back in front;
//! - [`metrics`]: Prometheus metrics (the `metrics` crate with its Prometheus
//!   exporter), one registry per service instance, the HTTP request histogram and
//!   span, and the process's CPU and memory;
//! - [`telemetry`]: traces over OTLP/HTTP when `OTEL_EXPORTER_OTLP_ENDPOINT` is set.
//!
//! A service's `main`:
//!
//! ```text
//! #[tokio::main]
//! async fn main() -> std::process::ExitCode {
//!     let (config, listener) = service_kit::start::<queue_api::Config>().await;
//!     service_kit::exit(queue_api::serve(listener, config, service_kit::shutdown_signal()).await)
//! }
//! ```

pub mod client_addr;
pub mod conn_limit;
pub mod flags;
pub mod html;
pub mod http;
pub mod lang;
pub mod logging;
pub mod metrics;
pub mod rewind;
pub mod telemetry;

pub use client_addr::{ClientAddr, ClientAddrs, HasClientAddrs, ProxyFlags};
pub use flags::{default_listen, duration, ms, secs, Common, Flags, Renamed};
pub use logging::LogFormat;

use axum::Router;
use std::fmt::Display;
use std::future::Future;
use std::process::ExitCode;
use tokio::net::TcpListener;

/// Parses the flags (exiting with a usage error, status 2, when they are wrong), sets up
/// logging and binds the listen address (exiting with status 1 when it cannot).
pub async fn start<F: Flags>() -> (F::Config, TcpListener) {
    let flags = flags::parse::<F>();
    let common = flags.common().clone();
    let name = F::command().get_name().to_string();
    logging::init(common.log_format, &name);
    let target = common.valkey_target().unwrap_or_else(|e| flags::usage_error::<F>(e));
    let config = flags.into_config().unwrap_or_else(|e| flags::usage_error::<F>(e));
    match TcpListener::bind(common.listen).await {
        Ok(listener) => {
            let listen = listener.local_addr().map_or_else(|_| common.listen.to_string(), |a| a.to_string());
            let valkey = target.display();
            tracing::info!(%listen, %valkey, cluster = target.cluster, tls = target.is_tls(), "{name} listening");
            (config, listener)
        }
        Err(e) => {
            tracing::error!("{name}: cannot listen on {}: {e}", common.listen);
            std::process::exit(1);
        }
    }
}

/// The exit status of a service that has stopped: success, or the error logged and 1.
/// Spans still queued for export are sent first (a few seconds at most).
pub fn exit<E: Display>(result: Result<(), E>) -> ExitCode {
    let status = match result {
        Ok(()) => {
            tracing::info!("stopped");
            ExitCode::SUCCESS
        }
        Err(e) => {
            tracing::error!("{e}");
            ExitCode::FAILURE
        }
    };
    telemetry::shutdown();
    status
}

/// Completes on SIGINT (Ctrl+C) or SIGTERM.
pub async fn shutdown_signal() {
    let interrupt = tokio::signal::ctrl_c();
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("SIGTERM handler");
    let name = tokio::select! {
        _ = interrupt => "SIGINT",
        _ = term.recv() => "SIGTERM",
    };
    tracing::info!("{name}: shutting down");
}

/// Serves `router` on `listener` (handlers may ask for the peer's address with
/// `ConnectInfo<SocketAddr>`) until `shutdown` completes, then finishes the requests
/// in flight and returns; request heads and whole requests bounded by the default
/// [`http::HttpLimits`].
pub async fn serve(
    listener: TcpListener,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let limits = http::HttpLimits::default();
    http::serve(listener, http::with_request_timeout(router, limits.request_timeout), shutdown, limits).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::extract::ConnectInfo;
    use axum::routing::get;
    use std::net::SocketAddr;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn serves_with_the_peer_address_until_shutdown() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let router = Router::new()
            .route("/", get(|ConnectInfo(peer): ConnectInfo<SocketAddr>| async move { peer.ip().to_string() }));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(serve(listener, router, async {
            let _ = stopped.await;
        }));
        // A connection that never sends anything (a preconnect) must not hold shutdown.
        let _silent = tokio::net::TcpStream::connect(addr).await.unwrap();
        let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
        conn.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").await.unwrap();
        let mut reply = String::new();
        conn.read_to_string(&mut reply).await.unwrap();
        assert!(reply.starts_with("HTTP/1.1 200") && reply.ends_with("127.0.0.1"), "{reply}");
        stop.send(()).unwrap();
        tokio::time::timeout(std::time::Duration::from_secs(5), server)
            .await
            .expect("prompt shutdown")
            .unwrap()
            .unwrap();
    }

    #[test]
    fn exit_status() {
        assert_eq!(exit::<String>(Ok(())), ExitCode::SUCCESS);
        assert_eq!(exit(Err("broken")), ExitCode::FAILURE);
    }
}
