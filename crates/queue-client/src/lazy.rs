//! A connection made in the background, for services that must start (and answer
//! "unavailable") while Valkey is not reachable yet. Once made, the client keeps it
//! and reconnects by itself.

use crate::{Backoff, ConnectOptions, Durability, QueueClient, Target};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::RwLock;

/// A [`QueueClient`] being connected in the background.
#[derive(Clone)]
pub struct LazyClient {
    /// What it connects to.
    pub target: Target,
    client: Arc<RwLock<Option<QueueClient>>>,
}

impl LazyClient {
    /// Options for services: short timeouts, so that a request waiting on a dead
    /// store gets its "unavailable" quickly and background loops do not stall.
    pub fn service_options() -> ConnectOptions {
        ConnectOptions {
            response_timeout: Duration::from_secs(2),
            connection_timeout: Duration::from_secs(1),
            reconnect_retries: 2,
            reconnect_max_delay: Duration::from_secs(2),
        }
    }

    /// Starts connecting to `url` in the background, retrying with a [`Backoff`]
    /// from 200 ms up to 5 s (must be called inside a tokio runtime).
    pub fn connect(url: String) -> LazyClient {
        LazyClient::connect_target(Target::single(url))
    }

    /// Starts connecting to `target` (one server or a cluster, TLS, ACL user) in the
    /// background, retrying with backoff (must be called inside a tokio runtime).
    pub fn connect_target(target: Target) -> LazyClient {
        LazyClient::connect_durable(target, Durability::OFF)
    }

    /// [`LazyClient::connect_target`] with claims made durable
    /// ([`QueueClient::with_durability`]); an out-of-range setting is logged and
    /// left off.
    pub fn connect_durable(target: Target, durability: Durability) -> LazyClient {
        let lazy = LazyClient { target, client: Arc::new(RwLock::new(None)) };
        let l = lazy.clone();
        tokio::spawn(async move {
            let options = LazyClient::service_options();
            let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(5));
            loop {
                match QueueClient::connect_target(&l.target, options.clone()).await {
                    Ok(c) => {
                        tracing::info!(backend = ?c.backend(), "connected to the queue store");
                        let c = c.clone().with_durability(durability).unwrap_or_else(|e| {
                            tracing::error!(error = %e, "durable claims left off");
                            c
                        });
                        *l.client.write().await = Some(c);
                        return;
                    }
                    Err(e) => match e.refused_permission() {
                        Some(refused) => {
                            tracing::error!("Valkey refuses a permission this service needs: {refused}; retrying")
                        }
                        None => tracing::warn!(error = %e, "queue store unreachable; retrying"),
                    },
                }
                tokio::time::sleep(backoff.next_delay()).await;
            }
        });
        lazy
    }

    /// The client, or None while the first connection is not made yet.
    pub async fn client(&self) -> Option<QueueClient> {
        self.client.read().await.clone()
    }
}
