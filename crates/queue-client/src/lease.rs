//! A lease held in one key (the queue-manager's leader lease, [`keys::LEADER`]):
//! the holder's token with a PX expiry, renewed and released only by its holder.
//!
//! [`keys::LEADER`]: queue_core::keys::LEADER

use crate::reply::int;
use crate::{ClientError, QueueClient};
use redis::Value;
use std::time::Duration;

/// PEXPIREs the key only while it still holds the caller's token, so a holder whose
/// lease lapsed cannot extend someone else's.
const RENEW: &str = "if redis.call('GET', KEYS[1]) == ARGV[1] then \
                     return redis.call('PEXPIRE', KEYS[1], ARGV[2]) else return 0 end";
/// DELs the key only while it holds the caller's token.
const RELEASE: &str = "if redis.call('GET', KEYS[1]) == ARGV[1] then \
                       return redis.call('DEL', KEYS[1]) else return 0 end";

impl QueueClient {
    /// `SET <key> <token> NX PX <period>`: true if the lease was free and is now ours.
    pub async fn acquire_lease(&self, key: &str, token: &str, period: Duration) -> Result<bool, ClientError> {
        let mut cmd = redis::cmd("SET");
        cmd.arg(key).arg(token).arg("NX").arg("PX").arg(period.as_millis().to_string());
        Ok(matches!(self.raw(&cmd).await?, Value::Okay | Value::SimpleString(_)))
    }

    /// Extends the lease by `period` if `key` still holds `token`; true if it did.
    pub async fn renew_lease(&self, key: &str, token: &str, period: Duration) -> Result<bool, ClientError> {
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(RENEW).arg(1).arg(key).arg(token).arg(period.as_millis().to_string());
        Ok(int(&self.raw(&cmd).await?) == Some(1))
    }

    /// Deletes `key` if it still holds `token`; true if it did.
    pub async fn release_lease(&self, key: &str, token: &str) -> Result<bool, ClientError> {
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(RELEASE).arg(1).arg(key).arg(token);
        Ok(int(&self.raw(&cmd).await?) == Some(1))
    }
}
