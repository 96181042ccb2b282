//! One push stream: its registration with the hub ([`Subscription`]) and its state
//! between events ([`events`]): the standing last sent with the total and pause sent
//! beside it, so that an event goes out when either changed and never twice for one
//! change.

use super::{wire, Hub, QueueWatch, Summary};
use crate::conn_limit::Permit;
use axum::response::sse::Event;
use futures_util::Stream;
use queue_client::{QueueState, Standing, Status};
use std::sync::Arc;
use tokio::sync::watch;

/// Keeps a stream's registration; unregisters on drop.
pub struct Subscription {
    hub: Arc<Hub>,
    queue: String,
    user: String,
    watch: Arc<QueueWatch>,
    pub updates: watch::Receiver<Option<Standing>>,
    /// Changes when the queue's total or pause changed noticeably.
    pub summary: watch::Receiver<Summary>,
    /// The sale's state: closed, sold out, the operator's message (None: not read yet).
    pub sale: watch::Receiver<Option<QueueState>>,
    /// Changes when the queue's branding changed (the new branding).
    pub brand: watch::Receiver<serde_json::Value>,
}

impl Subscription {
    pub(super) fn new(
        hub: Arc<Hub>,
        queue: &str,
        user: &str,
        watch: Arc<QueueWatch>,
        updates: watch::Receiver<Option<Standing>>,
    ) -> Subscription {
        let (summary, sale, brand) = (watch.summary.subscribe(), watch.sale.subscribe(), watch.brand.subscribe());
        Subscription { hub, queue: queue.to_string(), user: user.to_string(), watch, updates, summary, sale, brand }
    }

    /// Whether the sale's state is known here yet (else the stream reads QUEUE.INFO).
    pub fn sale_known(&self) -> bool {
        self.watch.sale.borrow().is_some()
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
        self.hub.unsubscribe(&self.queue, &self.user);
        self.hub.metrics.sse_streams.decrement(1.0);
    }
}

/// One push stream's state between events.
struct Follow {
    sub: Subscription,
    _permit: Permit,
    shutdown: watch::Receiver<bool>,
    queue: String,
    /// A standing not yet looked at.
    pending: Option<Standing>,
    /// The last standing sent, and the total and pause sent with it.
    last: Option<(Standing, Summary)>,
    /// The sale's state as this stream last told it (nothing closed, sold out or
    /// said before the first event: a stream opened later tells the state first).
    sale_sent: QueueState,
    /// The branding changed since the last `brand` event.
    brand_new: bool,
    done: bool,
}

impl Follow {
    fn summary(&self) -> Summary {
        Summary { total: self.sub.total_waiting(), paused: self.sub.paused() }
    }

    /// The next event: a changed standing, or the last one again when the queue's
    /// total or pause changed noticeably while waiting; None when the stream ends.
    async fn next(&mut self) -> Option<Event> {
        if self.done {
            return None;
        }
        loop {
            // The sale's state goes first: one event per part that changed.
            let sale = self.sub.sale.borrow_and_update().clone();
            if let Some(ev) = sale.and_then(|now| self.sale_event(now)) {
                return Some(ev);
            }
            // (`changed()` below marks the branding seen: hence `brand_new`.)
            if std::mem::take(&mut self.brand_new) || self.sub.brand.has_changed().unwrap_or(false) {
                let brand = self.sub.brand.borrow_and_update().clone();
                return Some(wire::brand_event(&self.queue, &brand));
            }
            if let Some(s) = self.pending.take() {
                if self.last.as_ref().map(|(l, _)| l) != Some(&s) {
                    return Some(self.send(s));
                }
            }
            tokio::select! {
                changed = self.sub.updates.changed() => {
                    if changed.is_err() {
                        return None;
                    }
                    self.pending = self.sub.updates.borrow_and_update().clone();
                }
                changed = self.sub.summary.changed() => {
                    if changed.is_err() {
                        return None;
                    }
                    self.sub.summary.borrow_and_update();
                    // A new standing from the same read goes first (it carries the
                    // new total too). One equal to the last sent (the first
                    // standing, read by the stream itself, coming back from the
                    // follower) is no news: the total still is.
                    if self.sub.updates.has_changed().unwrap_or(false) {
                        let s = self.sub.updates.borrow_and_update().clone();
                        if s.is_some() && self.last.as_ref().map(|(l, _)| l) != s.as_ref() {
                            self.pending = s;
                            continue;
                        }
                    }
                    let now = self.summary();
                    if let Some((s, sent)) = &self.last {
                        if s.status == Status::Waiting && *sent != now {
                            return Some(self.send(s.clone()));
                        }
                    }
                }
                changed = self.sub.sale.changed() => {
                    if changed.is_err() {
                        return None;
                    }
                }
                changed = self.sub.brand.changed() => {
                    if changed.is_err() {
                        return None;
                    }
                    self.brand_new = true;
                }
                _ = self.shutdown.changed() => return None,
            }
        }
    }

    /// The event for the first part of the sale's state that differs from what was
    /// told (closed, then sold out, then the message), if any.
    fn sale_event(&mut self, now: QueueState) -> Option<Event> {
        let mut sent = self.sale_sent.clone();
        let ev = if now.closed != sent.closed {
            sent.closed = now.closed;
            wire::closed_event(&self.queue, now.closed)
        } else if now.sold_out != sent.sold_out {
            sent.sold_out = now.sold_out;
            wire::sold_out_event(&self.queue, now.sold_out)
        } else if now.message != sent.message {
            sent.message = now.message.clone();
            wire::message_event(&self.queue, &now.message)
        } else {
            return None;
        };
        self.sale_sent = sent;
        Some(ev)
    }

    fn send(&mut self, s: Standing) -> Event {
        let summary = self.summary();
        self.done = s.status != Status::Waiting;
        let ev = wire::event_for(&s, &self.queue, summary);
        self.last = Some((s, summary));
        ev
    }
}

/// The events of a stream that starts from `first` (the standing the request read)
/// and holds `permit` (its place among the open streams) until it ends: `first`, then
/// each change, until the person is no longer waiting or `shutdown` flips.
pub fn events(
    sub: Subscription,
    permit: Permit,
    shutdown: watch::Receiver<bool>,
    queue: String,
    first: Standing,
) -> impl Stream<Item = Result<Event, std::convert::Infallible>> {
    let follow = Follow {
        sub,
        _permit: permit,
        shutdown,
        queue,
        pending: Some(first),
        last: None,
        sale_sent: QueueState::default(),
        brand_new: false,
        done: false,
    };
    futures_util::stream::unfold(follow, |mut f| async move {
        let ev = f.next().await?;
        Some((Ok(ev), f))
    })
}
