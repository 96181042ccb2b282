//! Push updates at the price of what changes in the line, not of its length times
//! the instances (docs/commands.md, "The change log and watchers").
//!
//! Each queue with open streams here has one follower task (follower.rs). It
//! registers each streamed person with `QUEUE.WATCH`, which replies their number in
//! line and rank as of a log number (the checkpoint), and extends this instance's
//! lease, which counts every registered person as heard from: one call per queue per
//! tick, however many people it streams to. Then it takes the queue's change log
//! entries as the commands that wrote them publish them (`queue:{Q}:changes`, one
//! subscription per process for every queue: no call of its own per change) and the
//! ledger (ledger.rs, no I/O) computes ranks from them; the log itself is read (XRANGE
//! after the last entry applied) only for what the channel missed. `QUEUE.UNWATCH`
//! when a person's last stream closes starts their usual abandon_after.
//!
//! Status polls are answered from the same ledger ([`Hub::poll`]): a person who
//! enters through this instance is registered from the entry ([`Hub::entered`]), one
//! who polls otherwise like a streamed one (their first answer is the batched read,
//! src/batch.rs); both are kept registered while they poll, then unregistered after the
//! grace period (`--poll-grace`) with nobody polling or streaming. An answer comes
//! from here only while the follower is confirmed current within `--status-max-staleness`
//! (a `QUEUE.WATCH` reply whose log number was applied); otherwise the batched read
//! answers.
//!
//! The files: this one is the registry of the queues, people and streams of this
//! instance ([`Hub`]); ledger.rs the pure bookkeeping; follower.rs the loop that
//! calls Valkey; stream.rs one stream's state between events; wire.rs its events.

mod follower;
pub mod ledger;
mod slot;
pub mod stream;
pub mod wire;

use crate::metrics::Metrics;
use crate::valkey::Valkey;
use queue_client::{LogEntry, QueueState, Standing};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{watch, Notify};

pub use stream::Subscription;

/// One person streamed to or polling here.
struct Person {
    /// Their standing as this instance knows it (what their streams read).
    tx: slot::Sender<Option<Standing>>,
    /// Their open streams here.
    streams: usize,
    /// Their last status poll here, if any.
    polled: Option<Instant>,
    /// The ledger keeps `tx` current (they wait in line or in the pre-queue as of a
    /// checkpoint of the log applied): a poll may be answered from it. Not so for a
    /// person out of line (promoted, inside, unknown): the log does not tell all that
    /// may happen to them next (entering again at the back, say).
    current: bool,
    /// Registered by a poll (counted in the hub's pollers until they leave).
    by_poll: bool,
    /// Counts the checked standings handed to them (a registration's answer): a poll
    /// held for one ([`Hub::poll_held`]) stops waiting when it moves.
    checked: u64,
    /// How many of their streams here look at every change of rank now (not holding
    /// one back for pacing, stream.rs). While none does, a change of rank or estimate
    /// alone is written into `tx` without waking anyone: a paced stream reads the
    /// latest when its gap has passed, and a change of status always wakes.
    listening: Arc<AtomicUsize>,
    /// They entered again through this instance while kept current, at this moment:
    /// not answered from until the log's entry tells their new place
    /// ([`ledger::Effect::Moved`]), or asked after [`MOVE_WAIT`].
    moving: Option<Instant>,
    /// How many times the log told them a new place after entering again
    /// ([`ledger::Effect::Moved`]): an entry here compares it with its count from
    /// before ([`Hub::moves`]), in case the log told it before the entry's reply.
    moves: u64,
}

/// How long a person who entered again through this instance waits for the change
/// log to tell their new place before they are asked (the entry came on the channel
/// before their entry's reply here, or entering again said nothing of it).
const MOVE_WAIT: Duration = Duration::from_secs(1);

impl Person {
    fn new() -> Person {
        Person {
            tx: slot::channel(None),
            streams: 0,
            polled: None,
            current: false,
            by_poll: false,
            checked: 0,
            listening: Arc::default(),
            moving: None,
            moves: 0,
        }
    }

