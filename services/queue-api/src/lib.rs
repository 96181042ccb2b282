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
mod brand;
pub mod batch;
pub mod cors;
pub mod error;
pub mod extract;
pub mod hub;
pub mod i18n;
pub mod limit;
pub mod metrics;
mod openapi;
mod opening;
pub mod pages;
pub mod pow;
mod routes;
mod server;
pub mod store;
pub mod templates;

use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};
use axum::Router;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::watch;

/// queue-api: the waiting room's HTTP front. Every flag has an environment-variable
/// fallback.
#[derive(Debug, Clone, clap::Parser)]
#[command(name = "queue-api", version, about, mut_arg("listen", service_kit::default_listen("127.0.0.1:8080")))]
pub struct Config {
    #[command(flatten)]
    pub common: service_kit::Common,
    #[command(flatten)]
    pub http: service_kit::http::HttpLimits,
    /// Where admitted people go: the chat page (its `?ticketId=` is added).
    #[arg(long, env = "CHAT_URL", default_value = "http://127.0.0.1:8081/")]
    pub chat_url: String,
    /// `QUEUE=URL` (repeatable): where the page sends QUEUE's admitted people (with
    /// `ticketId`, `queue` and `return`), e.g. the gate's `/gate/claim`; other queues
    /// go to --chat-url.
    #[arg(long = "admit-url", env = "ADMIT_URLS", value_delimiter = ',', value_parser = pages::AdmitUrl::parse)]
    pub admit_url: Vec<pages::AdmitUrl>,
    /// A directory whose index.html replaces the waiting-room page (docs/pages.md
    /// lists its variables; its other files are served under assets/). Checked at
    /// start: an unknown variable is an error.
    #[arg(long, env = "TEMPLATES", value_parser = templates::Pages::from_flag)]
    pub templates: Option<templates::Pages>,
    /// Bearer token for the back office; without one the back office is disabled.
    #[arg(long, env = "ADMIN_TOKEN")]
    pub admin_token: Option<String>,
    /// Requests per second per client address on entry, status, leave and stream (0: no limit).
    #[arg(long, env = "RATE_LIMIT", default_value_t = 20.0)]
    pub rate_limit: f64,
    /// Burst per client address.
    #[arg(long, env = "RATE_BURST", default_value_t = 40.0)]
    pub rate_burst: f64,
    /// Origins whose pages may call the public queue API from a browser: a
    /// comma-separated list (`https://shop.example`), `*` for any, empty for none
    /// (the default: only the page this service serves).
    #[arg(long, env = "CORS_ORIGINS", default_value = "", value_parser = cors::Origins::parse)]
    pub cors_origins: cors::Origins,
    /// Take the client address from X-Forwarded-For (behind a trusted proxy).
    #[arg(long, env = "TRUST_PROXY", default_value_t = false)]
    pub trust_proxy: bool,
    /// How often push streams are refreshed without a promotion announcement (100ms to 60s).
    #[arg(long, env = "PUSH_TICK", default_value = "1s",
          value_parser = service_kit::duration(Duration::from_millis(100)..=Duration::from_secs(60)))]
    pub push_tick: Duration,
    /// Secret proof-of-work challenges are signed with; every instance behind one
    /// load balancer needs the same (default: random bytes at start).
    #[arg(long, env = "POW_SECRET", hide_env_values = true)]
    pub pow_secret: Option<String>,
    /// Most push streams this instance holds open at once (0: no limit); past it a new
    /// stream is refused with 503 and Retry-After.
    #[arg(long, env = "MAX_STREAMS", default_value_t = 100_000)]
    pub max_streams: usize,
    /// Most push streams one client address holds open at once (0: no limit); past it
    /// a new stream from that address is refused with 429 and Retry-After.
    #[arg(long, env = "MAX_STREAMS_PER_ADDR", default_value_t = 64)]
    pub max_streams_per_addr: u32,
    /// Serve /bench/noop, a no-op handler benchmarks compare against.
    #[arg(long, env = "BENCH_ROUTES", default_value_t = false, hide = true)]
    pub bench_routes: bool,
}

impl service_kit::Flags for Config {
    type Config = Config;
    const RENAMED: &'static [service_kit::Renamed] =
        &[service_kit::Renamed::millis("push-tick-ms", "PUSH_TICK_MS", "push-tick", "PUSH_TICK")];

    fn common(&self) -> &service_kit::Common {
        &self.common
    }

    fn into_config(self) -> Result<Config, String> {
        Ok(self)
    }
}

