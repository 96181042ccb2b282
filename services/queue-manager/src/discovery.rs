//! Which queues exist: found in the store, never configured one by one, so that a
//! queue entered through any queue-api instance is served without a restart.
//!
//! Sources, merged:
//! - the queues named with `--queues` (always served, even before anyone enters);
//! - the set `queue-registry`, where queue-api adds every queue it serves;
//! - on a single server, a `SCAN ... TYPE zset` for `queue:{*}` keys whose suffix is
//!   `waiting` or `sessions`: any queue with someone in line or inside. On a cluster
//!   a keyless SCAN would see one node only, so there the first two sources are the
//!   list (queue-api registers what it serves).
//!
//! Names are checked like the commands check them; anything else found is ignored.

use queue_client::{QueueClient, QueueError};
use queue_core::keys;
use redis::Value;
use std::collections::BTreeSet;

/// The set queue-api adds queue names to.
pub const REGISTRY_KEY: &str = "queue-registry";

/// Keys scanned per SCAN call.
const SCAN_COUNT: u32 = 1000;

/// The queue a key belongs to, if it is the `waiting` or `sessions` zset of a queue
/// with a valid name: `queue:{launch}:waiting` -> `launch`.
pub fn queue_of_key(key: &[u8]) -> Option<String> {
    let key = std::str::from_utf8(key).ok()?;
    let rest = key.strip_prefix("queue:{")?;
    let (name, suffix) = rest.rsplit_once("}:")?;
    if suffix != keys::WAITING && suffix != keys::SESSIONS {
        return None;
    }
    valid(name)
}

/// `name` if it is a valid queue name.
pub fn valid(name: &str) -> Option<String> {
    keys::check_queue(name.as_bytes()).ok().map(str::to_string)
}

/// Every queue the store knows of, plus `fixed`.
pub async fn discover(client: &QueueClient, fixed: &[String]) -> Result<BTreeSet<String>, QueueError> {
    let mut found: BTreeSet<String> = fixed.iter().filter_map(|q| valid(q)).collect();
    let mut members = redis::cmd("SMEMBERS");
    members.arg(REGISTRY_KEY);
    match client.raw(&members).await {
        Ok(v) => found.extend(strings(v).iter().filter_map(|m| valid(&String::from_utf8_lossy(m)))),
        // A registry key of another type is someone else's business, not a reason to stop.
        Err(QueueError::WrongType) => {}
        Err(e) => return Err(e),
    }
    if !client.is_cluster() {
        found.extend(scan(client).await?);
    }
    Ok(found)
}

/// The queues with a `waiting` or `sessions` key on a single server.
async fn scan(client: &QueueClient) -> Result<BTreeSet<String>, QueueError> {
    let mut found = BTreeSet::new();
    let mut cursor = "0".to_string();
    loop {
        let mut cmd = redis::cmd("SCAN");
        cmd.arg(&cursor).arg("MATCH").arg("queue:{*}:*").arg("COUNT").arg(SCAN_COUNT).arg("TYPE").arg("zset");
        let Value::Array(mut reply) = client.raw(&cmd).await? else {
            return Err(QueueError::Protocol("SCAN: expected [cursor, keys]".into()));
        };
        if reply.len() != 2 {
            return Err(QueueError::Protocol("SCAN: expected [cursor, keys]".into()));
        }
        let batch = reply.pop().unwrap();
        found.extend(strings(batch).iter().filter_map(|k| queue_of_key(k)));
        cursor =
            strings(reply.pop().unwrap()).pop().map(|c| String::from_utf8_lossy(&c).into_owned()).unwrap_or_default();
        if cursor == "0" || cursor.is_empty() {
            return Ok(found);
        }
    }
}

/// The strings of a reply: a bulk string alone, or the elements of an array or set.
fn strings(v: Value) -> Vec<Vec<u8>> {
    match v {
        Value::BulkString(b) => vec![b],
        Value::SimpleString(s) => vec![s.into_bytes()],
        Value::Array(items) | Value::Set(items) => items.into_iter().flat_map(strings).collect(),
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_names_from_keys() {
        let cases: [(&str, Option<&str>); 10] = [
            ("queue:{launch}:waiting", Some("launch")),
            ("queue:{launch}:sessions", Some("launch")),
            ("queue:{a.b_c:d-1}:waiting", Some("a.b_c:d-1")),
            ("queue:{launch}:w:3", None),
            ("queue:{launch}:stats", None),
            ("queue:{}:waiting", None),
            ("queue:{bad name}:waiting", None),
            ("queue:{a}:b}:waiting", None),
            ("other:{launch}:waiting", None),
            ("queue:launch:waiting", None),
        ];
        for (key, want) in cases {
            assert_eq!(queue_of_key(key.as_bytes()).as_deref(), want, "{key}");
        }
        let long = format!("queue:{{{}}}:waiting", "q".repeat(65));
        assert_eq!(queue_of_key(long.as_bytes()), None);
    }

    #[test]
    fn reply_strings() {
        let b = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        assert_eq!(strings(Value::Set(vec![b("a"), b("b")])), vec![b"a".to_vec(), b"b".to_vec()]);
        assert_eq!(strings(b("0")), vec![b"0".to_vec()]);
        assert!(strings(Value::Nil).is_empty());
    }
}