    /// Whether they still count as polling (polled within `grace`).
    fn polling(&self, now: Instant, grace: Duration) -> bool {
        self.polled.is_some_and(|t| now.saturating_duration_since(t) < grace)
    }
}

#[derive(Default)]
struct Shared {
    users: HashMap<String, Person>,
    /// Every change Valkey made to the queue before this instant is applied here (a
    /// `QUEUE.WATCH` sent then replied a log number the ledger has applied); None
    /// while not placed in the log or after it moved back.
    confirmed: Option<Instant>,
    /// The last status poll of this queue answered or registered here.
    last_poll: Option<Instant>,
    /// Users to register (a new stream) or ask again (their standing may have changed
    /// in a way the log does not tell: they left the pre-queue here).
    fresh: Vec<String>,
    /// Users whose last stream here closed.
    closed: Vec<String>,
    /// A stream opened here since the follower last looked at whom it gathers.
    stream_opened: bool,
    /// Users who entered again or left through this instance since the follower's
    /// cycle began: a registration reply sent before that does not make them current.
    changed_here: std::collections::HashSet<String>,
    /// Users who entered again here while kept current ([`Person::moving`]), in the
    /// order they did (some may have been told their place since).
    moving: std::collections::VecDeque<(Instant, String)>,
    /// Log entries as published on the queue's changes channel, not taken yet.
    pushed: Vec<LogEntry>,
}

/// One queue's streams here: what its follower shares with them.
struct QueueWatch {
    shared: Mutex<Shared>,
    wake: Notify,
    /// Users waiting in the queue as last heard (`UNKNOWN` before).
    waiting: AtomicU64,
    /// Whether admission is paused (soft cap 0) as of the last tick.
    paused: AtomicBool,
    /// What every stream of the queue shows beside its own standing, as last
    /// published ([`News`]): one channel, so that an idle stream waits on one
    /// change of the queue's, not one per part.
    news: watch::Sender<News>,
    /// The log number of the last `state` entry taken (0: none yet); an entry at or
    /// below it is old news (one read from the log after it came on the channel).
    sale_n: AtomicU64,
    /// Counts the state entries taken, so that a QUEUE.INFO read across one does
    /// not put its older state back ([`QueueWatch::note_info_sale`]).
    sale_seq: AtomicU64,
    /// A wake-up at the end of each of the follower's cycles: a poll held for its
    /// person's registration ([`Hub::poll_held`]) looks again.
    cycled: Notify,
}

const UNKNOWN: u64 = u64::MAX;

