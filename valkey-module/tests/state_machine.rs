//! Randomized state-machine test of every rule against the reference model in
//! `reference/` (written from the rules in docs/commands.md, not from either implementation),
//! on both backends. Each run is a fresh queue with random settings and a few
//! users; each step one of ENTER (new, re-entry, or refused while max_waiting wait), STATUS, RANKS, LEAVE, PROMOTE,
//! CLAIM (live, used, withdrawn and made-up tickets, with or without a HOLDER), HEARTBEAT, END, WATCH and
//! UNWATCH (two push instances, leases shorter and longer than abandon_after), or a
//! move of the server's test clock (small, or just past ticket_ttl, session_lease or
//! abandon_after). After every step, in the same round trip:
//!
//! - the reply equals the model's;
//! - the queue's data, read without side effects, holds exactly the model's line
//!   (same people, same order, waiting or holding which ticket until when, last-seen
//!   times), sessions, `joining`, the watchers' registrations, the instances' leases
//!   and the change log's number; a newcomer's number in line is above everyone's in
//!   line and every number promoted since tickets were last all gone;
//! - the change log's new entries (read from the stream after the last one seen) are
//!   exactly the entry the model expects of the command, or none;
//! - a watcher simulated here, which starts from the checkpoints WATCH replies give
//!   and follows the change log by the rule docs/commands.md states and nothing else,
//!   knows every watched user's rank: the model's (and RANKS's) for each one still
//!   waiting, and learns of each one's leaving by the entry that says so;
//! - QUEUE.INFO's counts and counters equal the model's, none below zero, and
//!   active + joining <= soft_cap; its `lane_counts` (per lane: waiting now,
//!   promoted from it) equal the model's, the lanes' waiting add up to `waiting`
//!   and their admissions to `promoted`;
//! - FIFO, checked apart from the model: nobody holds a ticket while someone who
//!   entered before them (and did not leave or re-enter since) still waits;
//! - no ticket ever opens a second session: a ticket claimed again successfully is a
//!   repeat by the holder that opened its session, while that session lives, and
//!   answers what the first claim answered; the `claimed` hash holds exactly the
//!   live claims made with a holder.
//!
//! A third of the runs are of a queue with two or three lanes (a third of those
//! with `entry invite`) and a few access codes: ENTER then names no lane, a lane (or
//! one the queue does not have), a code (or a made-up one), or both, and
//! QUEUE.CODES ADD, REMOVE and COUNTS come in; the model keeps the line in lane order
//! and the codes' uses, and after every step, apart from the model:
//!
//! - FIFO within a lane: nobody holds a ticket while someone of the same lane who
//!   entered before them still waits;
//! - lane order: nobody promoted in a step came from a later lane than someone who
//!   waited before the step and still waits after it;
//! - a code's uses are never exceeded: its consumed uses grow by at most one a step,
//!   and only while some were left;
//! - each user holds at most one place in line, numbered in its band (holders below
//!   2^40 in the order promoted, lane `i` from `(i + 1) * 2^40`, at the back).
//!
//! A third of the runs sell out or close ("A sale's end"): QUEUE.CONFIG SET of
//! `closes_at` (passed, soon, or 0), `inventory` (-1, 0 or a few units) and `message`,
//! and QUEUE.SOLD with or without USER come in; the model refuses entries with CLOSED
//! and SOLDOUT, limits promotions by the inventory and writes the `state` entry; and
//! after every step, apart from the model:
//!
//! - never admitted beyond the inventory: a step that promoted anyone leaves the
//!   tickets and sessions not reported bought (`outstanding`) within `inventory`;
//! - no entry while closed or sold out: an ENTER that succeeded did so while
//!   neither was the case;
//! - sold out exactly when the inventory is 0 (QUEUE.INFO's `sold_out`, `inventory`).
//!
//! PASS (`QUEUE.PASS`, with or without a HOLDER) comes in everywhere; apart from the
//! model, a pass that let someone in did so while nobody waited (never jumping the
//! line), and one that answered nil changed nothing (the data, INFO and the log equal
//! the unchanged model's, as after every step); its ticket claimed again by its
//! holder answers the same. A rare move of the clock by more than a day lets WATCH
//! prune the instances gone that long.
//!
//! In half of the runs every step also asks RANKS for every user, so waiting users'
//! ranks are checked to be exactly 1..n in entry order after every step.
//!
//! `MODEL_STEPS` (default 150000 per backend) sets the length, `MODEL_SEED` replays
//! one run (the seed is printed on failure), `MODEL_KEEP_GOING=1` runs every seed
//! and lists all that failed. `bash bench/model-bench.sh` runs ten million steps.

mod reference;

use redis::Value;
use reference::{ClaimOutcome, LogEntry, Model, Place, Settings, Standing};
use std::collections::{BTreeMap, HashMap};
use testkit::{as_int, as_string, clock_key, fields, Backend, Rng, ValkeyServer};

testkit::backend_tests!(model_agrees_step_by_step);

