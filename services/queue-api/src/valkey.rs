//! The connection to Valkey, made in the background: the service starts and answers
//! 503 while Valkey is unreachable. (Not a store in queue-core's sense, whose `Store`
//! trait is the engine's view of one queue's keys: this is the client to the server.)

use crate::error::ApiError;
use queue_client::{LazyClient, QueueClient, Target};

#[derive(Clone)]
pub struct Valkey(LazyClient);

impl Valkey {
    /// Connects in the background to what `target` names (one server or a cluster).
    pub fn connect(target: Target) -> Valkey {
        Valkey(LazyClient::connect_target(target))
    }

    /// The client, or 503 while the first connection is not made yet.
    pub async fn client(&self) -> Result<QueueClient, ApiError> {
        self.0.client().await.ok_or(ApiError::Unavailable)
    }
}
