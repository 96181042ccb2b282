//! The downstream servers' health signal: hash `queue:{Q}:health`
//! ([`keys::HEALTH`]), one field per server instance, each value a JSON reading
//! that carries its own expiry (written by chat-server, read by queue-manager).

use crate::reply::Fields;
use crate::{ClientError, QueueClient};
use queue_core::keys::{self, HEALTH};
use std::collections::HashMap;

impl QueueClient {
    /// `HSET queue:{Q}:health <instance> <reading>`: sets this instance's reading.
    pub async fn set_health(&self, queue: &str, instance: &str, reading: &str) -> Result<(), ClientError> {
        let mut cmd = redis::cmd("HSET");
        cmd.arg(keys::key(queue, HEALTH)).arg(instance).arg(reading);
        self.raw(&cmd).await?;
        Ok(())
    }

    /// `HDEL queue:{Q}:health <instance>`: withdraws this instance's reading; true if
    /// there was one.
    pub async fn remove_health(&self, queue: &str, instance: &str) -> Result<bool, ClientError> {
        let mut cmd = redis::cmd("HDEL");
        cmd.arg(keys::key(queue, HEALTH)).arg(instance);
        Ok(crate::reply::int(&self.raw(&cmd).await?).is_some_and(|n| n > 0))
    }

    /// `HGETALL queue:{Q}:health`: every instance's reading, as written.
    pub async fn health_readings(&self, queue: &str) -> Result<HashMap<String, String>, ClientError> {
        let mut cmd = redis::cmd("HGETALL");
        cmd.arg(keys::key(queue, HEALTH));
        Ok(Fields::new(self.raw(&cmd).await?, "HGETALL health")?.into_strings())
    }
}
