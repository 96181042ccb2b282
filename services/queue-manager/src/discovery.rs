//! Which queues exist: found in the store, never configured one by one, so that a
//! queue entered through any queue-api instance is served without a restart.
//!
//! Sources, merged:
//! - the queues named with `--queues` (always served, even before anyone enters);
//! - the set `queue-registry` of declared queues (the back office's, the gates'
//!   routes, queues with settings once queue-api met them);
//! - a `SCAN ... TYPE zset` for `queue:{*}` keys whose suffix is `waiting` or
//!   `sessions`: any queue with someone in line or inside. On a cluster every primary
//!   of the current topology is scanned, each discovery anew, so queues moved by
//!   resharding or served by a promoted replica are found without a restart.
//!
//! Names are checked like the commands check them; anything else found is ignored.

use queue_client::QueueError;
use queue_client::{ClientError, QueueClient};
use queue_core::keys;
use std::collections::BTreeSet;

/// The set queue-api adds queue names to.
pub const REGISTRY_KEY: &str = keys::REGISTRY;

/// `name` if it is a valid queue name.
pub fn valid(name: &str) -> Option<String> {
    keys::check_queue(name.as_bytes()).ok().map(str::to_string)
}

/// Every queue the store knows of, plus `fixed`.
pub async fn discover(client: &QueueClient, fixed: &[String]) -> Result<BTreeSet<String>, ClientError> {
    let mut found: BTreeSet<String> = fixed.iter().filter_map(|q| valid(q)).collect();
    match client.registered_queues().await {
        Ok(names) => found.extend(names.iter().filter_map(|m| valid(m))),
        // A registry key of another type is someone else's business, not a reason to stop.
        Err(ClientError::Refused(QueueError::WrongType)) => {}
        Err(e) => return Err(e),
    }
    found.extend(client.scan_queues().await?);
    Ok(found)
}
