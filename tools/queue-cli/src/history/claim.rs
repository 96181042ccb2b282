//! How the run claims a ticket: `QueueClient::claim_as` (`TICKET.CLAIM Q ticket HOLDER
//! h`), idempotent for its holder (a repeat by the same holder while the session lives
//! answers the same admission).
//!
//! Plain: acknowledged once the primary applied it. Durable (`--durable`): the client
//! with `Durability { replicas: 1, .. }`, which acknowledges a claim only once `WAIT`
//! confirms a replica holds it, else answers `ClientError::NotDurable` ("not durable in
//! time, retry"); the claim then stands on the primary but may be lost with it, so the
//! history records its outcome as unknown.

use queue_client::{ClientError, Durability, QueueClient};
use std::time::Duration;

/// How long a durable claim waits for a replica.
pub const DURABLE_WAIT: Duration = Duration::from_millis(500);

/// The run's way of claiming.
#[derive(Clone)]
pub struct Claimer {
    client: QueueClient,
}

/// What a claim admitted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admission {
    pub user_id: String,
}

impl Claimer {
    /// Claims through `client`, durably (one replica, [`DURABLE_WAIT`]) when `durable`.
    pub fn new(client: QueueClient, durable: bool) -> Result<Claimer, String> {
        if !durable {
            return Ok(Claimer { client });
        }
        let durability = Durability { replicas: 1, timeout: DURABLE_WAIT, aof: false };
        let client = client.with_durability(durability).map_err(|e| format!("durable claims: {e}"))?;
        Ok(Claimer { client })
    }

    /// Claims `ticket` for `holder`.
    pub async fn claim(&self, queue: &str, ticket: &str, holder: &str) -> Result<Admission, ClientError> {
        self.client.claim_as(queue, ticket, holder).await.map(|c| Admission { user_id: c.user_id })
    }
}
