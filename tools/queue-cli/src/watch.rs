//! `queue-cli watch`: the load and the probes of `bench/push-scale.sh` (push cost at
//! scale). Two parts, run as separate processes by the script:
//!
//! - `watch streams`: opens this process's share of the push streams of a line of
//!   people named `p-0000000` .. (`--line`), spread evenly over the line and over the
//!   queue-api instances (`--api`, one per instance), from several loopback source
//!   addresses, over plain TCP (a hand-written GET, a small buffer per stream); counts
//!   the events by name and rewrites a one-line JSON status file (`--status`) four
//!   times a second. Streams ended by the server (a `promoted` or `unknown` event) are
//!   not reopened. Stops by itself after `--max-secs`.
//! - `watch drive`: one measured phase. Optionally churn (entries, leaves of random
//!   waiting people, `QUEUE.PROMOTE MAX n` at a fixed cadence, each followed by the
//!   queue-manager's announcement when it did something), probes that time a change
//!   of a watched person's standing to the event on their stream, and over the window
//!   the deltas of Valkey's `INFO commandstats` and `INFO cpu` and of the streams'
//!   status files; writes them as one JSON object (`--out`) for the script's summary.
//!
//! Probes. Leave: a victim and a watcher enter at the back, the watcher's stream
//! opens, then `MULTI; STATUS watcher; LEAVE victim; EXEC`: every state after the
//! leave shows the watcher at a rank below the one read, every state before it at that
//! rank or more, so the first event with a lower rank (or another status) is the
//! leave's; its arrival minus the EXEC's reply is one sample. Promote (churn only):
//! `--promote-probes` watchers at the back of the line; each PROMOTE goes in a
//! `MULTI` after their STATUS, and the first event at or below rank - promoted is
//! that PROMOTE's.
//!
//! With `--backend lua` the QUEUE.* commands go as `FCALL queue_x 1 Q ...`, and the
//! FCALLs' server time is split by function from the slow log (threshold 0 during the
//! window, drained under MULTI), as `INFO commandstats` has one line for every FCALL.

use clap::{Args, Subcommand};
use redis::aio::MultiplexedConnection;
use redis::Value;
use std::collections::{BTreeMap, HashMap};
use std::net::{Ipv4Addr, SocketAddr};
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio::sync::Semaphore;

#[derive(Args)]
pub struct WatchArgs {
    #[command(subcommand)]
    pub cmd: WatchCmd,
}

#[derive(Subcommand)]
pub enum WatchCmd {
    /// Opens this process's share of the push streams and counts their events.
    Streams(StreamsArgs),
    /// One measured phase: churn, probes, Valkey's command statistics.
    Drive(DriveArgs),
}

#[derive(Args)]
pub struct StreamsArgs {
    /// queue-api instances, host:port, comma-separated.
    #[arg(long, value_delimiter = ',', required = true)]
    api: Vec<SocketAddr>,
    #[arg(long, default_value = "push")]
    queue: String,
    /// People in line, `p-0000000` ..; the streams are spread evenly over them.
    #[arg(long)]
    line: u64,
    /// Streams per instance (over all parts).
    #[arg(long)]
    per_instance: u64,
    /// This process's part (0-based) of --parts.
    #[arg(long, default_value_t = 0)]
    part: u64,
    #[arg(long, default_value_t = 1)]
    parts: u64,
    /// First loopback source address (127.0.0.B).
    #[arg(long, default_value_t = 2)]
    source_base: u8,
    /// How many source addresses.
    #[arg(long, default_value_t = 16)]
    sources: u8,
    /// Streams being opened at once.
    #[arg(long, default_value_t = 256)]
    opening: usize,
    /// The status file, rewritten every 250 ms.
    #[arg(long)]
    status: String,
    /// Stops after this long, whatever happens.
    #[arg(long, default_value_t = 1800)]
    max_secs: u64,
}

