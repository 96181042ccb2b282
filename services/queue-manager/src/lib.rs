//! queue-manager: the admission loop of the waiting room.
//!
//! Every tick the leader calls `QUEUE.PROMOTE` on every known queue and announces
//! what changed to the queue-api instances; it holds no queue state of its own.
//! Replicas stand by behind a lease in Valkey ([`leader`]); queues are discovered in
//! the store ([`discovery`]); with `--adaptive`, each queue's admission follows the
//! downstream server's health signal ([`health`], [`policy`]). `/metrics` and
//! `/healthz` are served by [`http`].
//!
//! [`serve`] runs everything until its shutdown future completes, then stops
//! promoting, releases the lease (so a standby takes over at once) and returns.

pub mod config;
pub mod discovery;
pub mod health;
pub mod http;
pub mod leader;
pub mod metrics;
pub mod policy;

mod admit;

pub use config::{Config, Flags};
pub use http::app;

use policy::Admission;
use queue_client::{Backoff, ClientError, ConnectOptions, QueueClient};
use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tracing::{debug, error, info, warn};

/// What the loops and the HTTP handlers share.
pub struct ManagerState {
    config: Config,
    client: OnceLock<QueueClient>,
    lease: leader::Lease,
    queues: RwLock<BTreeSet<String>>,
    valkey_up: AtomicBool,
    admissions: Mutex<BTreeMap<String, Admission>>,
    /// The HTTP request histogram and the process's figures, kept across scrapes.
    http: service_kit::metrics::Registry,
}

impl ManagerState {
    /// A state for `config`, not connected yet, not leading.
    pub fn new(config: Config) -> ManagerState {
        ManagerState {
            lease: leader::Lease::new(leader::LEADER_KEY, config.lease),
            queues: RwLock::new(config.queues.iter().cloned().collect()),
            config,
            client: OnceLock::new(),
            valkey_up: AtomicBool::new(false),
            admissions: Mutex::new(BTreeMap::new()),
            http: service_kit::metrics::Registry::default(),
        }
    }

    /// Whether this replica holds the lease (and so promotes).
    pub fn is_leader(&self) -> bool {
        self.lease.is_held()
    }

    /// Whether Valkey answered the last call.
    pub fn valkey_up(&self) -> bool {
        self.valkey_up.load(Ordering::Relaxed)
    }

    /// The queues served, in name order.
    pub fn queues(&self) -> Vec<String> {
        self.queues.read().unwrap().iter().cloned().collect()
    }

    /// Notes that a call went through.
    fn up(&self) {
        if !self.valkey_up.swap(true, Ordering::Relaxed) {
            info!("Valkey answers");
        }
    }

    /// Notes a failed call: an unreachable store is logged once per outage; a refused
    /// permission is no outage (the client logs it once, naming it; `/healthz` shows it).
    fn failed(&self, what: &str, e: &ClientError) {
        if let Some(refused) = e.refused_permission() {
            debug!("{what}: {refused}");
        } else if !e.is_unavailable() {
            warn!("{what}: {e}");
        } else if self.valkey_up.swap(false, Ordering::Relaxed) {
            warn!("{what}: Valkey unreachable, backing off until it is back: {e}");
        } else {
            debug!("{what}: {e}");
        }
    }

    /// The figures of one scrape.
    async fn snapshot(&self) -> metrics::Snapshot {
        let mut snap = metrics::Snapshot { leader: self.is_leader(), ..Default::default() };
        if let Some(client) = self.client.get() {
            for queue in self.queues() {
                match client.info(&queue).await {
                    Ok(info) => snap.queues.push((queue, info)),
                    Err(e) => {
                        self.failed("QUEUE.INFO", &e);
                        if e.is_unavailable() {
                            break;
                        }
                    }
                }
            }
            if !snap.queues.is_empty() {
                self.up();
            }
        }
        snap.valkey_up = self.valkey_up();
        if self.config.adaptive.is_some() {
            snap.admissions = self.admissions.lock().unwrap().iter().map(|(q, a)| (q.clone(), *a)).collect();
        }
        snap
    }
}

/// Serves on `listener` until `shutdown` completes, then stops promoting, releases
/// the lease and returns. A Valkey URL that can never work is an error
/// (`InvalidInput`) instead of a retry forever.
pub async fn serve(
    listener: TcpListener,
    config: Config,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let (stop_tx, stop) = watch::channel(false);
    let stop_tx = Arc::new(stop_tx);
    let relay = tokio::spawn({
        let stop_tx = stop_tx.clone();
        async move {
            shutdown.await;
            stop_tx.send_replace(true);
        }
    });
    let state = Arc::new(ManagerState::new(config));
    if let Ok(addr) = listener.local_addr() {
        info!(%addr, instance = state.lease.token(), "queue-manager listening");
    }
    let http = tokio::spawn(service_kit::serve(listener, app(state.clone()), stopped(stop.clone())));
    let result = match connect(&state, &stop).await {
        Ok(Some(client)) => {
            let _ = state.client.set(client.clone());
            run_loops(&state, client, &stop).await;
            Ok(())
        }
        Ok(None) => Ok(()),
        Err(e) => Err(e),
    };
    relay.abort();
    // Also when connecting failed for good: the HTTP server must not outlive `serve`.
    stop_tx.send_replace(true);
    if let Ok(Err(e)) = http.await {
        error!("HTTP server: {e}");
    }
    result
}

