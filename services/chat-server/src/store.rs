//! The connection to Valkey: made in the background (the service starts, and
//! refuses handshakes with 503, while Valkey is unreachable) and then kept by the
//! client, which reconnects by itself.

use queue_client::{ConnectOptions, QueueClient};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::RwLock;

#[derive(Clone)]
pub struct Store {
    pub url: String,
    client: Arc<RwLock<Option<QueueClient>>>,
}

impl Store {
    /// Starts connecting to `url` in the background, retrying with backoff.
    pub fn connect(url: String) -> Store {
        let store = Store { url, client: Arc::new(RwLock::new(None)) };
        let s = store.clone();
        tokio::spawn(async move {
            // Short timeouts: a handshake waiting on a dead store should get its 503
            // quickly, and the heartbeat loop should not stall for long.
            let options = ConnectOptions {
                response_timeout: Duration::from_secs(2),
                connection_timeout: Duration::from_secs(1),
                reconnect_retries: 2,
                reconnect_max_delay: Duration::from_secs(2),
            };
            let mut delay = Duration::from_millis(200);
            loop {
                match QueueClient::connect_with(&s.url, options.clone()).await {
                    Ok(c) => {
                        tracing::info!(backend = ?c.backend(), "connected to the queue store");
                        *s.client.write().await = Some(c);
                        return;
                    }
                    Err(e) => tracing::warn!(error = %e, "queue store unreachable; retrying"),
                }
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(5));
            }
        });
        store
    }

    /// The client, or None while the first connection is not made yet.
    pub async fn client(&self) -> Option<QueueClient> {
        self.client.read().await.clone()
    }
}
