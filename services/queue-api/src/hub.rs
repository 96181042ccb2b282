//! Push updates at the price of what changes in the line, not of its length times
//! the instances (docs/commands.md, "The change log and watchers").
//!
//! Each queue with open streams here has one follower task. It registers each
//! streamed person with `QUEUE.WATCH`, which replies their number in line and rank as
//! of a log number (the checkpoint), and extends this instance's lease, which counts
//! every registered person as heard from: one call per queue per tick, however many
//! people it streams to. Then it takes the queue's change log entries as the commands
//! that wrote them publish them (`queue:{Q}:changes`, one subscription per process
//! for every queue: no call of its own per change) and computes ranks itself: an
//! entry says who left the waiting part (the head up to a number, and other numbers),
//! so a person's new rank is the old one minus those who left ahead of them. The log
//! itself is read (XRANGE after the last entry applied) only for what the channel
//! missed: a number skipped, or the log's number in the tick's renewal ahead of what
//! was applied. The log also tells the promoted and registered their tickets and who
//! left for good; only people taken at the head with no ticket listed, people still
//! in the queue otherwise (entered again, or inside), and everyone after a gap in the log (entries trimmed before they
//! were read, a failover, a restart) or an entry that says reset, are asked again. `QUEUE.UNWATCH` when a person's last stream closes
//! starts their usual abandon_after.

use crate::metrics::Metrics;
use crate::store::Store;
use queue_client::{Checkpoint, ClientError, LogEntry, QueueClient, Standing, Status};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{watch, Notify};
use tokio::time::Instant;

/// Users registered per QUEUE.WATCH call (bounds one call's time inside Valkey).
const WATCH_BATCH: usize = 10_000;
/// Log entries read per call (catching up after a lost message).
const LOG_PAGE: usize = 1_000;
/// How long entries that a checkpoint says the log holds beyond what was applied may
/// still be on their way on the changes channel before the log is read for them (a
/// reply on another connection can overtake a message by a little).
const IN_FLIGHT: Duration = Duration::from_millis(50);
/// How long a follower waits after a cycle failed (Valkey away) before the next.
const RETRY: Duration = Duration::from_millis(200);

/// What the streams of a user read, and how many streams it has here.
type Channel = (watch::Sender<Option<Standing>>, usize);

#[derive(Default)]
struct Shared {
    users: HashMap<String, Channel>,
    /// Users to register (a new stream) or ask again (their standing may have changed
    /// in a way the log does not tell: they left the pre-queue here).
    fresh: Vec<String>,
    /// Users whose last stream here closed.
    closed: Vec<String>,
    /// Log entries as published on the queue's changes channel, not taken yet.
    pushed: Vec<LogEntry>,
}

struct QueueWatch {
    shared: Mutex<Shared>,
    wake: Notify,
    /// Users waiting in the queue as last heard (`UNKNOWN` before).
    waiting: AtomicU64,
    /// Whether admission is paused (soft cap 0) as of the last tick.
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
    fn note_waiting(&self, waiting: u64) {
        self.waiting.store(waiting, Ordering::Relaxed);
    }

    fn total(&self) -> Option<u64> {
        Some(self.waiting.load(Ordering::Relaxed)).filter(|&w| w != UNKNOWN)
    }

