//! The follower of one queue: the loop that calls Valkey for the ledger (ledger.rs)
//! and hands its effects to the streams. Each cycle it takes new and closed streams
//! and published entries from the hub, places the ledger in the log before the first
//! entry, applies what was published (reading the log for a number skipped), reads
//! the queue's counts and renews the lease once a tick, registers the people to ask
//! (`QUEUE.WATCH`), reads the log when a checkpoint said it holds entries that never
//! came, and unregisters the people whose last stream closed (`QUEUE.UNWATCH`).

use super::ledger::{self, Behind, Effect, Ledger, Published, Why};
use super::{Channel, Hub, QueueWatch};
use queue_client::{ClientError, QueueClient, Standing, Status};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;

/// Users registered per QUEUE.WATCH call (bounds one call's time inside Valkey).
const WATCH_BATCH: usize = 10_000;
/// Log entries read per call (catching up after a lost message).
const LOG_PAGE: usize = 1_000;
/// How long a follower waits after a cycle failed (Valkey away) before the next.
const RETRY: Duration = Duration::from_millis(200);

pub(super) struct Follower {
    hub: Arc<Hub>,
    queue: String,
    watch: Arc<QueueWatch>,
    ledger: Ledger,
    last_tick: Option<Instant>,
}

impl Follower {
    pub(super) fn new(hub: Arc<Hub>, queue: String, watch: Arc<QueueWatch>) -> Follower {
        Follower { hub, queue, watch, ledger: Ledger::new(), last_tick: None }
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
            let next_tick = self.last_tick.map_or_else(Instant::now, |t| t + self.hub.tick);
            let next_tick = self.ledger.read_due().map_or(next_tick, |due| next_tick.min(Instant::from_std(due)));
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
        for u in std::mem::take(&mut shared.closed) {
            if !shared.users.contains_key(&u) {
                self.ledger.closed(u);
            }
        }
        for u in std::mem::take(&mut shared.fresh) {
            self.ledger.ask(u);
        }
        self.ledger.published(std::mem::take(&mut shared.pushed));
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
            let info = client.info(&q).await?;
            self.watch.note_paused(info.config.soft_cap() == 0);
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
        if self.ledger.nobody_to_watch() && renew {
            self.hub.metrics.watch_calls.increment(1);
            let cp = client.watch::<&str>(&self.queue, &self.hub.instance, lease, &[]).await?;
            self.ledger.position(cp.log, cp.waiting, Instant::now().into_std());
            self.deliver();
        }
        while let Some(batch) = self.ledger.next_to_watch(WATCH_BATCH) {
            self.hub.metrics.watch_calls.increment(1);
            match client.watch(&self.queue, &self.hub.instance, lease, &batch).await {
                Ok(cp) => {
                    let watch = self.watch.clone();
                    let shared = watch.shared.lock().unwrap();
                    let now = Instant::now().into_std();
                    self.ledger.checkpoint(batch, cp, now, |u| shared.users.contains_key(u));
                    let effects = self.ledger.take_effects();
                    self.hand_out(effects, &shared.users);
                }
                Err(e) => {
                    self.ledger.watch_failed(batch);
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    /// After a checkpoint said the log holds entries beyond what was applied: what
    /// came on the channel meanwhile is applied, and the log read when they are
    /// overdue (ledger.rs, [`Ledger::behind`]).
    async fn check_behind(&mut self, client: &QueueClient) -> Result<(), ClientError> {
        if self.ledger.read_due().is_none() {
            return Ok(());
        }
        let watch = self.watch.clone();
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
            let follows = self.ledger.read(&entries);
            self.deliver();
            if !follows || entries.len() < LOG_PAGE {
                return Ok(());
            }
        }
    }

    /// Hands the ledger's effects to the streams.
    fn deliver(&mut self) {
        let effects = self.ledger.take_effects();
        if effects.is_empty() {
            return;
        }
        let watch = self.watch.clone();
        let shared = watch.shared.lock().unwrap();
        self.hand_out(effects, &shared.users);
    }

    fn hand_out(&mut self, effects: Vec<Effect>, users: &HashMap<String, Channel>) {
        for effect in effects {
            match effect {
                Effect::Standing(user, st) => {
                    if let Some((tx, _)) = users.get(&user) {
                        send(&self.hub, tx, st);
                    }
                }
                Effect::Rank { user, rank, eta } => {
                    if let Some((tx, _)) = users.get(&user) {
                        tx.send_if_modified(|shown| ledger::set_rank(shown, rank, eta));
                    }
                }
                Effect::Gone { user, ticket } => {
                    let Some((tx, _)) = users.get(&user) else { continue };
                    let st = ledger::gone_standing(&user, tx.borrow().as_ref(), ticket);
                    match st {
                        Some(st) => send(&self.hub, tx, st),
                        None => self.ledger.ask_again(user),
                    }
                }
                Effect::Waiting(n) => self.watch.note_waiting(n),
                Effect::AskedEveryone(why) => {
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
