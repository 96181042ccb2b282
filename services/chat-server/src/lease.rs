//! Session leases: a claimed ticket opens a lease that this instance keeps alive
//! with one SESSION.HEARTBEAT per queue per tick for all its users
//! ([`QueueClient::renew_leases`]: the batching and the reply read back), and gives
//! back with SESSION.END when the session closes. If the process dies the heartbeats
//! stop and the leases run out, so a crash leaks no capacity.

use crate::room::Kick;
use crate::AppState;
use queue_client::QueueClient;
use std::sync::Arc;

/// A lease this instance holds. Ending it is explicit ([`LeaseGuard::end`]); a guard
/// dropped without that (an upgrade that never completed, a task that panicked)
/// ends the lease in the background, so that the slot comes back at once rather
/// than when the lease runs out.
pub struct LeaseGuard {
    client: QueueClient,
    queue: String,
    user_id: String,
    armed: bool,
}

impl LeaseGuard {
    pub fn new(client: QueueClient, queue: &str, user_id: &str) -> LeaseGuard {
        LeaseGuard { client, queue: queue.to_string(), user_id: user_id.to_string(), armed: true }
    }

    /// SESSION.END: frees the slot.
    pub async fn end(mut self) {
        self.armed = false;
        end_session(&self.client, &self.queue, &self.user_id).await;
    }

    /// Forgets the lease without ending it (it is gone already).
    pub fn release(mut self) {
        self.armed = false;
    }
}

async fn end_session(client: &QueueClient, queue: &str, user_id: &str) {
    if let Err(e) = client.end_session(queue, user_id).await {
        tracing::warn!(queue, user_id, error = %e, "SESSION.END failed; the lease will lapse by itself");
    }
}

impl Drop for LeaseGuard {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let (client, queue, user) = (self.client.clone(), self.queue.clone(), self.user_id.clone());
            rt.spawn(async move { end_session(&client, &queue, &user).await });
        }
    }
}

/// Extends the leases of every local user each `heartbeat` until shutdown; closes
/// the sessions whose lease is gone (1008, without SESSION.END: there is nothing to
/// end).
pub async fn heartbeat_loop(state: Arc<AppState>) {
    let state = &state;
    crate::every_tick(state, state.config.heartbeat, || async move {
        let Some(client) = state.store.client().await else { return };
        for (queue, users) in state.rooms.users() {
            client
                .renew_leases(&queue, &users, |call| match call.gone {
                    Ok(gone) => {
                        state.latency.record(call.took.as_millis() as u64);
                        for user in gone {
                            tracing::info!(queue, user, "session lease lost; closing");
                            let kicked = state.rooms.kick(&queue, user, Kick::LeaseLost);
                            state.metrics.leases_lost.increment(kicked as u64);
                        }
                    }
                    Err(e) => tracing::warn!(queue, error = %e, "SESSION.HEARTBEAT failed; retrying next tick"),
                })
                .await;
        }
    })
    .await;
}