    /// Tells the streams when the total moved noticeably or the pause flipped since
    /// last told. Called after the new ranks were handed out, so that a stream whose
    /// rank changed too sends one event, not two.
    fn publish(&self) {
        let Some(waiting) = self.total() else { return };
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
    /// This process's name in the queues' `instances` (its lease vouches for the
    /// people it streams to).
    instance: String,
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
    /// How many wait in the queue, as last heard (seed 001's total), if known.
    pub fn total_waiting(&self) -> Option<u64> {
        self.watch.total()
    }

    /// Whether admission is paused (soft cap 0), as of the last tick.
    pub fn paused(&self) -> bool {
        self.watch.paused.load(Ordering::Relaxed)
    }

    /// Takes the queue's counts read by the stream itself (before the queue's first
    /// tick here, so that its first event has the total too).
    pub fn note(&self, info: &queue_client::QueueInfo) {
        if self.watch.total().is_none() {
            self.watch.note_waiting(info.waiting);
            self.watch.paused.store(info.config.soft_cap() == 0, Ordering::Relaxed);
        }
        self.watch.publish();
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.hub.unsubscribe(&self.queue, &self.user);
        self.hub.metrics.sse_streams.decrement(1.0);
    }
}

/// A process's instance name: the host's name (in the characters a userId may hold)
/// with the process id and a random suffix, so that a restarted process is a new
/// instance.
fn instance_name() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let host: String =
        host.trim().chars().filter(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')).take(32).collect();
    let mut random = [0u8; 4];
    getrandom::fill(&mut random).unwrap_or_default();
    let random: String = random.iter().map(|b| format!("{b:02x}")).collect();
    format!("api-{}{}{}-{random}", host, if host.is_empty() { "" } else { "-" }, std::process::id())
}

impl Hub {
    pub fn new(store: Store, tick: Duration, metrics: Arc<Metrics>) -> Arc<Hub> {
        Arc::new(Hub { queues: Mutex::new(HashMap::new()), store, tick, instance: instance_name(), metrics })
    }

