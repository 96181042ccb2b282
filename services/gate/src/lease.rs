//! Session leases, as chat-server holds them: each tick one SESSION.HEARTBEAT per
//! queue for every person this instance saw within the queue's idle time
//! ([`QueueClient::renew_leases`] batches them and reads the reply back). The
//! reply says whose lease is gone (lapsed, or ended at another instance): those
//! sessions end here at once, so a lease that lapsed in Valkey ends access at every
//! instance within a tick. Someone not seen for the idle time is not renewed and
//! their lease runs out by itself (the queue's `session_lease`). On a tick with
//! nothing to renew, a PING keeps the gate's knowledge of Valkey's reachability
//! fresh (for claims and `--fail-open`).
//!
//! Sessions the gate ends (the app's header, `/gate/leave`, the longest session)
//! get their SESSION.END from [`end_loop`], off the request's path; while Valkey is
//! away they are kept and sent when it is back.

use crate::sessions::State;
use crate::{now_ms, EndRequest, Gate};
use queue_client::{ClientError, QueueClient};
use std::collections::VecDeque;
use std::sync::Arc;
use tokio::sync::{mpsc, watch};

/// Renews leases every tick until `stop` turns true.
pub async fn tick_loop(gate: Arc<Gate>, mut stop: watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(gate.config.tick);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        // A round stuck on an unreachable Valkey must not hold shutdown.
        tokio::select! {
            _ = one_tick(&gate) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
    }
}

/// One round: heartbeats (or a PING), lapsed sessions ended, expired entries swept,
/// the inside gauges set.
pub async fn one_tick(gate: &Gate) {
    let now = now_ms();
    let max_s = |q: &str| gate.config.rules.settings(q).max_session.map(|d| d.as_secs());
    for s in gate.table.past_max_session(now / 1000, max_s) {
        tracing::info!(queue = s.queue, user = s.user, "longest session reached; ending it");
        gate.end_session(&s.queue, &s.user, crate::EndReason::MaxSession);
    }
    gate.table.sweep(now);
    let due = gate.table.due(now, |q| gate.idle_ms(q));
    gate.metrics.set_inside(&due.iter().map(|(q, users)| (q.clone(), users.len())).collect());
    let Some(client) = gate.store.client().await else {
        gate.health.down(now, &"not connected yet");
        gate.metrics.valkey_up.set(0.0);
        return;
    };
    if due.is_empty() {
        observe(gate, client.ping().await);
    }
    for (queue, users) in &due {
        let names: Vec<&String> = users.keys().collect();
        client
            .renew_leases(queue, &names, |call| {
                gate.metrics.heartbeat_calls.increment(1);
                let Some(gone) = observe(gate, call.gone) else { return };
                for user in gone {
                    for session in &users[*user] {
                        if session.finish(State::Lapsed) {
                            tracing::info!(queue, user = **user, "session lease gone; access ends");
                            gate.metrics.leases_lost.increment(1);
                        }
                    }
                }
            })
            .await;
    }
}

/// Notes what a call says of Valkey's reachability; the value when it succeeded.
fn observe<T>(gate: &Gate, result: Result<T, ClientError>) -> Option<T> {
    match result {
        Ok(v) => {
            gate.health.up();
            gate.metrics.valkey_up.set(1.0);
            Some(v)
        }
        Err(e) => {
            if e.is_unavailable() {
                gate.health.down(now_ms(), &e);
                gate.metrics.valkey_up.set(0.0);
            } else {
                tracing::warn!(error = %e, "heartbeat refused");
            }
            None
        }
    }
}

/// Most SESSION.END kept while Valkey is away (past it the oldest are dropped: their
/// leases lapse by themselves).
pub const MAX_PENDING_ENDS: usize = 100_000;

/// How long a SESSION.END is kept for Valkey's return. By then its lease has long
/// lapsed by itself, and a later END (it names the person, not the session) could end
/// a new session of the same person.
pub const PENDING_END_MAX_AGE_MS: u64 = 10 * 60 * 1000;