/// What every stream of a queue shows beside its own standing; a change of any part
/// wakes them all, and each tells what differs from what it told.
#[derive(Debug, Clone, PartialEq)]
pub struct News {
    /// The total and the pause: changed when the total moved noticeably
    /// ([`noticeable`]) or the pause flipped, so that a stream tells its person
    /// even when their own rank stayed.
    pub summary: Summary,
    /// Counts the changes of `summary`: a stream compares this, not the value (a
    /// change and its undoing between two looks are still a change: the stream may
    /// have told the first).
    pub summary_seq: u64,
    /// The sale's state (closed, sold out, the operator's message) as last heard:
    /// None until read.
    pub sale: Option<QueueState>,
    /// The branding as last changed here (Null before any change was heard), and
    /// how many changes were heard.
    pub brand: Arc<serde_json::Value>,
    pub brand_seq: u64,
    /// Counts the keep-alive ticks ([`Hub::keep_alive`]): each new one has every
    /// stream write a comment line.
    pub ping: u64,
    /// The service is shutting down: the stream ends.
    pub ending: bool,
}

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
    fn new(ending: bool) -> QueueWatch {
        QueueWatch {
            shared: Mutex::default(),
            wake: Notify::new(),
            waiting: AtomicU64::new(UNKNOWN),
            paused: AtomicBool::new(false),
            news: watch::channel(News {
                summary: Summary { total: None, paused: false },
                summary_seq: 0,
                sale: None,
                brand: Arc::new(serde_json::Value::Null),
                brand_seq: 0,
                ping: 0,
                ending,
            })
            .0,
            sale_n: AtomicU64::new(0),
            sale_seq: AtomicU64::new(0),
            cycled: Notify::new(),
        }
    }

    /// The follower ended a cycle: polls held for a registration look again.
    fn cycle_done(&self) {
        self.cycled.notify_waiters();
    }

    /// Takes a `state` entry of the change log (one write in Valkey per change,
    /// however many streams show it): newer than the last taken, it becomes the
    /// state every stream shows.
    fn note_state_entry(&self, n: u64, state: &QueueState) {
        if self.sale_n.fetch_max(n, Ordering::Relaxed) >= n {
            return;
        }
        self.sale_seq.fetch_add(1, Ordering::Relaxed);
        self.set_sale(state.clone());
    }

    /// The state a QUEUE.INFO read shows (from the clock: a closing time passed shows
    /// before any entry says so), unless a state entry was taken since `seq` (the
    /// count when the read was sent): then the entry is newer.
    fn note_info_sale(&self, seq: u64, info: &queue_client::QueueInfo) {
        if self.sale_seq.load(Ordering::Relaxed) != seq {
            return;
        }
        self.set_sale(QueueState { closed: info.closed, sold_out: info.sold_out, message: info.message.clone() });
    }

    fn set_sale(&self, state: QueueState) {
        self.news.send_if_modified(|n| {
            if n.sale.as_ref() == Some(&state) {
                return false;
            }
            n.sale = Some(state);
            true
        });
    }

    fn note_waiting(&self, waiting: u64) {
        self.waiting.store(waiting, Ordering::Relaxed);
    }

    fn note_paused(&self, paused: bool) {
        self.paused.store(paused, Ordering::Relaxed);
    }

    fn total(&self) -> Option<u64> {
        Some(self.waiting.load(Ordering::Relaxed)).filter(|&w| w != UNKNOWN)
    }

    fn paused(&self) -> bool {
        self.paused.load(Ordering::Relaxed)
    }

    /// Tells the streams when the total moved noticeably or the pause flipped since
    /// last told. Called after the new ranks were handed out, so that a stream whose
    /// rank changed too sends one event, not two.
    fn publish(&self) {
        let Some(waiting) = self.total() else { return };
        let paused = self.paused();
        self.news.send_if_modified(|n| {
            if noticeable(n.summary.total, waiting) || n.summary.paused != paused {
                n.summary = Summary { total: Some(waiting), paused };
                n.summary_seq += 1;
                true
            } else {
                false
            }
        });
    }
}

/// The registry of this instance's push streams: per queue, who is streamed and how
/// many streams each has, and the follower that keeps them told.
pub struct Hub {
    queues: Mutex<HashMap<String, Arc<QueueWatch>>>,
    valkey: Valkey,
    tick: Duration,
    /// How long a person who stopped polling stays registered (`--poll-grace`).
    poll_grace: Duration,
    /// How far behind Valkey a poll's answer from here may be (`--status-max-staleness`).
    max_staleness: Duration,
    /// This process's name in the queues' `instances` (its lease vouches for the
    /// people it streams to).
    instance: String,
    metrics: Arc<Metrics>,
    /// People registered by a poll, here in all queues, and the most allowed
    /// (`--max-pollers`; 0: no limit).
    pollers: AtomicUsize,
    max_pollers: AtomicUsize,
    /// A stream tells a mere rank change at most once per this many milliseconds
    /// (`--push-interval`; 0: every change at once).
    push_interval_ms: AtomicU64,
    /// `--poll-hold` in milliseconds ([`Hub::hold_polls`]).
    poll_hold_ms: AtomicU64,
    /// The service is shutting down: every stream ends ([`Hub::shut_down`]).
    ending: AtomicBool,
    /// `--stream-keep-alive` in milliseconds (0 before [`Hub::keep_alive`] runs).
    keep_alive_ms: AtomicU64,
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

/// What a new stream takes from its person's entry: their standing's receiver and
/// the count of their streams that look at every change (`Person::listening`).
type StreamHandles = (slot::Receiver<Option<Standing>>, Arc<AtomicUsize>);

/// What [`Hub::poll_held`] made of a status poll.
#[derive(Debug)]
pub enum Polled {
    /// Answered from the follower.
    Answer(Standing),
    /// Known here and asked again, not answered in time: read from Valkey (their
    /// registration is under way already).
    Asked,
    /// Not known here: read from Valkey, then registered if they wait.
    Unknown,
}

/// How a poll or stream came to the hub.
enum Came {
    Stream,
    Poll,
    /// They entered (or entered again) through this instance and wait: registered
    /// like a poller before their first poll, and asked again whatever was known
    /// (unless the log tells their new place: with [`Hub::moves`] from before the
    /// entry, and the standing the entry replied).
    Entry(Option<u64>, Standing),
}

impl Hub {
    pub fn new(valkey: Valkey, tick: Duration, metrics: Arc<Metrics>) -> Arc<Hub> {
        Hub::with_polls(valkey, tick, Duration::from_secs(15), Duration::from_secs(1), metrics)
    }

