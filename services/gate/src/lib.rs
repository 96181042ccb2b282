//! queue-gate: the waiting room in front of anyone's app.
//!
//! Two ways to use it, sharing everything below: a reverse proxy in front of the app
//! ([`proxy`], with `--upstream`), or a forward-auth endpoint for a proxy already there
//! ([`auth`], `GET /gate/auth`). Either way a request is decided by [`decide`] from
//! the rules ([`rules`]) and the admission token ([`token`], cached in [`sessions`])
//! without any Valkey call; a visitor without a token goes straight in while there is
//! room ([`straight`], one QUEUE.PASS); promoted people claim their ticket at
//! `/gate/claim` ([`claim`]); the leases of the people seen are renewed once per tick
//! per queue ([`lease`]); the app's sales reported in proxy mode ([`sales`]). See
//! docs/gate.md.

pub mod answer;
pub mod auth;
pub mod claim;
pub mod config;
pub mod cookie;
pub mod decide;
pub mod health;
pub mod i18n;
pub mod lease;
pub mod metrics;
pub mod proxy;
pub mod readmit;
pub mod registry;
pub mod returns;
pub mod rules;
pub mod sales;
pub mod sessions;
pub mod straight;
pub mod token;

pub use config::{Config, Flags};

use axum::routing::{any, get};
use axum::Router;
use queue_client::LazyClient;
use std::future::Future;
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};

/// Why a session is ended by the gate (SESSION.END).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndReason {
    /// The app answered `Queue-Session: end`.
    App,
    /// The person left at `/gate/leave`.
    Leave,
    /// Past the queue's longest session.
    MaxSession,
}

impl EndReason {
    pub fn as_str(self) -> &'static str {
        match self {
            EndReason::App => "app",
            EndReason::Leave => "leave",
            EndReason::MaxSession => "max_session",
        }
    }
}

/// A session to end in Valkey.
#[derive(Debug)]
pub struct EndRequest {
    pub queue: String,
    pub user: String,
    pub reason: EndReason,
}

/// What every handler and loop shares.
pub struct Gate {
    pub config: Config,
    pub store: LazyClient,
    pub table: sessions::Table,
    pub health: health::StoreHealth,
    pub metrics: metrics::Metrics,
    pub cookie: cookie::CookieSpec,
    /// Sessions to end with SESSION.END, by the ender task (never on a request's path).
    pub ends: mpsc::UnboundedSender<EndRequest>,
    pub http: proxy::HttpClient,
    /// The app as proxy mode's fast path reaches it (plain HTTP upstreams; None with
    /// `--fast-path off`).
    pub fast: Option<proxy::fast::Upstream>,
    /// Straight passes: the per-address limiter and the per-queue busy hint.
    pub straight: straight::StraightThrough,
    /// Sales the app reported (`Queue-Sold`), sent by the sale task.
    pub sales: mpsc::Sender<sales::Sale>,
    /// The sale task's end of [`Gate::sales`], taken by [`serve`].
    pub sales_rx: std::sync::Mutex<Option<mpsc::Receiver<sales::Sale>>>,
}

/// Milliseconds since the epoch.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

impl Gate {
    /// The gate for `config`, connecting to Valkey in the background; the receiver
    /// takes the sessions to end ([`lease::end_loop`]).
    pub fn new(mut config: Config) -> (Arc<Gate>, mpsc::UnboundedReceiver<EndRequest>) {
        // In forward-auth mode every caller is the proxy asking about a request.
        if config.upstream.is_none() {
            config.client_addrs = config.client_addrs.trusting_peer();
        }
        let (ends, ended) = mpsc::unbounded_channel();
        let (sales, sales_rx) = mpsc::channel(sales::SALES_PENDING);
        let gate = Gate {
            straight: straight::StraightThrough::new(config.straight_per_address),
            sales,
            sales_rx: std::sync::Mutex::new(Some(sales_rx)),
            store: LazyClient::connect_durable(config.target.clone(), config.durability),
            table: sessions::Table::default(),
            health: health::StoreHealth::new(config.fail_open, now_ms()),
            metrics: metrics::Metrics::new(),
            cookie: cookie::CookieSpec { name: config.cookie_name.clone(), domain: config.cookie_domain.clone() },
            ends,
            http: proxy::client(),
            fast: config.upstream.as_ref().filter(|_| config.fast_path).and_then(proxy::fast::Upstream::of),
            config,
        };
        (Arc::new(gate), ended)
    }

    /// The idle time of `queue`, in milliseconds.
    pub fn idle_ms(&self, queue: &str) -> u64 {
        self.config.rules.settings(queue).idle.as_millis() as u64
    }
}

/// The queues this gate sends people to: its routes' and, with `--unmatched`, that one.
pub fn gated_queues(rules: &rules::Rules) -> std::collections::BTreeSet<String> {
    let mut queues: std::collections::BTreeSet<String> = rules.routes().iter().map(|r| r.queue.clone()).collect();
    if let rules::Unmatched::Queue(q) = &rules.unmatched {
        queues.insert(q.clone());
    }
    queues
}

