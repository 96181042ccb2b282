//! The connection to Valkey (made in the background: the service starts and answers
//! 503 while Valkey is unreachable).

use crate::error::ApiError;
use queue_client::{LazyClient, QueueClient, Target};

#[derive(Clone)]
pub struct Store(LazyClient);

impl Store {
    /// Connects in the background to what `target` names (one server or a cluster).
    pub fn connect(target: Target) -> Store {
        Store(LazyClient::connect_target(target))
    }

    /// The client, or 503 while the first connection is not made yet.
    pub async fn client(&self) -> Result<QueueClient, ApiError> {
        self.0.client().await.ok_or(ApiError::Unavailable)
    }
}
