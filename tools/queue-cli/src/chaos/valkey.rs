//! What a chaos run reads from Valkey: QUEUE.INFO's counters and every ticket holder
//! and session, each read with a one-second limit (Valkey may be down).

use super::QUEUE;
use std::collections::BTreeMap;
use std::time::Duration;

pub(super) async fn valkey_conn(url: &str) -> Result<redis::aio::MultiplexedConnection, String> {
    let client = redis::Client::open(url).map_err(|e| e.to_string())?;
    tokio::time::timeout(Duration::from_secs(1), client.get_multiplexed_async_connection())
        .await
        .map_err(|_| "connect timed out".to_string())?
        .map_err(|e| e.to_string())
}

/// Runs `cmd` with a one-second limit.
pub(super) async fn query<T: redis::FromRedisValue>(
    conn: &mut redis::aio::MultiplexedConnection,
    cmd: &redis::Cmd,
) -> Result<T, String> {
    tokio::time::timeout(Duration::from_secs(1), cmd.query_async(conn))
        .await
        .map_err(|_| "timed out".to_string())?
        .map_err(|e| e.to_string())
}

/// Whether this run's backend is the Lua library (set once at the start of a run).
pub(super) static LUA: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// QUEUE.INFO's integer fields (FCALL_RO queue_info on the Lua library).
pub(super) async fn queue_info(conn: &mut redis::aio::MultiplexedConnection) -> Result<BTreeMap<String, i64>, String> {
    let mut cmd = if LUA.load(std::sync::atomic::Ordering::Relaxed) {
        let mut c = redis::cmd("FCALL_RO");
        c.arg("queue_info").arg(1);
        c
    } else {
        redis::cmd("QUEUE.INFO")
    };
    let v: redis::Value = query(conn, cmd.arg(QUEUE)).await?;
    let pairs: Vec<(redis::Value, redis::Value)> = match v {
        redis::Value::Map(m) => m,
        redis::Value::Array(a) => {
            let mut it = a.into_iter();
            std::iter::from_fn(|| Some((it.next()?, it.next()?))).collect()
        }
        other => return Err(format!("unexpected QUEUE.INFO reply {other:?}")),
    };
    let text = |v: &redis::Value| match v {
        redis::Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        redis::Value::SimpleString(s) => Some(s.clone()),
        redis::Value::Int(i) => Some(i.to_string()),
        _ => None,
    };
    Ok(pairs.iter().filter_map(|(k, v)| Some((text(k)?, text(v)?.parse().ok()?))).collect())
}

/// Every ticket holder (the first `joining` members of the line) and every session,
/// read in one script so both are of the same moment.
const HOLDERS: &str = r"
local j = tonumber(redis.call('HGET', KEYS[1], 'joining') or '0') or 0
local t = {}
if j > 0 then t = redis.call('ZRANGE', KEYS[2], 0, j - 1) end
return {t, redis.call('ZRANGE', KEYS[3], 0, -1)}
";

pub(super) async fn holders(
    conn: &mut redis::aio::MultiplexedConnection,
) -> Result<(Vec<String>, Vec<String>), String> {
    let k = |s: &str| format!("queue:{{{QUEUE}}}:{s}");
    query(conn, redis::cmd("EVAL").arg(HOLDERS).arg(3).arg(k("stats")).arg(k("waiting")).arg(k("sessions"))).await
}

/// The counters QUEUE.INFO keeps (they only grow): read before and after a restart.
pub(super) const COUNTERS: [&str; 7] = ["promoted", "claimed", "expired", "dropped", "left", "ended", "lapsed"];
