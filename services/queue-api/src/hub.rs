//! Push updates for many streams at the price of one: each queue with open streams
//! has one refresher that, on every tick and whenever a promotion is announced,
//! walks the line with `QUEUE.LINE` (ids only, ranks implied by the order) for the
//! waiting users' ranks, asks `QUEUE.RANKS` only about the users the walk did not
//! find (new streams, promoted or gone users), and hands each stream its user's
//! standing only when it changed. Every quarter of `abandon_after` (at most 15 s) it
//! asks `QUEUE.RANKS` about everyone instead, which counts them as still there, and it
//! does so every time when the line is so long, against the streams it has, that the
//! walk would cost Valkey more than asking.

use crate::metrics::Metrics;
use crate::store::Store;
use queue_client::{Standing, Status};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{watch, Notify};

/// Users asked about per QUEUE.RANKS call (bounds one call's time inside Valkey).
const RANKS_BATCH: usize = 10_000;
/// Waiting users listed per QUEUE.LINE call.
const LINE_PAGE: u32 = 10_000;

#[derive(Default)]
struct Watched {
    /// Per user: the channel its streams read, and how many streams it has.
    users: HashMap<String, (watch::Sender<Option<Standing>>, usize)>,
}

struct QueueWatch {
    watched: Mutex<Watched>,
    wake: Notify,
    /// Users waiting in the queue as of the last refresh (`UNKNOWN` before the first).
    waiting: AtomicU64,
    /// Whether admission is paused (soft cap 0) as of the last refresh.
    paused: AtomicBool,
    /// The total and the pause as last published to streams: changed when the total
    /// moved noticeably ([`noticeable`]) or the pause flipped, so that a stream tells
    /// its person even when their own rank stayed.
    summary: watch::Sender<Summary>,
}

const UNKNOWN: u64 = u64::MAX;

/// What every stream of a queue shows beside its own standing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Summary {
    pub total: Option<u64>,
    pub paused: bool,
}

/// Whether the total moved enough since `shown` to tell everyone: any change of a
/// line under 100, a hundredth of it beyond (a line of a million sends its streams
/// at most one such event per 10,000 people come or gone, not one per person).
fn noticeable(shown: Option<u64>, now: u64) -> bool {
    shown.is_none_or(|s| s.abs_diff(now) * 100 >= s.max(1))
}

impl QueueWatch {
    /// Takes what one QUEUE.INFO said: the total and the pause, which every event
    /// sent from now on carries.
    fn note(&self, waiting: u64, paused: bool) {
        self.waiting.store(waiting, Ordering::Relaxed);
        self.paused.store(paused, Ordering::Relaxed);
    }

    /// Tells the streams when the total moved noticeably or the pause flipped since
    /// last told. Called after the refresh that read them has handed out the new
    /// ranks, so that a stream whose rank changed too sends one event, not two.
    fn publish(&self) {
        let Some(waiting) = Some(self.waiting.load(Ordering::Relaxed)).filter(|&w| w != UNKNOWN) else { return };
        let paused = self.paused.load(Ordering::Relaxed);
        self.summary.send_if_modified(|s| {
            if noticeable(s.total, waiting) || s.paused != paused {
                *s = Summary { total: Some(waiting), paused };
                true
            } else {
                false
            }
        });
    }
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
    watch: Arc<QueueWatch>,
    pub updates: watch::Receiver<Option<Standing>>,
    /// Changes when the queue's total or pause changed noticeably.
    pub summary: watch::Receiver<Summary>,
}

impl Subscription {
    /// How many wait in the queue, as of the last refresh (seed 001's total), if known.
    pub fn total_waiting(&self) -> Option<u64> {
        Some(self.watch.waiting.load(Ordering::Relaxed)).filter(|&w| w != UNKNOWN)
    }

    /// Whether admission is paused (soft cap 0), as of the last refresh.
    pub fn paused(&self) -> bool {
        self.watch.paused.load(Ordering::Relaxed)
    }

    /// Takes the queue's counts read by the stream itself (before the queue's first
    /// refresh, so that its first event has the total too).
    pub fn note(&self, info: &queue_client::QueueInfo) {
        self.watch.note(info.waiting, info.config.soft_cap() == 0);
        self.watch.publish();
    }
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
                    let w = Arc::new(QueueWatch {
                        watched: Mutex::default(),
                        wake: Notify::new(),
                        waiting: AtomicU64::new(UNKNOWN),
                        paused: AtomicBool::new(false),
                        summary: watch::channel(Summary { total: None, paused: false }).0,
                    });
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
        let summary = watch.summary.subscribe();
        Subscription { hub: self.clone(), queue: queue.to_string(), user: user.to_string(), watch, updates, summary }
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
    // When every stream's user was last asked about with QUEUE.RANKS (which counts a
    // waiting user as heard from, so that open streams keep their place).
    let mut touched: Option<tokio::time::Instant> = None;
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
            // abandon_after and the line's length, read every time (one small call).
            let info = client.info(&queue).await.ok();
            if let Some(i) = &info {
                watch.note(i.waiting, i.config.soft_cap() == 0);
            }
            let period = touch_period(info.as_ref().map(|i| i.config.0.abandon_after()), hub.tick);
            let touch = touched.is_none_or(|t| t.elapsed() >= period);
            if touch {
                touched = Some(tokio::time::Instant::now());
            }
            // Walking costs ~0.1 us per waiting user, QUEUE.RANKS ~6 us per user asked.
            let walk = !touch && info.is_some_and(|i| users.len() as u64 * WALK_PER_RANKS >= i.waiting);
            if let Err(e) = refresh(&hub, &client, &queue, &watch, users, walk).await {
                tracing::warn!(queue, error = %e, "refreshing push streams failed");
            }
            watch.publish();
        }
        tokio::select! {
            _ = tokio::time::sleep(hub.tick) => {}
            _ = watch.wake.notified() => {}
        }
    }
}

