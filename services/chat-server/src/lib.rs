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

use axum::routing::get;
use axum::Router;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::{watch, Notify};

/// chat-server: the WebSocket chat room behind the waiting room. Every flag has an
/// environment-variable fallback.
#[derive(Debug, Clone, clap::Parser)]
#[command(name = "chat-server", version, about, mut_arg("listen", service_kit::default_listen("127.0.0.1:8081")))]
pub struct Config {
    #[command(flatten)]
    pub common: service_kit::Common,
    #[command(flatten)]
    pub http: service_kit::http::HttpLimits,
    /// The queue (room) of a connection whose URL names none; its health signal is
    /// published even while nobody is connected.
    #[arg(long, env = "QUEUE", default_value = "default", value_parser = parse_queue)]
    pub queue: String,
    /// Time between heartbeats: one SESSION.HEARTBEAT per queue for all local users.
    /// Must stay well under the queue's session_lease (default 30s).
    #[arg(long, env = "HEARTBEAT", default_value = "5s", value_parser = period())]
    pub heartbeat: Duration,
    /// Time without a frame from the client before it is closed (1000 "idle") and its
    /// session ended. Pings do not count: only text and binary frames.
    #[arg(long, env = "IDLE_TIMEOUT", default_value = "2m", value_parser = period())]
    pub idle_timeout: Duration,
    /// Largest frame accepted from a client, in bytes; a larger one closes the
    /// connection with 1009.
    #[arg(long, env = "MAX_FRAME_BYTES", default_value_t = 4096,
          value_parser = clap::value_parser!(u32).range(64..=1_048_576))]
    pub max_frame_bytes: u32,
    /// Frames a connection may send per second, on average.
    #[arg(long, env = "MESSAGES_PER_SECOND", default_value_t = 5.0, value_parser = parse_positive)]
    pub messages_per_second: f64,
    /// Frames a connection may send in a burst.
    #[arg(long, env = "MESSAGE_BURST", default_value_t = 10.0, value_parser = parse_positive)]
    pub message_burst: f64,
    /// Sessions this instance is sized for: its health signal's load is local
    /// sessions divided by this.
    #[arg(long, env = "CAPACITY", default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..))]
    pub capacity: u64,
    /// Most sessions this instance holds at once (0: no limit); past it a handshake is
    /// taken and closed at once with 1013 (try again later), its ticket unclaimed.
    #[arg(long, env = "MAX_SESSIONS", default_value_t = 20_000)]
    pub max_sessions: usize,
    /// Most sessions one client address holds at once (0: no limit); past it, as above.
    #[arg(long, env = "MAX_SESSIONS_PER_ADDR", default_value_t = 1_000)]
    pub max_sessions_per_addr: u32,
    /// How often presence changes (joins, leaves) are sent to the room: all of a tick's
    /// changes in one PRESENCE_JOINED, one PRESENCE_LEFT and one system line.
    /// Failed ticket checks (unknown, used or malformed tickets) one client address
    /// may make per minute once its burst is spent; past it, 429. 0 (the default): no
    /// limit, since behind a proxy or load balancer every client has its address; set
    /// it where chat-server sees the clients' own addresses.
    #[arg(long, env = "TICKET_FAILURES_PER_MINUTE", default_value_t = 0.0, value_parser = parse_non_negative)]
    pub ticket_failures_per_minute: f64,
    /// Failed ticket checks one client address may make at once.
    #[arg(long, env = "TICKET_FAILURE_BURST", default_value_t = 20.0, value_parser = parse_positive)]
    pub ticket_failure_burst: f64,
    #[arg(long, env = "PRESENCE_TICK", default_value = "200ms",
          value_parser = service_kit::duration(Duration::from_millis(10)..=Duration::from_secs(10)))]
    pub presence_tick: Duration,
    /// This instance's name in the health signal and on the room channel (default:
    /// random).
    #[arg(long, env = "INSTANCE_ID")]
    pub instance_id: Option<String>,
    /// Time between two health signals.
    #[arg(long, env = "HEALTH_INTERVAL", default_value = "2s", value_parser = period())]
    pub health_interval: Duration,
    /// How long a health signal stays valid (the queue-manager ignores it after).
    #[arg(long, env = "HEALTH_TTL", default_value = "10s", value_parser = period())]
    pub health_ttl: Duration,
}

