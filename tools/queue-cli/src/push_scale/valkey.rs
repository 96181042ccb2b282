//! Valkey for `watch drive`: QUEUE.* commands for either backend, replies read as
//! values, and the server's own statistics (`INFO commandstats`, `INFO cpu`, the
//! FCALLs of the slow log) with the streams' status files, as snapshots.

use redis::aio::MultiplexedConnection;
use redis::Value;
use std::collections::{BTreeMap, HashMap};
use std::time::Instant;

/// A QUEUE.* command for the backend: as is for the module, `FCALL queue_x 1 Q ...`
/// for the Lua library.
pub(super) fn qcmd(lua: bool, name: &str, queue: &str) -> redis::Cmd {
    if lua {
        let mut c = redis::cmd("FCALL");
        c.arg(name.to_ascii_lowercase().replace('.', "_")).arg(1).arg(queue);
        c
    } else {
        let mut c = redis::cmd(name);
        c.arg(queue);
        c
    }
}

pub(super) fn text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).to_string()),
        Value::SimpleString(s) => Some(s.clone()),
        Value::VerbatimString { text, .. } => Some(text.clone()),
        _ => None,
    }
}

pub(super) fn int(v: &Value) -> Option<i64> {
    match v {
        Value::Int(i) => Some(*i),
        Value::Double(d) => Some(*d as i64),
        other => text(other)?.parse().ok(),
    }
}

/// A map reply (RESP3 map or RESP2 flat array) as field -> value.
fn fields(v: &Value) -> HashMap<String, Value> {
    match v {
        Value::Map(pairs) => pairs.iter().filter_map(|(k, v)| Some((text(k)?, v.clone()))).collect(),
        Value::Array(items) => items.chunks(2).filter_map(|p| Some((text(p.first()?)?, p.get(1)?.clone()))).collect(),
        _ => HashMap::new(),
    }
}

pub(super) fn field_i64(v: &Value, name: &str) -> Option<i64> {
    fields(v).get(name).and_then(int)
}

pub(super) fn field_str(v: &Value, name: &str) -> Option<String> {
    fields(v).get(name).and_then(text)
}

/// `INFO commandstats` as name -> (calls, usec).
fn parse_cmdstats(info: &str) -> BTreeMap<String, (u64, u64)> {
    let mut m = BTreeMap::new();
    for line in info.lines() {
        let Some(rest) = line.strip_prefix("cmdstat_") else { continue };
        let Some((name, vals)) = rest.split_once(':') else { continue };
        let mut calls = 0;
        let mut usec = 0;
        for kv in vals.trim().split(',') {
            match kv.split_once('=') {
                Some(("calls", v)) => calls = v.parse().unwrap_or(0),
                Some(("usec", v)) => usec = v.parse().unwrap_or(0),
                _ => {}
            }
        }
        m.insert(name.to_string(), (calls, usec));
    }
    m
}

fn parse_info_f64(info: &str, key: &str) -> f64 {
    info.lines().find_map(|l| l.strip_prefix(&format!("{key}:"))).and_then(|v| v.trim().parse().ok()).unwrap_or(0.0)
}

pub(super) struct Snapshot {
    pub(super) at: Instant,
    pub(super) cmd: BTreeMap<String, (u64, u64)>,
    pub(super) cpu_main: f64,
    pub(super) cpu_all: f64,
    pub(super) streams: serde_json::Map<String, serde_json::Value>,
}

pub(super) async fn snapshot(conn: &mut MultiplexedConnection, status: &[String]) -> Result<Snapshot, String> {
    let info: String = redis::cmd("INFO").arg("commandstats").query_async(conn).await.map_err(|e| e.to_string())?;
    let at = Instant::now();
    let cpu: String = redis::cmd("INFO").arg("cpu").query_async(conn).await.map_err(|e| e.to_string())?;
    let mut streams = serde_json::Map::new();
    for path in status {
        let Ok(t) = std::fs::read_to_string(path) else { continue };
        let Ok(serde_json::Value::Object(o)) = serde_json::from_str::<serde_json::Value>(&t) else { continue };
        for (k, v) in o {
            let sum = streams.get(&k).and_then(|x| x.as_u64()).unwrap_or(0) + v.as_u64().unwrap_or(0);
            streams.insert(k, sum.into());
        }
    }
    Ok(Snapshot {
        at,
        cmd: parse_cmdstats(&info),
        cpu_main: parse_info_f64(&cpu, "used_cpu_user_main_thread") + parse_info_f64(&cpu, "used_cpu_sys_main_thread"),
        cpu_all: parse_info_f64(&cpu, "used_cpu_user") + parse_info_f64(&cpu, "used_cpu_sys"),
        streams,
    })
}

/// Adds the FCALLs in the slow log to `split` (function -> calls, usec) and empties it.
pub(super) async fn drain_slowlog(conn: &mut MultiplexedConnection, split: &mut BTreeMap<String, (u64, u64)>) {
    let mut tx = redis::pipe();
    tx.atomic().cmd("SLOWLOG").arg("GET").arg(-1).cmd("SLOWLOG").arg("RESET").ignore();
    let Ok((entries,)): Result<(Vec<Value>,), _> = tx.query_async(conn).await else { return };
    for e in entries {
        let Value::Array(f) = e else { continue };
        let (Some(usec), Some(Value::Array(args))) = (f.get(2).and_then(int), f.get(3)) else { continue };
        let Some(cmd) = args.first().and_then(text) else { continue };
        let key = match cmd.to_ascii_lowercase().as_str() {
            "fcall" | "fcall_ro" => args.get(1).and_then(text).unwrap_or_default(),
            _ => continue,
        };
        let s = split.entry(key).or_default();
        s.0 += 1;
        s.1 += usec as u64;
    }
}