#[derive(Args)]
pub struct DriveArgs {
    #[arg(long)]
    valkey: String,
    /// queue-api instances (probe streams go to them in turn).
    #[arg(long, value_delimiter = ',', required = true)]
    api: Vec<SocketAddr>,
    #[arg(long, default_value = "push")]
    queue: String,
    /// module or lua.
    #[arg(long, default_value = "module")]
    backend: String,
    /// People the line was filled with (`p-0000000` ..): the pool random leaves draw from.
    #[arg(long)]
    line: u64,
    /// Seconds of churn before the window.
    #[arg(long, default_value_t = 2.0)]
    warmup: f64,
    /// The measured window, seconds.
    #[arg(long, default_value_t = 20.0)]
    secs: f64,
    /// Entries per second (new people at the back).
    #[arg(long, default_value_t = 0.0)]
    enter_rate: f64,
    /// Leaves per second (random people of the line).
    #[arg(long, default_value_t = 0.0)]
    leave_rate: f64,
    /// Promotions per second.
    #[arg(long, default_value_t = 0.0)]
    promote_rate: f64,
    /// One PROMOTE every this many ms (MAX = rate x interval).
    #[arg(long, default_value_t = 200)]
    promote_every_ms: u64,
    /// Publish the queue-manager's announcement after a PROMOTE that did something.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    announce: bool,
    /// Leave probes run at once (each: enter a pair, open, leave, wait, close).
    #[arg(long, default_value_t = 4)]
    leave_probes: usize,
    /// Pause after a probe stream's first event before the change (ms).
    #[arg(long, default_value_t = 300)]
    probe_settle_ms: u64,
    /// Watchers of the promote probe (with promotions only).
    #[arg(long, default_value_t = 4)]
    promote_probes: usize,
    /// Source address of the probe streams (127.0.0.B).
    #[arg(long, default_value_t = 250)]
    source: u8,
    /// Prefix of the probes' people (each phase its own, so that people who left in
    /// one phase are not entered again, behind the watchers, in the next).
    #[arg(long, default_value = "")]
    tag: String,
    /// Status files of the `watch streams` processes, comma-separated.
    #[arg(long, value_delimiter = ',')]
    status: Vec<String>,
    /// Where the JSON result goes.
    #[arg(long)]
    out: String,
}

pub async fn run(args: WatchArgs) -> ExitCode {
    let r = match args.cmd {
        WatchCmd::Streams(a) => streams(a).await,
        WatchCmd::Drive(a) => drive(a).await,
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("queue-cli watch: {e}");
            ExitCode::from(2)
        }
    }
}

// ---------------------------------------------------------------- SSE over plain TCP

/// One push stream read by hand: `event:` / `data:` lines, dispatched on the blank line.
struct Sse {
    tcp: TcpStream,
    buf: Vec<u8>,
    len: usize,
    name: String,
    data: String,
}

#[derive(Debug)]
struct Event {
    name: String,
    data: String,
}

impl Event {
    /// `rank` from the data's JSON (without parsing it all).
    fn rank(&self) -> Option<i64> {
        let at = self.data.find("\"rank\":")? + 7;
        let digits: String = self.data[at..].chars().take_while(|c| c.is_ascii_digit()).collect();
        digits.parse().ok()
    }
}

async fn connect(api: SocketAddr, source: Ipv4Addr) -> std::io::Result<TcpStream> {
    let sock = TcpSocket::new_v4()?;
    sock.bind(SocketAddr::new(source.into(), 0))?;
    sock.connect(api).await
}

