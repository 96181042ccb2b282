//! The follower of one queue: the loop that calls Valkey for the ledger (ledger.rs)
//! and hands its effects to the streams. Each cycle it takes new and closed streams
//! and published entries from the hub, places the ledger in the log before the first
//! entry, applies what was published (reading the log for a number skipped), reads
//! the queue's counts and renews the lease once a tick, registers the people to ask
//! (`QUEUE.WATCH`), reads the log when a checkpoint said it holds entries that never
//! came, and unregisters the people whose last stream closed (`QUEUE.UNWATCH`).

use super::ledger::{self, Behind, Effect, Ledger, Published, Why};
use super::{Hub, QueueWatch};
use queue_client::{ClientError, QueueClient, Standing, Status};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// Users registered per QUEUE.WATCH call (bounds one call's time inside Valkey).
const WATCH_BATCH: usize = 10_000;
/// Log entries read per call (catching up after a lost message).
const LOG_PAGE: usize = 1_000;
/// How long a follower waits after a cycle failed (Valkey away) before the next.
const RETRY: Duration = Duration::from_millis(200);
/// How long published entries that move ranks alone (people entering, leaving, a
/// head moving past nobody registered here) wait to be applied together. Each
/// application walks everyone the entries reach, so under churn (a thousand entries a
/// second) applying them in batches costs a fraction of applying each; a rank is told
/// at most once per push interval anyway. An entry with a ticket for someone here,
/// the sale's state, a reset, or someone's new place after entering again (`moved`)
/// while someone who entered again here waits for it, is applied at once, with
/// everything before it.
const APPLY_EVERY: Duration = Duration::from_millis(20);
/// Entries held back at most (then applied at once).
const APPLY_BATCH: usize = 1_000;

pub(super) struct Follower {
    hub: Arc<Hub>,
    queue: String,
    watch: Arc<QueueWatch>,
    ledger: Ledger,
    last_tick: Option<Instant>,
    /// The last `QUEUE.WATCH` sent (each reply may confirm the ledger current).
    last_watch: Option<Instant>,
    /// A `QUEUE.WATCH` reply's log number not applied yet, and when it was sent: once
    /// applied, the ledger is current as of then.
    to_confirm: Option<(u64, std::time::Instant)>,
    /// The last sweep of pollers gone quiet.
    last_sweep: Instant,
    /// Since when published entries wait to be applied together ([`APPLY_EVERY`]).
    held_since: Option<Instant>,
    /// Since when people to register for their polls are gathered
    /// ([`super::Hub::gather_for`]).
    gathering_since: Option<Instant>,
    /// How many of the people to ask [`Follower::gathered`] looked at already.
    gather_scanned: usize,
}

impl Follower {
    pub(super) fn new(hub: Arc<Hub>, queue: String, watch: Arc<QueueWatch>) -> Follower {
        Follower {
            hub,
            queue,
            watch,
            ledger: Ledger::new(),
            last_tick: None,
            last_watch: None,
            to_confirm: None,
            last_sweep: Instant::now(),
            held_since: None,
            gathering_since: None,
            gather_scanned: 0,
        }
    }

