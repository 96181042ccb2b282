//! One push stream: its registration with the hub ([`Subscription`]) and its state
//! between events ([`events`]): the standing last sent with the total and pause sent
//! beside it, so that an event goes out when either changed and never twice for one
//! change.

use super::{slot, wire, Hub, News, QueueWatch, Summary};
use crate::conn_limit::Permit;
use axum::response::sse::Event;
use futures_util::Stream;
use queue_client::{QueueState, Standing, Status};
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;
use tokio::time::Sleep;

/// Keeps a stream's registration; unregisters on drop.
pub struct Subscription {
    hub: Arc<Hub>,
    queue: String,
    user: String,
    watch: Arc<QueueWatch>,
    pub updates: slot::Receiver<Option<Standing>>,
    /// The queue's news: its total and pause, the sale's state, the branding.
    pub news: watch::Receiver<News>,
    /// The news's counts of changes of the total and pause and of the branding, as
    /// this stream last looked at them (what was published before it began is no
    /// news).
    summary_seen: u64,
    brand_seen: u64,
    /// The keep-alive tick last answered with a comment line.
    ping_seen: u64,
    /// The person's streams that look at every change of rank now (mod.rs,
    /// `Person::listening`); this one counts in it unless `quiet`.
    listening: Arc<AtomicUsize>,
    quiet: bool,
}

impl Subscription {
    pub(super) fn new(
        hub: Arc<Hub>,
        queue: &str,
        user: &str,
        watch: Arc<QueueWatch>,
        updates: slot::Receiver<Option<Standing>>,
        listening: Arc<AtomicUsize>,
    ) -> Subscription {
        let news = watch.news.subscribe();
        let (summary_seen, brand_seen, ping_seen) = {
            let n = news.borrow();
            (n.summary_seq, n.brand_seq, n.ping)
        };
        listening.fetch_add(1, Ordering::SeqCst);
        Subscription {
            hub,
            queue: queue.to_string(),
            user: user.to_string(),
            watch,
            updates,
            news,
            summary_seen,
            brand_seen,
            ping_seen,
            listening,
            quiet: false,
        }
    }

    /// This stream holds a change of rank back (`true`: a mere change of rank need
    /// not wake it) or looks at every change again (`false`: counted before it reads
    /// the latest standing, so that no change falls between).
    fn quiet(&mut self, quiet: bool) {
        if quiet != self.quiet {
            self.quiet = quiet;
            if quiet {
                self.listening.fetch_sub(1, Ordering::SeqCst);
            } else {
                self.listening.fetch_add(1, Ordering::SeqCst);
            }
        }
    }

    /// Whether the sale's state is known here yet (else the stream reads QUEUE.INFO).
    pub fn sale_known(&self) -> bool {
        self.watch.news.borrow().sale.is_some()
    }

    /// How many wait in the queue, as last heard (seed 001's total), if known.
    pub fn total_waiting(&self) -> Option<u64> {
        self.watch.total()
    }

    /// Whether admission is paused (soft cap 0), as of the last tick.
    pub fn paused(&self) -> bool {
        self.watch.paused()
    }

    /// Takes the queue's counts read by the stream itself (before the queue's first
    /// tick here, so that its first event has the total too).
    pub fn note(&self, info: &queue_client::QueueInfo) {
        if self.watch.total().is_none() {
            self.watch.note_waiting(info.waiting);
            self.watch.note_paused(info.config.soft_cap() == 0);
        }
        if !self.sale_known() {
            let seq = self.watch.sale_seq.load(std::sync::atomic::Ordering::Relaxed);
            self.watch.note_info_sale(seq, info);
        }
        self.watch.publish();
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.quiet(true);
        self.hub.unsubscribe(&self.queue, &self.user);
        self.hub.metrics.sse_streams.decrement(1.0);
    }
}

/// One push stream's state between events.
///
/// Paced push: a change of rank, total or estimate alone is told at most once per
/// `gap` (the hub's push interval plus this stream's own share of a quarter of it, so
/// that the streams one promotion moved do not all speak again at the same instant):
/// a change that comes sooner only marks the stream `held`, without copying or
/// serialising the standing, and when the gap has passed the latest standing goes
/// out (never an older one). Everything else goes out at once: the first standing, a
/// change of status (promoted, inside, unknown), the sale's state (closed, sold out,
/// the message), the branding, and the pause flipping.
struct Follow {
    sub: Subscription,
    _permit: Permit,
    /// A standing not yet looked at (boxed: it is there only between a change and
    /// its event, and a stream's state stays small for the rest of its life).
    pending: Option<Box<Standing>>,
    /// The last standing sent, and the total and pause sent with it.
    last: Option<(Standing, Summary)>,
    /// The sale's state as this stream last told it (nothing closed, sold out or
    /// said before the first event: a stream opened later tells the state first).
    sale_sent: QueueState,
    done: bool,
    /// The least time between two `position` events (zero: no pacing).
    gap: Duration,
    /// When the last `position` event went out.
    told_at: Option<Instant>,
    /// A change of rank, total or estimate waits for the gap to pass (the timer).
    held: Option<Pin<Box<Sleep>>>,
}