/// Reads a queue's data as stored, with no side effect: the line in order with each
/// record, the sessions with their leases, the active hash and `joining`.
const INSPECT: &str = r#"
local p = "queue:{" .. ARGV[1] .. "}:"
local m = redis.call("ZRANGE", p .. "waiting", 0, -1, "WITHSCORES")
local line = {}
for i = 1, #m, 2 do
  local chunk = p .. "w:" .. math.floor(tonumber(m[i + 1]) / 32)
  line[#line + 1] = m[i]
  line[#line + 1] = m[i + 1]
  line[#line + 1] = redis.call("HGET", chunk, m[i + 1]) or ""
end
return { line, redis.call("ZRANGE", p .. "sessions", 0, -1, "WITHSCORES"), redis.call("HGETALL", p .. "active"),
  redis.call("HGET", p .. "stats", "joining") or "0", redis.call("HGETALL", p .. "watched"),
  redis.call("ZRANGE", p .. "instances", 0, -1, "WITHSCORES"), redis.call("HGET", p .. "stats", "log") or "0",
  redis.call("HGETALL", p .. "claimed"), redis.call("HGETALL", p .. "codes") }
"#;

/// The push instances of the runs.
const INSTANCES: [&str; 2] = ["pod-a", "pod-b"];

const NICKS: [&str; 3] = ["ann", "bo", "cy"];

/// The holders claims name (TICKET.CLAIM ... HOLDER h).
const HOLDERS: [&str; 3] = ["tab-1", "tab-2", "tab-3"];

/// A claim's answer: userId, nickname, ticketId, leaseMs.
type ClaimReply = (Option<String>, Option<String>, Option<String>, Option<i64>);

fn splitmix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    (z ^ (z >> 31)) | 1
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().map(|v| v.parse().unwrap_or_else(|_| panic!("{name} must be a number")))
}

fn model_agrees_step_by_step(b: Backend) {
    let server = ValkeyServer::builder(b).test_clock().start();
    let mut con = server.conn();
    // Every queue's published changes, compared with the entries each step wrote.
    let mut changes = Some(server.conn());
    let _: Value = redis::cmd("PSUBSCRIBE").arg("queue:{*}:changes").query(changes.as_mut().unwrap()).unwrap();
    let total = env_u64("MODEL_STEPS").unwrap_or(150_000);
    let keep_going = std::env::var("MODEL_KEEP_GOING").is_ok_and(|v| v == "1");
    let seeds: Vec<u64> = match env_u64("MODEL_SEED") {
        Some(s) => vec![s],
        None => {
            let base = env_u64("MODEL_BASE_SEED").unwrap_or(0x51A7_E000);
            (0..).map(|i| splitmix(base + i)).take(1_000_000).collect()
        }
    };
    let (mut steps, mut runs, mut failed) = (0u64, 0u64, Vec::new());
    let (mut entries, mut watched, mut repeats) = (0u64, 0u64, 0u64);
    let (mut lane_runs, mut ahead, mut codes_used, mut moved) = (0u64, 0u64, 0u64, 0u64);
    let (mut sale_refusals, mut state_entries, mut passes, mut refused_passes) = (0u64, 0u64, 0u64, 0u64);
    for (i, &seed) in seeds.iter().enumerate() {
        if steps >= total && env_u64("MODEL_SEED").is_none() {
            break;
        }
        let mut run = Run::new(b, seed, format!("m{i}"));
        run.changes = changes.take();
        let r = run.go(&mut con);
        changes = run.changes.take();
        steps += run.step;
        runs += 1;
        entries += run.log_entries;
        watched += run.watcher_checks;
        repeats += run.repeats;
        lane_runs += u64::from(run.model.has_lanes());
        ahead += run.ahead_entries;
        moved += run.moved_entries;
        sale_refusals += run.sale_refusals;
        state_entries += run.state_entries;
        passes += run.passes;
        refused_passes += run.refused_passes;
        codes_used += run.model.codes.values().map(|c| c.used as u64).sum::<u64>();
        if let Err(e) = r {
            failed.push(seed);
            let msg = format!("{b:?}: seed {seed} failed at step {} (replay: MODEL_SEED={seed}):\n{e}", run.step);
            if !keep_going {
                panic!("{msg}");
            }
            eprintln!("{msg}\n");
        }
    }
    eprintln!(
        "{b:?}: {runs} runs, {steps} steps, {entries} change-log entries, {watched} watched ranks confirmed, {repeats} claims answered again for their holder, {lane_runs} runs with lanes, {ahead} entries with `ahead`, {moved} with `moved`, {codes_used} code uses still counted at the end, {sale_refusals} entries refused CLOSED or SOLDOUT, {state_entries} state entries, {passes} passes and {refused_passes} passes answered nil, {} failed seeds {failed:?}",
        failed.len()
    );
    assert!(failed.is_empty(), "{} of {runs} runs failed: seeds {failed:?}", failed.len());
    assert!(moved > 0 || env_u64("MODEL_SEED").is_some(), "no re-entry was told by `moved`");
    if env_u64("MODEL_SEED").is_none() && steps >= 20_000 {
        assert!(sale_refusals > 0 && state_entries > 0, "the runs never closed or sold out");
        assert!(passes > 0 && refused_passes > 0, "PASS never let anyone in, or never refused");
    }
}

/// The access codes of a run with lanes (hashes as QUEUE.CODES takes them).
fn code_hash(i: u64) -> String {
    format!("{:064x}", 0xC0DE_0000 + i)
}

/// Numbers below this are ticket holders' in a queue with lanes; lane `i` numbers
/// from `(i + 1)` times it.
const BAND: i64 = 1 << 40;

#[derive(Debug)]
enum Op {
    /// User, nickname, `LANE`, `CODE`.
    Enter(String, String, Option<String>, Option<String>),
    CodesAdd(String, i64, Vec<String>),
    CodesRemove(Vec<String>),
    CodesCounts,
    Status(String),
    Ranks(Vec<String>),
    Leave(String),
    Promote(Option<i64>),
    Claim(String, Option<String>),
    Heartbeat(Vec<String>),
    End(String),
    Watch(String, i64, Vec<String>),
    Unwatch(String, Vec<String>),
    Advance(i64),
    /// QUEUE.CONFIG SET closes_at / inventory / message (those given).
    SetSale(Option<i64>, Option<i64>, Option<String>),
    /// QUEUE.SOLD n [USER u].
    Sold(i64, Option<String>),
    /// QUEUE.PASS user nickname [HOLDER h].
    Pass(String, String, Option<String>),
}

struct Run {
    b: Backend,
    rng: Rng,
    q: String,
    model: Model,
    users: Vec<String>,
    now: i64,
    step: u64,
    steps: u64,
    /// Ranks of everyone after every step (half of the runs).
    observe_all: bool,
    /// Entry counter at each user's latest ENTER, for the FIFO check.
    entered: HashMap<String, u64>,
    entries: u64,
    /// Every ticket ever handed out, and the answer and holder of the claim that
    /// opened a session with it.
    tickets: Vec<String>,
    first_claim: HashMap<String, (ClaimReply, Option<String>)>,
    /// The id of the last change-log entry read ("-" before any).
    log_id: String,
    /// The simulated watcher: each user it follows -> (number, rank) as of the last
    /// entry read, from a WATCH checkpoint and the entries since.
    watcher: BTreeMap<String, (i64, i64)>,
    /// Change-log entries read, and watched ranks confirmed (for the summary).
    log_entries: u64,
    watcher_checks: u64,
    /// Claims answered again for their holder (for the summary).
    repeats: u64,
    /// A connection subscribed to every queue's changes channel.
    changes: Option<redis::Connection>,
    /// The codes as stored after the last step (hash -> uses, used).
    codes_seen: BTreeMap<String, (i64, i64)>,
    /// Who waited after the last step (for the lane-order check).
    waited_before: Vec<String>,
    /// Change-log entries with `ahead`, and with `moved` (for the summary).
    ahead_entries: u64,
    moved_entries: u64,
    /// A run that closes and sells out (a third).
    sale: bool,
    /// `promoted` before the step (for the inventory check).
    promoted_before: i64,
    /// Entries refused with CLOSED or SOLDOUT, and `state` entries (for the summary).
    pub sale_refusals: u64,
    pub state_entries: u64,
    /// Passes that let someone in, and passes answered nil (for the summary).
    pub passes: u64,
    pub refused_passes: u64,
}

impl Run {
    fn new(b: Backend, seed: u64, q: String) -> Run {
        let mut rng = Rng(seed);
        let s = Settings {
            soft_cap: if rng.chance(5) { 0 } else { rng.range(1, 5) },
            hard_cap: if rng.chance(50) { 0 } else { rng.range(1, 4) },
            batch_max: if rng.chance(30) { 1000 } else { rng.range(1, 4) },
            ticket_ttl: rng.range(100, 3_000),
            session_lease: rng.range(100, 3_000),
            abandon_after: if rng.chance(25) { 0 } else { rng.range(300, 5_000) },
            max_waiting: if rng.chance(50) { 0 } else { rng.range(1, 6) },
            lanes: 0,
            invite: false,
        };
        let mut s = s;
        if rng.chance(33) {
            s.lanes = rng.range(2, 3) as usize;
            s.invite = rng.chance(33);
        }
        let users = (0..rng.range(3, 14)).map(|i| format!("u{i}")).collect();
        let steps = rng.range(300, 3_000) as u64;
        let observe_all = rng.chance(50);
        let sale = rng.chance(33);
        Run {
            b,
            rng,
            q,
            model: Model::new(s),
            users,
            now: 1_700_000_000_000,
            step: 0,
            steps,
            observe_all,
            entered: HashMap::new(),
            entries: 0,
            tickets: Vec::new(),
            first_claim: HashMap::new(),
            log_id: "-".into(),
            watcher: BTreeMap::new(),
            log_entries: 0,
            watcher_checks: 0,
            repeats: 0,
            changes: None,
            codes_seen: BTreeMap::new(),
            waited_before: Vec::new(),
            ahead_entries: 0,
            moved_entries: 0,
            sale,
            promoted_before: 0,
            sale_refusals: 0,
            state_entries: 0,
            passes: 0,
            refused_passes: 0,
        }
    }

    fn cmd(&self, name: &str, args: &[&str]) -> redis::Cmd {
        let mut all = vec![self.q.as_str()];
        all.extend_from_slice(args);
        testkit::command_for(self.b, name, &all)
    }

    fn go(&mut self, con: &mut redis::Connection) -> Result<(), String> {
        let s = self.model.s;
        let set: Vec<String> = [
            ("soft_cap", s.soft_cap),
            ("hard_cap", s.hard_cap),
            ("rate", 0),
            ("batch_max", s.batch_max),
            ("ticket_ttl", s.ticket_ttl),
            ("session_lease", s.session_lease),
            ("abandon_after", s.abandon_after),
            ("max_waiting", s.max_waiting),
        ]
        .iter()
        .flat_map(|(f, v)| [f.to_string(), v.to_string()])
        .collect();
        let mut args = vec!["SET"];
        args.extend(set.iter().map(String::as_str));
        let _: Value = self.cmd("QUEUE.CONFIG", &args).query(con).map_err(|e| format!("config: {e}"))?;
        if s.lanes > 1 {
            let lanes = (0..s.lanes).map(reference::lane_name).collect::<Vec<_>>().join(",");
            let entry = if s.invite { "invite" } else { "open" };
            let _: Value = self
                .cmd("QUEUE.CONFIG", &["SET", "lanes", &lanes, "entry", entry])
                .query(con)
                .map_err(|e| format!("config lanes: {e}"))?;
        }
        let context = format!("settings {s:?}, users {}, observe_all {}", self.users.len(), self.observe_all);
        while self.step < self.steps {
            self.step += 1;
            let op = self.pick();
            self.one(con, &op).map_err(|e| format!("{context}\nstep {} {op:?} at t={}: {e}", self.step, self.now))?;
        }
        Ok(())
    }

    fn user(&mut self) -> String {
        self.users[self.rng.below(self.users.len() as u64) as usize].clone()
    }

    fn pick(&mut self) -> Op {
        let s = self.model.s;
        let lanes = s.lanes > 1;
        let r = self.rng.below(132);
        if r >= 124 {
            let nick = NICKS[self.rng.below(3) as usize].to_string();
            let holder = match self.rng.below(4) {
                0 => None,
                h => Some(HOLDERS[h as usize - 1].to_string()),
            };
            return Op::Pass(self.user(), nick, holder);
        }
        let r = if (110..118).contains(&r) && !lanes { 25 } else { r };
        let r = if r >= 118 && !self.sale { 26 } else { r };
        match r {
            118..121 => match self.rng.below(3) {
                0 => {
                    let at = match self.rng.below(4) {
                        0 | 1 => 0,
                        2 => self.now + self.rng.range(1, 2_000),
                        _ => self.now - self.rng.range(0, 100),
                    };
                    Op::SetSale(Some(at), None, None)
                }
                1 => {
                    let inv = match self.rng.below(4) {
                        0 => -1,
                        1 => 0,
                        _ => self.rng.range(1, 6),
                    };
                    Op::SetSale(None, Some(inv), None)
                }
                _ => {
                    let m = ["", "doors close at nine", "café ☕"][self.rng.below(3) as usize];
                    Op::SetSale(None, None, Some(m.to_string()))
                }
            },
            121..124 => {
                let n = self.rng.range(0, 2);
                Op::Sold(n, self.rng.chance(60).then(|| self.user()))
            }
            110..114 => {
                let lane = reference::lane_name(self.rng.below(s.lanes as u64) as usize);
                let uses = if self.rng.chance(70) { self.rng.range(1, 3) } else { self.rng.range(1, 1_000_000) };
                let hs = (0..self.rng.range(1, 3)).map(|_| code_hash(self.rng.below(5))).collect();
                Op::CodesAdd(lane, uses, hs)
            }
            114..116 => Op::CodesRemove((0..self.rng.range(1, 2)).map(|_| code_hash(self.rng.below(5))).collect()),
            116..118 => Op::CodesCounts,
            100..106 => {
                let i = INSTANCES[self.rng.below(2) as usize].to_string();
                let lease = match self.rng.below(5) {
                    0 => self.rng.range(1, 200),
                    1 | 2 => self.rng.range(1, 2 * s.abandon_after.max(100)),
                    3 => s.abandon_after.max(1),
                    _ => self.rng.range(1, 600_000),
                };
                Op::Watch(i, lease, (0..self.rng.range(0, 3)).map(|_| self.user()).collect())
            }
            106..110 => {
                let i = INSTANCES[self.rng.below(2) as usize].to_string();
                Op::Unwatch(i, (0..self.rng.range(1, 3)).map(|_| self.user()).collect())
            }
            0..25 => {
                let nick = NICKS[self.rng.below(3) as usize].to_string();
                let (mut lane, mut code) = (None, None);
                let any_lane = |rng: &mut Rng| {
                    // Now and then a lane the queue does not have.
                    let i = rng.below(s.lanes.max(1) as u64 + 1) as usize;
                    reference::lane_name(if rng.chance(90) { i.min(s.lanes.max(1) - 1) } else { i + 9 })
                };
                match self.rng.below(if lanes { 10 } else { 100 }) {
                    0..3 => lane = Some(any_lane(&mut self.rng)),
                    3..7 => code = Some(code_hash(self.rng.below(6))),
                    7 => {
                        lane = Some(any_lane(&mut self.rng));
                        code = Some(code_hash(self.rng.below(6)));
                    }
                    _ => {}
                }
                Op::Enter(self.user(), nick, lane, code)
            }
            25..37 => Op::Status(self.user()),
            37..41 => Op::Ranks((0..self.rng.range(1, 4)).map(|_| self.user()).collect()),
            41..47 => Op::Leave(self.user()),
            47..62 => Op::Promote(if self.rng.chance(50) { None } else { Some(self.rng.range(0, 4)) }),
            62..77 => {
                let live: Vec<String> = self
                    .model
                    .line
                    .iter()
                    .filter_map(|p| match &p.place {
                        Place::Ticket { ticket: Some(t), .. } => Some(t.clone()),
                        _ => None,
                    })
                    .collect();
                let r = self.rng.below(100);
                let holder = match self.rng.below(4) {
                    0 => None,
                    h => Some(HOLDERS[h as usize - 1].to_string()),
                };
                if r < 60 && !live.is_empty() {
                    Op::Claim(live[self.rng.below(live.len() as u64) as usize].clone(), holder)
                } else if r < 85 && !self.tickets.is_empty() {
                    // Mostly a used ticket: its holder again (if it had one), or another.
                    let t = self.tickets[self.rng.below(self.tickets.len() as u64) as usize].clone();
                    let holder = match self.first_claim.get(&t) {
                        Some(first) if self.rng.chance(60) => first.1.clone(),
                        _ => holder,
                    };
                    Op::Claim(t, holder)
                } else {
                    Op::Claim(format!("{}.AAAAAAAAAAAAAAA{}", self.rng.range(1, 40), self.rng.below(10)), holder)
                }
            }
            77..83 => Op::Heartbeat((0..self.rng.range(1, 3)).map(|_| self.user()).collect()),
            83..89 => Op::End(self.user()),
            _ => {
                let limits = [s.ticket_ttl, s.session_lease, s.abandon_after.max(1)];
                let limit = limits[self.rng.below(3) as usize];
                if self.rng.chance(2) {
                    // Past the day an ended instance is kept.
                    return Op::Advance(reference::INSTANCE_KEEP_MS + self.rng.range(1, 2_000));
                }
                Op::Advance(match self.rng.below(4) {
                    0 | 1 => self.rng.range(1, 200),
                    2 => limit,
                    _ => limit + self.rng.range(1, 50),
                })
            }
        }
    }

    /// One step: the operation, then RANKS (observe_all runs), the data and INFO, in
    /// one round trip; the model does the same and everything is compared.
    fn one(&mut self, con: &mut redis::Connection, op: &Op) -> Result<(), String> {
        if let Op::Advance(by) = op {
            self.now += by;
        }
        self.promoted_before = self.model.counters.promoted;
        let now = self.now;
        // The clock and the operation first: an error reply (CLAIM) fails the pipeline.
        let mut pipe = redis::pipe();
        pipe.cmd("SET").arg(clock_key(&self.q)).arg(now).ignore();
        match op {
            Op::Enter(u, n, lane, code) => {
                let mut args = vec![u.as_str(), n.as_str()];
                if let Some(l) = lane {
                    args.extend(["LANE", l.as_str()]);
                }
                if let Some(h) = code {
                    args.extend(["CODE", h.as_str()]);
                }
                pipe.add_command(self.cmd("QUEUE.ENTER", &args))
            }
            Op::CodesAdd(lane, uses, hs) => {
                let uses = uses.to_string();
                let mut args = vec!["ADD", lane.as_str(), uses.as_str()];
                args.extend(hs.iter().map(String::as_str));
                pipe.add_command(self.cmd("QUEUE.CODES", &args))
            }
            Op::CodesRemove(hs) => {
                let mut args = vec!["REMOVE"];
                args.extend(hs.iter().map(String::as_str));
                pipe.add_command(self.cmd("QUEUE.CODES", &args))
            }
            Op::CodesCounts => pipe.add_command(self.cmd("QUEUE.CODES", &["COUNTS"])),
            Op::Status(u) => pipe.add_command(self.cmd("QUEUE.STATUS", &[u])),
            Op::Ranks(us) => {
                pipe.add_command(self.cmd("QUEUE.RANKS", &us.iter().map(String::as_str).collect::<Vec<_>>()))
            }
            Op::Leave(u) => pipe.add_command(self.cmd("QUEUE.LEAVE", &[u])),
            Op::Promote(None) => pipe.add_command(self.cmd("QUEUE.PROMOTE", &[])),
            Op::Promote(Some(m)) => pipe.add_command(self.cmd("QUEUE.PROMOTE", &["MAX", &m.to_string()])),
            Op::Claim(t, None) => pipe.add_command(self.cmd("TICKET.CLAIM", &[t])),
            Op::Claim(t, Some(h)) => pipe.add_command(self.cmd("TICKET.CLAIM", &[t, "HOLDER", h])),
            Op::Heartbeat(us) => {
                pipe.add_command(self.cmd("SESSION.HEARTBEAT", &us.iter().map(String::as_str).collect::<Vec<_>>()))
            }
            Op::End(u) => pipe.add_command(self.cmd("SESSION.END", &[u])),
            Op::Watch(i, lease, us) => {
                let lease = lease.to_string();
                let mut args = vec![i.as_str(), lease.as_str()];
                args.extend(us.iter().map(String::as_str));
                pipe.add_command(self.cmd("QUEUE.WATCH", &args))
            }
            Op::Unwatch(i, us) => {
                let mut args = vec![i.as_str()];
                args.extend(us.iter().map(String::as_str));
                pipe.add_command(self.cmd("QUEUE.UNWATCH", &args))
            }
            Op::Advance(_) => pipe.cmd("PING"),
            Op::SetSale(at, inv, msg) => {
                let (at, inv) = (at.map(|v| v.to_string()), inv.map(|v| v.to_string()));
                let mut args = vec!["SET"];
                if let Some(at) = &at {
                    args.extend(["closes_at", at.as_str()]);
                }
                if let Some(inv) = &inv {
                    args.extend(["inventory", inv.as_str()]);
                }
                if let Some(m) = msg {
                    args.extend(["message", m.as_str()]);
                }
                pipe.add_command(self.cmd("QUEUE.CONFIG", &args))
            }
            Op::Sold(n, user) => {
                let n = n.to_string();
                let mut args = vec![n.as_str()];
                if let Some(u) = user {
                    args.extend(["USER", u.as_str()]);
                }
                pipe.add_command(self.cmd("QUEUE.SOLD", &args))
            }
            Op::Pass(u, n, holder) => {
                let mut args = vec![u.as_str(), n.as_str()];
                if let Some(h) = holder {
                    args.extend(["HOLDER", h.as_str()]);
                }
                pipe.add_command(self.cmd("QUEUE.PASS", &args))
            }
        };
        let reply: Result<Value, String> = match pipe.query::<Vec<Value>>(con) {
            Ok(mut v) if v.len() == 1 => Ok(v.remove(0)),
            Ok(v) => return Err(format!("pipeline gave {v:?}")),
            Err(e) if e.code().is_some() => Err(testkit::error_text(&e)),
            Err(e) => return Err(format!("pipeline: {e}")),
        };
        let mut pipe = redis::pipe();
        let everyone: Vec<&str> = self.users.iter().map(String::as_str).collect();
        if self.observe_all {
            pipe.add_command(self.cmd("QUEUE.RANKS", &everyone));
        }
        pipe.cmd("EVAL").arg(INSPECT).arg(0).arg(&self.q);
        let info_cmd = match self.b {
            Backend::Lua => {
                let mut c = redis::cmd("FCALL_RO");
                c.arg("queue_info").arg(1).arg(&self.q);
                c
            }
            _ => redis::cmd("QUEUE.INFO").arg(&self.q).clone(),
        };
        pipe.add_command(info_cmd);
        let log_key = format!("queue:{{{}}}:log", self.q);
        let from = if self.log_id == "-" { "-".to_string() } else { format!("({}", self.log_id) };
        pipe.cmd("XRANGE").arg(&log_key).arg(from).arg("+");
        // After everything the step published: a marker.
        pipe.cmd("PUBLISH").arg(format!("queue:{{{}}}:changes", self.q)).arg("end").ignore();
        let replies: Vec<Value> = pipe.query(con).map_err(|e| format!("pipeline: {e}"))?;
        let reply = match reply {
            Ok(v) => v,
            Err(e) if matches!(op, Op::Claim(..)) => {
                return self.check_claim_error(op, &e, now).and_then(|_| self.check_rest(replies, now));
            }
            // A refused entry: the model must refuse it too, and the data stays as the
            // model has it (check_rest compares them).
            Err(e) if matches!(op, Op::Enter(..)) => {
                let Op::Enter(u, _, lane, code) = op else { unreachable!() };
                if let Some(want) = self.model.refuses_sale(now) {
                    self.sale_refusals += 1;
                    return match want == e {
                        true => self.check_rest(replies, now),
                        false => Err(format!("ENTER {u}: error {e:?}, model {want:?}")),
                    };
                }
                return match self.model.refuses_entry(u, lane.as_deref(), code.as_deref()) {
                    Err(want) if want == e => self.check_rest(replies, now),
                    want => Err(format!("ENTER {u}: error {e:?}, model {want:?}")),
                };
            }
            Err(e) if matches!(op, Op::Sold(..)) => {
                let Op::Sold(n, user) = op else { unreachable!() };
                return match self.model.sold(*n, user.as_deref(), now) {
                    Err(want) if want == e => self.check_rest(replies, now),
                    want => Err(format!("SOLD {n} {user:?}: error {e:?}, model {want:?}")),
                };
            }
            Err(e) => return Err(format!("error {e}")),
        };
        self.check_op(op, &reply, now)?;
        self.check_rest(replies, now)
    }

    fn check_claim_error(&mut self, op: &Op, got: &str, now: i64) -> Result<(), String> {
        let Op::Claim(t, holder) = op else { unreachable!() };
        match self.model.claim(t, holder.as_deref(), now) {
            ClaimOutcome::Error(e) if e == got => Ok(()),
            want => Err(format!("CLAIM {t}: error {got:?}, model {want:?}")),
        }
    }

    /// RANKS of everyone (observe_all runs), the stored data and INFO.
    fn check_rest(&mut self, replies: Vec<Value>, now: i64) -> Result<(), String> {
        // The entry the model expects of the command (RANKS below writes none).
        let entry = self.model.take_log();
        let mut r = replies.into_iter();
        if self.observe_all {
            let ranks = r.next().unwrap();
            let Value::Array(items) = ranks else { return Err(format!("RANKS: {ranks:?}")) };
            for (u, v) in self.users.clone().iter().zip(items.iter()) {
                let want = self.model.status(u, now);
                check_standing(u, v, &want, &mut self.model).map_err(|e| format!("RANKS of everyone: {e}"))?;
            }
        }
        let data = r.next().unwrap();
        self.check_data(&data)?;
        let info = r.next().unwrap();
        self.check_info(&info, now)?;
        let log = r.next().unwrap();
        self.check_log(&log, entry, now)?;
        self.check_watcher()
    }

    /// The change log's new entries against the model's, then the simulated watcher
    /// applies them.
    fn check_log(&mut self, log: &Value, mut want: Option<LogEntry>, now: i64) -> Result<(), String> {
        let got = stream_entries(log)?;
        // The tickets the entry lists: those the model's promoted and watched people
        // hold (learnt from the stored data just checked).
        if let Some(w) = want.as_mut() {
            self.model
                .name_tickets(w)
                .ok_or_else(|| format!("change log: tickets of {:?} unknown", w.promoted_watched))?;
        }
        if let Some((id, _)) = got.last() {
            self.log_id = id.clone();
        }
        let want_fields: Vec<Vec<(String, String)>> = want.iter().map(LogEntry::fields).collect();
        let got_fields: Vec<Vec<(String, String)>> = got.iter().map(|(_, f)| f.clone()).collect();
        if got_fields != want_fields {
            return Err(format!("change log: new entries {got_fields:?}, model {want_fields:?}"));
        }
        // Each entry written was published as written (id, fields and values), and
        // nothing else.
        let written: Vec<String> =
            got.iter().map(|(id, fields)| fields.iter().fold(id.clone(), |m, (f, v)| format!("{m} {f} {v}"))).collect();
        let heard = self.heard_until_marker()?;
        if heard != written {
            return Err(format!("published changes {heard:?}, written {written:?}"));
        }
        for (_, fields) in &got {
            self.log_entries += 1;
            let e = LogEntry::parse(fields)?;
            self.ahead_entries += u64::from(!e.ahead.is_empty());
            self.state_entries += u64::from(e.state.is_some());
            if e.reset {
                self.watcher.clear();
                continue;
            }
            // What the entry tells of those it says left, as a push instance takes
            // it without asking: a ticket listed under their number, or gone for good.
            for (u, &(seq, _)) in &self.watcher {
                // `<number>.<secret>`, or in a queue with lanes `<number waited under>=<ticket>`.
                let listed = e.tickets.iter().find_map(|t| match t.split_once('=') {
                    Some((n, t)) => (n == seq.to_string()).then_some(t),
                    None => (t.split_once('.').map(|(n, _)| n) == Some(&seq.to_string())).then_some(t.as_str()),
                });
                let told = match listed {
                    Some(t) => Some(Standing::Promoted { ticket: Some(t.to_string()), nickname: String::new() }),
                    None if e.left.contains(&seq) && !e.again.contains(&seq) => Some(Standing::Unknown),
                    None => None,
                };
                let Some(told) = told else { continue };
                let is = match self.model.status(u, now) {
                    Standing::Promoted { ticket, .. } => Standing::Promoted { ticket, nickname: String::new() },
                    other => other,
                };
                if is != told {
                    return Err(format!("the log tells {u} (number {seq}) is {told:?}, the model {is:?}"));
                }
            }
            // Gone, or (`moved`) waiting again under a new number at the rank told.
            let watcher = std::mem::take(&mut self.watcher);
            self.watcher = watcher
                .into_iter()
                .filter_map(|(u, (s, r))| match reference::apply_entry(s, r, &e) {
                    Some(r) => Some((u, (s, r))),
                    None => e.moved.iter().find(|m| m.0 == s).map(|&(_, s, r)| (u, (s, r))),
                })
                .collect();
            self.moved_entries += u64::from(!e.moved.is_empty());
        }
        Ok(())
    }

    /// Every user the watcher follows waits with that number at that rank, as the
    /// model (checked against the server's data and RANKS) has it.
    /// The changes published on this run's queue since the last call, up to the
    /// step's marker.
    fn heard_until_marker(&mut self) -> Result<Vec<String>, String> {
        let channel = format!("queue:{{{}}}:changes", self.q);
        let Some(sub) = self.changes.as_mut() else { return Ok(Vec::new()) };
        let mut heard = Vec::new();
        loop {
            let v = sub.recv_response().map_err(|e| format!("changes channel: {e}"))?;
            let Value::Array(parts) = v else { return Err(format!("changes channel: {v:?}")) };
            let [_, _, Value::BulkString(ch), Value::BulkString(payload)] = &parts[..] else {
                return Err(format!("changes channel: {parts:?}"));
            };
            if ch != channel.as_bytes() {
                return Err(format!("published on {} during a step of {channel}", String::from_utf8_lossy(ch)));
            }
            if payload == b"end" {
                return Ok(heard);
            }
            heard.push(String::from_utf8_lossy(payload).into_owned());
        }
    }

    fn check_watcher(&mut self) -> Result<(), String> {
        self.watcher_checks += self.watcher.len() as u64;
        let waiting = self.model.waiting_numbers();
        for (u, &(s, r)) in &self.watcher {
            match waiting.iter().find(|(w, _, _)| w == u) {
                Some((_, Some(num), rank)) if *num == s && *rank == r => {}
                found => {
                    return Err(format!(
                    "watcher: {u} (number {s}) at rank {r} by the change log, model {found:?} (waiting: {waiting:?})"
                ))
                }
            }
        }
        Ok(())
    }

    fn check_op(&mut self, op: &Op, reply: &Value, now: i64) -> Result<(), String> {
        match op {
            Op::Enter(u, n, lane, code) => {
                let (closed, sold_out) = (self.model.closed(now), self.model.sold_out());
                if let Some(e) = self.model.refuses_sale(now) {
                    return Err(format!("ENTER {u}: entered, but the model refuses it with {e:?}"));
                }
                // No entry while closed or sold out (the settings as this test set them).
                if closed || sold_out {
                    return Err(format!("ENTER {u}: entered while closed {closed} / sold out {sold_out}"));
                }
                let into = self
                    .model
                    .refuses_entry(u, lane.as_deref(), code.as_deref())
                    .map_err(|e| format!("ENTER {u}: entered, but the model refuses it with {e:?}"))?;
                self.entries += 1;
                self.entered.insert(u.clone(), self.entries);
                let want = self.model.enter(u, n, into, code.as_deref(), now);
                check_standing(u, reply, &want, &mut self.model)?;
            }
            Op::CodesAdd(lane, uses, hs) => {
                let l = lane[1..].parse().map_err(|_| format!("lane {lane}"))?;
                expect_int("CODES ADD", reply, self.model.codes_add(l, *uses, hs))?
            }
            Op::CodesRemove(hs) => expect_int("CODES REMOVE", reply, self.model.codes_remove(hs))?,
            Op::CodesCounts => {
                let want: Vec<Vec<String>> = self
                    .model
                    .codes_counts()
                    .into_iter()
                    .map(|(l, c, used, left)| vec![l, c.to_string(), used.to_string(), left.to_string()])
                    .collect();
                let got = strings_of(reply);
                if got != want {
                    return Err(format!("CODES COUNTS {got:?}, model {want:?}"));
                }
            }
            Op::Status(u) => {
                let want = self.model.status(u, now);
                check_standing(u, reply, &want, &mut self.model)?;
            }
            Op::Ranks(us) => {
                let Value::Array(items) = reply else { return Err(format!("RANKS: {reply:?}")) };
                if items.len() != us.len() {
                    return Err(format!("RANKS gave {} answers for {} users", items.len(), us.len()));
                }
                for (u, v) in us.iter().zip(items) {
                    let want = self.model.status(u, now);
                    check_standing(u, v, &want, &mut self.model)?;
                }
            }
            Op::Leave(u) => expect_int("LEAVE", reply, self.model.leave(u, now))?,
            Op::Promote(max) => {
                let want = self.model.promote(*max, now);
                let m = fields(reply);
                let got: Vec<i64> = [
                    "promoted",
                    "tickets_expired",
                    "leases_expired",
                    "dropped",
                    "waiting",
                    "joining",
                    "active",
                    "available_slots",
                ]
                .iter()
                .map(|f| m.get(*f).and_then(as_int).unwrap_or(i64::MIN))
                .collect();
                let expect = vec![
                    want.promoted.len() as i64,
                    want.tickets_expired,
                    want.leases_expired,
                    want.dropped,
                    want.waiting,
                    want.joining,
                    want.active,
                    want.available_slots,
                ];
                if got != expect {
                    return Err(format!(
                        "PROMOTE: got {got:?}, model {expect:?} (promoted, tickets_expired, leases_expired, dropped, waiting, joining, active, available_slots); model promotes {:?}",
                        want.promoted
                    ));
                }
            }
            Op::Claim(t, holder) => {
                let want = self.model.claim(t, holder.as_deref(), now);
                match (want, reply) {
                    (ClaimOutcome::Claimed { user, nickname, lease_ms, again }, Value::Array(_) | Value::Map(_)) => {
                        let m = fields(reply);
                        let got = (
                            m.get("userId").and_then(as_string),
                            m.get("nickname").and_then(as_string),
                            m.get("ticketId").and_then(as_string),
                            m.get("leaseMs").and_then(as_int),
                        );
                        let expect = (Some(user), Some(nickname), Some(t.clone()), Some(lease_ms));
                        if got != expect {
                            return Err(format!("CLAIM {t}: {got:?}, model {expect:?}"));
                        }
                        // A second success is the same session, for the holder that opened it.
                        match self.first_claim.get(t) {
                            None if !again => {
                                self.first_claim.insert(t.clone(), (expect, holder.clone()));
                            }
                            Some((first, Some(h))) if again && *first == expect && Some(h) == holder.as_ref() => {
                                self.repeats += 1;
                            }
                            first => {
                                return Err(format!(
                                    "ticket {t} claimed again (holder {holder:?}, model's repeat {again}): first claim {first:?}"
                                ))
                            }
                        }
                    }
                    (want, got) => return Err(format!("CLAIM {t}: got {got:?}, model {want:?}")),
                }
            }
            Op::Heartbeat(us) => {
                let want = self.model.heartbeat(&us.iter().map(String::as_str).collect::<Vec<_>>(), now);
                let got: Option<Vec<i64>> = match reply {
                    Value::Array(a) => a.iter().map(as_int).collect(),
                    _ => None,
                };
                if got.as_ref() != Some(&want) {
                    return Err(format!("HEARTBEAT: got {reply:?}, model {want:?}"));
                }
            }
            Op::End(u) => expect_int("END", reply, self.model.end(u, now))?,
            Op::Watch(i, lease, us) => {
                let (n, waiting, each) =
                    self.model.watch(i, *lease, &us.iter().map(String::as_str).collect::<Vec<_>>(), now);
                let (got_n, got_waiting, got_each) = watch_reply(reply)?;
                if (got_n, got_waiting, got_each.len()) != (n, waiting, us.len()) {
                    return Err(format!(
                        "WATCH: log number {got_n}, waiting {got_waiting}, {} users; model {n}, {waiting}, {}",
                        got_each.len(),
                        us.len()
                    ));
                }
                for ((u, (want_num, want)), (got_num, v)) in us.iter().zip(each).zip(got_each) {
                    if got_num != want_num {
                        return Err(format!("WATCH: {u} has number {got_num}, model {want_num}"));
                    }
                    check_standing(u, &v, &want, &mut self.model).map_err(|e| format!("WATCH: {e}"))?;
                }
                // The checkpoint: the watcher follows each waiting user from here.
                let ranks = self.model.waiting_numbers();
                for u in us {
                    match ranks.iter().find(|(w, _, _)| w == u) {
                        Some((_, Some(s), r)) => {
                            self.watcher.insert(u.clone(), (*s, *r));
                        }
                        _ => {
                            self.watcher.remove(u);
                        }
                    }
                }
            }
            Op::Unwatch(i, us) => expect_int(
                "UNWATCH",
                reply,
                self.model.unwatch(i, &us.iter().map(String::as_str).collect::<Vec<_>>(), now),
            )?,
            Op::Advance(_) => {}
            Op::Pass(u, n, holder) => {
                let nobody_waited = self.waited_before.is_empty();
                match (self.model.pass(u, n, holder.as_deref(), now), reply) {
                    (None, Value::Nil) => self.refused_passes += 1,
                    (Some((nickname, lease_ms)), Value::Array(_) | Value::Map(_)) => {
                        self.passes += 1;
                        // Apart from the model: nobody waited, so nobody was jumped.
                        if !nobody_waited {
                            return Err(format!("PASS {u}: let in while {:?} waited", self.waited_before));
                        }
                        let m = fields(reply);
                        let t = m.get("ticketId").and_then(as_string).unwrap_or_default();
                        let got = (
                            m.get("userId").and_then(as_string),
                            m.get("nickname").and_then(as_string),
                            Some(t.clone()),
                            m.get("leaseMs").and_then(as_int),
                        );
                        let expect = (Some(u.clone()), Some(nickname), Some(t.clone()), Some(lease_ms));
                        if got != expect || t.is_empty() {
                            return Err(format!("PASS {u}: {got:?}, model {expect:?}"));
                        }
                        if self.first_claim.contains_key(&t) || self.tickets.contains(&t) {
                            return Err(format!("PASS {u}: ticket {t} was handed out before"));
                        }
                        self.model.learn_pass_ticket(u, &t);
                        self.tickets.push(t.clone());
                        self.first_claim.insert(t, (expect, holder.clone()));
                        self.entries += 1;
                        self.entered.insert(u.clone(), self.entries);
                    }
                    (want, got) => return Err(format!("PASS {u}: got {got:?}, model {want:?}")),
                }
            }
            Op::SetSale(at, inv, msg) => {
                if *reply != Value::Okay && as_string(reply).as_deref() != Some("OK") {
                    return Err(format!("CONFIG SET: {reply:?}"));
                }
                self.model.configure_sale(*at, *inv, msg.as_deref(), now);
            }
            Op::Sold(n, user) => match (self.model.sold(*n, user.as_deref(), now), reply) {
                (Ok(None), Value::Nil) => {}
                (Ok(Some(left)), got) if as_int(got) == Some(left) => {}
                (want, got) => return Err(format!("SOLD: got {got:?}, model {want:?}")),
            },
        }
        Ok(())
    }

    /// The stored line, sessions and `joining` against the model; tickets the model
    /// issued are learnt here (`<number>.<secret>`, from the ticket's record).
    fn check_data(&mut self, data: &Value) -> Result<(), String> {
        let parts = strings_of(data);
        let [line, sessions, active, joining, watched, instances, log_n, claimed, codes] = &parts[..] else {
            return Err(format!("inspect: {data:?}"));
        };
        let joining = joining.first().map(String::as_str).unwrap_or("0");
        let stored: Vec<(&str, &str, &str)> =
            line.chunks(3).map(|c| (c[0].as_str(), c[1].as_str(), c[2].as_str())).collect();
        let stored_who: Vec<&str> = stored.iter().map(|x| x.0).collect();
        let model_who: Vec<&str> = self.model.line.iter().map(|p| p.user.as_str()).collect();
        if stored_who != model_who {
            return Err(format!("line holds {stored_who:?}, model {model_who:?}"));
        }
        let mut learnt = Vec::new();
        let mut numbers: Vec<(String, i64)> = Vec::new();
        for (p, &(user, seq, _)) in self.model.line.iter().zip(&stored) {
            let seq: i64 = seq.parse().map_err(|_| format!("{user}'s number {seq:?}"))?;
            match p.number {
                Some(n) if n != seq => return Err(format!("{user} has number {seq}, was {n}")),
                Some(_) => {}
                None => numbers.push((user.to_string(), seq)),
            }
        }
        // Each user at most one place in line.
        let mut who = stored_who.clone();
        who.sort();
        who.dedup();
        if who.len() != stored_who.len() {
            return Err(format!("a user holds two places: {stored_who:?}"));
        }
        if self.model.has_lanes() {
            for (user, seq) in &numbers {
                // "Why numbers in bands": holders below 2^40 after the last holder,
                // lane i from (i + 1) * 2^40, at the back of its lane.
                let i = self.model.line.iter().position(|p| p.user == *user).unwrap();
                let p = &self.model.line[i];
                let band = match p.place {
                    Place::Ticket { .. } => 0,
                    Place::Waiting { .. } => p.lane as i64 + 1,
                };
                let in_band = |n: i64| n >= band * BAND && n < (band + 1) * BAND;
                let above = self.model.line.iter().filter_map(|p| p.number).filter(|&n| in_band(n)).max();
                if !in_band(*seq) || above.is_some_and(|a| *seq <= a) {
                    return Err(format!("{user} was numbered {seq}, not in band {band} after {above:?}"));
                }
            }
            for (user, seq) in std::mem::take(&mut numbers) {
                self.model.learn_number(&user, seq);
            }
        }
        for (user, seq) in numbers {
            // "Key layout": a newcomer is numbered after the last one in line and after
            // `p_max`, the highest number promoted (since tickets were last all gone).
            let above = self.model.line.iter().filter_map(|p| p.number).chain([self.model.max_promoted]).max();
            if above.is_some_and(|a| seq <= a) {
                return Err(format!("{user} was numbered {seq}, not after {above:?} (in line or p_max)"));
            }
            self.model.learn_number(&user, seq);
        }
        for (p, &(user, seq, rec)) in self.model.line.iter().zip(&stored) {
            match (&p.place, rec.strip_prefix('P')) {
                (Place::Waiting { seen }, None) => {
                    let want = format!("{seen}:{}", p.nickname);
                    if rec != want {
                        return Err(format!("{user} waits with record {rec:?}, model {want:?}"));
                    }
                }
                (Place::Ticket { ticket, expiry }, Some(t)) => {
                    let f: Vec<&str> = t.splitn(3, '|').collect();
                    let id = format!("{seq}.{}", f.get(1).unwrap_or(&""));
                    if f.len() != 3 || f[0] != expiry.to_string() || f[2] != p.nickname {
                        return Err(format!(
                            "{user} holds record {rec:?}, model expiry {expiry} nickname {}",
                            p.nickname
                        ));
                    }
                    match ticket {
                        Some(known) if *known != id => return Err(format!("{user} holds {id}, model {known}")),
                        Some(_) => {}
                        None => learnt.push((user.to_string(), id)),
                    }
                }
                (place, _) => return Err(format!("{user} has record {rec:?}, model {place:?}")),
            }
        }
        for (u, id) in learnt {
            self.model.learn_ticket(&u, &id);
        }
        for p in &self.model.line {
            if let Place::Ticket { ticket: Some(t), .. } = &p.place {
                if !self.tickets.contains(t) {
                    self.tickets.push(t.clone());
                }
            }
        }
        if joining.parse::<i64>().ok() != Some(self.model.joining()) {
            return Err(format!("stats joining {joining}, model {}", self.model.joining()));
        }
        let got: Vec<(String, String)> = sessions.chunks(2).map(|c| (c[0].clone(), c[1].clone())).collect();
        let want: Vec<(String, String)> =
            self.model.sessions.iter().map(|(u, s)| (u.clone(), s.lease.to_string())).collect();
        let mut got_sorted = got.clone();
        got_sorted.sort();
        if got_sorted != want {
            return Err(format!("sessions {got:?}, model {want:?}"));
        }
        let mut got: Vec<(String, String)> = active.chunks(2).map(|c| (c[0].clone(), c[1].clone())).collect();
        got.sort();
        let want: Vec<(String, String)> =
            self.model.sessions.iter().map(|(u, s)| (u.clone(), s.nickname.clone())).collect();
        if got != want {
            return Err(format!("active {got:?}, model {want:?}"));
        }
        let got: Vec<(String, String)> = watched.chunks(2).map(|c| (c[0].clone(), c[1].clone())).collect();
        let want: Vec<(String, String)> = self.model.watched.iter().map(|(u, i)| (u.clone(), i.join(","))).collect();
        let mut got_sorted = got.clone();
        got_sorted.sort();
        if got_sorted != want {
            return Err(format!("watched {got:?}, model {want:?}"));
        }
        let mut got: Vec<(String, String)> = instances.chunks(2).map(|c| (c[0].clone(), c[1].clone())).collect();
        got.sort();
        let want: Vec<(String, String)> =
            self.model.instances.iter().map(|(i, l)| (i.clone(), l.to_string())).collect();
        if got != want {
            return Err(format!("instances {got:?}, model {want:?}"));
        }
        // "Claiming twice": ticketId -> holder|leaseMs|userId and #userId -> ticketId for
        // each session a claim with a holder opened.
        let mut got: Vec<(String, String)> = claimed.chunks(2).map(|c| (c[0].clone(), c[1].clone())).collect();
        got.sort();
        let mut want: Vec<(String, String)> = Vec::new();
        for (u, s) in &self.model.sessions {
            if let Some((t, h, lease)) = &s.claim {
                want.push((t.clone(), format!("{h}|{lease}|{u}")));
                want.push((format!("#{u}"), t.clone()));
            }
        }
        want.sort();
        if got != want {
            return Err(format!("claimed {got:?}, model {want:?}"));
        }
        let log_n = log_n.first().map(String::as_str).unwrap_or("0");
        if log_n.parse::<i64>().ok() != Some(self.model.log_n) {
            return Err(format!("stats log {log_n}, model {}", self.model.log_n));
        }
        // The codes as the model has them; apart from the model, a code's consumed
        // uses grow by at most one a step, and only while some were left.
        let got: BTreeMap<String, String> = codes.chunks(2).map(|c| (c[0].clone(), c[1].clone())).collect();
        let want: BTreeMap<String, String> = self
            .model
            .codes
            .iter()
            .map(|(h, c)| (h.clone(), format!("{}|{}|{}", reference::lane_name(c.lane), c.uses, c.used)))
            .collect();
        if got != want {
            return Err(format!("codes {got:?}, model {want:?}"));
        }
        let mut seen = BTreeMap::new();
        for (h, v) in &got {
            let f: Vec<i64> = v.split('|').skip(1).filter_map(|x| x.parse().ok()).collect();
            let [uses, used] = f[..] else { return Err(format!("code {h}: {v:?}")) };
            if let Some(&(was_uses, was_used)) = self.codes_seen.get(h) {
                if used > was_used && (used != was_used + 1 || was_used >= was_uses) {
                    return Err(format!("code {h}: uses consumed went {was_used} -> {used} with {was_uses} uses"));
                }
            } else if used > 1 {
                return Err(format!("code {h}: new with {used} uses consumed"));
            }
            seen.insert(h.clone(), (uses, used));
        }
        self.codes_seen = seen;
        // FIFO within a lane, apart from the model: every ticket holder entered before
        // every waiter of its lane (the stored line and the model's hold the same people).
        let lanes = self.model.s.lanes.max(1);
        let mut last_holder = vec![0; lanes];
        let mut first_waiter = vec![u64::MAX; lanes];
        for (p, &(user, _, rec)) in self.model.line.iter().zip(&stored) {
            let at = self.entered[user];
            if rec.starts_with('P') {
                last_holder[p.lane] = last_holder[p.lane].max(at);
            } else {
                first_waiter[p.lane] = first_waiter[p.lane].min(at);
            }
        }
        for l in 0..lanes {
            if last_holder[l] > first_waiter[l] {
                return Err(format!(
                    "FIFO: a ticket holder of lane {l} entered (#{}) after a waiter (#{})",
                    last_holder[l], first_waiter[l]
                ));
            }
        }
        // Lane order: nobody promoted in this step came from a later lane than someone
        // who waited before it and waits still.
        let holders: Vec<(String, usize)> = self
            .model
            .line
            .iter()
            .zip(&stored)
            .filter(|(_, s)| s.2.starts_with('P'))
            .map(|(p, _)| (p.user.clone(), p.lane))
            .collect();
        let waiters: Vec<(String, usize)> = self
            .model
            .line
            .iter()
            .zip(&stored)
            .filter(|(_, s)| !s.2.starts_with('P'))
            .map(|(p, _)| (p.user.clone(), p.lane))
            .collect();
        let stayed = waiters.iter().filter(|(u, _)| self.waited_before.contains(u)).map(|&(_, l)| l).min();
        for (u, l) in &holders {
            if self.waited_before.contains(u) && stayed.is_some_and(|s| s < *l) {
                return Err(format!("lane order: {u} of lane {l} promoted while lane {stayed:?} waits"));
            }
        }
        self.waited_before = waiters.into_iter().map(|(u, _)| u).collect();
        Ok(())
    }

    fn check_info(&self, info: &Value, now: i64) -> Result<(), String> {
        let m = fields(info);
        let int = |f: &str| m.get(f).and_then(as_int).unwrap_or(i64::MIN);
        let (waiting, joining, active, free) = self.model.info(now);
        let c = &self.model.counters;
        let checks = [
            ("waiting", waiting),
            ("joining", joining),
            ("active", active),
            ("available_slots", free),
            ("tokens", -1),
            ("promoted", c.promoted),
            ("claimed", c.claimed),
            ("expired", c.expired),
            ("dropped", c.dropped),
            ("left", c.left),
            ("ended", c.ended),
            ("lapsed", c.lapsed),
            ("slot_wait_ms", c.slot_wait_ms),
        ];
        for (f, want) in checks {
            let got = int(f);
            if got != want {
                return Err(format!("INFO {f} = {got}, model {want}"));
            }
            if got < -1 || (got < 0 && f != "tokens") {
                return Err(format!("INFO {f} = {got} is below zero"));
            }
        }
        // A sale's end: the state as the model has it; sold out exactly at inventory 0;
        // a step that promoted anyone kept `outstanding` within the inventory.
        let inventory = m.get("inventory").and_then(as_int);
        let sale = [
            ("closed", i64::from(self.model.closed(now))),
            ("sold_out", i64::from(self.model.sold_out())),
            ("outstanding", self.model.outstanding()),
            ("closes_at", self.model.closes_at),
        ];
        for (f, want) in sale {
            if int(f) != want {
                return Err(format!("INFO {f} = {}, model {want}", int(f)));
            }
        }
        if inventory != self.model.inventory {
            return Err(format!("INFO inventory = {inventory:?}, model {:?}", self.model.inventory));
        }
        if m.get("message").and_then(as_string).unwrap_or_default() != self.model.message {
            return Err(format!("INFO message = {:?}, model {:?}", m.get("message"), self.model.message));
        }
        if (int("sold_out") == 1) != (inventory == Some(0)) {
            return Err(format!("INFO sold_out {} with inventory {inventory:?}", int("sold_out")));
        }
        if let Some(i) = inventory {
            if int("promoted") > self.promoted_before && int("outstanding") > i {
                return Err(format!(
                    "promoted beyond the inventory: outstanding {} > inventory {i}",
                    int("outstanding")
                ));
            }
        }
        if int("active") + int("joining") > self.model.s.soft_cap {
            return Err(format!("over capacity: active {} + joining {} > soft_cap", int("active"), int("joining")));
        }
        // Per lane: [lane, waiting, admitted] in the queue's order, as the model has
        // them; the lanes' admissions add up to `promoted` (every run's lanes are set
        // before its first entry, so every promotion came from a lane).
        let lanes: Vec<(String, i64, i64)> = match m.get("lane_counts") {
            Some(Value::Array(a)) => a
                .iter()
                .map(|l| match l {
                    Value::Array(t) if t.len() == 3 => Some((as_string(&t[0])?, as_int(&t[1])?, as_int(&t[2])?)),
                    _ => None,
                })
                .collect::<Option<_>>()
                .ok_or_else(|| format!("INFO lane_counts is not [lane, waiting, admitted]s: {a:?}"))?,
            other => return Err(format!("INFO lane_counts: {other:?}")),
        };
        let want = self.model.lane_counts();
        if lanes != want {
            return Err(format!("INFO lane_counts = {lanes:?}, model {want:?}"));
        }
        if self.model.has_lanes() {
            let sum: i64 = lanes.iter().map(|l| l.2).sum();
            if sum != int("promoted") {
                return Err(format!("INFO lane_counts admitted sum {sum} != promoted {}", int("promoted")));
            }
            let waiting: i64 = lanes.iter().map(|l| l.1).sum();
            if waiting != int("waiting") {
                return Err(format!("INFO lane_counts waiting sum {waiting} != waiting {}", int("waiting")));
            }
        }
        Ok(())
    }
}

fn expect_int(what: &str, reply: &Value, want: i64) -> Result<(), String> {
    match as_int(reply) {
        Some(v) if v == want => Ok(()),
        _ => Err(format!("{what}: got {reply:?}, model {want}")),
    }
}

/// A stream entry: its id and its fields in order.
type Entry = (String, Vec<(String, String)>);

/// XRANGE's reply: (id, fields) per entry.
fn stream_entries(v: &Value) -> Result<Vec<Entry>, String> {
    let text = |x: &Value| as_string(x).or_else(|| as_int(x).map(|i| i.to_string()));
    let Value::Array(entries) = v else { return Err(format!("XRANGE: {v:?}")) };
    entries
        .iter()
        .map(|e| match e {
            Value::Array(pair) if pair.len() == 2 => {
                let id = text(&pair[0]).ok_or_else(|| format!("XRANGE entry {e:?}"))?;
                let fields: Vec<String> = match &pair[1] {
                    Value::Array(f) => f.iter().map(|x| text(x).unwrap_or_default()).collect(),
                    Value::Map(m) => {
                        m.iter().flat_map(|(k, v)| [text(k).unwrap_or_default(), text(v).unwrap_or_default()]).collect()
                    }
                    other => return Err(format!("XRANGE fields {other:?}")),
                };
                Ok((id, fields.chunks(2).map(|c| (c[0].clone(), c.get(1).cloned().unwrap_or_default())).collect()))
            }
            other => Err(format!("XRANGE entry {other:?}")),
        })
        .collect()
}

/// QUEUE.WATCH's checkpoint: (log number, waiting, per user (number, standing map)).
type Checkpoint = (i64, i64, Vec<(i64, Value)>);

/// QUEUE.WATCH's reply: the log number, the number waiting, and per user its number
/// and standing map (`[n, waiting, [[number, map], ...]]`).
fn watch_reply(v: &Value) -> Result<Checkpoint, String> {
    let bad = || format!("WATCH reply {v:?}");
    let Value::Array(items) = v else { return Err(bad()) };
    let (Some(n), Some(waiting)) = (items.first().and_then(as_int), items.get(1).and_then(as_int)) else {
        return Err(bad());
    };
    let Some(Value::Array(each)) = items.get(2).filter(|_| items.len() == 3) else { return Err(bad()) };
    let each = each
        .iter()
        .map(|p| match p {
            Value::Array(pair) if pair.len() == 2 => as_int(&pair[0]).map(|num| (num, pair[1].clone())).ok_or_else(bad),
            _ => Err(bad()),
        })
        .collect::<Result<_, _>>()?;
    Ok((n, waiting, each))
}

/// A nested array reply as lists of strings (numbers as their text).
fn strings_of(v: &Value) -> Vec<Vec<String>> {
    let text = |x: &Value| as_string(x).or_else(|| as_int(x).map(|i| i.to_string())).unwrap_or_default();
    match v {
        Value::Array(parts) => parts
            .iter()
            .map(|p| match p {
                Value::Array(a) => a.iter().map(text).collect(),
                other => vec![text(other)],
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// A standing map against the model's standing. A ticket just issued by the model is
/// learnt from the reply.
fn check_standing(user: &str, reply: &Value, want: &Standing, model: &mut Model) -> Result<(), String> {
    let m = fields(reply);
    let s = |f: &str| m.get(f).and_then(as_string);
    let rank = m.get("rank").and_then(as_int);
    let (status, ticket, nickname) = (s("status"), s("ticketId"), s("nickname"));
    let eta_nil = matches!(m.get("estimatedWaitSeconds"), Some(Value::Nil));
    let ok = s("userId").as_deref() == Some(user)
        && match want {
            Standing::Waiting { rank: r, nickname: n, lane } => {
                s("lane") == *lane
                    && status.as_deref() == Some("WAITING")
                    && rank == Some(*r)
                    && ticket.is_none()
                    && nickname.as_ref() == Some(n)
            }
            Standing::Promoted { ticket: t, nickname: n } => {
                status.as_deref() == Some("PROMOTED")
                    && rank == Some(0)
                    && ticket.is_some()
                    && (t.is_none() || *t == ticket)
                    && nickname.as_ref() == Some(n)
                    && eta_nil
            }
            Standing::Active { nickname: n } => {
                status.as_deref() == Some("ACTIVE")
                    && rank == Some(0)
                    && ticket.is_none()
                    && nickname.as_ref() == Some(n)
                    && eta_nil
            }
            Standing::Unknown => {
                status.as_deref() == Some("UNKNOWN")
                    && rank == Some(0)
                    && ticket.is_none()
                    && nickname.is_none()
                    && eta_nil
            }
        };
    // The `lane` field: in queues with lanes only (nil unless waiting).
    let lane_ok = m.contains_key("lane") == model.has_lanes()
        && (matches!(want, Standing::Waiting { .. }) || s("lane").is_none());
    if !ok || !lane_ok {
        return Err(format!("{user}: got {m:?}, model {want:?}"));
    }
    if let (Standing::Promoted { ticket: None, .. }, Some(t)) = (want, ticket) {
        model.learn_ticket(user, &t);
    }
    Ok(())
}
