//! The gates' descriptions of themselves: hash `gate:instances` ([`GATES`]), one
//! field per running gate instance, each value the JSON description the gate writes
//! (its mode, routes, bypass rules, cookie and durability settings; nothing secret)
//! carrying its own expiry, since a hash has no per-field TTL on Valkey 8.0. Written
//! by queue-gate, read by queue-api's back office; the format is the gate's
//! (services/gate/src/registry.rs).

use crate::reply::Fields;
use crate::{ClientError, QueueClient};
use std::collections::HashMap;

/// The hash of the gates' descriptions (no queue's hash tag: one key for every gate).
pub const GATES: &str = "gate:instances";

impl QueueClient {
    /// `HSET gate:instances <instance> <description>`.
    pub async fn set_gate(&self, instance: &str, description: &str) -> Result<(), ClientError> {
        let mut cmd = redis::cmd("HSET");
        cmd.arg(GATES).arg(instance).arg(description);
        self.raw(&cmd).await?;
        Ok(())
    }

    /// `HDEL gate:instances <instance> ...`: how many there were.
    pub async fn remove_gates<S: AsRef<str>>(&self, instances: &[S]) -> Result<u64, ClientError> {
        if instances.is_empty() {
            return Ok(0);
        }
        let mut cmd = redis::cmd("HDEL");
        cmd.arg(GATES);
        for i in instances {
            cmd.arg(i.as_ref());
        }
        Ok(crate::reply::int(&self.raw(&cmd).await?).unwrap_or(0).max(0) as u64)
    }

    /// `HGETALL gate:instances`: every instance's description, as written (expired
    /// ones included: the reader compares their expiry with its clock).
    pub async fn gate_descriptions(&self) -> Result<HashMap<String, String>, ClientError> {
        let mut cmd = redis::cmd("HGETALL");
        cmd.arg(GATES);
        Ok(Fields::new(self.raw(&cmd).await?, "HGETALL gate:instances")?.into_strings())
    }
}
