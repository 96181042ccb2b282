//! How the run claims a ticket: a plain claim, or a durable one (acknowledged only
//! once a replica has it). Both name the claim's holder.

use queue_client::{Claim, ClientError, QueueClient};

/// The run's way of claiming (`--durable`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claimer {
    /// `TICKET.CLAIM`, acknowledged as soon as the primary applied it.
    Plain,
    /// Acknowledged only once a replica confirmed it.
    Durable,
}

impl Claimer {
    pub async fn claim(self, client: &QueueClient, queue: &str, ticket: &str, _holder: &str) -> Result<Claim, ClientError> {
        match self {
            Claimer::Plain | Claimer::Durable => client.claim(queue, ticket).await,
        }
    }
}
