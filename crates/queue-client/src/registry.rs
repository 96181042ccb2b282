//! Which queues exist: the registry set of declared queues ([`keys::REGISTRY`]: the
//! back office's and the gate's, and every queue an older queue-api served), a
//! queue's settings hash, and the queues found by their keys on a single server.

use crate::reply::{self, array, int};
use crate::{ClientError, QueueClient};
use queue_core::keys;
use std::collections::BTreeSet;

/// Keys scanned per SCAN call.
const SCAN_COUNT: u32 = 1000;

impl QueueClient {
    /// `SADD queue-registry <queue>`: registers a queue for discovery; true if it
    /// was not registered yet.
    pub async fn register_queue(&self, queue: &str) -> Result<bool, ClientError> {
        let mut cmd = redis::cmd("SADD");
        cmd.arg(keys::REGISTRY).arg(queue);
        Ok(int(&self.raw(&cmd).await?).is_some_and(|n| n > 0))
    }

    /// `SISMEMBER queue-registry <queue>`: whether the queue is registered.
    pub async fn is_registered(&self, queue: &str) -> Result<bool, ClientError> {
        let mut cmd = redis::cmd("SISMEMBER");
        cmd.arg(keys::REGISTRY).arg(queue);
        Ok(int(&self.raw(&cmd).await?).is_some_and(|n| n > 0))
    }

    /// `SREM queue-registry <queue>`: true if it was registered.
    pub async fn unregister_queue(&self, queue: &str) -> Result<bool, ClientError> {
        let mut cmd = redis::cmd("SREM");
        cmd.arg(keys::REGISTRY).arg(queue);
        Ok(int(&self.raw(&cmd).await?).is_some_and(|n| n > 0))
    }

    /// `EXISTS queue:{Q}:config`: whether any setting of the queue was ever written.
    pub async fn has_settings(&self, queue: &str) -> Result<bool, ClientError> {
        let mut cmd = redis::cmd("EXISTS");
        cmd.arg(keys::key(queue, keys::CONFIG));
        Ok(int(&self.raw(&cmd).await?).is_some_and(|n| n > 0))
    }

    /// `DEL queue:{Q}:<suffix> ...` (one slot, one call): how many keys existed.
    pub async fn delete_keys(&self, queue: &str, suffixes: &[&str]) -> Result<i64, ClientError> {
        let mut cmd = redis::cmd("DEL");
        for s in suffixes {
            cmd.arg(keys::key(queue, s));
        }
        Ok(int(&self.raw(&cmd).await?).unwrap_or(0))
    }

    /// `SMEMBERS queue-registry`: the registered names, unchecked. A registry key of
    /// another type fails with `ClientError::Refused(QueueError::WrongType)`.
    pub async fn registered_queues(&self) -> Result<Vec<String>, ClientError> {
        let mut cmd = redis::cmd("SMEMBERS");
        cmd.arg(keys::REGISTRY);
        reply::strings(self.raw(&cmd).await?, "SMEMBERS")
    }

    /// The queues with someone in line or inside: a `SCAN ... TYPE zset` for the
    /// `waiting` and `sessions` keys of validly named queues ([`keys::queue_of`]).
    /// On a cluster every primary is scanned (the primaries of the current topology,
    /// so resharding and failover are followed from one call to the next).
    pub async fn scan_queues(&self) -> Result<BTreeSet<String>, ClientError> {
        let mut found = BTreeSet::new();
        for node in self.conn.primaries().await? {
            self.scan_node(&node, &mut found).await?;
        }
        Ok(found)
    }

    async fn scan_node(&self, node: &crate::conn::Node, found: &mut BTreeSet<String>) -> Result<(), ClientError> {
        let mut cursor = "0".to_string();
        loop {
            let mut cmd = redis::cmd("SCAN");
            cmd.arg(&cursor)
                .arg("MATCH")
                .arg(keys::ANY_KEY_PATTERN)
                .arg("COUNT")
                .arg(SCAN_COUNT)
                .arg("TYPE")
                .arg("zset");
            let mut reply = array(self.conn.send_to(node, &cmd).await?, "SCAN")?;
            if reply.len() != 2 {
                return Err(ClientError::protocol("SCAN: expected [cursor, keys]"));
            }
            let batch = reply::strings(reply.pop().unwrap(), "SCAN keys")?;
            found.extend(batch.iter().filter_map(|k| keys::queue_of(k)).map(str::to_string));
            cursor = reply::text(&reply[0]).unwrap_or_default();
            if cursor == "0" || cursor.is_empty() {
                return Ok(());
            }
        }
    }
}
