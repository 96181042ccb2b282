//! Push updates for many streams at the price of one: each queue with open streams
//! has one refresher that asks `QUEUE.RANKS` for all of its streams' users at once,
//! on every tick and whenever the queue-manager announces a promotion, and hands
//! each stream its user's standing only when it changed.

use crate::metrics::Metrics;
use crate::store::Store;
use queue_client::{Standing, Status};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{watch, Notify};

/// Users asked about per QUEUE.RANKS call (bounds one call's time inside Valkey).
const RANKS_BATCH: usize = 10_000;

#[derive(Default)]
struct Watched {
    /// Per user: the channel its streams read, and how many streams it has.
    users: HashMap<String, (watch::Sender<Option<Standing>>, usize)>,
}

struct QueueWatch {
    watched: Mutex<Watched>,
    wake: Notify,
}

pub struct Hub {
    queues: Mutex<HashMap<String, Arc<QueueWatch>>>,
    store: Store,
    tick: Duration,
    metrics: Arc<Metrics>,
}

/// Keeps a stream's registration; unregisters on drop.
pub struct Subscription {
    hub: Arc<Hub>,
    queue: String,
    user: String,
    pub updates: watch::Receiver<Option<Standing>>,
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.hub.unsubscribe(&self.queue, &self.user);
        self.hub.metrics.sse_streams.decrement(1.0);
    }
}

impl Hub {
    pub fn new(store: Store, tick: Duration, metrics: Arc<Metrics>) -> Arc<Hub> {
        Arc::new(Hub { queues: Mutex::new(HashMap::new()), store, tick, metrics })
    }

    /// Registers a stream for `user` on `queue`; its first standing comes at once.
    pub fn subscribe(self: &Arc<Hub>, queue: &str, user: &str) -> Subscription {
        // Under the registry lock, so that a refresher retiring its queue either
        // sees this user or is replaced by a new one.
        let (watch, new_queue, updates) = {
            let mut queues = self.queues.lock().unwrap();
            let (w, new_queue) = match queues.get(queue) {
                Some(w) => (w.clone(), false),
                None => {
                    let w = Arc::new(QueueWatch { watched: Mutex::default(), wake: Notify::new() });
                    queues.insert(queue.to_string(), w.clone());
                    (w, true)
                }
            };
            let updates = {
                let mut watched = w.watched.lock().unwrap();
                let entry = watched.users.entry(user.to_string()).or_insert_with(|| (watch::channel(None).0, 0));
                entry.1 += 1;
                entry.0.subscribe()
            };
            (w, new_queue, updates)
        };
        if new_queue {
            tokio::spawn(refresher(self.clone(), queue.to_string(), watch.clone()));
        }
        watch.wake.notify_one();
        self.metrics.sse_streams.increment(1.0);
        Subscription { hub: self.clone(), queue: queue.to_string(), user: user.to_string(), updates }
    }

    fn unsubscribe(&self, queue: &str, user: &str) {
        let queues = self.queues.lock().unwrap();
        if let Some(w) = queues.get(queue) {
            let mut watched = w.watched.lock().unwrap();
            if let Some(entry) = watched.users.get_mut(user) {
                entry.1 -= 1;
                if entry.1 == 0 {
                    watched.users.remove(user);
                }
            }
        }
    }

    /// Refreshes `queue` now (a promotion was announced).
    pub fn wake(&self, queue: &str) {
        if let Some(w) = self.queues.lock().unwrap().get(queue) {
            w.wake.notify_one();
        }
    }

    /// Queues with open streams (for tests and metrics).
    pub fn watched_queues(&self) -> usize {
        self.queues.lock().unwrap().len()
    }
}

async fn refresher(hub: Arc<Hub>, queue: String, watch: Arc<QueueWatch>) {
    loop {
        let users: Vec<String> = {
            let mut queues = hub.queues.lock().unwrap();
            let watched = watch.watched.lock().unwrap();
            if watched.users.is_empty() {
                // Nobody left: retire (under the registry lock, so no subscriber races us).
                queues.remove(&queue);
                return;
            }
            watched.users.keys().cloned().collect()
        };
        if let Ok(client) = hub.store.client().await {
            for batch in users.chunks(RANKS_BATCH) {
                hub.metrics.ranks_calls.increment(1);
                match client.ranks(&queue, batch).await {
                    Ok(standings) => {
                        let watched = watch.watched.lock().unwrap();
                        for s in standings {
                            if let Some((tx, _)) = watched.users.get(&s.user_id) {
                                let promoted_now = s.status == Status::Promoted;
                                tx.send_if_modified(|cur| {
                                    if cur.as_ref() == Some(&s) {
                                        return false;
                                    }
                                    if promoted_now && cur.as_ref().is_none_or(|c| c.status != Status::Promoted) {
                                        hub.metrics.promoted_users.increment(1);
                                    }
                                    *cur = Some(s.clone());
                                    true
                                });
                            }
                        }
                    }
                    Err(e) => tracing::warn!(queue, error = %e, "refreshing push streams failed"),
                }
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(hub.tick) => {}
            _ = watch.wake.notified() => {}
        }
    }
}
