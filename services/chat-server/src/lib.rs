//! chat-server: the game server of seed 000, a WebSocket chat room behind the
//! waiting room.
//!
//! A connection is let in by claiming its ticket at the handshake (`TICKET.CLAIM`,
//! before the upgrade, so refusals are plain HTTP statuses), holds a session lease
//! while it is open (one `SESSION.HEARTBEAT` per queue per tick for every local user)
//! and gives it back when it closes (`SESSION.END`). A process that dies leaks
//! nothing: its users' leases run out.
//!
//! Any number of instances can serve one room: every broadcast frame goes through
//! Valkey pub/sub (`chat:{Q}:room`) and each instance, the sender's included, hands
//! what it hears to its local sockets. Presence and `clientCount` are read from the
//! queue's own keys, so they count everyone.
//!
//! Routes: `GET /gameserver?ticketId=&queue=` (WebSocket), `/` (the chat page),
//! `/healthz`, `/metrics`.

pub mod bus;
pub mod config;
pub use service_kit::conn_limit;
pub mod error;
pub mod frames;
pub mod guess;
mod handshake;
pub mod health;
pub mod lease;
pub mod limit;
pub mod metrics;
pub mod presence;
pub mod room;
mod routes;
mod session;

pub use config::Config;

use axum::routing::get;
use axum::Router;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::{watch, Notify};

/// Open WebSocket sessions (and upgrades under way), so that shutdown can wait for
/// every one to give its lease back.
#[derive(Default)]
pub struct Tracker {
    live: AtomicUsize,
    changed: Notify,
}

/// Counts one session while it lives.
pub struct Tracked(Arc<Tracker>);

impl Tracker {
    pub fn enter(self: &Arc<Self>) -> Tracked {
        self.live.fetch_add(1, Ordering::SeqCst);
        Tracked(self.clone())
    }

    pub fn live(&self) -> usize {
        self.live.load(Ordering::SeqCst)
    }

    /// Waits until no session is left, or `limit` passes; true if none is left.
    pub async fn drained(&self, limit: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let changed = self.changed.notified();
            if self.live() == 0 {
                return true;
            }
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                return self.live() == 0;
            }
        }
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        self.0.live.fetch_sub(1, Ordering::SeqCst);
        self.0.changed.notify_waiters();
    }
}

/// Runs `step` every `period` until the shutdown flag is up; a late tick is not
/// caught up (the next one waits a whole period).
pub async fn every_tick<F, Fut>(state: &AppState, period: Duration, mut step: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let mut shutdown = state.shutdown.clone();
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stopped(&mut shutdown) => return,
        }
        step().await;
    }
}

/// Resolves once the shutdown flag is up (at once if it is already).
pub async fn stopped(flag: &mut watch::Receiver<bool>) {
    let _ = flag.wait_for(|s| *s).await;
}

/// Shared by every handler and background loop.
pub struct AppState {
    pub config: Config,
    /// This instance's name (the flag, or a random one).
    pub instance_id: String,
    /// The connection to Valkey, made in the background (503 until it is).
    pub store: queue_client::LazyClient,
    pub rooms: Arc<room::Rooms>,
    pub metrics: Arc<metrics::Metrics>,
    /// Recent broadcast round trips and heartbeat round trips, for the health signal.
    pub latency: Arc<health::Latency>,
    pub sessions: Arc<Tracker>,
    /// Open sessions against --max-sessions and --max-sessions-per-addr.
    pub limits: Arc<conn_limit::ConnLimit>,
    /// Failed ticket checks per client address.
    pub ticket_failures: guess::FailureLimit,
    /// Refusals with 1013 under way (bounded: past it, refusals are plain 503s).
    pub refusing: Arc<Tracker>,
    /// True while the pub/sub subscription that feeds the rooms is live.
    pub room_feed_up: Arc<AtomicBool>,
    /// Flips to true on shutdown: sessions close with 1001.
    pub shutdown: watch::Receiver<bool>,
    /// Who the client is behind the proxies in front (`--trusted-proxies`).
    pub client_addrs: service_kit::ClientAddrs,
}

