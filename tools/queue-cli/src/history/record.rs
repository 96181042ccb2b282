//! A history as JSON lines: one `meta` line with the run's settings, then for every
//! operation an `invoke` line and, once the client knows, one completion line with
//! the same id: `ok`, `fail` (the call certainly did nothing, or was refused) or
//! `unknown` (no reply: timeout, connection lost, failover; it may or may not have
//! happened). Times are microseconds on a monotonic clock from the run's start.
//! `note` lines mark what the run did to the cluster (a fault, its healing).

use serde::{Deserialize, Serialize};
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

/// The operations a history holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum F {
    /// QUEUE.ENTER: `status`, `rank`, `ticket` came back.
    Enter,
    /// QUEUE.STATUS while the run goes on.
    Status,
    /// QUEUE.PROMOTE by the promoter loop (`promoted` came back).
    Promote,
    /// TICKET.CLAIM of `ticket` by `holder`; `claimUser` came back.
    Claim,
    /// SESSION.HEARTBEAT of `user`; `alive` came back.
    Heartbeat,
    /// QUEUE.LEAVE.
    Leave,
    /// SESSION.END.
    End,
    /// The final read of a user's standing, after the cluster healed.
    Read,
}

/// The run's settings, the first line.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Meta {
    pub queue: String,
    pub backend: String,
    pub fault: String,
    pub durable: bool,
    pub hard_cap: u64,
    pub soft_cap: u64,
    pub ticket_ttl_ms: u64,
    pub session_lease_ms: u64,
    pub abandon_after_ms: u64,
    pub users: usize,
    pub seed: u64,
}

/// One operation's invocation or completion: the arguments on `invoke`, what came
/// back on the completion.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Op {
    pub id: u64,
    /// Microseconds since the run's start (monotonic).
    pub time: u64,
    /// Who did it: a user id, a user's second tab (`u-1/b`), `promoter` or `final`.
    pub process: String,
    pub f: Option<F>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holder: Option<String>,
    /// The ticket claimed (invoke) or seen in a standing (completion).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ticket: Option<String>,
    /// WAITING, PROMOTED, ACTIVE or UNKNOWN.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rank: Option<u64>,
    /// The user a claim admitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim_user: Option<String>,
    /// A session id a claim returned, when the server gives one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    /// A heartbeat: whether the lease was live.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alive: Option<bool>,
    /// PROMOTE: how many tickets it issued.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub promoted: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// A fault injected or healed, for reading a history by eye.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Note {
    pub time: u64,
    pub text: String,
}

/// One line of a history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum Record {
    Meta(Meta),
    Invoke(Op),
    Ok(Op),
    Fail(Op),
    Unknown(Op),
    Note(Note),
}

/// How a completed operation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Ok,
    Fail,
    Unknown,
}

/// Reads a history; the error names the first bad line.
pub fn parse(text: &str) -> Result<Vec<Record>, String> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| serde_json::from_str(l).map_err(|e| format!("line {}: {e}", i + 1)))
        .collect()
}

/// Where a run writes its history: lines appended under a lock, ids and times given here.
pub struct Recorder {
    start: Instant,
    next: AtomicU64,
    out: Mutex<Box<dyn Write + Send>>,
}

impl Recorder {
    pub fn new(out: Box<dyn Write + Send>) -> Recorder {
        Recorder { start: Instant::now(), next: AtomicU64::new(1), out: Mutex::new(out) }
    }

    /// Microseconds since the start.
    pub fn now(&self) -> u64 {
        self.start.elapsed().as_micros() as u64
    }

    fn write(&self, r: &Record) {
        let line = serde_json::to_string(r).expect("a record serializes");
        let mut out = self.out.lock().unwrap();
        let _ = writeln!(out, "{line}");
    }

    pub fn meta(&self, m: Meta) {
        self.write(&Record::Meta(m));
    }

    pub fn note(&self, text: impl Into<String>) {
        self.write(&Record::Note(Note { time: self.now(), text: text.into() }));
    }

    /// Records `op`'s invocation (id and time filled in); returns its id.
    pub fn invoke(&self, mut op: Op) -> u64 {
        op.id = self.next.fetch_add(1, Ordering::Relaxed);
        op.time = self.now();
        let id = op.id;
        self.write(&Record::Invoke(op));
        id
    }

    /// Records the completion of operation `id` as `outcome` with what came back.
    pub fn complete(&self, id: u64, outcome: Outcome, mut op: Op) {
        op.id = id;
        op.time = self.now();
        self.write(&match outcome {
            Outcome::Ok => Record::Ok(op),
            Outcome::Fail => Record::Fail(op),
            Outcome::Unknown => Record::Unknown(op),
        });
    }

    pub fn flush(&self) {
        let _ = self.out.lock().unwrap().flush();
    }
}