/// How many waiting users a walk may cover for each user it saves asking QUEUE.RANKS
/// about (their costs per user inside Valkey, about 6 us against 0.085 us).
const WALK_PER_RANKS: u64 = 64;

/// How often every stream's user is asked about with QUEUE.RANKS: often enough that
/// nobody with an open stream is dropped as silent (a quarter of abandon_after), at
/// least every tick and at most every 15 s; every tick when abandon_after is unknown.
fn touch_period(abandon_after: Option<i64>, tick: Duration) -> Duration {
    match abandon_after {
        None => tick,
        Some(a) if a <= 0 => Duration::from_secs(15).max(tick),
        Some(a) => Duration::from_millis((a / 4) as u64).clamp(tick, Duration::from_secs(15).max(tick)),
    }
}

/// One refresh. When `walk`: the ranks of waiting users from a walk of the line
/// (QUEUE.LINE, a few integers and ids per page), stopping once every user known to
/// wait was found; then QUEUE.RANKS for the others (new streams, promoted or gone
/// users). Otherwise, or when a walk fails, QUEUE.RANKS for everyone.
async fn refresh(
    hub: &Hub,
    client: &queue_client::QueueClient,
    queue: &str,
    watch: &QueueWatch,
    users: Vec<String>,
    walk: bool,
) -> Result<(), queue_client::ClientError> {
    let mut found: HashSet<String> = HashSet::new();
    if walk {
        let waiting_known = {
            let watched = watch.watched.lock().unwrap();
            watched
                .users
                .values()
                .filter(|(tx, _)| tx.borrow().as_ref().is_some_and(|st| st.status == Status::Waiting))
                .count()
        };
        if let Err(e) = walk_line(hub, client, queue, watch, waiting_known, &mut found).await {
            tracing::warn!(queue, error = %e, "walking the line failed; asking about everyone");
            found.clear();
        }
    }
    let rest: Vec<&String> = users.iter().filter(|u| !found.contains(*u)).collect();
    for batch in rest.chunks(RANKS_BATCH) {
        hub.metrics.ranks_calls.increment(1);
        let standings = client.ranks(queue, batch).await?;
        let watched = watch.watched.lock().unwrap();
        for s in standings {
            if let Some((tx, _)) = watched.users.get(&s.user_id) {
                let promoted_now = s.status == Status::Promoted;
                tx.send_if_modified(|cur| {
                    if cur.as_ref() == Some(&s) {
                        return false;
                    }
                    if promoted_now && cur.as_ref().is_none_or(|c| c.status != Status::Promoted) {
                        hub.metrics.promoted(&s);
                    }
                    *cur = Some(s.clone());
                    true
                });
            }
        }
    }
    Ok(())
}

/// Walks QUEUE.LINE pages, giving each stream whose user is known to wait its new rank
/// and estimated wait, until `waiting_known` of them were found or the line ends.
async fn walk_line(
    hub: &Hub,
    client: &queue_client::QueueClient,
    queue: &str,
    watch: &QueueWatch,
    waiting_known: usize,
    found: &mut HashSet<String>,
) -> Result<(), queue_client::ClientError> {
    let mut cursor = 0;
    while found.len() < waiting_known {
        hub.metrics.line_calls.increment(1);
        let page = client.line(queue, cursor, LINE_PAGE).await?;
        let watched = watch.watched.lock().unwrap();
        for (i, user) in page.users.iter().enumerate() {
            let Some((tx, _)) = watched.users.get(user) else { continue };
            let rank = page.first_rank + i as u64;
            let eta = page.estimated_wait_seconds(rank);
            // Only a user already known to wait keeps its nickname from before.
            let mut known = false;
            tx.send_if_modified(|cur| match cur {
                Some(st) if st.status == Status::Waiting => {
                    known = true;
                    let changed = st.rank != rank || st.estimated_wait_seconds != eta;
                    st.rank = rank;
                    st.estimated_wait_seconds = eta;
                    changed
                }
                _ => false,
            });
            if known {
                found.insert(user.clone());
            }
        }
        if page.cursor == 0 {
            break;
        }
        cursor = page.cursor;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_total_is_told_when_it_moved_noticeably() {
        assert!(noticeable(None, 0), "the first total is always told");
        assert!(noticeable(Some(0), 1));
        assert!(noticeable(Some(5), 4), "every change of a short line");
        assert!(!noticeable(Some(5), 5));
        assert!(!noticeable(Some(1000), 1009));
        assert!(noticeable(Some(1000), 1010));
        assert!(noticeable(Some(1000), 990));
        assert!(!noticeable(Some(1_000_000), 1_009_999));
    }

    #[test]
    fn touches_come_at_a_quarter_of_abandon_after_within_bounds() {
        let tick = Duration::from_secs(1);
        assert_eq!(touch_period(None, tick), tick);
        assert_eq!(touch_period(Some(0), tick), Duration::from_secs(15));
        assert_eq!(touch_period(Some(60_000), tick), Duration::from_secs(15));
        assert_eq!(touch_period(Some(20_000), tick), Duration::from_secs(5));
        assert_eq!(touch_period(Some(2_000), tick), tick);
        assert_eq!(touch_period(Some(1_000), Duration::from_secs(30)), Duration::from_secs(30));
    }
}