    /// A hub whose pollers stay registered `poll_grace` after their last poll, and
    /// whose poll answers are at most `max_staleness` behind Valkey.
    pub fn with_polls(
        valkey: Valkey,
        tick: Duration,
        poll_grace: Duration,
        max_staleness: Duration,
        metrics: Arc<Metrics>,
    ) -> Arc<Hub> {
        Arc::new(Hub {
            queues: Mutex::new(HashMap::new()),
            valkey,
            tick,
            poll_grace,
            max_staleness,
            instance: instance_name(),
            metrics,
            pollers: AtomicUsize::new(0),
            max_pollers: AtomicUsize::new(0),
            push_interval_ms: AtomicU64::new(0),
            poll_hold_ms: AtomicU64::new(0),
            ending: AtomicBool::new(false),
            keep_alive_ms: AtomicU64::new(0),
        })
    }

    /// Every `every`, until shutdown: each open stream writes a comment line unless it
    /// told its standing within half of it, so that proxies in front do not cut it
    /// as idle. One timer for all the streams of the process (through the queues'
    /// news, which each waits on anyway), not one each.
    pub async fn keep_alive(self: Arc<Hub>, every: Duration) {
        self.keep_alive_ms.store(every.as_millis() as u64, Ordering::Relaxed);
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        while !self.ending.load(Ordering::SeqCst) {
            tick.tick().await;
            let queues: Vec<_> = self.queues.lock().unwrap().values().cloned().collect();
            for w in queues {
                w.news.send_modify(|n| n.ping += 1);
            }
        }
    }

    /// The service is shutting down: every open stream ends (told through its
    /// queue's news, which each waits on anyway), and one opened from now on ends
    /// at once.
    pub fn shut_down(&self) {
        let queues = self.queues.lock().unwrap();
        self.ending.store(true, Ordering::SeqCst);
        for w in queues.values() {
            w.news.send_modify(|n| n.ending = true);
        }
    }

    /// Registers at most `max` pollers (0: no limit); past it, polls are answered
    /// from Valkey without registering their people.
    pub fn limit_pollers(&self, max: usize) {
        self.max_pollers.store(max, Ordering::Relaxed);
    }

    /// Streams tell a change of rank, total or estimate alone at most once per
    /// `interval` (zero: at once); stream.rs, "Paced push".
    pub fn pace_pushes(&self, interval: Duration) {
        self.push_interval_ms.store(interval.as_millis() as u64, Ordering::Relaxed);
    }

    /// Polls of people known here but not current wait up to `hold` for the
    /// follower's next registration ([`Hub::poll_held`]; zero: read at once).
    pub fn hold_polls(&self, hold: Duration) {
        self.poll_hold_ms.store(hold.as_millis() as u64, Ordering::Relaxed);
    }

    /// How long the follower gathers the people to register for their polls before
    /// one `QUEUE.WATCH` registers them all: half the hold, so that the polls held
    /// for them are answered by it well within the hold. A registration has a fixed
    /// part (about 5 µs of Valkey's time in a tight loop, several times that when it
    /// comes now and then) and about 2 µs a person more, so under churn (people
    /// leaving and entering, each then polling every instance) one a gathering saves
    /// the fixed part of all but one (bench/README.md, "Polls gathered into one
    /// registration", for what that came to).
    fn gather_for(&self) -> Duration {
        Duration::from_millis(self.poll_hold_ms.load(Ordering::Relaxed) / 2)
    }