impl Sse {
    /// Opens a stream; Err(status line) when the answer is not 200.
    async fn open(api: SocketAddr, source: Ipv4Addr, queue: &str, user: &str) -> Result<Sse, String> {
        let mut tcp = connect(api, source).await.map_err(|e| format!("connect: {e}"))?;
        let req = format!(
            "GET /api/queue/stream?userId={user}&queue={queue} HTTP/1.1\r\nHost: bench\r\nAccept: text/event-stream\r\n\r\n"
        );
        tcp.write_all(req.as_bytes()).await.map_err(|e| format!("write: {e}"))?;
        let mut s = Sse { tcp, buf: vec![0u8; 2048], len: 0, name: String::new(), data: String::new() };
        // The head.
        loop {
            if let Some(end) = s.buf[..s.len].windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&s.buf[..end]).to_string();
                let status = head.split(' ').nth(1).unwrap_or("").to_string();
                s.buf.copy_within(end + 4..s.len, 0);
                s.len -= end + 4;
                if status != "200" {
                    return Err(format!("status {status}"));
                }
                return Ok(s);
            }
            if s.len == s.buf.len() {
                return Err("head too long".into());
            }
            let n = s.tcp.read(&mut s.buf[s.len..]).await.map_err(|e| format!("read: {e}"))?;
            if n == 0 {
                return Err("closed before the head".into());
            }
            s.len += n;
        }
    }

    /// The next event; None when the stream ended.
    async fn next(&mut self) -> Option<Event> {
        loop {
            while let Some(nl) = self.buf[..self.len].iter().position(|&b| b == b'\n') {
                let line = String::from_utf8_lossy(&self.buf[..nl]).trim_end_matches('\r').to_string();
                self.buf.copy_within(nl + 1..self.len, 0);
                self.len -= nl + 1;
                if let Some(v) = line.strip_prefix("event:") {
                    self.name = v.trim().to_string();
                } else if let Some(v) = line.strip_prefix("data:") {
                    self.data = v.trim().to_string();
                } else if line.is_empty() && !(self.name.is_empty() && self.data.is_empty()) {
                    let name = std::mem::take(&mut self.name);
                    let data = std::mem::take(&mut self.data);
                    return Some(Event { name: if name.is_empty() { "message".into() } else { name }, data });
                }
                // Anything else (comments, keep-alives, chunk sizes) is skipped.
            }
            if self.len == self.buf.len() {
                self.buf.resize(self.buf.len() * 2, 0);
            }
            match self.tcp.read(&mut self.buf[self.len..]).await {
                Ok(0) | Err(_) => return None,
                Ok(n) => self.len += n,
            }
        }
    }
}

// ---------------------------------------------------------------- watch streams

#[derive(Default)]
struct Counters {
    opened: AtomicU64,
    open: AtomicU64,
    ended: AtomicU64,
    refused: AtomicU64,
    errors: AtomicU64,
    failed: AtomicU64,
    events: AtomicU64,
    position: AtomicU64,
    promoted: AtomicU64,
    unknown: AtomicU64,
    other: AtomicU64,
}

impl Counters {
    fn json(&self) -> String {
        let f = |a: &AtomicU64| a.load(Relaxed);
        serde_json::json!({
            "opened": f(&self.opened), "open": f(&self.open), "ended": f(&self.ended),
            "refused": f(&self.refused), "errors": f(&self.errors), "failed": f(&self.failed),
            "events": f(&self.events), "position": f(&self.position), "promoted": f(&self.promoted),
            "unknown": f(&self.unknown), "other": f(&self.other),
        })
        .to_string()
    }
}

fn write_status(path: &str, text: &str) {
    let tmp = format!("{path}.tmp");
    if std::fs::write(&tmp, text).is_ok() {
        let _ = std::fs::rename(&tmp, path);
    }
}

