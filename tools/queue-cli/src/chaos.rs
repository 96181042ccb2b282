//! The chaos run: the whole system on loopback, owned by this process (valkey-server
//! with the module and AOF, two queue-managers, queue-api, chat-server, as child
//! processes on free ports), a swarm of virtual users through it, and faults injected
//! on a seeded random schedule while the swarm runs:
//!
//! - `kill -9` of queue-api, chat-server and the leading queue-manager, each restarted
//!   after a random pause;
//! - `kill -9` of valkey-server, restarted on the same port and directory from its
//!   AOF, alternately with `appendfsync everysec` and `always`; the queue's counters
//!   are read just before the kill and just after the restart, and any that went
//!   back (acknowledged writes lost) are reported;
//! - `SIGSTOP` of the leading queue-manager for longer than its lease, then `SIGCONT`.
//!
//! Meanwhile a probe enters (and leaves at once) every 200 ms through queue-api,
//! a sampler reads the queue's state from Valkey every 250 ms (the promoted counter,
//! every ticket holder and session), and both managers' `/metrics` say who leads.
//! The report gives, per fault, what users saw (the swarm's retries by kind, see
//! [`crate::outage`]), how long until a probe entry went through again, until the
//! next promotion, and (for the managers) until a leader promoted again; then the
//! swarm's own audits (FIFO, capacity, double claims) and the held-slots check: every
//! ticket or session seen held is given back within `ticket_ttl + session_lease`
//! (plus the manager's tick and the sampling period) of when it was taken or of the
//! last fault before its end, whichever is later.

use crate::outage::{Outage, OutageLog};
use crate::swarm::{self, SwarmConfig};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use testkit::free_port;
use testkit::process::Proc;

/// What a chaos run does; see `queue-cli chaos --help`.
#[derive(Debug, Clone)]
pub struct ChaosConfig {
    pub users: usize,
    pub rate: f64,
    pub soft_cap: u64,
    pub stay: Duration,
    /// `kill -9` and restart of each of queue-api, chat-server and the leading manager.
    pub kills: u32,
    /// `kill -9` and AOF restarts of valkey-server (everysec, always, everysec, ...).
    pub valkey_restarts: u32,
    /// SIGSTOPs of the leading queue-manager.
    pub stops: u32,
    pub ticket_ttl: Duration,
    pub session_lease: Duration,
    pub abandon_after: Duration,
    pub manager_lease: Duration,
    /// Faults fall between this long after the start and the last arrival.
    pub first_fault_after: Duration,
    pub seed: u64,
    pub timeout: Duration,
    /// Where queue-api, queue-manager and chat-server are (target/release).
    pub bin_dir: PathBuf,
    /// The module (libvalkey_queue.so); None: the Lua library (the services install it).
    pub module: Option<PathBuf>,
    pub valkey_server: String,
}

const QUEUE: &str = "default";
const ADMIN_TOKEN: &str = "chaos-admin";
/// The manager's tick (its default) plus the sampling period: how late a slot the
/// rules give back may be seen given back.
const SLACK: Duration = Duration::from_millis(1500);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Service {
    Api,
    Chat,
    Manager,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fsync {
    EverySec,
    Always,
}

impl Fsync {
    fn as_str(self) -> &'static str {
        match self {
            Fsync::EverySec => "everysec",
            Fsync::Always => "always",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    Kill(Service),
    /// kill -9 of valkey-server, restarted from its AOF with this fsync policy.
    Valkey(Fsync),
    /// SIGSTOP of the leading queue-manager for longer than its lease.
    StopLeader,
}

impl std::fmt::Display for Fault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Fault::Kill(Service::Api) => write!(f, "kill -9 queue-api"),
            Fault::Kill(Service::Chat) => write!(f, "kill -9 chat-server"),
            Fault::Kill(Service::Manager) => write!(f, "kill -9 leading manager"),
            Fault::Valkey(m) => write!(f, "kill -9 valkey, AOF {}", m.as_str()),
            Fault::StopLeader => write!(f, "SIGSTOP leading manager"),
        }
    }
}

/// The faults of a run at their offsets from the start: every kind as often as asked,
/// in a seeded random order, one per equal slot of `[from, to)` at a random moment in
/// the slot's first half (so each has time to recover before the next).
pub fn schedule(
    kills: u32,
    valkey: u32,
    stops: u32,
    from: Duration,
    to: Duration,
    seed: u64,
) -> Vec<(Duration, Fault)> {
    let mut faults = Vec::new();
    for svc in [Service::Api, Service::Chat, Service::Manager] {
        faults.extend((0..kills).map(|_| Fault::Kill(svc)));
    }
    faults.extend((0..valkey).map(|i| Fault::Valkey(if i % 2 == 0 { Fsync::EverySec } else { Fsync::Always })));
    faults.extend((0..stops).map(|_| Fault::StopLeader));
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed ^ 0xc4a0_5000);
    faults.shuffle(&mut rng);
    if faults.is_empty() {
        return Vec::new();
    }
    let slot = to.saturating_sub(from) / faults.len() as u32;
    faults
        .into_iter()
        .enumerate()
        .map(|(i, f)| (from + slot * i as u32 + slot.mul_f64(rng.random_range(0.0..0.5)), f))
        .collect()
}