    /// How often an idle stream writes a comment line ([`Hub::keep_alive`]).
    pub fn keep_alive_interval(&self) -> Duration {
        Duration::from_millis(self.keep_alive_ms.load(Ordering::Relaxed))
    }

    /// The pace of [`Hub::pace_pushes`].
    pub fn push_interval(&self) -> Duration {
        Duration::from_millis(self.push_interval_ms.load(Ordering::Relaxed))
    }

    /// People registered by a poll here now.
    pub fn pollers(&self) -> usize {
        self.pollers.load(Ordering::Relaxed)
    }

    /// A person leaves the registry (counted out of the pollers if a poll brought them).
    fn forget(&self, person: &Person) {
        if person.by_poll {
            self.pollers.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Registers a stream for `user` on `queue`; its standing is checked at once.
    pub fn subscribe(self: &Arc<Hub>, queue: &str, user: &str) -> Subscription {
        let (watch, updates) = self.register(queue, user, Came::Stream);
        self.metrics.sse_streams.increment(1.0);
        let (updates, listening) = updates.expect("a stream's receiver");
        Subscription::new(self.clone(), queue, user, watch, updates, listening)
    }

    /// Registers a poller: `user` polled `queue` and the batched read found them
    /// waiting. They are registered with the follower (a `QUEUE.WATCH` in its next
    /// cycle) unless the ledger keeps them current already, and stay registered while
    /// they poll (`--poll-grace`).
    pub fn watch_poller(self: &Arc<Hub>, queue: &str, user: &str) {
        self.register_within_cap(queue, user, Came::Poll);
    }

    /// Registers `user` as a poller unless `--max-pollers` are registered already and
    /// they are not one of them: then their polls are answered from Valkey, and the
    /// refusal is counted.
    fn register_within_cap(self: &Arc<Hub>, queue: &str, user: &str, came: Came) {
        let max = self.max_pollers.load(Ordering::Relaxed);
        if max > 0 && self.pollers() >= max && !self.knows(queue, user) {
            self.metrics.pollers_refused.increment(1);
            return;
        }
        self.register(queue, user, came);
    }

    /// `user` entered `queue` through this instance and waits (the entry's reply
    /// said so): registered with the follower at once, in its next cycle's
    /// `QUEUE.WATCH` with everyone else who entered meanwhile, so that their first
    /// poll is answered from the ledger with no read of their own. Whatever was known
    /// of them before (an earlier place, re-entered now) is not answered from until
    /// that registration's checkpoint is applied; or, for a person kept current in
    /// line here, until the change log tells their new place (no registration).
    pub fn entered(self: &Arc<Hub>, queue: &str, user: &str, moves: Option<u64>, replied: &Standing) {
        self.register_within_cap(queue, user, Came::Entry(moves, replied.clone()));
    }

    /// How many new places after entering again the log told `user` here so far
    /// (None: not known here), read before an entry through this instance and handed
    /// to [`Hub::entered`] after it.
    pub fn moves(&self, queue: &str, user: &str) -> Option<u64> {
        let w = self.queues.lock().unwrap().get(queue).cloned()?;
        let shared = w.shared.lock().unwrap();
        shared.users.get(user).map(|p| p.moves)
    }

    /// `user` left `queue` through this instance: polls here read Valkey from now on
    /// (read-your-writes here). A person polling only is forgotten and unregistered
    /// at once; one with streams here is asked again (their streams end with
    /// `unknown`).
    pub fn left(&self, queue: &str, user: &str) {
        let queues = self.queues.lock().unwrap();
        let Some(w) = queues.get(queue) else { return };
        let mut shared = w.shared.lock().unwrap();
        let shared = &mut *shared;
        let Some(person) = shared.users.get_mut(user) else { return };
        person.current = false;
        person.moving = None;
        shared.changed_here.insert(user.to_string());
        if person.streams == 0 {
            // Leaving removed their registration in Valkey: nothing to unregister
            // (the ledger forgets them when the log tells it, or asks nobody).
            if let Some(p) = shared.users.remove(user) {
                self.forget(&p);
            }
        } else {
            shared.fresh.push(user.to_string());
        }
        w.wake.notify_one();
    }

    /// Whether `user` of `queue` is registered here already.
    fn knows(&self, queue: &str, user: &str) -> bool {
        let w = self.queues.lock().unwrap().get(queue).cloned();
        w.is_some_and(|w| w.shared.lock().unwrap().users.contains_key(user))
    }

    fn register(self: &Arc<Hub>, queue: &str, user: &str, came: Came) -> (Arc<QueueWatch>, Option<StreamHandles>) {
        // Under the registry lock, so that a follower retiring its queue either sees
        // this user or is replaced by a new one.
        let (watch, new_queue, updates) = {
            let mut queues = self.queues.lock().unwrap();
            let (w, new_queue) = match queues.get(queue) {
                Some(w) => (w.clone(), false),
                None => {
                    let w = Arc::new(QueueWatch::new(self.ending.load(Ordering::SeqCst)));
                    queues.insert(queue.to_string(), w.clone());
                    (w, true)
                }
            };
            let updates = {
                let mut shared = w.shared.lock().unwrap();
                let shared = &mut *shared;
                let mut fresh = false;
                let person = shared.users.entry(user.to_string()).or_insert_with(|| {
                    fresh = true;
                    let mut p = Person::new();
                    if matches!(came, Came::Poll | Came::Entry(..)) {
                        p.by_poll = true;
                        self.pollers.fetch_add(1, Ordering::Relaxed);
                    }
                    p
                });
                let updates = match came {
                    Came::Stream => {
                        person.streams += 1;
                        shared.stream_opened = true;
                        Some((person.tx.subscribe(), person.listening.clone()))
                    }
                    Came::Poll => {
                        let now = Instant::now();
                        person.polled = Some(now);
                        shared.last_poll = Some(now);
                        // Known but not kept current (say promoted before and in
                        // line again): asked again, unless the log is to tell.
                        fresh |= !person.current && person.moving.is_none();
                        None
                    }
                    Came::Entry(before, replied) => {
                        // Counted as polling from the entry on: unregistered after
                        // the grace period if they never poll.
                        let now = Instant::now();
                        person.polled = Some(now);
                        shared.last_poll = Some(now);
                        // Kept current in line until now: entering again as they
                        // were, the log tells their new place (`moved`), with no
                        // registration; not answered from until it does, unless it
                        // did already (since `before`, the place the entry replied).
                        let (in_line, as_replied) = match person.tx.borrow().as_ref() {
                            Some(st) => (
                                st.status == queue_client::Status::Waiting && st.opens_at.is_none(),
                                (st.rank, &st.nickname, &st.lane) == (replied.rank, &replied.nickname, &replied.lane),
                            ),
                            None => (false, false),
                        };
                        let told = before.is_some_and(|b| person.moves > b) && as_replied;
                        if !(person.current && in_line && told) {
                            if person.current && in_line && before.is_some() {
                                person.moving = Some(now);
                                shared.moving.push_back((now, user.to_string()));
                            } else {
                                fresh = true;
                            }
                            person.current = false;
                            shared.changed_here.insert(user.to_string());
                        }
                        None
                    }
                };
                if fresh {
                    shared.fresh.push(user.to_string());
                }
                updates
            };
            (w, new_queue, updates)
        };
        if new_queue {
            let follower = follower::Follower::new(self.clone(), queue.to_string(), watch.clone());
            tokio::spawn(follower.run());
        }
        watch.wake.notify_one();
        (watch, updates)
    }

    /// `user`'s standing on `queue` for a status poll, from what the follower knows,
    /// or None when it cannot answer within the staleness bound (not registered yet,
    /// not kept current, the follower not confirmed current lately): then the
    /// batched read answers. A poll answered here keeps the person registered.
    pub fn poll(&self, queue: &str, user: &str) -> Option<Standing> {
        let w = self.queues.lock().unwrap().get(queue)?.clone();
        let mut shared = w.shared.lock().unwrap();
        let now = Instant::now();
        let fresh_since =
            |t: Option<Instant>| t.is_some_and(|t| now.saturating_duration_since(t) <= self.max_staleness);
        let confirmed = fresh_since(shared.confirmed);
        let person = shared.users.get_mut(user)?;
        person.polled = Some(now);
        let answer = if confirmed && person.current { person.tx.borrow().clone() } else { None };
        shared.last_poll = Some(now);
        answer
    }

    /// A status poll of `user` on `queue`, answered from the follower when it can be
    /// ([`Hub::poll`]). A person known here but not kept current (they entered again
    /// elsewhere under another nickname or lane, or were promoted; a re-entry as they
    /// were is followed from the log) is asked again and the poll held for up to
    /// `hold`, until the follower's next registration (its `QUEUE.WATCH`, shared with
    /// everyone asked meanwhile) makes them current: one registration then answers
    /// both this poll and the next ones, instead of a read of their own and then a
    /// registration. When that answer does not make them current (they do not wait
    /// any more), or not within `hold` (`--poll-hold`; the follower behind, Valkey
    /// slow), the poll is read from Valkey ([`Polled::Asked`]).
    pub async fn poll_held(self: &Arc<Hub>, queue: &str, user: &str) -> Polled {
        if let Some(standing) = self.poll(queue, user) {
            return Polled::Answer(standing);
        }
        let hold = Duration::from_millis(self.poll_hold_ms.load(Ordering::Relaxed));
        let Some(w) = self.queues.lock().unwrap().get(queue).cloned() else { return Polled::Unknown };
        if hold.is_zero() || !w.shared.lock().unwrap().users.contains_key(user) {
            return Polled::Unknown;
        }
        let checked = |w: &QueueWatch| w.shared.lock().unwrap().users.get(user).map(|p| p.checked);
        let start = checked(&w);
        self.metrics.status_held.increment(1);
        self.register(queue, user, Came::Poll);
        let deadline = tokio::time::Instant::now() + hold;
        loop {
            let cycled = w.cycled.notified();
            tokio::pin!(cycled);
            cycled.as_mut().enable();
            if let Some(standing) = self.poll(queue, user) {
                return Polled::Answer(standing);
            }
            // Their registration answered without making them current (they do not
            // wait any more), or they were forgotten here.
            if checked(&w) != start {
                return Polled::Asked;
            }
            if tokio::time::timeout_at(deadline, cycled).await.is_err() {
                return Polled::Asked;
            }
        }
    }

    fn unsubscribe(&self, queue: &str, user: &str) {
        let queues = self.queues.lock().unwrap();
        if let Some(w) = queues.get(queue) {
            let mut shared = w.shared.lock().unwrap();
            let grace = self.poll_grace;
            if let Some(person) = shared.users.get_mut(user) {
                person.streams -= 1;
                // A person still polling stays until the follower's sweep.
                if person.streams == 0 && !person.polling(Instant::now(), grace) {
                    if let Some(p) = shared.users.remove(user) {
                        self.forget(&p);
                    }
                    shared.closed.push(user.to_string());
                    w.wake.notify_one();
                }
            }
        }
    }

    /// Takes a change log entry of `queue` as its command published it. A `state`
    /// entry (closed, sold out, message) goes to every stream of the queue at once.
    pub fn change(&self, queue: &str, entry: LogEntry) {
        if let Some(w) = self.queues.lock().unwrap().get(queue) {
            if let Some(state) = &entry.state {
                w.note_state_entry(entry.n, state);
            }
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

    /// Whether `queue` has open streams or pollers here.
    pub fn follows(&self, queue: &str) -> bool {
        self.queues.lock().unwrap().contains_key(queue)
    }

    /// The queue's branding changed (announced on its channel by the instance that
    /// wrote it, read once here): every open stream of it here sends it to its page.
    pub fn brand_changed(&self, queue: &str, brand: serde_json::Value) {
        if let Some(w) = self.queues.lock().unwrap().get(queue) {
            w.news.send_modify(|n| {
                n.brand = Arc::new(brand);
                n.brand_seq += 1;
            });
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
}
