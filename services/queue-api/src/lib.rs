//! queue-api: the HTTP front of the waiting room. It only calls the queue commands
//! (through queue-client) and holds no queue state, so any number of instances can
//! run behind a load balancer.
//!
//! Seed 000's contract on the default queue: `POST /api/queue/entry {nickname}` and
//! `GET /api/queue/status?userId=`; plus push updates (`/api/queue/stream`, SSE), the
//! waiting-room page (`/`), the back office (`/api/admin/queues/{queue}`), `/metrics`,
//! `/healthz` and `/api/openapi.json`.

pub mod error;
pub mod hub;
pub mod limit;
pub mod metrics;
mod openapi;
mod routes;
pub mod store;

use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};
use axum::Router;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::watch;

/// Settings, from flags with environment fallbacks (see main.rs).
#[derive(Debug, Clone, clap::Args)]
pub struct Config {
    /// Valkey URL (redis://host:port/).
    #[arg(long, env = "VALKEY_URL", default_value = "redis://127.0.0.1:6379/")]
    pub valkey_url: String,
    /// Address to listen on.
    #[arg(long, env = "LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// Where admitted people go: the chat page (its `?ticketId=` is added).
    #[arg(long, env = "CHAT_URL", default_value = "http://127.0.0.1:8081/")]
    pub chat_url: String,
    /// Bearer token for the back office; without one the back office is disabled.
    #[arg(long, env = "ADMIN_TOKEN")]
    pub admin_token: Option<String>,
    /// Requests per second per client address on entry, status and stream (0: no limit).
    #[arg(long, env = "RATE_LIMIT", default_value_t = 20.0)]
    pub rate_limit: f64,
    /// Burst per client address.
    #[arg(long, env = "RATE_BURST", default_value_t = 40.0)]
    pub rate_burst: f64,
    /// Take the client address from X-Forwarded-For (behind a trusted proxy).
    #[arg(long, env = "TRUST_PROXY", default_value_t = false)]
    pub trust_proxy: bool,
    /// How often push streams are refreshed without a promotion announcement (ms).
    #[arg(long, env = "PUSH_TICK_MS", default_value_t = 1000, value_parser = clap::value_parser!(u64).range(100..=60_000))]
    pub push_tick_ms: u64,
    /// Serve /bench/noop, a no-op handler benchmarks compare against.
    #[arg(long, env = "BENCH_ROUTES", default_value_t = false, hide = true)]
    pub bench_routes: bool,
}

impl Config {
    /// Defaults for a local run and tests.
    pub fn local(valkey_url: &str) -> Config {
        Config {
            valkey_url: valkey_url.to_string(),
            listen: "127.0.0.1:0".parse().unwrap(),
            chat_url: "http://127.0.0.1:8081/".into(),
            admin_token: None,
            rate_limit: 20.0,
            rate_burst: 40.0,
            trust_proxy: false,
            push_tick_ms: 1000,
            bench_routes: false,
        }
    }
}

/// Shared by every handler.
pub struct AppState {
    pub config: Config,
    pub store: store::Store,
    pub hub: Arc<hub::Hub>,
    pub limiter: limit::RateLimiter,
    pub metrics: Arc<metrics::Metrics>,
    /// Queues this instance has registered in the discovery set.
    pub registered: std::sync::Mutex<std::collections::HashSet<String>>,
    /// Flips to true on shutdown, ending push streams.
    pub shutdown: watch::Receiver<bool>,
}

/// Largest request body accepted (an entry is a nickname).
const BODY_LIMIT: usize = 16 * 1024;

pub fn app(state: Arc<AppState>) -> Router {
    let mut router = Router::new()
        .route("/", get(routes::page))
        .route("/api/queue/entry", post(routes::entry).delete(routes::leave))
        .route("/api/queue/status", get(routes::status))
        .route("/api/queue/stream", get(routes::stream))
        .route("/api/admin/queues/{queue}", get(routes::admin_get).put(routes::admin_put))
        .route("/api/openapi.json", get(routes::openapi))
        .route("/metrics", get(routes::metrics))
        .route("/healthz", get(routes::healthz));
    if state.config.bench_routes {
        router = router.route("/bench/noop", get(|| async { "ok" }));
    }
    router
        .fallback(routes::not_found)
        .layer(axum::middleware::from_fn_with_state(state.metrics.clone(), metrics::track))
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .with_state(state)
}

/// Serves on `listener` until `shutdown` resolves, then stops push streams and
/// finishes the requests in flight.
pub async fn serve(
    listener: TcpListener,
    config: Config,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let metrics = Arc::new(metrics::Metrics::default());
    let store = store::Store::connect(config.valkey_url.clone());
    let hub = hub::Hub::new(store.clone(), Duration::from_millis(config.push_tick_ms), metrics.clone());
    let (stop_tx, stop_rx) = watch::channel(false);
    // Promotion announcements wake the matching queue's push streams at once.
    let mut events = queue_client::events::subscribe_all(config.valkey_url.clone());
    let hub_events = hub.clone();
    tokio::spawn(async move {
        while let Some(e) = events.recv().await {
            hub_events.wake(&e.queue);
        }
    });
    let state = Arc::new(AppState {
        limiter: limit::RateLimiter::new(config.rate_limit, config.rate_burst),
        config,
        store,
        hub,
        metrics,
        registered: Default::default(),
        shutdown: stop_rx,
    });
    let app = app(state).into_make_service_with_connect_info::<SocketAddr>();
    axum::serve(listener, app)
        .with_graceful_shutdown(async move {
            shutdown.await;
            let _ = stop_tx.send(true);
        })
        .await
}
