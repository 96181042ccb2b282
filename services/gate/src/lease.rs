//! Session leases, as chat-server holds them: each tick one SESSION.HEARTBEAT per
//! queue for every person this instance saw within the queue's idle time. The
//! reply says whose lease is gone (lapsed, or ended at another instance): those
//! sessions end here at once, so a lease that lapsed in Valkey ends access at every
//! instance within a tick. Someone not seen for the idle time is not renewed and
//! their lease runs out by itself (the queue's `session_lease`). On a tick with
//! nothing to renew, a PING keeps the gate's knowledge of Valkey's reachability
//! fresh (for claims and `--fail-open`).
//!
//! Sessions the gate ends (the app's header, `/gate/leave`, the longest session)
//! get their SESSION.END from [`end_loop`], off the request's path.

use crate::sessions::State;
use crate::{now_ms, EndRequest, Gate};
use queue_client::{ClientError, QueueClient};
use std::sync::Arc;
use tokio::sync::{mpsc, watch};

/// Most users named in one SESSION.HEARTBEAT call (more take several).
pub const HEARTBEAT_BATCH: usize = 5000;

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
        for batch in names.chunks(HEARTBEAT_BATCH) {
            gate.metrics.heartbeat_calls.increment(1);
            let reply = client.heartbeat(queue, batch).await;
            let Some(live) = observe(gate, reply) else { continue };
            for (user, _) in batch.iter().zip(live).filter(|(_, live)| !live) {
                for session in &users[*user] {
                    if session.finish(State::Lapsed) {
                        tracing::info!(queue, user = **user, "session lease gone; access ends");
                        gate.metrics.leases_lost.increment(1);
                    }
                }
            }
        }
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

/// Ends the sessions sent to it with SESSION.END (which promotes the next person in
/// the same command), until `stop` turns true and the channel is drained.
pub async fn end_loop(
    gate: Arc<Gate>,
    mut ended: mpsc::UnboundedReceiver<EndRequest>,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        let next = tokio::select! {
            next = ended.recv() => next,
            _ = stop.wait_for(|s| *s) => None,
        };
        match next {
            Some(req) => end_one(&gate, req).await,
            None => break,
        }
    }
    while let Ok(req) = ended.try_recv() {
        end_one(&gate, req).await;
    }
}

async fn end_one(gate: &Gate, req: EndRequest) {
    let Some(client) = gate.store.client().await else {
        tracing::warn!(
            queue = req.queue,
            user = req.user,
            "SESSION.END skipped: Valkey not connected; the lease will lapse by itself"
        );
        return;
    };
    end_with(gate, &client, &req).await;
}

/// SESSION.END for `req`; a failure is logged (the lease then lapses by itself:
/// this instance renews it no more).
pub async fn end_with(gate: &Gate, client: &QueueClient, req: &EndRequest) -> bool {
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
            had
        }
        Err(e) => {
            if e.is_unavailable() {
                gate.health.down(now_ms(), &e);
            }
            tracing::warn!(queue = req.queue, user = req.user, error = %e, "SESSION.END failed; the lease will lapse by itself");
            false
        }
    }
}