async fn one_stream(
    api: SocketAddr,
    source: Ipv4Addr,
    queue: String,
    user: String,
    c: Arc<Counters>,
    gate: Arc<Semaphore>,
) {
    let mut permit = Some(gate.acquire_owned().await.expect("open"));
    let mut tries = 0;
    let mut s = loop {
        tries += 1;
        match Sse::open(api, source, &queue, &user).await {
            Ok(s) => break s,
            Err(e) => {
                if e.starts_with("status") { &c.refused } else { &c.errors }.fetch_add(1, Relaxed);
                if tries >= 10 {
                    c.failed.fetch_add(1, Relaxed);
                    return;
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    };
    let mut first = true;
    while let Some(ev) = s.next().await {
        if first {
            first = false;
            permit.take();
            c.opened.fetch_add(1, Relaxed);
            c.open.fetch_add(1, Relaxed);
        }
        c.events.fetch_add(1, Relaxed);
        match ev.name.as_str() {
            "position" => &c.position,
            "promoted" => &c.promoted,
            "unknown" => &c.unknown,
            _ => &c.other,
        }
        .fetch_add(1, Relaxed);
    }
    if !first {
        c.open.fetch_sub(1, Relaxed);
        c.ended.fetch_add(1, Relaxed);
    } else {
        c.failed.fetch_add(1, Relaxed);
    }
}

/// The user a stream watches: stream g of `total`, spread evenly over the line.
pub fn person(g: u64, total: u64, line: u64) -> String {
    format!("p-{:07}", g * line / total.max(1))
}

async fn streams(a: StreamsArgs) -> Result<(), String> {
    let instances = a.api.len() as u64;
    let total = instances * a.per_instance;
    let c = Arc::new(Counters::default());
    let gate = Arc::new(Semaphore::new(a.opening.max(1)));
    let mut mine = 0u64;
    for g in (a.part..total).step_by(a.parts.max(1) as usize) {
        let api = a.api[(g % instances) as usize];
        let n = (g / a.parts.max(1)) % u64::from(a.sources.max(1));
        let source = Ipv4Addr::new(127, 0, 0, a.source_base.wrapping_add(n as u8));
        tokio::spawn(one_stream(api, source, a.queue.clone(), person(g, total, a.line), c.clone(), gate.clone()));
        mine += 1;
    }
    let started = Instant::now();
    let status = a.status.clone();
    loop {
        write_status(&status, &format!("{{\"streams\":{mine},{}", &c.json()[1..]));
        if started.elapsed() >= Duration::from_secs(a.max_secs) {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

// ---------------------------------------------------------------- watch drive

/// A QUEUE.* command for the backend: as is for the module, `FCALL queue_x 1 Q ...`
/// for the Lua library.
fn qcmd(lua: bool, name: &str, queue: &str) -> redis::Cmd {
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

fn text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).to_string()),
        Value::SimpleString(s) => Some(s.clone()),
        Value::VerbatimString { text, .. } => Some(text.clone()),
        _ => None,
    }
}

fn int(v: &Value) -> Option<i64> {
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

fn field_i64(v: &Value, name: &str) -> Option<i64> {
    fields(v).get(name).and_then(int)
}

fn field_str(v: &Value, name: &str) -> Option<String> {
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

struct Snapshot {
    at: Instant,
    cmd: BTreeMap<String, (u64, u64)>,
    cpu_main: f64,
    cpu_all: f64,
    streams: serde_json::Map<String, serde_json::Value>,
}

async fn snapshot(conn: &mut MultiplexedConnection, status: &[String]) -> Result<Snapshot, String> {
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

/// Latency samples (ms) and how many expected events never came.
#[derive(Default)]
struct Samples {
    ms: Vec<f64>,
    timeouts: u64,
    errors: u64,
}

struct Window {
    start: Instant,
    end: Instant,
}

impl Window {
    fn inside(&self, t: Instant) -> bool {
        t >= self.start && t < self.end
    }
}

async fn open_first(api: SocketAddr, source: Ipv4Addr, queue: &str, user: &str) -> Result<(Sse, Event), String> {
    let mut s = Sse::open(api, source, queue, user).await?;
    let first = tokio::time::timeout(Duration::from_secs(10), s.next())
        .await
        .map_err(|_| "no first event".to_string())?
        .ok_or("ended before the first event")?;
    Ok((s, first))
}

/// Leave probe number `k`: its watcher waits at the back of the line behind a chain of
/// `victims` people; each round, the victim right ahead of the watcher leaves, and the
/// time until the watcher's stream shows it is one sample. The watcher's stream is
/// opened before the window and stays open (opening one wakes the instance's push
/// path, which would be counted as push cost), and rounds are spread at random over a
/// second so that they fall anywhere between an instance's refreshes.
#[allow(clippy::too_many_arguments)]
async fn leave_probe(
    k: usize,
    mut conn: MultiplexedConnection,
    mut sse: Sse,
    victims: usize,
    tag: String,
    queue: String,
    lua: bool,
    win: Arc<Window>,
    out: Arc<Mutex<Samples>>,
) {
    let watcher = format!("{tag}lw-{k}");
    let mut next = victims;
    while Instant::now() < win.end && next > 0 {
        tokio::time::sleep(Duration::from_millis(rand::random_range(200..1200))).await;
        next -= 1;
        let victim = format!("{tag}lv-{k}-{next:04}");
        let mut tx = redis::pipe();
        tx.atomic()
            .add_command(qcmd(lua, "QUEUE.STATUS", &queue).arg(&watcher).clone())
            .add_command(qcmd(lua, "QUEUE.LEAVE", &queue).arg(&victim).clone());
        let r: Result<Vec<Value>, _> = tx.query_async(&mut conn).await;
        let t0 = Instant::now();
        let Some(before) = r.ok().and_then(|v| v.first().and_then(|s| field_i64(s, "rank"))) else {
            out.lock().unwrap().errors += 1;
            continue;
        };
        let wait = tokio::time::timeout(Duration::from_secs(10), async {
            while let Some(ev) = sse.next().await {
                if ev.name != "position" || ev.rank().is_some_and(|r| r < before) {
                    return Some((Instant::now(), ev.name != "position"));
                }
            }
            None
        })
        .await;
        let mut o = out.lock().unwrap();
        match wait {
            Ok(Some((t1, ended))) => {
                if win.inside(t0) {
                    o.ms.push((t1 - t0).as_secs_f64() * 1e3);
                }
                if ended {
                    o.errors += 1;
                    return;
                }
            }
            Ok(None) => {
                o.errors += 1;
                return;
            }
            Err(_) => {
                if win.inside(t0) {
                    o.timeouts += 1;
                }
            }
        }
    }
}

/// What a promote probe's watcher waits for: an event at or below `rank` (or another
/// status), expected since `t0`.
struct Expect {
    rank: i64,
    t0: Instant,
}

#[derive(Default)]
struct Watcher {
    pending: Vec<Expect>,
    /// The last event: (rank, or -1 when not waiting; when it came).
    last: Option<(i64, Instant)>,
}

fn resolve(w: &mut Watcher, rank: i64, at: Instant, win: &Window, out: &Mutex<Samples>) {
    w.last = Some((rank, at));
    w.pending.retain(|e| {
        if rank <= e.rank {
            if win.inside(e.t0) {
                out.lock().unwrap().ms.push(at.saturating_duration_since(e.t0).as_secs_f64() * 1e3);
            }
            false
        } else {
            true
        }
    });
}

#[derive(Default, Clone, serde::Serialize)]
struct Churn {
    entered: u64,
    enter_errors: u64,
    leaves: u64,
    left: u64,
    promotes: u64,
    promoted: u64,
    tickets_expired: u64,
    announced: u64,
    errors: u64,
}

async fn drive(a: DriveArgs) -> Result<(), String> {
    let lua = a.backend == "lua";
    let client = redis::Client::open(a.valkey.as_str()).map_err(|e| e.to_string())?;
    let conn = |name: &'static str| {
        let client = client.clone();
        async move {
            let mut c = client.get_multiplexed_async_connection().await.map_err(|e| e.to_string())?;
            let _: Result<(), _> = redis::cmd("CLIENT").arg("SETNAME").arg(name).query_async(&mut c).await;
            Ok::<_, String>(c)
        }
    };
    let mut meter = conn("bench-meter").await?;
    let source = Ipv4Addr::new(127, 0, 0, a.source);
    let queue = a.queue.clone();
    let tag = a.tag.clone();
    let promoting = a.promote_rate > 0.0;

    // Promote probe watchers: at the back, streams open before anything starts.
    let promote_out = Arc::new(Mutex::new(Samples::default()));
    let mut watchers: Vec<(String, Arc<Mutex<Watcher>>)> = Vec::new();
    let mut readers = Vec::new();
    if promoting {
        let mut c = conn("bench-probe").await?;
        for k in 0..a.promote_probes {
            let user = format!("{}pw-{k}", a.tag);
            qcmd(lua, "QUEUE.ENTER", &queue)
                .arg(&user)
                .arg("probe")
                .query_async::<Value>(&mut c)
                .await
                .map_err(|e| e.to_string())?;
            let api = a.api[k % a.api.len()];
            let (sse, first) = open_first(api, source, &queue, &user).await?;
            let w = Arc::new(Mutex::new(Watcher::default()));
            w.lock().unwrap().last = Some((first.rank().unwrap_or(-1), Instant::now()));
            readers.push((sse, w.clone()));
            watchers.push((user, w));
        }
    }

    // Leave probes: each a chain of victims and a watcher, entered at the back, the
    // watcher's stream open before the window.
    let leave_out = Arc::new(Mutex::new(Samples::default()));
    let mut tasks = Vec::new();
    let victims = ((a.warmup + a.secs) / 0.2).ceil() as usize + 1;
    for k in 0..a.leave_probes {
        let mut c = conn("bench-probe").await?;
        let mut p = redis::pipe();
        for v in 0..victims {
            p.add_command(qcmd(lua, "QUEUE.ENTER", &queue).arg(format!("{}lv-{k}-{v:04}", a.tag)).arg("probe").clone())
                .ignore();
        }
        p.add_command(qcmd(lua, "QUEUE.ENTER", &queue).arg(format!("{tag}lw-{k}")).arg("probe").clone()).ignore();
        p.query_async::<()>(&mut c).await.map_err(|e| e.to_string())?;
        let api = a.api[(k + 1) % a.api.len()];
        let (sse, _) = open_first(api, source, &queue, &format!("{tag}lw-{k}")).await?;
        tasks.push((sse, c));
    }
    tokio::time::sleep(Duration::from_millis(a.probe_settle_ms)).await;
    // The window starts after the warmup, counted from here.
    let start = Instant::now() + Duration::from_secs_f64(a.warmup);
    let win = Arc::new(Window { start, end: start + Duration::from_secs_f64(a.secs) });
    for (mut sse, w) in readers {
        let (win, out) = (win.clone(), promote_out.clone());
        tokio::spawn(async move {
            while let Some(ev) = sse.next().await {
                let rank = if ev.name == "position" { ev.rank().unwrap_or(i64::MAX) } else { -1 };
                resolve(&mut w.lock().unwrap(), rank, Instant::now(), &win, &out);
            }
        });
    }
    let tasks: Vec<_> = tasks
        .into_iter()
        .enumerate()
        .map(|(k, (sse, c))| {
            tokio::spawn(leave_probe(
                k,
                c,
                sse,
                victims,
                tag.clone(),
                queue.clone(),
                lua,
                win.clone(),
                leave_out.clone(),
            ))
        })
        .collect();
    let mut tasks = tasks;

    // The floor: an ECHO every 200 ms, as sparse as queue-api's own calls in a quiet
    // line, so that the report can show what any command costs here when sent that
    // rarely (commandstats `echo`: never counted as push).
    {
        let mut c = conn("bench-floor").await?;
        let win = win.clone();
        tasks.push(tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(200));
            while Instant::now() < win.end {
                tick.tick().await;
                let _: Result<String, _> = redis::cmd("ECHO").arg("floor").query_async(&mut c).await;
            }
        }));
    }

    // Churn: entries and leaves every 10 ms, PROMOTE every promote_every_ms.
    let churn = Arc::new(Mutex::new(Churn::default()));
    if a.enter_rate > 0.0 || a.leave_rate > 0.0 {
        let mut c = conn("bench-churn").await?;
        let (queue, churn, win) = (queue.clone(), churn.clone(), win.clone());
        let (enter_rate, leave_rate, line) = (a.enter_rate, a.leave_rate, a.line);
        let promote_rate = a.promote_rate;
        tasks.push(tokio::spawn(async move {
            let t0 = Instant::now();
            let (mut entered, mut left) = (0u64, 0u64);
            let mut tick = tokio::time::interval(Duration::from_millis(10));
            while Instant::now() < win.end {
                tick.tick().await;
                let secs = t0.elapsed().as_secs_f64();
                let mut p = redis::pipe();
                let mut n_enter = 0;
                while (entered as f64) < enter_rate * secs {
                    p.add_command(qcmd(lua, "QUEUE.ENTER", &queue).arg(format!("c-{entered:07}")).arg("churn").clone());
                    entered += 1;
                    n_enter += 1;
                }
                let mut n_leave = 0;
                while (left as f64) < leave_rate * secs {
                    // A random person still in line, most likely: promotions take the
                    // head at promote_rate, entries add c-... at the back.
                    let head = ((promote_rate * secs) as u64).min(line);
                    let pool = (line - head) + entered;
                    let pick = rand::random_range(0..pool.max(1));
                    let who = if pick < line - head {
                        format!("p-{:07}", head + pick)
                    } else {
                        format!("c-{:07}", pick - (line - head))
                    };
                    p.add_command(qcmd(lua, "QUEUE.LEAVE", &queue).arg(who).clone());
                    left += 1;
                    n_leave += 1;
                }
                if n_enter + n_leave == 0 {
                    continue;
                }
                let r: Result<Vec<Value>, _> = p.query_async(&mut c).await;
                let mut ch = churn.lock().unwrap();
                match r {
                    Ok(v) => {
                        ch.entered += n_enter as u64;
                        ch.leaves += n_leave as u64;
                        for x in &v[n_enter..] {
                            if int(x) == Some(1) {
                                ch.left += 1;
                            }
                        }
                        ch.enter_errors +=
                            v[..n_enter].iter().filter(|x| matches!(x, Value::ServerError(_))).count() as u64;
                    }
                    Err(_) => ch.errors += 1,
                }
            }
        }));
    }
    if promoting {
        let mut c = conn("bench-churn").await?;
        let (queue, churn, win, out) = (queue.clone(), churn.clone(), win.clone(), promote_out.clone());
        let every = Duration::from_millis(a.promote_every_ms.max(1));
        let max = ((a.promote_rate * every.as_secs_f64()).round() as i64).max(1);
        let announce = a.announce;
        let watchers = watchers.clone();
        tasks.push(tokio::spawn(async move {
            let mut held = 0i64;
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            while Instant::now() < win.end {
                tick.tick().await;
                let mut tx = redis::pipe();
                tx.atomic();
                for (u, _) in &watchers {
                    tx.add_command(qcmd(lua, "QUEUE.STATUS", &queue).arg(u).clone());
                }
                // The soft cap just lets MAX more in: a slot freed between PROMOTEs (a
                // ticket holder leaving) promotes one, not batch_max.
                tx.add_command(qcmd(lua, "QUEUE.CONFIG", &queue).arg("SET").arg("soft_cap").arg(held + max).clone()).ignore();
                tx.add_command(qcmd(lua, "QUEUE.PROMOTE", &queue).arg("MAX").arg(max).clone());
                let r: Result<Vec<Value>, _> = tx.query_async(&mut c).await;
                let t0 = Instant::now();
                let Ok(v) = r else {
                    churn.lock().unwrap().errors += 1;
                    continue;
                };
                let Some(report) = v.last() else { continue };
                let promoted = field_i64(report, "promoted").unwrap_or(0);
                let expired = field_i64(report, "tickets_expired").unwrap_or(0);
                let waiting = field_i64(report, "waiting").unwrap_or(0);
                held = field_i64(report, "joining").unwrap_or(0) + field_i64(report, "active").unwrap_or(0);
                {
                    let mut ch = churn.lock().unwrap();
                    ch.promotes += 1;
                    ch.promoted += promoted as u64;
                    ch.tickets_expired += expired as u64;
                }
                if promoted > 0 {
                    for ((_, w), st) in watchers.iter().zip(&v) {
                        let status = field_str(st, "status").unwrap_or_default();
                        let Some(rank) = field_i64(st, "rank").filter(|_| status == "WAITING") else { continue };
                        let expect = Expect { rank: rank - promoted, t0 };
                        let mut w = w.lock().unwrap();
                        // An event already at or below it can only show a state after
                        // the PROMOTE (ranks never rise): it came before the reply.
                        match w.last {
                            Some((r, at)) if r <= expect.rank && at >= t0 - Duration::from_secs(1) => {
                                if win.inside(t0) {
                                    out.lock().unwrap().ms.push(0.0);
                                }
                            }
                            _ => w.pending.push(expect),
                        }
                    }
                }
                if announce && promoted + expired > 0 {
                    let ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis();
                    let payload = serde_json::json!({"queue": queue, "promoted": promoted, "waiting": waiting, "atMs": ms as u64});
                    let ch = format!("queue:{{{queue}}}:promoted");
                    if redis::cmd("PUBLISH").arg(ch).arg(payload.to_string()).query_async::<i64>(&mut c).await.is_ok() {
                        churn.lock().unwrap().announced += 1;
                    }
                }
            }
        }));
    }

    // The window.
    tokio::time::sleep_until(win.start.into()).await;
    if lua {
        for (k, v) in [("slowlog-log-slower-than", "0"), ("slowlog-max-len", "1000000")] {
            let _: Result<(), _> = redis::cmd("CONFIG").arg("SET").arg(k).arg(v).query_async(&mut meter).await;
        }
        let _: Result<(), _> = redis::cmd("SLOWLOG").arg("RESET").query_async(&mut meter).await;
    }
    let s0 = snapshot(&mut meter, &a.status).await?;
    let c0 = churn.lock().unwrap().clone();
    let mut split: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    while Instant::now() < win.end {
        tokio::time::sleep(Duration::from_millis(250).min(win.end.saturating_duration_since(Instant::now()))).await;
        if lua {
            drain_slowlog(&mut meter, &mut split).await;
        }
    }
    let s1 = snapshot(&mut meter, &a.status).await?;
    let c1 = churn.lock().unwrap().clone();
    if lua {
        drain_slowlog(&mut meter, &mut split).await;
        let _: Result<(), _> =
            redis::cmd("CONFIG").arg("SET").arg("slowlog-log-slower-than").arg("10000").query_async(&mut meter).await;
        let _: Result<(), _> = redis::cmd("SLOWLOG").arg("RESET").query_async(&mut meter).await;
    }
    // Let pending probes finish (their own timeouts bound this).
    for t in tasks {
        let _ = tokio::time::timeout(Duration::from_secs(12), t).await;
    }
    let secs = (s1.at - s0.at).as_secs_f64();
    let mut cmd = serde_json::Map::new();
    for (name, (calls, usec)) in &s1.cmd {
        let (c0, u0) = s0.cmd.get(name).copied().unwrap_or((0, 0));
        if calls > &c0 {
            cmd.insert(name.clone(), serde_json::json!([calls - c0, usec - u0]));
        }
    }
    let fcall: serde_json::Map<String, serde_json::Value> =
        split.iter().map(|(k, (c, u))| (k.clone(), serde_json::json!([c, u]))).collect();
    let mut promote = promote_out.lock().unwrap();
    for (_, w) in &watchers {
        promote.timeouts += w.lock().unwrap().pending.iter().filter(|e| win.inside(e.t0)).count() as u64;
    }
    let leave = leave_out.lock().unwrap();
    // The churn done inside the window.
    let (c0, c1) = (serde_json::to_value(&c0).unwrap(), serde_json::to_value(&c1).unwrap());
    let churn_win: serde_json::Map<String, serde_json::Value> = c1
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), (v.as_u64().unwrap_or(0) - c0[k].as_u64().unwrap_or(0)).into()))
        .collect();
    let result = serde_json::json!({
        "secs": secs,
        "cmdstats": cmd,
        "fcall_split": fcall,
        "cpu_main_s": s1.cpu_main - s0.cpu_main,
        "cpu_all_s": s1.cpu_all - s0.cpu_all,
        "streams_start": s0.streams,
        "streams_end": s1.streams,
        "lat_leave_ms": leave.ms, "leave_timeouts": leave.timeouts, "leave_errors": leave.errors,
        "lat_promote_ms": promote.ms, "promote_timeouts": promote.timeouts,
        "churn": churn_win,
    });
    std::fs::write(&a.out, format!("{result}\n")).map_err(|e| format!("{}: {e}", a.out))?;
    Ok(())
}

/// Adds the FCALLs in the slow log to `split` (function -> calls, usec) and empties it.
async fn drain_slowlog(conn: &mut MultiplexedConnection, split: &mut BTreeMap<String, (u64, u64)>) {
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
