//! queue-api: the HTTP front of the waiting room. It only calls the queue commands
//! (through queue-client) and holds no queue state, so any number of instances can
//! run behind a load balancer.
//!
//! Seed 000's contract on the default queue: `POST /api/queue/entry {nickname}` and
//! `GET /api/queue/status?userId=`; plus push updates (`/api/queue/stream`, SSE), the
//! waiting-room page (`/`), the back office (`/api/admin/queues/{queue}`), `/metrics`,
//! `/healthz` and `/api/openapi.json`.

pub use service_kit::conn_limit;
mod admin;
pub mod batch;
pub mod brand;
pub mod codes;
pub mod config;
pub mod cors;
pub mod declared;
pub mod error;
pub mod extract;
pub mod hub;
pub mod i18n;
pub mod identity;
pub mod jwks;
pub mod limit;
pub mod metrics;
mod openapi;
mod opening;
pub mod pages;
pub mod place;
pub mod pow;
mod routes;
mod sale;
mod server;
pub mod templates;
pub mod valkey;

pub use config::Config;

use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};
use axum::Router;
use std::sync::Arc;
use tokio::net::TcpListener;

/// Shared by every handler.
pub struct AppState {
    pub config: Config,
    pub valkey: valkey::Valkey,
    pub hub: Arc<hub::Hub>,
    /// Status reads gathered into one `QUEUE.RANKS` call per queue.
    pub statuses: Arc<batch::StatusBatcher>,
    pub limiter: limit::RateLimiter,
    /// Open push streams, in all and per client address.
    pub streams: Arc<conn_limit::ConnLimit>,
    pub metrics: Arc<metrics::Metrics>,
    /// Proof-of-work challenges and what each queue asks.
    pub pow: pow::ProofOfWork,
    /// Which queues exist (declared by an operator), as this instance last found.
    pub declared: declared::Declared,
    /// Who the client is behind the proxies in front (`--trusted-proxies`).
    pub client_addrs: service_kit::ClientAddrs,
    /// Checks the app login's tokens (`--identity-jwks` or `--identity-jwks-url`); None
    /// when identity is off.
    pub identity: Option<identity::Verifier>,
    /// Each queue's `entry` setting, as this instance last read it.
    pub entry_modes: identity::EntryModes,
}

impl service_kit::HasClientAddrs for AppState {
    fn client_addrs(&self) -> &service_kit::ClientAddrs {
        &self.client_addrs
    }
}

/// Largest request body accepted (an entry is a nickname).
pub const BODY_LIMIT: usize = 16 * 1024;

pub fn app(state: Arc<AppState>) -> Router {
    let mut router = Router::new()
        .route("/", get(pages::room))
        .route("/app.js", get(pages::app_js))
        .route("/app.css", get(pages::app_css))
        .route("/pow-worker.js", get(pages::pow_worker_js))
        .route("/brand.css", get(pages::brand_css))
        .route("/i18n/{file}", get(pages::messages))
        .route("/assets/{name}", get(pages::asset))
        .route("/admin", get(pages::admin_page))
        .route("/admin.js", get(pages::admin_js))
        .route("/admin.css", get(pages::admin_css))
        .route("/api/admin/queues", get(admin::list).post(admin::create))
        .route("/api/admin/gates", get(admin::gates))
        .route("/api/admin/queues/{queue}/brand", axum::routing::put(admin::put_brand))
        .route("/api/admin/queues/{queue}/pause", post(admin::pause))
        .route(
            "/api/admin/queues/{queue}/codes",
            get(codes::counts).post(codes::add).layer(DefaultBodyLimit::max(codes::BODY_LIMIT)),
        )
        .route("/api/admin/queues/{queue}/resume", post(admin::resume))
        .route("/api/admin/queues/{queue}/inventory", post(sale::sold))
        .route("/api/admin/queues/{queue}/message", axum::routing::put(sale::message))
        .route("/api/queue/entry", post(routes::entry).delete(routes::leave))
        .route("/api/queue/status", get(routes::status))
        .route("/api/queue/stream", get(routes::stream))
        .route("/api/queue/opening", get(opening::opening))
        .route("/api/queue/challenge", get(routes::challenge))
        .route("/api/admin/queues/{queue}", get(admin::get).put(admin::put).delete(admin::delete))
        .route("/api/openapi.json", get(routes::openapi))
        .route("/metrics", get(routes::metrics))
        .route("/healthz", get(routes::healthz));
    if state.config.bench_routes {
        router = router.route("/bench/noop", get(|| async { "ok" }));
    }
    let router = router.fallback(routes::not_found);
    let router = service_kit::http::with_request_timeout(router, state.config.http.request_timeout);
    let router = state.metrics.registry().track_http(router);
    let router = router.layer(axum::middleware::from_fn_with_state(state.clone(), cors::policy));
    router.layer(DefaultBodyLimit::max(BODY_LIMIT)).with_state(state)
}

/// Serves on `listener` until `shutdown` resolves, then stops push streams and
/// finishes the requests in flight.
pub async fn serve(
    listener: TcpListener,
    config: Config,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let metrics = Arc::new(metrics::Metrics::default());
    let identity = config
        .identity
        .verifier(Some(metrics.jwks_fetches()))
        .await
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    metrics.registry().spawn_upkeep();
    let valkey = valkey::Valkey::connect(config.common.target());
    let hub = hub::Hub::with_polls(
        valkey.clone(),
        config.push_tick,
        config.poll_grace,
        config.status_max_staleness,
        metrics.clone(),
    );
    hub.limit_pollers(config.max_pollers);
    hub.pace_pushes(config.push_interval);
    let keep_alive = tokio::spawn(hub.clone().keep_alive(config.stream_keep_alive));
    hub.hold_polls(config.poll_hold);
    // Promotion announcements wake the matching queue's push streams at once.
    let mut events = queue_client::events::subscribe_target(config.common.target());
    let hub_events = hub.clone();
    let valkey_events = valkey.clone();
    tokio::spawn(async move {
        while let Some(e) = events.recv().await {
            if !brand::is_change_notice(&e) {
                hub_events.wake(&e.queue);
                continue;
            }
            // A branding change: read once here for every open page of the queue.
            if !hub_events.follows(&e.queue) {
                continue;
            }
            let (hub, valkey) = (hub_events.clone(), valkey_events.clone());
            tokio::spawn(async move {
                let Ok(client) = valkey.client().await else { return };
                if let Ok(stored) = client.brand(&e.queue).await {
                    hub.brand_changed(&e.queue, brand::Brand::from_stored(&stored).shown());
                }
            });
        }
    });
    // The change log's entries, as the commands that wrote them publish them.
    let mut changes = queue_client::events::subscribe_changes(config.common.target());
    let hub_changes = hub.clone();
    tokio::spawn(async move {
        while let Some(c) = changes.recv().await {
            hub_changes.change(&c.queue, c.entry);
        }
    });
    let state = Arc::new(AppState {
        limiter: limit::RateLimiter::new(config.rate_limit, config.rate_burst),
        pow: pow::ProofOfWork::new(config.pow_secret.as_deref()),
        streams: conn_limit::ConnLimit::new(config.max_streams, config.max_streams_per_addr),
        client_addrs: service_kit::ClientAddrs::new(&config.proxy),
        config,
        valkey,
        hub,
        statuses: Default::default(),
        metrics,
        declared: Default::default(),
        identity,
        entry_modes: Default::default(),
    });
    let limits = state.config.http;
    let hub = state.hub.clone();
    let served = server::serve(listener, app(state), limits, async move {
        shutdown.await;
        hub.shut_down();
    })
    .await;
    keep_alive.abort();
    served
}