/// Ends the sessions sent to it with SESSION.END (which promotes the next person in
/// the same command), until `stop` turns true and the channel is drained. An END that
/// could not reach Valkey is kept (at most [`MAX_PENDING_ENDS`], for
/// [`PENDING_END_MAX_AGE_MS`]) and sent again each tick until Valkey answers, in order,
/// so that the slot does return when Valkey is back.
pub async fn end_loop(
    gate: Arc<Gate>,
    mut ended: mpsc::UnboundedReceiver<EndRequest>,
    mut stop: watch::Receiver<bool>,
) {
    let mut pending: VecDeque<(u64, EndRequest)> = VecDeque::new();
    let mut retry = tokio::time::interval(gate.config.tick);
    retry.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    enum Next {
        End(EndRequest),
        Retry,
        Stop,
    }
    loop {
        // (The watch's guard must not live across the awaits below.)
        let next = tokio::select! {
            next = ended.recv() => next.map_or(Next::Stop, Next::End),
            _ = retry.tick(), if !pending.is_empty() => Next::Retry,
            _ = stop.wait_for(|s| *s) => Next::Stop,
        };
        match next {
            // Behind ENDs already waiting, in order; else sent now.
            Next::End(req) => {
                if pending.is_empty() && end_one(&gate, &req).await {
                    continue;
                }
                keep(&gate, &mut pending, req);
            }
            Next::Retry => send_pending(&gate, &mut pending).await,
            Next::Stop => break,
        }
    }
    while let Ok(req) = ended.try_recv() {
        keep(&gate, &mut pending, req);
    }
    send_pending(&gate, &mut pending).await;
    if !pending.is_empty() {
        tracing::warn!(
            sessions = pending.len(),
            "SESSION.END not sent before shutdown (Valkey away); those leases will lapse by themselves"
        );
    }
}

fn keep(gate: &Gate, pending: &mut VecDeque<(u64, EndRequest)>, req: EndRequest) {
    if pending.len() >= MAX_PENDING_ENDS {
        if let Some((_, dropped)) = pending.pop_front() {
            tracing::warn!(
                queue = dropped.queue,
                user = dropped.user,
                "too many SESSION.END waiting for Valkey; the oldest is dropped (its lease will lapse by itself)"
            );
        }
    }
    pending.push_back((now_ms(), req));
    gate.metrics.ends_pending.set(pending.len() as f64);
}

/// Sends the kept ENDs in order until one finds Valkey still away.
async fn send_pending(gate: &Gate, pending: &mut VecDeque<(u64, EndRequest)>) {
    let now = now_ms();
    while let Some((since, req)) = pending.pop_front() {
        if now.saturating_sub(since) > PENDING_END_MAX_AGE_MS {
            tracing::warn!(
                queue = req.queue,
                user = req.user,
                "SESSION.END given up after waiting for Valkey; the lease has lapsed by itself"
            );
            continue;
        }
        if gate.table.live_since(&req.queue, &req.user, since) {
            tracing::info!(
                queue = req.queue,
                user = req.user,
                "kept SESSION.END dropped: the person claimed again since (their new session stays)"
            );
            continue;
        }
        if !end_one(gate, &req).await {
            pending.push_front((since, req));
            break;
        }
    }
    gate.metrics.ends_pending.set(pending.len() as f64);
}

/// SESSION.END for `req`; false when Valkey could not be reached (to try again).
pub async fn end_one(gate: &Gate, req: &EndRequest) -> bool {
    let Some(client) = gate.store.client().await else {
        tracing::warn!(queue = req.queue, user = req.user, "SESSION.END waits: Valkey not connected");
        return false;
    };
    end_with(gate, &client, req).await.is_some()
}

/// SESSION.END for `req`: whether the person had a lease, or None when Valkey could
/// not be reached (the caller keeps it for later). Any other failure is logged and
/// not retried (the lease then lapses by itself: this instance renews it no more).
async fn end_with(gate: &Gate, client: &QueueClient, req: &EndRequest) -> Option<bool> {
    match client.end_session(&req.queue, &req.user).await {
        Ok(had) => {
            gate.health.up();
            tracing::info!(
                queue = req.queue,
                user = req.user,
                by = req.reason.as_str(),
                had_lease = had,
                "session ended"
            );
            Some(had)
        }
        Err(e) if e.is_unavailable() => {
            gate.health.down(now_ms(), &e);
            tracing::warn!(queue = req.queue, user = req.user, error = %e, "SESSION.END waits: Valkey unreachable");
            None
        }
        Err(e) => {
            tracing::warn!(queue = req.queue, user = req.user, error = %e, "SESSION.END failed; the lease will lapse by itself");
            Some(false)
        }
    }
}