impl Follow {
    fn summary(&self) -> Summary {
        Summary { total: self.sub.total_waiting(), paused: self.sub.paused() }
    }

    /// When a `position` event may go out next, if not now.
    fn paced_until(&self) -> Option<Instant> {
        let at = self.told_at? + self.gap;
        (self.gap > Duration::ZERO && Instant::now() < at).then_some(at)
    }

    /// Holds a change of rank, total or estimate until the gap has passed; false when
    /// it may go out now.
    fn hold(&mut self) -> bool {
        let Some(at) = self.paced_until() else { return false };
        if self.held.is_none() {
            self.held = Some(Box::pin(tokio::time::sleep_until(at.into())));
            // Until the gap has passed, a change of rank alone need not wake it.
            self.sub.quiet(true);
        }
        true
    }

    /// The gap has passed or an event goes out: every change looked at again.
    fn unhold(&mut self) {
        self.held = None;
        self.sub.quiet(false);
    }

    /// Looks at the follower's newest standing: a copy to consider sending now, or
    /// None when it is a change of rank or estimate alone and the stream is paced
    /// (then only marked held: nothing is copied or serialised).
    fn look(&mut self) -> Option<Option<Box<Standing>>> {
        let paced = self.paced_until().is_some();
        let s = self.sub.updates.borrow_and_update();
        let last = self.last.as_ref().map(|(l, _)| l);
        if paced && matches!((last, s.as_ref()), (Some(l), Some(n)) if rank_only(l, n)) {
            drop(s);
            self.hold();
            return None;
        }
        Some(s.as_ref().map(|s| Box::new(s.clone())))
    }

    /// Whether `s` differs from the last standing sent.
    fn differs(&self, s: &Standing) -> bool {
        self.last.as_ref().map(|(l, _)| l) != Some(s)
    }

    /// The next event: a changed standing, or the last one again when the queue's
    /// total or pause changed noticeably while waiting; None when the stream ends.
    async fn next(&mut self) -> Option<Event> {
        if self.done {
            return None;
        }
        loop {
            // The sale's state goes first (one event per part that changed), then
            // the branding. (Read without marking the news seen: `changed()` below
            // then still wakes for a change of the total that came meanwhile.)
            let (sale, brand, ping) = {
                let news = self.sub.news.borrow();
                if news.ending {
                    return None;
                }
                let sale = news.sale.as_ref().and_then(|now| sale_event(&mut self.sale_sent, &self.sub.queue, now));
                let brand = (news.brand_seq != self.sub.brand_seen).then(|| (news.brand_seq, news.brand.clone()));
                (sale, brand, news.ping)
            };
            if let Some(ev) = sale {
                return Some(ev);
            }
            if let Some((seq, brand)) = brand {
                self.sub.brand_seen = seq;
                return Some(wire::brand_event(&self.sub.queue, &brand));
            }
            if let Some(s) = self.pending.take() {
                if self.differs(&s) {
                    return Some(self.send(*s));
                }
            }
            if ping != self.sub.ping_seen {
                self.sub.ping_seen = ping;
                // A stream that told its standing within half the interval needs no
                // comment this time (so a line goes out at least every 1.5 intervals):
                // in a moving line most streams write nothing more, and the tick
                // that wakes every stream at once makes few of them write.
                let every = self.sub.hub.keep_alive_interval();
                if self.told_at.is_none_or(|t| t.elapsed() >= every / 2) {
                    return Some(Event::default().comment(""));
                }
            }
            let held = &mut self.held;
            tokio::select! {
                changed = self.sub.updates.changed() => {
                    if changed.is_err() {
                        return None;
                    }
                    // While paced, a rank change only marks the stream held (the
                    // standing is read again when the gap has passed).
                    if let Some(s) = self.look() {
                        self.pending = s;
                    }
                }
                changed = self.sub.news.changed() => {
                    if changed.is_err() {
                        return None;
                    }
                    // The sale's state, the branding, a keep-alive tick or shutdown:
                    // seen at the loop's top.
                    let published = self.sub.news.borrow_and_update().summary_seq;
                    if published == self.sub.summary_seen {
                        continue;
                    }
                    self.sub.summary_seen = published;
                    // A new standing from the same read goes first (it carries the
                    // new total too). One equal to the last sent (the first
                    // standing, read by the stream itself, coming back from the
                    // follower) is no news: the total still is.
                    if self.sub.updates.has_changed().unwrap_or(false) {
                        if let Some(s) = self.look() {
                            if s.as_deref().is_some_and(|s| self.differs(s)) {
                                self.pending = s;
                                continue;
                            }
                        } else {
                            // Paced: the held event will carry the new total too.
                            continue;
                        }
                    }
                    let now = self.summary();
                    if let Some((s, sent)) = &self.last {
                        if s.status == Status::Waiting && *sent != now {
                            // The pause flipping goes out at once; the total alone is paced.
                            if sent.paused != now.paused || !self.hold() {
                                return Some(self.send_latest());
                            }
                        }
                    }
                }
                () = async { held.as_mut().expect("held").await }, if held.is_some() => {
                    self.unhold();
                    if let Some(ev) = self.told_late() {
                        return Some(ev);
                    }
                }
            }
        }
    }