    /// Registers a stream for `user` on `queue`; its standing is checked at once.
    pub fn subscribe(self: &Arc<Hub>, queue: &str, user: &str) -> Subscription {
        // Under the registry lock, so that a follower retiring its queue either sees
        // this user or is replaced by a new one.
        let (watch, new_queue, updates) = {
            let mut queues = self.queues.lock().unwrap();
            let (w, new_queue) = match queues.get(queue) {
                Some(w) => (w.clone(), false),
                None => {
                    let w = Arc::new(QueueWatch {
                        shared: Mutex::default(),
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
                let mut shared = w.shared.lock().unwrap();
                let shared = &mut *shared;
                let entry = shared.users.entry(user.to_string()).or_insert_with(|| {
                    shared.fresh.push(user.to_string());
                    (watch::channel(None).0, 0)
                });
                entry.1 += 1;
                entry.0.subscribe()
            };
            (w, new_queue, updates)
        };
        if new_queue {
            let follower = Follower::new(self.clone(), queue.to_string(), watch.clone());
            tokio::spawn(follower.run());
        }
        watch.wake.notify_one();
        self.metrics.sse_streams.increment(1.0);
        let summary = watch.summary.subscribe();
        Subscription { hub: self.clone(), queue: queue.to_string(), user: user.to_string(), watch, updates, summary }
    }

    fn unsubscribe(&self, queue: &str, user: &str) {
        let queues = self.queues.lock().unwrap();
        if let Some(w) = queues.get(queue) {
            let mut shared = w.shared.lock().unwrap();
            if let Some(entry) = shared.users.get_mut(user) {
                entry.1 -= 1;
                if entry.1 == 0 {
                    shared.users.remove(user);
                    shared.closed.push(user.to_string());
                    w.wake.notify_one();
                }
            }
        }
    }

    /// Takes a change log entry of `queue` as its command published it.
    pub fn change(&self, queue: &str, entry: LogEntry) {
        if let Some(w) = self.queues.lock().unwrap().get(queue) {
            w.shared.lock().unwrap().pushed.push(entry);
            w.wake.notify_one();
        }
    }

    /// Looks at `queue` now (a promotion was announced).
    pub fn wake(&self, queue: &str) {
        if let Some(w) = self.queues.lock().unwrap().get(queue) {
            w.wake.notify_one();
        }
    }

    /// Asks about `user` again now (it left through this instance: from the
    /// pre-queue, which the log does not tell).
    pub fn recheck(&self, queue: &str, user: &str) {
        if let Some(w) = self.queues.lock().unwrap().get(queue) {
            let mut shared = w.shared.lock().unwrap();
            if shared.users.contains_key(user) {
                shared.fresh.push(user.to_string());
            }
            w.wake.notify_one();
        }
    }

    /// Queues with open streams (for tests and metrics).
    pub fn watched_queues(&self) -> usize {
        self.queues.lock().unwrap().len()
    }

    /// How long this instance's lease vouches for its people: three ticks, and at
    /// least 10 s so that a slow tick or a brief outage does not lapse it.
    fn lease(&self) -> Duration {
        (self.tick * 3).max(Duration::from_secs(10))
    }
}

/// Where a waiting person in line stands, as this instance knows it.
#[derive(Debug, Clone, Copy)]
struct InLine {
    seq: u64,
    rank: u64,
    /// The log number their rank is as of: entries up to it are already counted.
    pos: u64,
}

/// What the log says happened to a person numbered `seq`: gone from the waiting
/// part, or how many left ahead of them.
#[derive(Debug, PartialEq, Eq)]
enum Effect {
    Gone,
    Ahead(u64),
}

/// The docs' rule for one entry: gone if numbered at or below `head` or listed in
/// `left`; else `gone` when the head is below, plus the `left` numbers below.
fn effect_of(e: &LogEntry, seq: u64) -> Effect {
    let mut ahead = 0;
    if let Some((head, gone)) = e.head {
        if seq <= head {
            return Effect::Gone;
        }
        ahead += gone;
    }
    for &l in &e.left {
        if l == seq {
            return Effect::Gone;
        }
        if l < seq {
            ahead += 1;
        }
    }
    Effect::Ahead(ahead)
}

/// Several entries at once for everyone numbered in ascending order: one pass over
/// the people and the entries' numbers, as [`effect_of`] summed over the entries.
struct Batch {
    /// (number, how many left there): people numbered above it count them.
    marks: Vec<(u64, u64)>,
    /// People numbered at or below this are gone.
    head: Option<u64>,
    left: HashSet<u64>,
}

impl Batch {
    fn new(entries: &[LogEntry]) -> Batch {
        let mut marks = Vec::new();
        let mut head = None;
        let mut left = HashSet::new();
        for e in entries {
            if let Some((h, gone)) = e.head {
                marks.push((h, gone));
                head = Some(head.map_or(h, |x: u64| x.max(h)));
            }
            for &l in &e.left {
                marks.push((l, 1));
                left.insert(l);
            }
        }
        marks.sort_unstable();
        Batch { marks, head, left }
    }
}

struct Follower {
    hub: Arc<Hub>,
    queue: String,
    watch: Arc<QueueWatch>,
    /// The last entry applied: (stream id, number); None until read.
    cursor: Option<(String, u64)>,
    line: HashMap<String, InLine>,
    by_seq: BTreeMap<u64, String>,
    /// (pos, user) of everyone put in line from a checkpoint, until the entries up to
    /// their pos are applied: those an entry may reach before their pos is passed
    /// (entries up to it are counted already). Stale pairs (forgotten, checked again)
    /// are skipped.
    fresh: BTreeSet<(u64, String)>,
    /// People in the pre-queue (rank 0 until the opening, which the log announces).
    pre: HashSet<String>,
    to_watch: Vec<String>,
    to_unwatch: Vec<String>,
    /// The admissions per minute estimates use, and the opening time, as of the last tick.
    per_min: Option<i64>,
    opens_at: Option<i64>,
    last_tick: Option<Instant>,
    /// Published entries taken, by number, not applied yet (after a gap).
    pending: BTreeMap<u64, LogEntry>,
    /// The highest log number a checkpoint reported beyond what was applied, and
    /// since when one did.
    behind: Option<(u64, Instant)>,
}

impl Follower {
    fn new(hub: Arc<Hub>, queue: String, watch: Arc<QueueWatch>) -> Follower {
        Follower {
            hub,
            queue,
            watch,
            cursor: None,
            line: HashMap::new(),
            by_seq: BTreeMap::new(),
            fresh: BTreeSet::new(),
            pre: HashSet::new(),
            to_watch: Vec::new(),
            to_unwatch: Vec::new(),
            per_min: None,
            opens_at: None,
            last_tick: None,
            pending: BTreeMap::new(),
            behind: None,
        }
    }

    async fn run(mut self) {
        loop {
            if self.take_shared() {
                return;
            }
            let mut failed = true;
            if let Ok(client) = self.hub.store.client().await {
                match self.cycle(&client).await {
                    Ok(()) => failed = false,
                    Err(e) => tracing::warn!(queue = self.queue, error = %e, "following the change log failed"),
                }
                self.watch.publish();
            }
            let next_tick = self.last_tick.map_or_else(Instant::now, |t| t + self.hub.tick);
            let next_tick = self.behind.map_or(next_tick, |(_, since)| next_tick.min(since + IN_FLIGHT));
            // After a failure (Valkey away), not again at once.
            let next_tick = if failed { next_tick.max(Instant::now() + RETRY) } else { next_tick };
            tokio::select! {
                _ = tokio::time::sleep_until(next_tick) => {}
                _ = self.watch.wake.notified() => {}
            }
        }
    }

    /// Takes new and closed streams; true when nobody is left (the queue is retired,
    /// under the registry lock, so that no subscriber races it).
    fn take_shared(&mut self) -> bool {
        let (hub, watch) = (self.hub.clone(), self.watch.clone());
        let mut queues = hub.queues.lock().unwrap();
        let mut shared = watch.shared.lock().unwrap();
        for u in std::mem::take(&mut shared.closed) {
            if !shared.users.contains_key(&u) {
                // Only a person still waiting needs unregistering: taking someone out of
                // line (a claim, an expiry, leaving) removed their registration already.
                let registered = self.line.contains_key(&u)
                    || self.pre.contains(&u)
                    || self.to_watch.len() > 64
                    || self.to_watch.contains(&u);
                self.forget(&u);
                if registered {
                    self.to_unwatch.push(u);
                }
            }
        }
        for u in std::mem::take(&mut shared.fresh) {
            self.forget(&u);
            self.to_watch.push(u);
        }
        self.take_pushed(&mut shared);
        if shared.users.is_empty() && self.to_unwatch.is_empty() {
            queues.remove(&self.queue);
            return true;
        }
        false
    }

    /// Takes the entries published since, to apply in number order.
    fn take_pushed(&mut self, shared: &mut Shared) {
        self.pending.extend(std::mem::take(&mut shared.pushed).into_iter().map(|e| (e.n, e)));
    }

    fn forget(&mut self, user: &str) {
        if let Some(l) = self.line.remove(user) {
            self.by_seq.remove(&l.seq);
        }
        self.pre.remove(user);
    }

    /// Everyone is asked again (a gap in the log, or an entry that says reset).
    fn reset_all(&mut self) {
        self.hub.metrics.log_resets.increment(1);
        self.by_seq.clear();
        self.fresh.clear();
        self.to_watch.extend(self.line.drain().map(|(u, _)| u));
        self.to_watch.extend(self.pre.drain());
    }

    /// The log is not the one applied (it moved back, or was written anew after a
    /// failover): everyone is asked again from its end, read at once.
    fn reposition(&mut self, why: &str) {
        tracing::info!(queue = self.queue, applied = self.applied(), why, "asking everyone again");
        self.reset_all();
        self.cursor = None;
        self.last_tick = None;
        self.pending.clear();
        self.behind = None;
    }

    async fn cycle(&mut self, client: &QueueClient) -> Result<(), ClientError> {
        let q = self.queue.clone();
        let tick_due = self.last_tick.is_none_or(|t| t.elapsed() >= self.hub.tick);
        // Before the first entry: where the log ends.
        if self.cursor.is_none() {
            let last = client.log_last(&q).await?;
            self.cursor = Some(last.as_ref().map_or(("0-0".to_string(), 0), |e| (e.id.clone(), e.n)));
        }
        self.apply_pending(client).await?;
        if tick_due {
            self.last_tick = Some(Instant::now());
            let info = client.info(&q).await?;
            self.watch.note_waiting(info.waiting);
            self.watch.paused.store(info.config.soft_cap() == 0, Ordering::Relaxed);
            let per_min = info.admission_rate_per_min as i64;
            if self.per_min != Some(per_min) {
                self.per_min = Some(per_min);
                let users: Vec<String> = self.line.keys().cloned().collect();
                for u in users {
                    self.send_rank(&u);
                }
            }
            let opens_at = Some(info.config.0.opens_at()).filter(|&t| t > 0);
            if self.opens_at.is_some() && self.opens_at != opens_at {
                self.to_watch.extend(self.pre.drain());
            }
            self.opens_at = opens_at;
        }
        self.register(client, tick_due).await?;
        self.check_behind(client).await?;
        while !self.to_unwatch.is_empty() {
            let n = self.to_unwatch.len().min(WATCH_BATCH);
            let batch: Vec<String> = self.to_unwatch.drain(..n).collect();
            if let Err(e) = client.unwatch(&q, &self.hub.instance, &batch).await {
                self.to_unwatch.extend(batch);
                return Err(e);
            }
        }
        Ok(())
    }

    fn applied(&self) -> u64 {
        self.cursor.as_ref().map_or(0, |c| c.1)
    }

    /// QUEUE.WATCH for the people to (re)check, and the lease once a tick.
    async fn register(&mut self, client: &QueueClient, renew: bool) -> Result<(), ClientError> {
        let lease = self.hub.lease().as_millis() as u64;
        if self.to_watch.is_empty() && renew {
            self.hub.metrics.watch_calls.increment(1);
            let cp = client.watch::<&str>(&self.queue, &self.hub.instance, lease, &[]).await?;
            self.check_position(&cp);
        }
        // Checkpoints only from a known place in the log (after a move back, the next
        // cycle sets it first).
        while !self.to_watch.is_empty() && self.cursor.is_some() {
            let n = self.to_watch.len().min(WATCH_BATCH);
            let mut batch: Vec<String> = self.to_watch.drain(..n).collect();
            batch.sort_unstable();
            batch.dedup();
            self.hub.metrics.watch_calls.increment(1);
            match client.watch(&self.queue, &self.hub.instance, lease, &batch).await {
                Ok(cp) => self.take_checkpoint(&batch, cp),
                Err(e) => {
                    self.to_watch.extend(batch);
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    /// A checkpoint older than what was applied: the log moved back since (a
    /// failover); everyone is asked again from the log's new end. Newer: entries
    /// not applied yet (in flight on the channel, or lost), looked at each tick.
    fn check_position(&mut self, cp: &Checkpoint) -> bool {
        self.watch.note_waiting(cp.waiting);
        if cp.log < self.applied() {
            self.reposition("the change log moved back");
            return false;
        }
        if cp.log > self.applied() {
            self.behind = Some(self.behind.map_or((cp.log, Instant::now()), |(n, t)| (n.max(cp.log), t)));
        }
        true
    }

    /// After a checkpoint said the log holds entries beyond what was applied (the
    /// tick's renewal looks every tick): what came on the channel meanwhile is
    /// applied; still behind [`IN_FLIGHT`] later (a message lost, say while the
    /// subscription reconnected), the log is read. Read to its end and still behind:
    /// the entries cannot be reached after the last one applied (the log was written
    /// anew with ids that moved back), and everyone is asked again from its end.
    async fn check_behind(&mut self, client: &QueueClient) -> Result<(), ClientError> {
        let Some((n, since)) = self.behind else { return Ok(()) };
        let watch = self.watch.clone();
        self.take_pushed(&mut watch.shared.lock().unwrap());
        self.apply_pending(client).await?;
        if n <= self.applied() {
            self.behind = None;
        } else if since.elapsed() >= IN_FLIGHT {
            self.catch_up(client).await?;
            if self.cursor.is_some() && n > self.applied() {
                self.reposition("the change log's newest entries cannot be read after the last one applied");
            }
            self.behind = None;
        }
        Ok(())
    }

    /// Applies the published entries taken, in number order. A number missing before
    /// them (a message lost) is read from the log first; entries whose ids and
    /// numbers disagree with what was applied mean the log was written anew.
    async fn apply_pending(&mut self, client: &QueueClient) -> Result<(), ClientError> {
        let mut read = false;
        loop {
            let Some((cursor_id, applied)) = self.cursor.as_ref().map(|c| (stream_id(&c.0), c.1)) else {
                return Ok(());
            };
            // An entry already applied has an id at or before the cursor's, and the
            // cursor's own id only with the cursor's number.
            let disagrees =
                |n: u64, id: (u64, u64)| (n <= applied) != (id <= cursor_id) || (id == cursor_id && n != applied);
            if self.pending.iter().any(|(&n, e)| disagrees(n, stream_id(&e.id))) {
                self.reposition("a published entry disagrees with the change log applied");
                return Ok(());
            }
            self.pending.retain(|&n, _| n > applied);
            let Some(&first) = self.pending.keys().next() else { return Ok(()) };
            if first > applied + 1 && !read {
                read = true;
                self.catch_up(client).await?;
                continue;
            }
            // In order; still a gap after reading the log: apply() asks everyone again.
            let entries: Vec<LogEntry> = std::mem::take(&mut self.pending).into_values().collect();
            self.apply(&entries);
            return Ok(());
        }
    }

    /// Reads the log after the last entry applied, to its end.
    async fn catch_up(&mut self, client: &QueueClient) -> Result<(), ClientError> {
        loop {
            let Some((from, applied)) = self.cursor.clone() else { return Ok(()) };
            self.hub.metrics.log_reads.increment(1);
            let entries = client.log_after(&self.queue, &from, LOG_PAGE).await?;
            if entries.first().is_some_and(|e| e.n <= applied) {
                self.reposition("an entry after the last one applied has an earlier number");
                return Ok(());
            }
            self.apply(&entries);
            if entries.len() < LOG_PAGE {
                return Ok(());
            }
        }
    }

    fn take_checkpoint(&mut self, batch: &[String], cp: Checkpoint) {
        let current = self.check_position(&cp);
        if !current {
            // Asked again with everyone, once the cursor is set anew.
            self.to_watch.extend(batch.iter().cloned());
        }
        let shared = self.watch.shared.lock().unwrap();
        for (user, (seq, st)) in batch.iter().zip(cp.users) {
            let Some((tx, _)) = shared.users.get(user) else { continue };
            if current && st.status == Status::Waiting {
                if seq > 0 {
                    self.line.insert(user.clone(), InLine { seq, rank: st.rank, pos: cp.log });
                    self.by_seq.insert(seq, user.clone());
                    self.fresh.insert((cp.log, user.clone()));
                } else {
                    self.pre.insert(user.clone());
                }
            }
            send(&self.hub, tx, st);
        }
    }

    /// Applies entries read after the cursor: a gap or a reset asks everyone again.
    fn apply(&mut self, entries: &[LogEntry]) {
        // Entries already applied (the reader still on a cursor from before a reset).
        let applied = self.applied();
        let entries = &entries[entries.iter().position(|e| e.n > applied).unwrap_or(entries.len())..];
        let Some(last) = entries.last() else { return };
        if self.cursor.is_none() {
            return;
        }
        let first = applied + 1;
        let contiguous = entries.iter().enumerate().all(|(i, e)| e.n == first + i as u64);
        let reset = entries.iter().any(|e| e.reset);
        self.cursor = Some((last.id.clone(), last.n));
        self.watch.note_waiting(last.waiting);
        if !contiguous || reset {
            if !contiguous {
                tracing::info!(queue = self.queue, expected = first, got = entries[0].n, "a gap in the change log");
            }
            self.reset_all();
            return;
        }
        let batch = Batch::new(entries);
        let mut changed: Vec<(String, Effect)> = Vec::new();
        // Everyone whose rank is as of an entry before these: one pass in number order,
        // from the first person the entries reach (a head that moved reaches everyone;
        // people left reach those from them on; entries at the back, no one).
        let start = match (batch.head, batch.marks.first()) {
            (Some(_), _) => Some(0),
            (None, Some(&(at, _))) => Some(at),
            (None, None) => None,
        };
        let mut marks = batch.marks.iter().peekable();
        let mut ahead = 0u64;
        for (&seq, user) in start.map(|from| self.by_seq.range(from..)).into_iter().flatten() {
            let l = &self.line[user];
            if l.pos >= first {
                continue;
            }
            while let Some(&&(at, n)) = marks.peek() {
                if at >= seq {
                    break;
                }
                ahead += n;
                marks.next();
            }
            let gone = batch.head.is_some_and(|h| seq <= h) || batch.left.contains(&seq);
            if gone {
                changed.push((user.clone(), Effect::Gone));
            } else if ahead > 0 {
                changed.push((user.clone(), Effect::Ahead(ahead)));
            }
        }
        // Those checked in between: only the entries after their checkpoint. Everyone
        // checked before these entries' last is taken out of `fresh` (from then on
        // the first pass reaches them).
        let later = self.fresh.split_off(&(last.n, String::new()));
        let reached = std::mem::replace(&mut self.fresh, later);
        for (pos, user) in &reached {
            let Some(l) = self.line.get(user) else { continue };
            if l.pos != *pos || l.pos < first {
                continue;
            }
            let mut total = 0;
            let mut gone = false;
            for e in entries.iter().filter(|e| e.n > l.pos) {
                match effect_of(e, l.seq) {
                    Effect::Gone => gone = true,
                    Effect::Ahead(n) => total += n,
                }
            }
            changed.push((user.clone(), if gone { Effect::Gone } else { Effect::Ahead(total) }));
        }
        // Of those gone, the entries tell the promoted and watched their tickets, and
        // who left the queue altogether; the rest (taken at the head without a ticket
        // listed, or still in the queue otherwise: entered again, inside) are asked.
        for (user, effect) in changed {
            match effect {
                Effect::Gone => {
                    let seq = self.line.get(&user).map(|l| l.seq);
                    self.forget(&user);
                    let told = seq.is_some_and(|seq| match entries.iter().find_map(|e| e.ticket_of(seq)) {
                        Some(ticket) => self.tell_gone(&user, Some(ticket)),
                        None if batch.left.contains(&seq) && !entries.iter().any(|e| e.again.contains(&seq)) => {
                            self.tell_gone(&user, None)
                        }
                        None => false,
                    });
                    if !told {
                        self.to_watch.push(user);
                    }
                }
                Effect::Ahead(n) => {
                    if let Some(l) = self.line.get_mut(&user) {
                        l.rank = l.rank.saturating_sub(n).max(1);
                    }
                    if n > 0 {
                        self.send_rank(&user);
                    }
                }
            }
        }
    }

    /// Hands `user`'s stream what the log told of them: promoted with `ticket`, or
    /// (None) no longer in line. False when the stream has no standing yet to take
    /// the nickname from (then they are asked).
    fn tell_gone(&self, user: &str, ticket: Option<&str>) -> bool {
        let shared = self.watch.shared.lock().unwrap();
        let Some((tx, _)) = shared.users.get(user) else { return true };
        let Some(nickname) = tx.borrow().as_ref().map(|st| st.nickname.clone()) else { return false };
        let (status, nickname) = match ticket {
            Some(_) => (Status::Promoted, nickname),
            None => (Status::Unknown, None),
        };
        let st = Standing {
            status,
            rank: 0,
            user_id: user.to_string(),
            nickname,
            ticket_id: ticket.map(str::to_string),
            estimated_wait_seconds: None,
            opens_at: None,
        };
        send(&self.hub, tx, st);
        true
    }

    /// Hands `user`'s stream its rank as this instance knows it, with the estimate.
    fn send_rank(&self, user: &str) {
        let Some(l) = self.line.get(user) else { return };
        let shared = self.watch.shared.lock().unwrap();
        let Some((tx, _)) = shared.users.get(user) else { return };
        let eta = self
            .per_min
            .and_then(|m| queue_core::admission::estimated_wait_seconds(l.rank as i64, m))
            .map(|s| s.max(0) as u64);
        tx.send_if_modified(|cur| match cur {
            Some(st) if st.status == Status::Waiting => {
                let eta = if self.per_min.is_some() { eta } else { st.estimated_wait_seconds };
                let changed = st.rank != l.rank || st.estimated_wait_seconds != eta;
                st.rank = l.rank;
                st.estimated_wait_seconds = eta;
                changed
            }
            _ => false,
        });
    }
}

/// A stream id's (milliseconds, sequence), to compare ids.
fn stream_id(id: &str) -> (u64, u64) {
    let (ms, seq) = id.split_once('-').unwrap_or((id, "0"));
    (ms.parse().unwrap_or(0), seq.parse().unwrap_or(0))
}

/// Hands a checked standing to a user's streams (counting a promotion once).
fn send(hub: &Hub, tx: &watch::Sender<Option<Standing>>, s: Standing) {
    let promoted_now = s.status == Status::Promoted;
    tx.send_if_modified(|cur| {
        if cur.as_ref() == Some(&s) {
            return false;
        }
        if promoted_now && cur.as_ref().is_none_or(|c| c.status != Status::Promoted) {
            hub.metrics.promoted(&s);
        }
        *cur = Some(s);
        true
    });
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

    fn entry(n: u64, head: Option<(u64, u64)>, left: &[u64]) -> LogEntry {
        LogEntry { id: format!("{n}-0"), n, head, left: left.to_vec(), ..LogEntry::default() }
    }

    #[test]
    fn one_entry_follows_the_documented_rule() {
        let e = entry(1, Some((10, 3)), &[14, 20]);
        assert_eq!(effect_of(&e, 10), Effect::Gone, "at the head");
        assert_eq!(effect_of(&e, 7), Effect::Gone, "below the head");
        assert_eq!(effect_of(&e, 14), Effect::Gone, "listed");
        assert_eq!(effect_of(&e, 12), Effect::Ahead(3));
        assert_eq!(effect_of(&e, 15), Effect::Ahead(4));
        assert_eq!(effect_of(&e, 99), Effect::Ahead(5));
        assert_eq!(effect_of(&entry(2, None, &[5]), 3), Effect::Ahead(0));
    }

    /// The one-pass batch agrees with the rule applied entry by entry, for people
    /// spread over numbers around the entries' marks.
    #[test]
    fn a_batch_is_the_sum_of_its_entries() {
        let entries = [entry(1, Some((4, 2)), &[9]), entry(2, None, &[12, 6]), entry(3, Some((7, 1)), &[15])];
        let batch = Batch::new(&entries);
        for seq in 1..20u64 {
            let mut want = Effect::Ahead(0);
            let mut sum = 0;
            for e in &entries {
                match effect_of(e, seq) {
                    Effect::Gone => want = Effect::Gone,
                    Effect::Ahead(n) => sum += n,
                }
            }
            if want != Effect::Gone {
                want = Effect::Ahead(sum);
            }
            let gone = batch.head.is_some_and(|h| seq <= h) || batch.left.contains(&seq);
            let ahead: u64 = batch.marks.iter().filter(|m| m.0 < seq).map(|m| m.1).sum();
            let got = if gone { Effect::Gone } else { Effect::Ahead(ahead) };
            assert_eq!(got, want, "number {seq}");
        }
    }
}
