//! Proof-of-work challenges work once: the id of a solved one is recorded in the
//! queue's slot until the challenge expires (`queue:{Q}:pow:<id>`,
//! [`keys::POW_USED_PREFIX`]); see `queue_core::pow`.

use crate::{ClientError, QueueClient};
use queue_core::keys::{self, POW_USED_PREFIX};

impl QueueClient {
    /// `SET queue:{Q}:pow:<id> 1 NX PX <ttl>`: records a solved challenge as used;
    /// true the first time, false when it was used already.
    pub async fn use_challenge(&self, queue: &str, id: &str, ttl_ms: i64) -> Result<bool, ClientError> {
        let mut cmd = redis::cmd("SET");
        cmd.arg(keys::key(queue, &format!("{POW_USED_PREFIX}{id}"))).arg(1).arg("NX").arg("PX").arg(ttl_ms.max(1));
        Ok(!matches!(self.raw(&cmd).await?, redis::Value::Nil))
    }
}