    pub(super) async fn run(mut self) {
        loop {
            if self.take_shared() {
                return;
            }
            let mut failed = true;
            if let Ok(client) = self.hub.valkey.client().await {
                match self.cycle(&client).await {
                    Ok(()) => failed = false,
                    Err(e) => tracing::warn!(queue = self.queue, error = %e, "following the change log failed"),
                }
                self.watch.publish();
            }
            self.watch.cycle_done();
            let next_tick = self.last_tick.map_or_else(Instant::now, |t| t + self.hub.tick);
            let next_tick = self.ledger.read_due().map_or(next_tick, |due| next_tick.min(Instant::from_std(due)));
            // While people poll: a QUEUE.WATCH at least every half staleness bound,
            // so that polls find the ledger confirmed current.
            let next_tick = match self.last_watch.filter(|_| self.polled_lately()) {
                Some(t) => next_tick.min(t + self.confirm_every()),
                None => next_tick,
            };
            // Published entries held back: applied when they have waited long enough.
            let next_tick = self.held_since.map_or(next_tick, |t| next_tick.min(t + APPLY_EVERY));
            // People gathered for their polls: registered when gathered long enough
            // ([`Follower::gathered`]).
            let gather = self.hub.gather_for();
            let next_tick = self.gathering_since.map_or(next_tick, |t| next_tick.min(t + gather));
            // Someone who entered again here: asked if the log has not told by then.
            let moving = self.watch.shared.lock().unwrap().moving.front().map(|m| m.0);
            let next_tick = moving.map_or(next_tick, |t| next_tick.min(Instant::from_std(t + super::MOVE_WAIT)));
            // After a failure (Valkey away), not again at once.
            let next_tick = if failed { next_tick.max(Instant::now() + RETRY) } else { next_tick };
            tokio::select! {
                _ = tokio::time::sleep_until(next_tick) => {}
                _ = self.watch.wake.notified() => {}
            }
        }
    }

    /// Takes new and closed streams and published entries; true when nobody is left
    /// (the queue is retired, under the registry lock, so that no subscriber races it).
    fn take_shared(&mut self) -> bool {
        let (hub, watch) = (self.hub.clone(), self.watch.clone());
        let mut queues = hub.queues.lock().unwrap();
        let mut shared = watch.shared.lock().unwrap();
        // Pollers gone quiet for the grace period (with no stream) leave, once a tick.
        if self.last_sweep.elapsed() >= hub.tick.min(hub.poll_grace) {
            self.last_sweep = Instant::now();
            let (now, grace) = (std::time::Instant::now(), hub.poll_grace);
            let shared = &mut *shared;
            shared.users.retain(|u, p| {
                let keep = p.streams > 0 || p.polling(now, grace);
                if !keep {
                    hub.forget(p);
                    shared.closed.push(u.clone());
                }
                keep
            });
        }
        for u in std::mem::take(&mut shared.closed) {
            if !shared.users.contains_key(&u) {
                self.ledger.closed(u);
            }
        }
        for u in std::mem::take(&mut shared.fresh) {
            self.ledger.ask(u);
        }
        // Entered again here, and the log did not tell their new place in time.
        let now_std = std::time::Instant::now();
        while let Some((since, _)) = shared.moving.front() {
            if now_std.saturating_duration_since(*since) < super::MOVE_WAIT {
                break;
            }
            let Some((since, u)) = shared.moving.pop_front() else { break };
            if let Some(p) = shared.users.get_mut(&u).filter(|p| p.moving == Some(since)) {
                p.moving = None;
                self.ledger.ask(u);
            }
        }
        // Asked again from here on: only a reply sent after this counts for them.
        shared.changed_here.clear();
        // Entries that move ranks alone wait a moment for the next ones. One that
        // tells someone's new place after entering again does not while someone
        // who entered again here waits for it ([`super::Person::moving`]).
        let waited_for = !shared.moving.is_empty();
        let urgent = |e: &queue_client::LogEntry| {
            !e.tickets.is_empty() || e.state.is_some() || e.reset || (waited_for && !e.moved.is_empty())
        };
        let now = Instant::now();
        let due = self.held_since.is_some_and(|t| now >= t + APPLY_EVERY);
        if due || shared.pushed.len() >= APPLY_BATCH || shared.pushed.iter().any(urgent) {
            self.held_since = None;
            self.ledger.published(std::mem::take(&mut shared.pushed));
        } else if !shared.pushed.is_empty() {
            self.held_since.get_or_insert(now);
        }
        if shared.users.is_empty() && !self.ledger.unwatching() {
            queues.remove(&self.queue);
            return true;
        }
        false
    }

