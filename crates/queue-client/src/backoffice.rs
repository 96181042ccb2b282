//! The back office's keys beside a queue's own: hash `queue:{Q}:brand` (the
//! waiting-room page's branding, one field per setting, as the operator wrote it) and
//! hash `queue:{Q}:paused` (field `soft_cap`: the soft cap a pause replaced with 0, so
//! that resuming restores it). Written and read by queue-api only.

use crate::reply::{self, Fields};
use crate::{ClientError, QueueClient};
use queue_core::keys;
use std::collections::HashMap;

/// The branding hash's suffix (`queue:{Q}:brand`).
pub const BRAND: &str = "brand";
/// The pause record's suffix (`queue:{Q}:paused`).
pub const PAUSED: &str = "paused";

impl QueueClient {
    /// `HGETALL queue:{Q}:brand`: the page's branding as set (empty when none).
    pub async fn brand(&self, queue: &str) -> Result<HashMap<String, String>, ClientError> {
        let mut cmd = redis::cmd("HGETALL");
        cmd.arg(keys::key(queue, BRAND));
        Ok(Fields::new(self.raw(&cmd).await?, "HGETALL brand")?.into_strings())
    }

    /// Sets the `set` fields of the branding and removes the `clear` ones (`HDEL`,
    /// then `HSET`).
    pub async fn set_brand(&self, queue: &str, set: &[(&str, &str)], clear: &[&str]) -> Result<(), ClientError> {
        let key = keys::key(queue, BRAND);
        if !clear.is_empty() {
            let mut cmd = redis::cmd("HDEL");
            cmd.arg(&key).arg(clear);
            self.raw(&cmd).await?;
        }
        if !set.is_empty() {
            let mut cmd = redis::cmd("HSET");
            cmd.arg(&key);
            for (f, v) in set {
                cmd.arg(*f).arg(*v);
            }
            self.raw(&cmd).await?;
        }
        Ok(())
    }

    /// `HSETNX queue:{Q}:paused soft_cap <n>`: remembers the soft cap a pause
    /// replaces; false when a pause is remembered already (its cap is kept).
    pub async fn remember_pause(&self, queue: &str, soft_cap: i64) -> Result<bool, ClientError> {
        let mut cmd = redis::cmd("HSETNX");
        cmd.arg(keys::key(queue, PAUSED)).arg("soft_cap").arg(soft_cap);
        Ok(reply::int(&self.raw(&cmd).await?).is_some_and(|n| n > 0))
    }

    /// `HGET queue:{Q}:paused soft_cap`: the soft cap a pause replaced, if paused.
    pub async fn paused_soft_cap(&self, queue: &str) -> Result<Option<i64>, ClientError> {
        let mut cmd = redis::cmd("HGET");
        cmd.arg(keys::key(queue, PAUSED)).arg("soft_cap");
        let v = self.raw(&cmd).await?;
        Ok(reply::text(&v).and_then(|s| s.parse().ok()))
    }

    /// `HDEL queue:{Q}:paused soft_cap`: forgets the pause; true if one was remembered.
    pub async fn forget_pause(&self, queue: &str) -> Result<bool, ClientError> {
        let mut cmd = redis::cmd("HDEL");
        cmd.arg(keys::key(queue, PAUSED)).arg("soft_cap");
        Ok(reply::int(&self.raw(&cmd).await?).is_some_and(|n| n > 0))
    }
}