// ---------------------------------------------------------------- processes

/// The stack: each part a testkit [`Proc`] (a restartable child process logging into
/// the run's directory) on a port chosen up front, so that a restart reuses it.
struct Stack {
    dir: PathBuf,
    keep_dir: bool,
    valkey_port: u16,
    api_port: u16,
    chat_port: u16,
    manager_ports: [u16; 2],
    valkey: Proc,
    api: Proc,
    chat: Proc,
    managers: [Proc; 2],
}

impl Drop for Stack {
    fn drop(&mut self) {
        for m in &self.managers {
            m.signal("CONT");
        }
        self.api.kill9();
        self.chat.kill9();
        for m in &mut self.managers {
            m.kill9();
        }
        self.valkey.kill9();
        if !self.keep_dir {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

fn valkey_args(cfg: &ChaosConfig, port: u16, dir: &std::path::Path, fsync: Fsync) -> Vec<String> {
    [
        "--port",
        &port.to_string(),
        "--bind",
        "127.0.0.1",
        "--dir",
        &dir.display().to_string(),
        "--save",
        "",
        "--appendonly",
        "yes",
        "--appendfsync",
        fsync.as_str(),
    ]
    .iter()
    .map(|s| s.to_string())
    .chain(cfg.module.iter().flat_map(|m| ["--loadmodule".to_string(), m.display().to_string()]))
    .collect()
}

impl Stack {
    fn valkey_url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.valkey_port)
    }

    fn build(cfg: &ChaosConfig) -> Result<Stack, String> {
        let stamp = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos();
        let dir = std::env::temp_dir().join(format!("queue-chaos-{}-{stamp}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
        let (vp, ap, cp) = (free_port(), free_port(), free_port());
        let mp = [free_port(), free_port()];
        let url = format!("redis://127.0.0.1:{vp}/");
        let bin = |n: &str| cfg.bin_dir.join(n);
        let s = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let lease = format!("{}ms", cfg.manager_lease.as_millis());
        let manager = |i: usize| {
            Proc::new(
                &format!("queue-manager-{i}"),
                bin("queue-manager"),
                s(&["--valkey-url", &url, "--listen", &format!("127.0.0.1:{}", mp[i]), "--lease", &lease]),
                &dir,
            )
        };
        Ok(Stack {
            valkey: Proc::new("valkey", &cfg.valkey_server, valkey_args(cfg, vp, &dir, Fsync::EverySec), &dir),
            api: Proc::new(
                "queue-api",
                bin("queue-api"),
                s(&[
                    "--valkey-url",
                    &url,
                    "--listen",
                    &format!("127.0.0.1:{ap}"),
                    "--chat-url",
                    &format!("http://127.0.0.1:{cp}/"),
                    "--admin-token",
                    ADMIN_TOKEN,
                    "--trust-proxy",
                ]),
                &dir,
            ),
            chat: Proc::new(
                "chat-server",
                bin("chat-server"),
                s(&["--valkey-url", &url, "--listen", &format!("127.0.0.1:{cp}"), "--heartbeat", "1s"]),
                &dir,
            ),
            managers: [manager(0), manager(1)],
            dir,
            keep_dir: false,
            valkey_port: vp,
            api_port: ap,
            chat_port: cp,
            manager_ports: mp,
        })
    }
}

// ---------------------------------------------------------------- Valkey access

async fn valkey_conn(url: &str) -> Result<redis::aio::MultiplexedConnection, String> {
    let client = redis::Client::open(url).map_err(|e| e.to_string())?;
    tokio::time::timeout(Duration::from_secs(1), client.get_multiplexed_async_connection())
        .await
        .map_err(|_| "connect timed out".to_string())?
        .map_err(|e| e.to_string())
}

/// Runs `cmd` with a one-second limit.
async fn query<T: redis::FromRedisValue>(
    conn: &mut redis::aio::MultiplexedConnection,
    cmd: &redis::Cmd,
) -> Result<T, String> {
    tokio::time::timeout(Duration::from_secs(1), cmd.query_async(conn))
        .await
        .map_err(|_| "timed out".to_string())?
        .map_err(|e| e.to_string())
}

/// Whether this run's backend is the Lua library (set once at the start of a run).
static LUA: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// QUEUE.INFO's integer fields (FCALL_RO queue_info on the Lua library).
async fn queue_info(conn: &mut redis::aio::MultiplexedConnection) -> Result<BTreeMap<String, i64>, String> {
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

async fn holders(conn: &mut redis::aio::MultiplexedConnection) -> Result<(Vec<String>, Vec<String>), String> {
    let k = |s: &str| format!("queue:{{{QUEUE}}}:{s}");
    query(conn, redis::cmd("EVAL").arg(HOLDERS).arg(3).arg(k("stats")).arg(k("waiting")).arg(k("sessions"))).await
}

/// The counters QUEUE.INFO keeps (they only grow): read before and after a restart.
const COUNTERS: [&str; 7] = ["promoted", "claimed", "expired", "dropped", "left", "ended", "lapsed"];

// ---------------------------------------------------------------- monitors

/// One slot seen held: a ticket (kind 't') or a session ('s') of a user.
#[derive(Debug, Clone)]
pub struct Hold {
    pub kind: char,
    pub user: String,
    pub first_seen: Instant,
    /// The first sample without it (or the end of the run while still held).
    pub gone: Instant,
}

/// One probe entry.
#[derive(Debug, Clone, Copy)]
pub struct Probe {
    pub sent: Instant,
    pub answered: Instant,
    pub ok: bool,
}

#[derive(Default)]
struct Monitor {
    /// Probe entries: when sent, when answered (or given up), whether it went through.
    probes: Vec<Probe>,
    /// Successful samples of the promoted counter.
    promoted: Vec<(Instant, u64)>,
    open_holds: HashMap<(char, String), Instant>,
    holds: Vec<Hold>,
    /// Who leads, per manager (None: no answer).
    leaders: Vec<(Instant, [Option<bool>; 2])>,
    samples_failed: u64,
}

async fn probe_loop(mon: Arc<Mutex<Monitor>>, http: reqwest::Client, api: String) {
    let mut i: u32 = 0;
    loop {
        i = i.wrapping_add(1);
        let ff = format!("10.254.{}.{}", (i >> 8) & 255, i & 255);
        let a = crate::api::Api::new(http.clone(), &api, QUEUE, Some(ff));
        let sent = Instant::now();
        let r = tokio::time::timeout(Duration::from_secs(2), a.enter("probe")).await;
        let ok = matches!(r, Ok(Ok(_)));
        mon.lock().unwrap().probes.push(Probe { sent, answered: Instant::now(), ok });
        if let Ok(Ok(s)) = r {
            // Leave at once, so the probe holds no place and no slot.
            for _ in 0..5 {
                if tokio::time::timeout(Duration::from_secs(2), a.leave(&s.user_id)).await.is_ok_and(|r| r.is_ok()) {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
        tokio::time::sleep_until((sent + Duration::from_millis(200)).into()).await;
    }
}

async fn sample_loop(mon: Arc<Mutex<Monitor>>, url: String) {
    let mut conn = None;
    loop {
        let at = Instant::now();
        if conn.is_none() {
            conn = valkey_conn(&url).await.ok();
        }
        let got = match conn.as_mut() {
            Some(c) => match (holders(c).await, queue_info(c).await) {
                (Ok(h), Ok(info)) => Some((h, info)),
                _ => None,
            },
            None => None,
        };
        let now = Instant::now();
        let failed = got.is_none();
        record_sample(&mut mon.lock().unwrap(), got, now);
        if failed {
            conn = None;
        }
        tokio::time::sleep_until((at + Duration::from_millis(250)).into()).await;
    }
}

type Sample = ((Vec<String>, Vec<String>), BTreeMap<String, i64>);

fn record_sample(m: &mut Monitor, got: Option<Sample>, now: Instant) {
    match got {
        None => m.samples_failed += 1,
        Some(((tickets, sessions), info)) => {
            if let Some(p) = info.get("promoted") {
                m.promoted.push((now, (*p).max(0) as u64));
            }
            let seen: std::collections::HashSet<(char, String)> =
                tickets.into_iter().map(|u| ('t', u)).chain(sessions.into_iter().map(|u| ('s', u))).collect();
            let gone: Vec<(char, String)> = m.open_holds.keys().filter(|k| !seen.contains(*k)).cloned().collect();
            for k in gone {
                let first_seen = m.open_holds.remove(&k).expect("listed");
                m.holds.push(Hold { kind: k.0, user: k.1, first_seen, gone: now });
            }
            for k in seen {
                m.open_holds.entry(k).or_insert(now);
            }
        }
    }
}

async fn is_leader(http: &reqwest::Client, port: u16) -> Option<bool> {
    let url = format!("http://127.0.0.1:{port}/metrics");
    let r = http.get(url).timeout(Duration::from_millis(400)).send().await.ok()?;
    let text = r.text().await.ok()?;
    let line = text.lines().find(|l| l.starts_with("queue_manager_is_leader"))?;
    Some(line.split_whitespace().last()? == "1")
}

async fn leader_loop(mon: Arc<Mutex<Monitor>>, http: reqwest::Client, ports: [u16; 2]) {
    loop {
        let at = Instant::now();
        let (a, b) = tokio::join!(is_leader(&http, ports[0]), is_leader(&http, ports[1]));
        mon.lock().unwrap().leaders.push((at, [a, b]));
        tokio::time::sleep_until((at + Duration::from_millis(200)).into()).await;
    }
}

// ---------------------------------------------------------------- faults

/// One fault as it happened.
#[derive(Debug, Clone)]
pub struct FaultRecord {
    pub fault: Fault,
    pub target: String,
    pub at: Instant,
    /// Restarted (or SIGCONT) at.
    pub restored: Instant,
    /// Answering again (health check, PING) at.
    pub ready: Option<Instant>,
    /// Valkey: counters that went back over the restart (name, by how much).
    pub lost: Vec<(String, i64)>,
    pub counters_read: bool,
}

async fn wait_http_ok(http: &reqwest::Client, url: &str, limit: Duration) -> Option<Instant> {
    let until = Instant::now() + limit;
    while Instant::now() < until {
        if let Ok(r) = http.get(url).timeout(Duration::from_millis(500)).send().await {
            if r.status().is_success() {
                return Some(Instant::now());
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    None
}

async fn wait_valkey(url: &str, limit: Duration) -> Option<Instant> {
    let until = Instant::now() + limit;
    while Instant::now() < until {
        if let Ok(mut c) = valkey_conn(url).await {
            if query::<String>(&mut c, &redis::cmd("PING")).await.is_ok() {
                return Some(Instant::now());
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    None
}

async fn counters(url: &str) -> Option<BTreeMap<String, i64>> {
    let mut c = valkey_conn(url).await.ok()?;
    queue_info(&mut c).await.ok()
}

/// Which manager leads now (by its metrics), else the first.
async fn leader_index(http: &reqwest::Client, stack: &Stack) -> usize {
    for _ in 0..10 {
        for (i, p) in stack.manager_ports.iter().enumerate() {
            if is_leader(http, *p).await == Some(true) {
                return i;
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    0
}

async fn inject(
    cfg: &ChaosConfig,
    stack: &mut Stack,
    http: &reqwest::Client,
    fault: Fault,
    rng: &mut rand::rngs::StdRng,
) -> Result<FaultRecord, String> {
    let down = Duration::from_millis(rng.random_range(500..1500));
    let health = |port: u16| format!("http://127.0.0.1:{port}/healthz");
    let mut lost = Vec::new();
    let mut counters_read = false;
    let (target, at, restored, ready) = match fault {
        Fault::Kill(svc) => {
            let (proc_, url) = match svc {
                Service::Api => (&mut stack.api, health(stack.api_port)),
                Service::Chat => (&mut stack.chat, health(stack.chat_port)),
                Service::Manager => {
                    let i = leader_index(http, stack).await;
                    (&mut stack.managers[i], health(stack.manager_ports[i]))
                }
            };
            let at = Instant::now();
            proc_.kill9();
            tokio::time::sleep(down).await;
            proc_.spawn()?;
            let restored = Instant::now();
            let target = proc_.name.clone();
            (target, at, restored, wait_http_ok(http, &url, Duration::from_secs(30)).await)
        }
        Fault::Valkey(fsync) => {
            let url = stack.valkey_url();
            let before = counters(&url).await;
            let at = Instant::now();
            stack.valkey.kill9();
            tokio::time::sleep(down).await;
            stack.valkey.args = valkey_args(cfg, stack.valkey_port, &stack.dir, fsync);
            stack.valkey.spawn()?;
            let restored = Instant::now();
            let ready = wait_valkey(&url, Duration::from_secs(30)).await;
            if let (Some(b), Some(a)) = (before, counters(&url).await) {
                counters_read = true;
                for name in COUNTERS {
                    let d = b.get(name).copied().unwrap_or(0) - a.get(name).copied().unwrap_or(0);
                    if d > 0 {
                        lost.push((name.to_string(), d));
                    }
                }
            }
            ("valkey".to_string(), at, restored, ready)
        }
        Fault::StopLeader => {
            let i = leader_index(http, stack).await;
            let at = Instant::now();
            stack.managers[i].signal("STOP");
            tokio::time::sleep(cfg.manager_lease * 2 + Duration::from_secs(1)).await;
            stack.managers[i].signal("CONT");
            let restored = Instant::now();
            (stack.managers[i].name.clone(), at, restored, Some(restored))
        }
    };
    Ok(FaultRecord { fault, target, at, restored, ready, lost, counters_read })
}

// ---------------------------------------------------------------- the report

/// Per fault: what the probes, the sampler and the users saw from its start until
/// the next fault's.
#[derive(Debug, Clone)]
pub struct FaultOutcome {
    pub record: FaultRecord,
    pub probe_failures: usize,
    /// From the fault's start to the answer of the first probe entry sent after it
    /// that went through.
    pub entry_ok_after: Option<Duration>,
    /// The longest a probe entry sent in this fault's time waited for its answer.
    pub slowest_probe: Option<Duration>,
    /// From the fault's start to the first rise of the promoted counter seen after it.
    pub promotion_after: Option<Duration>,
    /// Managers: from the fault's start to a manager reporting that it leads.
    pub leader_after: Option<Duration>,
    /// Per kind: how many times, and how many users.
    pub users_saw: BTreeMap<Outage, (usize, usize)>,
}

/// Per kind: how many events, and how many distinct users met them.
fn tally<'a>(events: impl Iterator<Item = &'a (Instant, usize, Outage)>) -> BTreeMap<Outage, (usize, usize)> {
    let mut users: BTreeMap<Outage, std::collections::HashSet<usize>> = BTreeMap::new();
    let mut counts: BTreeMap<Outage, usize> = BTreeMap::new();
    for (_, who, what) in events {
        *counts.entry(*what).or_insert(0) += 1;
        users.entry(*what).or_default().insert(*who);
    }
    counts.into_iter().map(|(k, n)| (k, (n, users[&k].len()))).collect()
}

/// "stream lost 900 (412 users), ..." or "nothing".
fn describe(t: &BTreeMap<Outage, (usize, usize)>) -> String {
    if t.is_empty() {
        return "nothing".into();
    }
    let parts: Vec<String> = t
        .iter()
        .map(
            |(k, (n, u))| {
                if n == u {
                    format!("{} {n}", k.as_str())
                } else {
                    format!("{} {n} ({u} users)", k.as_str())
                }
            },
        )
        .collect();
    parts.join(", ")
}

fn secs_after(t: Instant, from: Instant) -> Duration {
    t.saturating_duration_since(from)
}

/// Works out each fault's outcome from what the monitors recorded.
fn outcomes(
    records: &[FaultRecord],
    probes: &[Probe],
    promoted: &[(Instant, u64)],
    leaders: &[(Instant, [Option<bool>; 2])],
    events: &[(Instant, usize, Outage)],
    end: Instant,
) -> Vec<FaultOutcome> {
    records
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let until = records.get(i + 1).map(|n| n.at).unwrap_or(end);
            let within = |t: Instant| t >= r.at && t < until;
            let probe_failures = probes.iter().filter(|p| within(p.sent) && !p.ok).count();
            let entry_ok_after = probes.iter().find(|p| p.sent >= r.at && p.ok).map(|p| secs_after(p.answered, r.at));
            let slowest_probe = probes.iter().filter(|p| within(p.sent)).map(|p| p.answered - p.sent).max();
            let promotion_after =
                promoted.windows(2).find(|w| w[1].0 >= r.at && w[1].1 > w[0].1).map(|w| secs_after(w[1].0, r.at));
            let leader_after = match r.fault {
                Fault::Kill(Service::Manager) | Fault::StopLeader => leaders
                    .iter()
                    .find(|(t, l)| *t >= r.at + Duration::from_millis(50) && l.contains(&Some(true)))
                    .map(|(t, _)| secs_after(*t, r.at)),
                _ => None,
            };
            let users_saw = tally(events.iter().filter(|(t, _, _)| within(*t)));
            FaultOutcome {
                record: r.clone(),
                probe_failures,
                entry_ok_after,
                slowest_probe,
                promotion_after,
                leader_after,
                users_saw,
            }
        })
        .collect()
}

/// How long `hold` stayed past the later of its start and the last fault that began
/// before it was given back.
pub fn held_past_fault(hold: &Hold, fault_starts: &[Instant]) -> Duration {
    let last_fault = fault_starts.iter().filter(|t| **t <= hold.gone).max().copied();
    let from = last_fault.map_or(hold.first_seen, |f| f.max(hold.first_seen));
    hold.gone.saturating_duration_since(from)
}

/// The chaos run's findings.
pub struct ChaosReport {
    pub seed: u64,
    pub started: Instant,
    pub duration: Duration,
    pub outcomes: Vec<FaultOutcome>,
    pub swarm: swarm::Report,
    pub events: BTreeMap<Outage, (usize, usize)>,
    pub holds: usize,
    pub holds_too_long: Vec<(Hold, Duration)>,
    pub longest_hold: Duration,
    pub hold_bound: Duration,
    pub samples_failed: u64,
    pub stack_failures: Vec<String>,
    pub log_dir: Option<PathBuf>,
}

impl ChaosReport {
    pub fn passed(&self) -> bool {
        self.swarm.clean()
            && self.holds_too_long.is_empty()
            && self.swarm.unfinished == 0
            && self.stack_failures.is_empty()
    }

    /// 0 passed; 1 an audit failed (FIFO, capacity, double claims, slots held too long);
    /// 2 users left unfinished or the stack did not come back.
    pub fn exit_code(&self) -> u8 {
        if !self.swarm.clean() || !self.holds_too_long.is_empty() {
            1
        } else if self.swarm.unfinished > 0 || !self.stack_failures.is_empty() {
            2
        } else {
            0
        }
    }
}

fn opt_secs(d: Option<Duration>) -> String {
    d.map(|d| format!("{:.2}", d.as_secs_f64())).unwrap_or_else(|| "-".into())
}

impl std::fmt::Display for ChaosReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "chaos report (seed {}, {:.1} s, {} faults)",
            self.seed,
            self.duration.as_secs_f64(),
            self.outcomes.len()
        )?;
        writeln!(
            f,
            "  {:<44} {:>6} {:>6} {:>7} {:>7} {:>7} {:>7} {:>6}  what users saw (until the next fault)",
            "fault", "at s", "down s", "probe x", "slow s", "entry s", "promo s", "lead s"
        )?;
        for o in &self.outcomes {
            let r = &o.record;
            let at = r.at.saturating_duration_since(self.started);
            let saw = describe(&o.users_saw);
            writeln!(
                f,
                "  {:<44} {:>6.1} {:>6.2} {:>7} {:>7} {:>7} {:>7} {:>6}  {saw}",
                format!("{} ({})", r.fault, r.target),
                at.as_secs_f64(),
                r.restored.saturating_duration_since(r.at).as_secs_f64(),
                o.probe_failures,
                opt_secs(o.slowest_probe),
                opt_secs(o.entry_ok_after),
                opt_secs(o.promotion_after),
                opt_secs(o.leader_after),
            )?;
            if let Fault::Valkey(_) = r.fault {
                if !r.counters_read {
                    writeln!(f, "      counters not read around the restart: loss unknown")?;
                } else if r.lost.is_empty() {
                    writeln!(f, "      no counter went back over the restart (nothing acknowledged was lost)")?;
                } else {
                    let l: Vec<String> = r.lost.iter().map(|(k, n)| format!("{k} -{n}")).collect();
                    writeln!(f, "      LOST over the restart: {}", l.join(", "))?;
                }
            }
        }
        writeln!(
            f,
            "  (at: seconds into the run; down: until restarted/resumed; probe x: probe entries that \
             failed; slow: the longest a probe waited for its answer; entry/promo/lead: seconds from the fault until a probe entry sent after it was answered, the promoted \
             counter rose, a manager led)"
        )?;
        writeln!(f, "  users saw in all      {}", describe(&self.events))?;
        let mark = if self.holds_too_long.is_empty() { "ok" } else { "FAIL" };
        writeln!(
            f,
            "  slots held too long   {} [{mark}] ({} tickets and sessions seen, longest {:.1} s past its start or \
             the last fault, bound ticket_ttl + session_lease = {:.1} s + {:.1} s slack)",
            self.holds_too_long.len(),
            self.holds,
            self.longest_hold.as_secs_f64(),
            self.hold_bound.as_secs_f64(),
            SLACK.as_secs_f64()
        )?;
        for (h, d) in self.holds_too_long.iter().take(10) {
            let kind = if h.kind == 't' { "ticket" } else { "session" };
            writeln!(f, "      {kind} of {} held {:.1} s", h.user, d.as_secs_f64())?;
        }
        if self.samples_failed > 0 {
            writeln!(f, "  Valkey samples failed {} (while it was down)", self.samples_failed)?;
        }
        for e in &self.stack_failures {
            writeln!(f, "  stack: {e}")?;
        }
        write!(f, "{}", self.swarm)?;
        let mark = |ok: bool| if ok { "PASS" } else { "FAIL" };
        writeln!(
            f,
            "chaos: {} (audits {}, slots {}, users unfinished {}, ended with an error after retrying {})",
            mark(self.passed()),
            mark(self.swarm.clean()),
            mark(self.holds_too_long.is_empty()),
            self.swarm.unfinished,
            self.swarm.errors
        )?;
        if let Some(d) = &self.log_dir {
            writeln!(f, "  service logs kept in {}", d.display())?;
        }
        Ok(())
    }
}

// ---------------------------------------------------------------- the run

async fn start_stack(cfg: &ChaosConfig, stack: &mut Stack, http: &reqwest::Client) -> Result<(), String> {
    stack.valkey.spawn()?;
    let url = stack.valkey_url();
    wait_valkey(&url, Duration::from_secs(20)).await.ok_or("valkey-server did not answer PING")?;
    // The client finds the backend (and installs the Lua library where there is no module).
    let qc = queue_client::QueueClient::connect(&url).await.map_err(|e| format!("connecting: {e}"))?;
    LUA.store(qc.backend() == queue_client::Backend::Lua, std::sync::atomic::Ordering::Relaxed);
    let ms = |d: Duration| d.as_millis() as i64;
    let settings = [
        ("soft_cap", cfg.soft_cap as i64),
        ("ticket_ttl", ms(cfg.ticket_ttl)),
        ("session_lease", ms(cfg.session_lease)),
        ("abandon_after", ms(cfg.abandon_after)),
    ];
    qc.config_set(QUEUE, &settings).await.map_err(|e| format!("QUEUE.CONFIG: {e}"))?;
    stack.chat.spawn()?;
    for m in &mut stack.managers {
        m.spawn()?;
    }
    stack.api.spawn()?;
    let checks = [
        ("queue-api", stack.api_port),
        ("chat-server", stack.chat_port),
        ("queue-manager-0", stack.manager_ports[0]),
        ("queue-manager-1", stack.manager_ports[1]),
    ];
    for (name, port) in checks {
        let url = format!("http://127.0.0.1:{port}/healthz");
        wait_http_ok(http, &url, Duration::from_secs(30)).await.ok_or(format!("{name} did not come up"))?;
    }
    Ok(())
}

/// Runs the whole chaos run; `Err` when the stack could not be started.
pub async fn run(cfg: ChaosConfig) -> Result<ChaosReport, String> {
    let http = crate::api::Api::http_client();
    let mut stack = Stack::build(&cfg)?;
    if let Err(e) = start_stack(&cfg, &mut stack, &http).await {
        stack.keep_dir = true;
        return Err(format!("{e}; logs in {}", stack.dir.display()));
    }
    let started = Instant::now();
    let log = Arc::new(OutageLog::new(cfg.ticket_ttl, 4));
    let swarm_cfg = SwarmConfig {
        api: format!("http://127.0.0.1:{}", stack.api_port),
        chat: format!("http://127.0.0.1:{}", stack.chat_port),
        queue: QUEUE.into(),
        users: cfg.users,
        rate: cfg.rate,
        abandon: 0.1,
        leave_politely: 0.5,
        abandon_within: Duration::from_secs(5),
        stay: cfg.stay,
        messages: 2,
        race: 0.2,
        replay: 1.0,
        polling: 0.1,
        poll_every: Duration::from_secs(1),
        soft_cap: Some(cfg.soft_cap),
        admin_token: Some(ADMIN_TOKEN.into()),
        timeout: cfg.timeout,
        nickname_prefix: "c".into(),
        forwarded_for: true,
        seed: cfg.seed,
        outages: Some(log.clone()),
    };
    let mon = Arc::new(Mutex::new(Monitor::default()));
    let monitors = [
        tokio::spawn(probe_loop(mon.clone(), http.clone(), swarm_cfg.api.clone())),
        tokio::spawn(sample_loop(mon.clone(), stack.valkey_url())),
        tokio::spawn(leader_loop(mon.clone(), http.clone(), stack.manager_ports)),
    ];
    let arrivals = Duration::from_secs_f64(cfg.users as f64 / cfg.rate.max(0.001));
    let plan = schedule(cfg.kills, cfg.valkey_restarts, cfg.stops, cfg.first_fault_after, arrivals, cfg.seed);
    let swarm_task = tokio::spawn(swarm::run(swarm_cfg, |_| {}));

    let mut records = Vec::new();
    let mut stack_failures = Vec::new();
    let mut rng = rand::rngs::StdRng::seed_from_u64(cfg.seed ^ 0x5eed);
    for (offset, fault) in &plan {
        tokio::time::sleep_until((started + *offset).into()).await;
        if swarm_task.is_finished() {
            stack_failures.push(format!("the swarm ended before {fault} was injected"));
            break;
        }
        match inject(&cfg, &mut stack, &http, *fault, &mut rng).await {
            Ok(r) => {
                eprintln!(
                    "[{:6.1} s] {fault} ({}): back after {:.2} s{}",
                    r.at.duration_since(started).as_secs_f64(),
                    r.target,
                    r.restored.duration_since(r.at).as_secs_f64(),
                    if r.ready.is_some() { "" } else { ", NOT answering" }
                );
                if r.ready.is_none() {
                    stack_failures.push(format!("{} did not answer after {fault}", r.target));
                }
                records.push(r);
            }
            Err(e) => stack_failures.push(format!("{fault}: {e}")),
        }
    }
    let swarm_report = swarm_task.await.map_err(|e| format!("the swarm failed: {e}"))?;
    let swarm_end = Instant::now();

    // Drain: every slot still held must be given back within the bound after the
    // last fault (or its start); wait for that, or until nothing is held.
    let bound = cfg.ticket_ttl + cfg.session_lease;
    let last = records.last().map(|r| r.restored).unwrap_or(started).max(swarm_end - bound.min(swarm_end - started));
    let drain_until = last + bound + SLACK + Duration::from_secs(1);
    while Instant::now() < drain_until {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let m = mon.lock().unwrap();
        if m.open_holds.is_empty() && m.promoted.last().is_some_and(|(t, _)| *t > swarm_end) {
            break;
        }
    }
    for m in monitors {
        m.abort();
    }
    for p in [&mut stack.api, &mut stack.chat, &mut stack.valkey] {
        if p.exited() {
            stack_failures.push(format!("{} exited by itself", p.name));
        }
    }
    let end = Instant::now();
    let mut m = mon.lock().unwrap();
    let open: Vec<((char, String), Instant)> = m.open_holds.drain().collect();
    for ((kind, user), first_seen) in open {
        m.holds.push(Hold { kind, user, first_seen, gone: end });
    }
    let events = log.events();
    let fault_starts: Vec<Instant> = records.iter().map(|r| r.at).collect();
    let mut holds_too_long = Vec::new();
    let mut longest = Duration::ZERO;
    for h in &m.holds {
        let d = held_past_fault(h, &fault_starts);
        longest = longest.max(d);
        if d > bound + SLACK {
            holds_too_long.push((h.clone(), d));
        }
    }
    let totals = tally(events.iter());
    let report = ChaosReport {
        seed: cfg.seed,
        started,
        duration: end - started,
        outcomes: outcomes(&records, &m.probes, &m.promoted, &m.leaders, &events, swarm_end),
        swarm: swarm_report,
        events: totals,
        holds: m.holds.len(),
        holds_too_long,
        longest_hold: longest,
        hold_bound: bound,
        samples_failed: m.samples_failed,
        stack_failures,
        log_dir: None,
    };
    drop(m);
    let mut report = report;
    if !report.passed() {
        stack.keep_dir = true;
        report.log_dir = Some(stack.dir.clone());
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schedule_has_every_fault_once_per_slot_inside_the_window() {
        let (from, to) = (Duration::from_secs(5), Duration::from_secs(83));
        let plan = schedule(3, 3, 1, from, to, 7);
        assert_eq!(plan.len(), 13);
        let count = |f: Fault| plan.iter().filter(|(_, g)| *g == f).count();
        for svc in [Service::Api, Service::Chat, Service::Manager] {
            assert_eq!(count(Fault::Kill(svc)), 3);
        }
        assert_eq!(count(Fault::Valkey(Fsync::EverySec)), 2);
        assert_eq!(count(Fault::Valkey(Fsync::Always)), 1);
        assert_eq!(count(Fault::StopLeader), 1);
        let slot = (to - from) / 13;
        for (i, (t, _)) in plan.iter().enumerate() {
            let start = from + slot * i as u32;
            assert!(*t >= start && *t < start + slot / 2 + Duration::from_millis(1), "fault {i} at {t:?}");
        }
        assert_eq!(plan, schedule(3, 3, 1, from, to, 7), "a seed replays the schedule");
        assert_ne!(plan, schedule(3, 3, 1, from, to, 8));
    }

    #[test]
    fn a_hold_is_measured_from_the_last_fault_before_its_end() {
        let t0 = Instant::now();
        let s = |n: u64| t0 + Duration::from_secs(n);
        let hold = |first, gone| Hold { kind: 's', user: "u".into(), first_seen: s(first), gone: s(gone) };
        let faults = [s(10), s(30)];
        // Taken before the fault at 10, given back at 20: 10 s past the fault.
        assert_eq!(held_past_fault(&hold(2, 20), &faults), Duration::from_secs(10));
        // Taken after it: from its own start.
        assert_eq!(held_past_fault(&hold(12, 15), &faults), Duration::from_secs(3));
        // No fault before its end: its whole length.
        assert_eq!(held_past_fault(&hold(1, 9), &faults), Duration::from_secs(8));
        // Spans both faults: from the later one.
        assert_eq!(held_past_fault(&hold(5, 50), &faults), Duration::from_secs(20));
    }

    #[test]
    fn recovery_times_come_from_the_first_success_after_each_fault() {
        let t0 = Instant::now();
        let ms = |n: u64| t0 + Duration::from_millis(n);
        let rec = |fault, at| FaultRecord {
            fault,
            target: "x".into(),
            at: ms(at),
            restored: ms(at + 500),
            ready: Some(ms(at + 700)),
            lost: vec![],
            counters_read: true,
        };
        let records = [rec(Fault::Kill(Service::Api), 1000), rec(Fault::StopLeader, 5000)];
        let probe = |sent, answered, ok| Probe { sent: ms(sent), answered: ms(answered), ok };
        let probes = [
            probe(900, 905, true),
            probe(1100, 1102, false),
            probe(1300, 1302, false),
            probe(1500, 1950, true),
            probe(5100, 5103, true),
        ];
        let promoted = [(ms(800), 10), (ms(1200), 10), (ms(2000), 12), (ms(5200), 12), (ms(6400), 13)];
        let leaders = [(ms(5020), [Some(true), None]), (ms(5200), [None, Some(false)]), (ms(8000), [None, Some(true)])];
        let events = [
            (ms(1200), 4, Outage::EntryRetried),
            (ms(1250), 4, Outage::EntryRetried),
            (ms(1260), 9, Outage::EntryRetried),
            (ms(5500), 4, Outage::StreamLost),
        ];
        let o = outcomes(&records, &probes, &promoted, &leaders, &events, ms(10_000));
        assert_eq!(o[0].probe_failures, 2);
        assert_eq!(o[0].entry_ok_after, Some(Duration::from_millis(950)), "until the answer came");
        assert_eq!(o[0].slowest_probe, Some(Duration::from_millis(450)));
        assert_eq!(o[0].promotion_after, Some(Duration::from_millis(1000)));
        assert_eq!(o[0].leader_after, None, "not a manager fault");
        assert_eq!(o[0].users_saw.get(&Outage::EntryRetried), Some(&(3, 2)));
        assert_eq!(describe(&o[0].users_saw), "entry retried 3 (2 users)");
        assert_eq!(o[1].entry_ok_after, Some(Duration::from_millis(103)));
        assert_eq!(o[1].promotion_after, Some(Duration::from_millis(1400)));
        // The sample 20 ms after the SIGSTOP still came from the stopped leader: skipped.
        assert_eq!(o[1].leader_after, Some(Duration::from_millis(3000)));
        assert_eq!(describe(&o[1].users_saw), "stream lost 1");
    }
}