    async fn cycle(&mut self, client: &QueueClient) -> Result<(), ClientError> {
        let q = self.queue.clone();
        let tick_due = self.last_tick.is_none_or(|t| t.elapsed() >= self.hub.tick);
        // Before the first entry: where the log ends.
        if self.ledger.cursor().is_none() {
            let last = client.log_last(&q).await?;
            self.ledger.start(last.as_ref().map(|e| (e.id.as_str(), e.n)));
        }
        self.apply_published(client).await?;
        if tick_due {
            self.last_tick = Some(Instant::now());
            let seq = self.watch.sale_seq.load(std::sync::atomic::Ordering::Relaxed);
            let info = client.info(&q).await?;
            self.watch.note_paused(info.config.soft_cap() == 0);
            self.watch.note_info_sale(seq, &info);
            let opens_at = Some(info.config.0.opens_at()).filter(|&t| t > 0);
            self.ledger.tick(info.waiting, info.admission_rate_per_min as i64, opens_at);
            self.deliver();
        }
        self.register(client, tick_due).await?;
        self.check_behind(client).await?;
        while let Some(batch) = self.ledger.next_to_unwatch(WATCH_BATCH) {
            if let Err(e) = client.unwatch(&q, &self.hub.instance, &batch).await {
                self.ledger.unwatch_failed(batch);
                return Err(e);
            }
        }
        Ok(())
    }