/// Declares the gate's queues (`SADD queue-registry`): queue-api serves only queues an
/// operator declared, and a gate's route is one (docs/gate.md). Tried again every
/// second until Valkey has them all, or the gate stops.
async fn declare_queues(gate: Arc<Gate>, mut stop: watch::Receiver<bool>) {
    let mut left = gated_queues(&gate.config.rules);
    while !left.is_empty() {
        // The connection is made in the background: declared as soon as it is up (not
        // a second later, among the admitted requests).
        let Some(client) = gate.store.client().await else {
            tokio::select! {
                _ = tokio::time::sleep(std::time::Duration::from_millis(50)) => continue,
                _ = stop.changed() => return,
            }
        };
        let mut failed = std::collections::BTreeSet::new();
        for q in left {
            if let Err(e) = client.register_queue(&q).await {
                tracing::warn!(queue = %q, error = %e, "could not declare the queue in queue-registry; retrying");
                failed.insert(q);
            }
        }
        left = failed;
        if left.is_empty() {
            tracing::info!("the routes' queues are declared in queue-registry");
            return;
        }
        tokio::select! {
            _ = tokio::time::sleep(std::time::Duration::from_secs(1)) => {}
            _ = stop.changed() => return,
        }
    }
}

/// The gate's routes: its own endpoints, and in proxy mode everything else forwarded.
pub fn app(gate: Arc<Gate>) -> Router {
    let limit = gate.config.limits.request_timeout;
    let own = Router::new()
        .route("/gate/auth", any(auth::auth))
        .route("/gate/auth/{*rest}", any(auth::auth))
        .route("/gate/claim", get(claim::claim))
        .route("/gate/leave", get(claim::leave).post(claim::leave))
        .route("/gate/renew", get(claim::renew))
        .route("/.well-known/jwks.json", get(auth::jwks))
        .route("/gate/healthz", get(auth::healthz))
        .route("/gate/metrics", get(metrics::metrics));
    let own = if gate.config.upstream.is_none() {
        own.route("/healthz", get(auth::healthz)).route("/metrics", get(metrics::metrics))
    } else {
        own
    };
    // The gate's own answers are bounded by --request-timeout; proxied requests by
    // --upstream-timeout (an upload may take longer than the gate's own requests).
    let own = service_kit::http::with_request_timeout(own, limit);
    let room = Router::new()
        .route("/gate/room", any(proxy::general::room))
        .route("/gate/room/", any(proxy::general::room))
        .route("/gate/room/{*rest}", any(proxy::general::room))
        // The rest of /gate/ is the gate's, never the app's.
        .route("/gate/{*rest}", any(auth::not_found));
    let router = own.merge(room);
    let router = if gate.config.upstream.is_some() { router.fallback(proxy::general::forward) } else { router };
    gate.metrics.registry.track_http(router.with_state(gate.clone()))
}

/// Serves the gate on `listener` until `shutdown` completes, then finishes the
/// requests in flight and returns.
pub async fn serve(
    listener: TcpListener,
    config: Config,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let limits = config.limits;
    let listen = listener.local_addr().map_or_else(|_| String::new(), |a| a.to_string());
    let (gate, ended) = Gate::new(config);
    gate.metrics.registry.spawn_upkeep();
    let (stop_tx, stop_rx) = watch::channel(false);
    let ticker = tokio::spawn(lease::tick_loop(gate.clone(), stop_rx.clone()));
    tokio::spawn(declare_queues(gate.clone(), stop_rx.clone()));
    let described = tokio::spawn(registry::publish_loop(gate.clone(), listen, stop_rx.clone()));
    if let Some(sales) = gate.sales_rx.lock().unwrap().take() {
        tokio::spawn(sales::sale_loop(gate.clone(), sales, stop_rx.clone()));
    }
    let ender = tokio::spawn(lease::end_loop(gate.clone(), ended, stop_rx));
    tracing::info!(
        mode = if gate.config.upstream.is_some() { "proxy" } else { "forward-auth" },
        kid = gate.config.keys.signing_kid(),
        alg = gate.config.keys.signing_alg().name(),
        routes = gate.config.rules.routes().len(),
        "queue-gate ready"
    );
    let router = app(gate.clone());
    let result = if gate.config.fast_path {
        // Plain requests on the fast path (forward-auth calls in either mode, requests
        // for a plain-HTTP app in proxy mode), the rest by the router.
        let http = Arc::new(service_kit::http::http1(limits));
        let g = gate.clone();
        service_kit::http::serve_with(listener, shutdown, move |tcp, peer, closing| {
            proxy::fast::connection(g.clone(), router.clone(), http.clone(), tcp, peer, closing)
        })
        .await
    } else {
        service_kit::http::serve(listener, router, shutdown, limits).await
    };
    let _ = stop_tx.send(true);
    let _ = ticker.await;
    let _ = tokio::time::timeout(std::time::Duration::from_secs(2), described).await;
    // Sessions ended by the last requests still get their SESSION.END.
    let _ = tokio::time::timeout(std::time::Duration::from_secs(5), ender).await;
    result
}