    /// The latest standing (or the last sent, when the follower has none newer), to
    /// be sent now with the current total and pause.
    fn send_latest(&mut self) -> Event {
        let latest = self.sub.updates.borrow_and_update().clone();
        let s = match (latest, &self.last) {
            (Some(s), _) => s,
            (None, Some((l, _))) => l.clone(),
            (None, None) => unreachable!("a stream starts from a standing"),
        };
        self.send(s)
    }

    /// The gap has passed: the latest standing, if it or the total differs from what
    /// was told.
    fn told_late(&mut self) -> Option<Event> {
        let (last, sent) = self.last.as_ref()?;
        if last.status != Status::Waiting {
            return None;
        }
        let changed = {
            let latest = self.sub.updates.borrow();
            latest.as_ref().is_some_and(|s| s != last)
        };
        (changed || *sent != self.summary()).then(|| self.send_latest())
    }

    fn send(&mut self, s: Standing) -> Event {
        let summary = self.summary();
        self.done = s.status != Status::Waiting;
        self.unhold();
        if !self.done {
            self.told_at = Some(Instant::now());
        }
        let ev = wire::event_for(&s, &self.sub.queue, summary);
        self.last = Some((s, summary));
        ev
    }
}

/// The event for the first part of the sale's state `now` that differs from what was
/// told (`sent`, brought up to date): closed, then sold out, then the message.
fn sale_event(sent: &mut QueueState, queue: &str, now: &QueueState) -> Option<Event> {
    if now.closed != sent.closed {
        sent.closed = now.closed;
        Some(wire::closed_event(queue, now.closed))
    } else if now.sold_out != sent.sold_out {
        sent.sold_out = now.sold_out;
        Some(wire::sold_out_event(queue, now.sold_out))
    } else if now.message != sent.message {
        sent.message.clone_from(&now.message);
        Some(wire::message_event(queue, &now.message))
    } else {
        None
    }
}

/// Whether `new` differs from `told` in rank, estimate or nothing at all (what pacing
/// may hold back), not in status, ticket, pre-queue or lane (what goes out at once).
fn rank_only(told: &Standing, new: &Standing) -> bool {
    new.status == Status::Waiting
        && told.status == new.status
        && told.ticket_id == new.ticket_id
        && told.opens_at == new.opens_at
        && told.lane == new.lane
}

/// A stream's gap between `position` events: `interval` and a random share of a
/// quarter of it more, drawn once per stream. Streams that one promotion moved at the
/// same instant then speak again at different instants, and drift further apart with
/// each gap, instead of all at once one interval later.
fn spread(interval: Duration) -> Duration {
    let mut r = [0u8; 4];
    getrandom::fill(&mut r).unwrap_or_default();
    interval + interval.mul_f64(f64::from(u32::from_le_bytes(r)) / f64::from(u32::MAX) / 4.0)
}

/// The events of a stream that starts from `first` (the standing the request read)
/// and holds `permit` (its place among the open streams) until it ends: `first`, then
/// each change (a change of rank, total or estimate alone at most once per the hub's
/// push interval), until the person is no longer waiting or the service shuts down
/// ([`super::Hub::shut_down`]).
pub fn events(
    sub: Subscription,
    permit: Permit,
    first: Standing,
) -> impl Stream<Item = Result<Event, std::convert::Infallible>> {
    let interval = sub.hub.push_interval();
    let follow = Follow {
        sub,
        _permit: permit,
        pending: Some(Box::new(first)),
        last: None,
        sale_sent: QueueState::default(),
        done: false,
        gap: spread(interval),
        told_at: None,
        held: None,
    };
    futures_util::stream::unfold(follow, |mut f| async move {
        let ev = f.next().await?;
        Some((Ok(ev), f))
    })
}