    /// QUEUE.WATCH for the people to (re)check, and the lease once a tick.
    async fn register(&mut self, client: &QueueClient, renew: bool) -> Result<(), ClientError> {
        let lease = self.hub.lease().as_millis() as u64;
        let due = renew || self.confirm_due();
        let send = due || self.gathered();
        if send {
            self.gathering_since = None;
            self.gather_scanned = 0;
        }
        if send && !self.ledger.nobody_to_watch() {
            // A registration goes out: everyone gathered goes with it, but nobody
            // this instance no longer follows.
            let shared = self.watch.shared.lock().unwrap();
            self.ledger.keep_asking(|u| shared.users.contains_key(u));
        }
        if self.ledger.nobody_to_watch() && due {
            self.hub.metrics.watch_calls.increment(1);
            let sent = Instant::now();
            self.last_watch = Some(sent);
            let cp = client.watch::<&str>(&self.queue, &self.hub.instance, lease, &[]).await?;
            if self.ledger.position(cp.log, cp.waiting, Instant::now().into_std()) {
                self.to_confirm = Some((cp.log, sent.into_std()));
            }
            self.deliver();
        }
        if !send {
            return Ok(());
        }
        while let Some(batch) = self.ledger.next_to_watch(WATCH_BATCH) {
            self.hub.metrics.watch_calls.increment(1);
            let sent = Instant::now();
            self.last_watch = Some(sent);
            match client.watch(&self.queue, &self.hub.instance, lease, &batch).await {
                Ok(cp) => {
                    let watch = self.watch.clone();
                    let mut shared = watch.shared.lock().unwrap();
                    let now = Instant::now().into_std();
                    let log = cp.log;
                    let moved_back = log < self.ledger.applied();
                    self.ledger.checkpoint(batch, cp, now, |u| shared.users.contains_key(u));
                    if !moved_back {
                        self.to_confirm = Some((log, sent.into_std()));
                    }
                    let effects = self.ledger.take_effects();
                    self.hand_out(effects, &mut shared);
                    self.settle(&mut shared);
                }
                Err(e) => {
                    self.ledger.watch_failed(batch);
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    /// Whether the people to ask are to be registered now. People asked for their
    /// polls alone (no stream here) are gathered for [`super::Hub::gather_for`]
    /// from the first, their polls held meanwhile, so that under churn one
    /// `QUEUE.WATCH` registers many and pays a registration's fixed part once.
    /// Someone with a stream here is to be told every change from now on, so is
    /// registered at once (and everyone gathered with them).
    fn gathered(&mut self) -> bool {
        if self.ledger.nobody_to_watch() {
            return true;
        }
        let now = Instant::now();
        let since = *self.gathering_since.get_or_insert(now);
        // Only the people asked since the last look (the list only grows while
        // gathering), unless a stream opened meanwhile (its person may have been
        // looked at before).
        let streamed = {
            let mut shared = self.watch.shared.lock().unwrap();
            if std::mem::take(&mut shared.stream_opened) {
                self.gather_scanned = 0;
            }
            let asking = self.ledger.asking();
            if asking.len() < self.gather_scanned {
                self.gather_scanned = 0;
            }
            let new = &asking[self.gather_scanned..];
            self.gather_scanned = asking.len();
            new.iter().any(|u| shared.users.get(u).is_some_and(|p| p.streams > 0))
        };
        streamed || now >= since + self.hub.gather_for()
    }

    /// After a checkpoint said the log holds entries beyond what was applied: what
    /// came on the channel meanwhile is applied, and the log read when they are
    /// overdue (ledger.rs, [`Ledger::behind`]).
    async fn check_behind(&mut self, client: &QueueClient) -> Result<(), ClientError> {
        if self.ledger.read_due().is_none() {
            return Ok(());
        }
        let watch = self.watch.clone();
        self.held_since = None;
        self.ledger.published(std::mem::take(&mut watch.shared.lock().unwrap().pushed));
        self.apply_published(client).await?;
        if self.ledger.behind(Instant::now().into_std()) == Behind::ReadLog {
            self.catch_up(client).await?;
            self.ledger.behind_read();
            self.deliver();
        }
        Ok(())
    }

    /// Applies the published entries taken, reading the log first for a number
    /// missing before them.
    async fn apply_published(&mut self, client: &QueueClient) -> Result<(), ClientError> {
        let mut log_read = false;
        loop {
            let next = self.ledger.apply_published(log_read);
            self.deliver();
            match next {
                Published::Done => return Ok(()),
                Published::ReadLog => {
                    log_read = true;
                    self.catch_up(client).await?;
                }
            }
        }
    }

    /// Reads the log after the last entry applied, to its end.
    async fn catch_up(&mut self, client: &QueueClient) -> Result<(), ClientError> {
        loop {
            let Some(from) = self.ledger.cursor().map(str::to_string) else { return Ok(()) };
            self.hub.metrics.log_reads.increment(1);
            let entries = client.log_after(&self.queue, &from, LOG_PAGE).await?;
            // State entries the channel lost reach the streams from the log.
            for e in &entries {
                if let Some(state) = &e.state {
                    self.watch.note_state_entry(e.n, state);
                }
            }
            let follows = self.ledger.read(&entries);
            self.deliver();
            if !follows || entries.len() < LOG_PAGE {
                return Ok(());
            }
        }
    }

    /// Whether anyone polled this queue here within the grace period.
    fn polled_lately(&self) -> bool {
        let last = self.watch.shared.lock().unwrap().last_poll;
        last.is_some_and(|t| t.elapsed() < self.hub.poll_grace)
    }

    /// Whether a `QUEUE.WATCH` is due: while people poll, one every half staleness
    /// bound confirms the ledger current.
    fn confirm_due(&self) -> bool {
        self.polled_lately() && self.last_watch.is_none_or(|t| t.elapsed() >= self.confirm_every())
    }

    /// How often the ledger is confirmed current while people poll.
    fn confirm_every(&self) -> Duration {
        (self.hub.max_staleness / 2).max(Duration::from_millis(10))
    }

    /// Hands the ledger's effects to the streams and pollers.
    fn deliver(&mut self) {
        let effects = self.ledger.take_effects();
        let watch = self.watch.clone();
        let mut shared = watch.shared.lock().unwrap();
        if !effects.is_empty() {
            self.hand_out(effects, &mut shared);
        }
        self.settle(&mut shared);
    }

    /// After effects were handed out: the people the ledger is to ask are not kept
    /// current until asked, and a `QUEUE.WATCH` reply whose log number is applied now
    /// confirms the ledger current as of when it was sent.
    fn settle(&mut self, shared: &mut super::Shared) {
        for u in self.ledger.asking() {
            if let Some(p) = shared.users.get_mut(u) {
                p.current = false;
                // The registration's answer makes them current.
                p.moving = None;
            }
        }
        if self.ledger.cursor().is_none() {
            shared.confirmed = None;
            self.to_confirm = None;
        } else if let Some((log, sent)) = self.to_confirm {
            if log <= self.ledger.applied() {
                shared.confirmed = Some(shared.confirmed.map_or(sent, |c| c.max(sent)));
                self.to_confirm = None;
            }
        }
    }

    fn hand_out(&mut self, effects: Vec<Effect>, shared: &mut super::Shared) {
        let users = &mut shared.users;
        // People who entered again or left through this instance since this cycle
        // began: a reply sent before that does not make them current.
        let asked = &shared.changed_here;
        for effect in effects {
            match effect {
                Effect::Standing(user, st) => {
                    if let Some(p) = users.get_mut(&user) {
                        p.checked += 1;
                        p.current = st.status == Status::Waiting
                            && self.ledger.tracks(&user)
                            && !asked.contains(&user)
                            && p.moving.is_none();
                        send(&self.hub, &p.tx, st);
                    }
                }
                Effect::Moved { user, rank, eta } => {
                    let Some(p) = users.get_mut(&user) else { continue };
                    // Entered again here: their new place, as the log tells it.
                    p.moves += 1;
                    if p.moving.take().is_some() {
                        p.current = true;
                    }
                    tell_rank(p, rank, eta);
                }
                Effect::Rank { user, rank, eta } => {
                    if let Some(p) = users.get(&user) {
                        tell_rank(p, rank, eta);
                    }
                }
                Effect::Gone { user, ticket } => {
                    let Some(p) = users.get_mut(&user) else { continue };
                    p.current = false;
                    // Entered again here after this (a ticket they gave back, say):
                    // not told what the entry says of before, asked.
                    if p.moving.take().is_some() {
                        self.ledger.ask_again(user);
                        continue;
                    }
                    let st = ledger::gone_standing(&user, p.tx.borrow().as_ref(), ticket);
                    match st {
                        Some(st) => send(&self.hub, &p.tx, st),
                        None => self.ledger.ask_again(user),
                    }
                }
                Effect::Waiting(n) => self.watch.note_waiting(n),
                Effect::AskedEveryone(why) => {
                    for p in users.values_mut() {
                        p.current = false;
                    }
                    self.hub.metrics.log_resets.increment(1);
                    match why {
                        Why::Gap { expected, got } => {
                            tracing::info!(queue = self.queue, expected, got, "a gap in the change log")
                        }
                        Why::Reset => {}
                        Why::Moved { why, applied } => {
                            tracing::info!(queue = self.queue, applied, why, "asking everyone again");
                            // The next cycle places the ledger anew and ticks at once.
                            self.last_tick = None;
                        }
                    }
                }
            }
        }
    }
}

/// Writes a new rank and estimate into a person's standing. Nobody is woken while
/// every stream of theirs holds a change back (the count is read under the channel's
/// lock: a stream that starts listening after it reads the new rank).
fn tell_rank(p: &super::Person, rank: u64, eta: ledger::Eta) {
    let listening = &p.listening;
    p.tx.send_if_modified(|shown| ledger::set_rank(shown, rank, eta) && listening.load(Ordering::SeqCst) > 0);
}

/// Hands a checked standing to a user's streams (counting a promotion once).
fn send(hub: &Hub, tx: &super::slot::Sender<Option<Standing>>, s: Standing) {
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