impl service_kit::Flags for Config {
    type Config = Config;
    const RENAMED: &'static [service_kit::Renamed] = &[
        service_kit::Renamed::secs("heartbeat-secs", "HEARTBEAT_SECS", "heartbeat", "HEARTBEAT"),
        service_kit::Renamed::secs("idle-timeout-secs", "IDLE_TIMEOUT_SECS", "idle-timeout", "IDLE_TIMEOUT"),
        service_kit::Renamed::secs("health-secs", "HEALTH_SECS", "health-interval", "HEALTH_INTERVAL"),
        service_kit::Renamed::secs("health-ttl-secs", "HEALTH_TTL_SECS", "health-ttl", "HEALTH_TTL"),
    ];

    fn common(&self) -> &service_kit::Common {
        &self.common
    }

    fn into_config(self) -> Result<Config, String> {
        Ok(self)
    }
}

/// The periods above: more than 0, at most a day.
fn period() -> service_kit::flags::DurationParser {
    service_kit::duration(Duration::from_nanos(1)..=Duration::from_secs(86_400))
}

fn parse_positive(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(format!("{s:?} is not a positive number")),
    }
}

fn parse_non_negative(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        _ => Err(format!("{s:?} is not a number from 0 up")),
    }
}

fn parse_queue(s: &str) -> Result<String, String> {
    queue_core::keys::check_queue(s.as_bytes()).map(str::to_string).map_err(|e| e.to_string())
}

impl Config {
    /// Defaults for a local run and tests, listening on any free loopback port.
    pub fn local(valkey_url: &str) -> Config {
        Config {
            common: service_kit::Common::local(valkey_url),
            http: Default::default(),
            queue: "default".into(),
            heartbeat: Duration::from_secs(5),
            idle_timeout: Duration::from_secs(120),
            max_frame_bytes: 4096,
            messages_per_second: 5.0,
            message_burst: 10.0,
            capacity: 1000,
            max_sessions: 20_000,
            max_sessions_per_addr: 1_000,
            ticket_failures_per_minute: 0.0,
            ticket_failure_burst: 20.0,
            presence_tick: Duration::from_millis(200),
            instance_id: None,
            health_interval: Duration::from_secs(2),
            health_ttl: Duration::from_secs(10),
        }
    }
}

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
        store: queue_client::LazyClient::connect_target(config.common.target()),
        instance_id,
        rooms: Arc::new(room::Rooms::default()),
        metrics: Arc::new(metrics::Metrics::default()),
        latency: Arc::new(health::Latency::default()),
        sessions: Arc::new(Tracker::default()),
        limits: conn_limit::ConnLimit::new(config.max_sessions, config.max_sessions_per_addr),
        ticket_failures: guess::FailureLimit::new(config.ticket_failures_per_minute, config.ticket_failure_burst),
        refusing: Arc::new(Tracker::default()),
        room_feed_up: Arc::new(AtomicBool::new(false)),
        shutdown: stop_rx,
        config,
    });
    tracing::info!(instance = %state.instance_id, "chat-server starting");
    let feed = tokio::spawn(bus::subscribe(state.clone()));
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

#[cfg(test)]
mod tests {
    use super::*;
    use service_kit::flags::try_parse_args as parse;

    #[test]
    fn durations_with_units_and_the_old_seconds_flags() {
        let c = parse::<Config>(&[]).unwrap();
        assert_eq!(c.common.listen.to_string(), "127.0.0.1:8081");
        assert_eq!((c.heartbeat, c.idle_timeout), (Duration::from_secs(5), Duration::from_secs(120)));
        assert_eq!((c.health_interval, c.health_ttl), (Duration::from_secs(2), Duration::from_secs(10)));
        assert_eq!(
            (c.max_sessions, c.max_sessions_per_addr, c.presence_tick),
            (20_000, 1_000, Duration::from_millis(200))
        );
        let c = parse::<Config>(&["--heartbeat", "200ms", "--idle-timeout", "1h", "--health-interval", "1s"]).unwrap();
        assert_eq!((c.heartbeat, c.idle_timeout), (Duration::from_millis(200), Duration::from_secs(3600)));
        let c = parse::<Config>(&["--heartbeat-secs", "0.2", "--idle-timeout-secs", "3600", "--health-ttl-secs", "30"])
            .unwrap();
        assert_eq!((c.heartbeat, c.idle_timeout), (Duration::from_millis(200), Duration::from_secs(3600)));
        assert_eq!(c.health_ttl, Duration::from_secs(30));
        for bad in
            [&["--heartbeat", "0"][..], &["--heartbeat", "5"], &["--heartbeat-secs", "0"], &["--health-secs", "86401"]]
        {
            assert!(parse::<Config>(bad).is_err(), "{bad:?}");
        }
    }
}
