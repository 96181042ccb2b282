//! The promotion loop: every tick, while this replica holds the lease, one
//! `QUEUE.PROMOTE` per known queue, then an event for the queue-api instances when
//! it changed something.

use crate::policy::{Admission, Governor};
use crate::{health, stopped, thawed, unix_ms, ManagerState};
use queue_client::events::QueueEvent;
use queue_client::{ClientError, QueueClient};
use std::collections::HashMap;
use std::sync::Arc;
use tokio::sync::watch;
use tokio::time::{Instant, MissedTickBehavior};
use tracing::{debug, info, warn};

pub(crate) async fn tick_loop(state: Arc<ManagerState>, client: QueueClient, stop: watch::Receiver<bool>) {
    let mut ticker = tokio::time::interval(state.config.tick);
    ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut governors: HashMap<String, Governor> = HashMap::new();
    let mut promoting = false;
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            _ = stopped(stop.clone()) => return,
        }
        if !thawed(&state.config.freeze, &stop).await {
            return;
        }
        if !state.lease.is_held() {
            if promoting {
                info!("lease not held: promotion stopped");
                // A later leadership starts the policy afresh: the signal may have
                // changed a lot meanwhile.
                governors.clear();
                state.admissions.lock().unwrap().clear();
            }
            promoting = false;
            continue;
        }
        promoting = true;
        for queue in state.queues() {
            if *stop.borrow() {
                return;
            }
            match round(&state, &client, &queue, &mut governors).await {
                Ok(()) => state.up(),
                Err(e) => {
                    state.failed(&format!("promote {queue}"), &e);
                    if e.is_unavailable() {
                        // The other queues would fail the same way; the next tick retries.
                        break;
                    }
                }
            }
        }
    }
}

/// One queue's turn: decide the allowance, promote, announce.
async fn round(
    state: &ManagerState,
    client: &QueueClient,
    queue: &str,
    governors: &mut HashMap<String, Governor>,
) -> Result<(), ClientError> {
    let allowance = match &state.config.adaptive {
        None => Admission::Unrestricted,
        Some(cfg) => {
            let signal = health::read(client, queue, unix_ms()).await?;
            let governor = governors.entry(queue.to_string()).or_insert_with(|| Governor::new(cfg));
            let before = governor.current();
            let allowance = governor.next(signal.as_ref(), cfg, Instant::now());
            if allowance != before {
                info!(queue, ?signal, from = ?before, to = ?allowance, "admission changed");
            }
            state.admissions.lock().unwrap().insert(queue.to_string(), allowance);
            allowance
        }
    };
    let max = match allowance {
        // MAX 0 still drops expired tickets, lapsed leases and silent waiters.
        Admission::Limited(n) => Some(n),
        Admission::Unrestricted => None,
    };
    // Fencing: checked right before the command goes out (see `leader`).
    if !state.lease.is_held() {
        return Ok(());
    }
    let report = client.promote(queue, max).await?;
    if report.promoted + report.tickets_expired + report.leases_expired + report.dropped == 0 {
        return Ok(());
    }
    debug!(queue, ?report, "promoted");
    let event = QueueEvent {
        queue: queue.to_string(),
        promoted: report.promoted,
        waiting: report.waiting,
        at_ms: unix_ms(),
        branding: false,
    };
    if let Err(e) = client.publish_event(&event).await {
        // The api instances also refresh on a timer: a lost event only delays them.
        warn!(queue, "could not publish the promotion event: {e}");
    }
    Ok(())
}