/// Runs the loops until stopped, then gives the lease up.
async fn run_loops(state: &Arc<ManagerState>, client: QueueClient, stop: &watch::Receiver<bool>) {
    let discovery = tokio::spawn(discovery_loop(state.clone(), client.clone(), stop.clone()));
    let lease = tokio::spawn(lease_loop(state.clone(), client.clone(), stop.clone()));
    let admit = tokio::spawn(admit::tick_loop(state.clone(), client.clone(), stop.clone()));
    // Promoting stops first; only then is the lease given up.
    let _ = admit.await;
    let _ = lease.await;
    let _ = discovery.await;
    match state.lease.release(&client).await {
        Ok(true) => info!("released the leader lease"),
        Ok(false) => debug!("not the leader at shutdown"),
        Err(e) => warn!("could not release the leader lease (it expires by itself): {e}"),
    }
}

/// Connects (retrying with backoff while the store is away); `None` if stopped first.
async fn connect(state: &ManagerState, stop: &watch::Receiver<bool>) -> std::io::Result<Option<QueueClient>> {
    let config = &state.config;
    let options = ConnectOptions {
        response_timeout: config.lease.clamp(Duration::from_secs(1), Duration::from_secs(5)),
        ..Default::default()
    };
    let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(5));
    loop {
        let target = config.store();
        let attempt = QueueClient::connect_target(&target, options.clone());
        let result = tokio::select! {
            r = attempt => r,
            _ = stopped(stop.clone()) => return Ok(None),
        };
        match result {
            Ok(client) => {
                info!(backend = ?client.backend(), cluster = client.is_cluster(), "connected to Valkey");
                state.up();
                return Ok(Some(client));
            }
            Err(ClientError::InvalidArgument(e)) => {
                return Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, e))
            }
            Err(e) => {
                let delay = backoff.next_delay();
                match e.refused_permission() {
                    Some(refused) => {
                        error!("Valkey refuses a permission this service needs: {refused}; retrying in {delay:?}")
                    }
                    None => warn!("cannot connect to Valkey, retrying in {delay:?}: {e}"),
                }
                tokio::select! {
                    _ = tokio::time::sleep(delay) => {}
                    _ = stopped(stop.clone()) => return Ok(None),
                }
            }
        }
    }
}

/// Renews or acquires the lease every lease/3; backs off while the store is away.
async fn lease_loop(state: Arc<ManagerState>, client: QueueClient, stop: watch::Receiver<bool>) {
    let period = state.lease.period() / 3;
    let mut backoff = Backoff::new(period, Duration::from_secs(5));
    loop {
        if !thawed(&state.config.freeze, &stop).await {
            return;
        }
        let delay = match state.lease.refresh(&client).await {
            Ok(change) => {
                state.up();
                backoff.reset();
                match change {
                    leader::Change::Acquired => info!("acquired the leader lease: promoting"),
                    leader::Change::Lost => warn!("lost the leader lease to another replica: standing by"),
                    leader::Change::Kept | leader::Change::Standby => {}
                }
                period
            }
            Err(e) => {
                state.failed("leader lease", &e);
                backoff.next_delay()
            }
        };
        tokio::select! {
            _ = tokio::time::sleep(delay) => {}
            _ = stopped(stop.clone()) => return,
        }
    }
}

/// Refreshes the list of queues every `discover_every`. Queues are never forgotten
/// while the process lives (an emptied queue costs one cheap PROMOTE per tick).
async fn discovery_loop(state: Arc<ManagerState>, client: QueueClient, stop: watch::Receiver<bool>) {
    loop {
        match discovery::discover(&client, &state.config.queues).await {
            Ok(found) => {
                state.up();
                let mut known = state.queues.write().unwrap();
                for q in found {
                    if !known.contains(&q) {
                        info!(queue = %q, "serving a newly found queue");
                        known.insert(q);
                    }
                }
            }
            Err(e) => state.failed("discovery", &e),
        }
        tokio::select! {
            _ = tokio::time::sleep(state.config.discover_every) => {}
            _ = stopped(stop.clone()) => return,
        }
    }
}

/// Completes once shutdown is asked for.
async fn stopped(mut stop: watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

/// Waits while the freeze hook holds (see [`Config::freeze`]); false if stopping.
async fn thawed(freeze: &Option<watch::Receiver<bool>>, stop: &watch::Receiver<bool>) -> bool {
    if let Some(freeze) = freeze {
        let mut freeze = freeze.clone();
        tokio::select! {
            _ = freeze.wait_for(|frozen| !*frozen) => {}
            _ = stopped(stop.clone()) => return false,
        }
    }
    !*stop.borrow()
}

/// Wall-clock time in Unix ms (event timestamps, health expiry).
fn unix_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The pauses double up to the cap, each drawn between half and all of its
    /// ceiling (the jitter makes an exact value impossible: the bounds are asserted).
    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let within = |d: Duration, ceiling: u64| {
            let ceiling = Duration::from_millis(ceiling);
            ceiling / 2 <= d && d <= ceiling
        };
        let mut b = Backoff::new(Duration::from_millis(100), Duration::from_millis(500));
        let got: Vec<Duration> = (0..5).map(|_| b.next_delay()).collect();
        for (d, ceiling) in got.iter().zip([100, 200, 400, 500, 500]) {
            assert!(within(*d, ceiling), "{got:?}");
        }
        b.reset();
        assert!(within(b.next_delay(), 100));
    }
}
