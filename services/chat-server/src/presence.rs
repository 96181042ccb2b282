//! Who is in a room, for the snapshot a new connection gets (seed 004: the full list
//! on join, then only deltas).
//!
//! The queue itself knows, across every instance: `queue:{Q}:active` maps each user
//! inside to its nickname (written by TICKET.CLAIM), and `queue:{Q}:sessions` holds
//! each lease's expiry. A lease that ran out stays in both until the next PROMOTE
//! sweeps it, so the snapshot keeps only users whose lease is still live.

use crate::frames::Person;
use queue_client::{QueueClient, QueueError};
use queue_core::keys::{key, ACTIVE, SESSIONS};
use redis::Value;
use std::collections::HashSet;

/// Everyone with a live session in `queue` at `now_ms`, by nickname.
pub async fn snapshot(client: &QueueClient, queue: &str, now_ms: u64) -> Result<Vec<Person>, QueueError> {
    let mut live = redis::cmd("ZRANGE");
    live.arg(key(queue, SESSIONS)).arg(format!("({now_ms}")).arg("+inf").arg("BYSCORE");
    let live: HashSet<String> = strings(client.raw(&live).await?).into_iter().collect();
    let mut names = redis::cmd("HGETALL");
    names.arg(key(queue, ACTIVE));
    let mut people: Vec<Person> = pairs(client.raw(&names).await?)
        .into_iter()
        .filter(|(user, _)| live.contains(user))
        .map(|(user_id, nickname)| Person { user_id, nickname })
        .collect();
    people.sort_by(|a, b| (&a.nickname, &a.user_id).cmp(&(&b.nickname, &b.user_id)));
    Ok(people)
}

fn text(v: Value) -> Option<String> {
    match v {
        Value::BulkString(b) => String::from_utf8(b).ok(),
        Value::SimpleString(s) => Some(s),
        Value::VerbatimString { text, .. } => Some(text),
        _ => None,
    }
}

fn strings(v: Value) -> Vec<String> {
    match v {
        Value::Array(items) | Value::Set(items) => items.into_iter().filter_map(text).collect(),
        _ => Vec::new(),
    }
}

/// The field/value pairs of an HGETALL reply (RESP3 map or RESP2 flat array).
fn pairs(v: Value) -> Vec<(String, String)> {
    match v {
        Value::Map(kv) => kv.into_iter().filter_map(|(k, v)| Some((text(k)?, text(v)?))).collect(),
        Value::Array(items) => {
            let mut it = items.into_iter();
            let mut out = Vec::new();
            while let (Some(k), Some(v)) = (it.next(), it.next()) {
                if let (Some(k), Some(v)) = (text(k), text(v)) {
                    out.push((k, v));
                }
            }
            out
        }
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn hgetall_of_both_protocols() {
        let resp2 = Value::Array(vec![b("u-1"), b("alice"), b("u-2"), b("bob")]);
        let resp3 = Value::Map(vec![(b("u-1"), b("alice")), (b("u-2"), b("bob"))]);
        for v in [resp2, resp3] {
            assert_eq!(pairs(v), vec![("u-1".into(), "alice".into()), ("u-2".into(), "bob".into())]);
        }
        assert!(pairs(Value::Nil).is_empty());
        assert_eq!(strings(Value::Array(vec![b("a"), Value::Nil, b("c")])), vec!["a", "c"]);
    }
}