impl Config {
    /// Defaults for a local run and tests, listening on any free loopback port.
    pub fn local(valkey_url: &str) -> Config {
        Config {
            common: service_kit::Common::local(valkey_url),
            http: Default::default(),
            chat_url: "http://127.0.0.1:8081/".into(),
            admit_url: Vec::new(),
            templates: None,
            admin_token: None,
            rate_limit: 20.0,
            rate_burst: 40.0,
            cors_origins: cors::Origins::None,
            trust_proxy: false,
            push_tick: Duration::from_secs(1),
            pow_secret: None,
            max_streams: 100_000,
            max_streams_per_addr: 64,
            bench_routes: false,
        }
    }
}

/// Shared by every handler.
pub struct AppState {
    pub config: Config,
    pub store: store::Store,
    pub hub: Arc<hub::Hub>,
    /// Status reads gathered into one `QUEUE.RANKS` call per queue.
    pub statuses: Arc<batch::StatusBatcher>,
    pub limiter: limit::RateLimiter,
    /// Open push streams, in all and per client address.
    pub streams: Arc<conn_limit::ConnLimit>,
    pub metrics: Arc<metrics::Metrics>,
    /// Proof-of-work challenges and what each queue asks.
    pub pow: pow::Gate,
    /// Queues this instance has registered in the discovery set.
    pub registered: std::sync::Mutex<std::collections::HashSet<String>>,
    /// Flips to true on shutdown, ending push streams.
    pub shutdown: watch::Receiver<bool>,
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
        .route("/api/admin/queues", get(admin::list))
        .route("/api/admin/queues/{queue}/brand", axum::routing::put(admin::put_brand))
        .route("/api/admin/queues/{queue}/pause", post(admin::pause))
        .route("/api/admin/queues/{queue}/resume", post(admin::resume))
        .route("/api/queue/entry", post(routes::entry).delete(routes::leave))
        .route("/api/queue/status", get(routes::status))
        .route("/api/queue/stream", get(routes::stream))
        .route("/api/queue/opening", get(opening::opening))
        .route("/api/queue/challenge", get(routes::challenge))
        .route("/api/admin/queues/{queue}", get(admin::get).put(admin::put))
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
    metrics.registry().spawn_upkeep();
    let store = store::Store::connect(config.common.target());
    let hub = hub::Hub::new(store.clone(), config.push_tick, metrics.clone());
    let (stop_tx, stop_rx) = watch::channel(false);
    // Promotion announcements wake the matching queue's push streams at once.
    let mut events = queue_client::events::subscribe_target(config.common.target());
    let hub_events = hub.clone();
    tokio::spawn(async move {
        while let Some(e) = events.recv().await {
            hub_events.wake(&e.queue);
        }
    });
    let state = Arc::new(AppState {
        limiter: limit::RateLimiter::new(config.rate_limit, config.rate_burst),
        pow: pow::Gate::new(config.pow_secret.as_deref()),
        streams: conn_limit::ConnLimit::new(config.max_streams, config.max_streams_per_addr),
        config,
        store,
        hub,
        statuses: Default::default(),
        metrics,
        registered: Default::default(),
        shutdown: stop_rx,
    });
    let limits = state.config.http;
    server::serve(listener, app(state), limits, async move {
        shutdown.await;
        let _ = stop_tx.send(true);
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use service_kit::flags::try_parse_args as parse;

    #[test]
    fn flags_and_their_defaults() {
        let c = parse::<Config>(&[]).unwrap();
        assert_eq!((c.common.listen.to_string(), c.push_tick), ("127.0.0.1:8080".to_string(), Duration::from_secs(1)));
        assert_eq!((c.rate_limit, c.rate_burst, c.trust_proxy), (20.0, 40.0, false));
        assert_eq!((c.max_streams, c.max_streams_per_addr), (100_000, 64));
        let c = parse::<Config>(&["--max-streams", "5", "--max-streams-per-addr", "0"]).unwrap();
        assert_eq!((c.max_streams, c.max_streams_per_addr), (5, 0));
        assert_eq!(parse::<Config>(&["--push-tick", "250ms"]).unwrap().push_tick, Duration::from_millis(250));
        assert_eq!(
            parse::<Config>(&["--push-tick-ms", "250"]).unwrap().push_tick,
            Duration::from_millis(250),
            "the old spelling"
        );
        for bad in ["99ms", "61s", "1000"] {
            assert!(parse::<Config>(&["--push-tick", bad]).is_err(), "{bad}");
        }
    }
}