impl service_kit::HasClientAddrs for AppState {
    fn client_addrs(&self) -> &service_kit::ClientAddrs {
        &self.client_addrs
    }
}

impl AppState {
    pub fn shutting_down(&self) -> bool {
        *self.shutdown.borrow()
    }
}

pub fn app(state: Arc<AppState>) -> Router {
    let router = Router::new()
        .route("/", get(routes::page))
        .route("/gameserver", get(handshake::gameserver))
        .route("/metrics", get(routes::metrics))
        .route("/healthz", get(routes::healthz))
        .fallback(routes::not_found);
    let router = service_kit::http::with_request_timeout(router, state.config.http.request_timeout);
    state.metrics.registry().track_http(router).with_state(state)
}

/// How long shutdown waits for sessions to close and end their leases.
const DRAIN_LIMIT: Duration = Duration::from_secs(10);

/// A random instance name, `chat-` and 12 hex digits (a random UUID's first 48 bits).
fn random_instance_id() -> String {
    let id = uuid::Uuid::new_v4().simple().to_string();
    format!("chat-{}", &id[..12])
}

/// Serves on `listener` until `shutdown` resolves; then closes every socket with
/// 1001, ends every local session lease, withdraws the health signal and returns.
pub async fn serve(
    listener: TcpListener,
    config: Config,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let instance_id = config.instance_id.clone().filter(|s| !s.is_empty()).unwrap_or_else(random_instance_id);
    let (stop_tx, stop_rx) = watch::channel(false);
    let state = Arc::new(AppState {
        store: queue_client::LazyClient::connect_durable(config.common.target(), config.durable.durability()),
        instance_id,
        rooms: Arc::new(room::Rooms::default()),
        metrics: Arc::new(metrics::Metrics::default()),
        latency: Arc::new(health::Latency::default()),
        sessions: Arc::new(Tracker::default()),
        limits: conn_limit::ConnLimit::new(config.max_sessions, config.max_sessions_per_addr),
        client_addrs: service_kit::ClientAddrs::new(&config.proxy),
        ticket_failures: guess::FailureLimit::new(config.ticket_failures_per_minute, config.ticket_failure_burst),
        refusing: Arc::new(Tracker::default()),
        room_feed_up: Arc::new(AtomicBool::new(false)),
        shutdown: stop_rx,
        config,
    });
    tracing::info!(instance = %state.instance_id, "chat-server starting");
    let feed = tokio::spawn(bus::subscribe(state.clone(), |state| {
        tokio::spawn(presence::resync(state));
    }));
    let beats = tokio::spawn(lease::heartbeat_loop(state.clone()));
    let health = tokio::spawn(health::signal_loop(state.clone()));
    let told = tokio::spawn(presence::tell_loop(state.clone()));
    state.metrics.registry().spawn_upkeep();
    let stop_tx = Arc::new(stop_tx);
    let stop = stop_tx.clone();
    let limits = state.config.http;
    let served = service_kit::http::serve(
        listener,
        app(state.clone()),
        async move {
            shutdown.await;
            stop.send_replace(true);
        },
        limits,
    )
    .await;
    // Also when serving failed: the loops and sessions must come to an end.
    stop_tx.send_replace(true);
    // The HTTP side is done; upgraded sockets live on their own until they see the
    // shutdown flag, close with 1001 and end their leases.
    if !state.sessions.drained(DRAIN_LIMIT).await {
        tracing::warn!(left = state.sessions.live(), "sessions still open at shutdown; their leases will lapse");
    }
    let _ = beats.await;
    let _ = health.await;
    let _ = told.await;
    // The leaves of the sessions closed by the shutdown.
    presence::tell(&state).await;
    health::withdraw(&state).await;
    feed.abort();
    tracing::info!("chat-server stopped");
    served
}
