//! The same seeded random sequence of operations on two servers, one per backend,
//! and on the admission engine over its in-memory store: every reply and the final
//! data must match, byte for byte, once the values that are random (ticket secrets)
//! or clock readings (times) are masked.
//!
//! Byte for byte includes the order of map fields, which the Lua library cannot
//! choose: Valkey builds its maps in the iteration order of Lua tables. The module
//! follows Valkey 8's order; Valkey 9's scripting engine iterates differently, so
//! against a 9.x server the maps are compared as sets of fields (same fields, same
//! values, order aside) and everything else still byte for byte.

use queue_core::engine::{self, Aux, Standing, Store};
use queue_core::lanes::Lanes;
use queue_core::memory::{Content, MemoryStore};
use queue_core::replies;
use redis::Value;
use std::collections::BTreeMap;
use testkit::{Backend, Client, Rng, ValkeyServer};

fn is_secret(s: &str) -> bool {
    s.len() == 16 && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// Masks ticket secrets ("12.<secret>" keeps its number, in a change log entry's
/// comma-separated list too) and epoch-millisecond times.
fn mask_text(s: &str) -> String {
    // A ticket, or in a queue with lanes the change log's `<old number>=<ticket>`.
    let ticket = |t: &str| {
        let (old, t) = t.split_once('=').map_or(("", t), |(o, t)| (o, t));
        let old = if old.is_empty() { String::new() } else { format!("{old}=") };
        t.split_once('.')
            .filter(|(seq, secret)| !seq.is_empty() && seq.bytes().all(|b| b.is_ascii_digit()) && is_secret(secret))
            .map(|(seq, _)| format!("{old}{seq}.<secret>"))
    };
    let tickets: Option<Vec<String>> = s.split(',').map(ticket).collect();
    if let Some(tickets) = tickets {
        return tickets.join(",");
    }
    // Records: "<ms>:nick" and "P<ms>|<secret>|nick".
    if let Some(rest) = s.strip_prefix('P') {
        let parts: Vec<&str> = rest.splitn(3, '|').collect();
        if parts.len() == 3 && parts[0].len() == 13 && is_secret(parts[1]) {
            return format!("P<ms>|<secret>|{}", parts[2]);
        }
    }
    if let Some((ms, nick)) = s.split_once(':') {
        if ms.len() == 13 && ms.bytes().all(|b| b.is_ascii_digit()) {
            return format!("<ms>:{nick}");
        }
    }
    if s.len() == 13 && s.bytes().all(|b| b.is_ascii_digit()) {
        return "<ms>".into();
    }
    s.to_string()
}

/// How replies are compared on this server: masked, and with map fields sorted
/// unless the server keeps the field order the module follows (Valkey 8 and older).
#[derive(Clone, Copy)]
struct Compare {
    field_order: bool,
}

impl Compare {
    fn for_server(c: &mut Client) -> Compare {
        let info: String = redis::cmd("INFO").arg("server").query(&mut c.con).expect("INFO server");
        let major = info
            .lines()
            .find_map(|l| l.strip_prefix("valkey_version:"))
            .and_then(|v| v.split('.').next()?.trim().parse::<u32>().ok())
            .expect("valkey_version in INFO server");
        Compare { field_order: major <= 8 }
    }

    /// The reply with secrets and clock readings masked, in one walk with the field sorting.
    fn normal(self, v: &Value) -> Value {
        match v {
            Value::BulkString(b) => Value::BulkString(mask_text(&String::from_utf8_lossy(b)).into_bytes()),
            Value::Array(a) => Value::Array(a.iter().map(|v| self.normal(v)).collect()),
            Value::Map(m) => {
                let mut m: Vec<(Value, Value)> = m.iter().map(|(k, v)| (self.normal(k), self.normal(v))).collect();
                if !self.field_order {
                    m.sort_by_key(|(k, _)| format!("{k:?}"));
                }
                Value::Map(m)
            }
            other => other.clone(),
        }
    }
}

fn reply(c: &mut Client, name: &str, args: &[String]) -> Value {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    match c.call(name, &args) {
        Ok(v) => v,
        Err(e) => Value::SimpleString(format!("error: {}", testkit::error_text(&e))),
    }
}

/// Every key with its content, masked (hash fields sorted).
fn dump(c: &mut Client) -> BTreeMap<String, String> {
    let keys: Vec<String> = redis::cmd("KEYS").arg("queue:*").query(&mut c.con).unwrap();
    let mut out = BTreeMap::new();
    for k in keys {
        let kind: String = redis::cmd("TYPE").arg(&k).query(&mut c.con).unwrap();
        let content = match kind.as_str() {
            "zset" => {
                let v: Vec<(String, String)> =
                    redis::cmd("ZRANGE").arg(&k).arg(0).arg(-1).arg("WITHSCORES").query(&mut c.con).unwrap();
                format!("{:?}", v.iter().map(|(m, s)| (m.clone(), mask_text(s))).collect::<Vec<_>>())
            }
            "hash" => {
                let v: BTreeMap<String, String> = redis::cmd("HGETALL").arg(&k).query(&mut c.con).unwrap();
                format!("{:?}", v.iter().map(|(f, x)| (f.clone(), mask_text(x))).collect::<BTreeMap<_, _>>())
            }
            // The change log: each entry's fields in order; the ids (the server's clock
            // in ms, then a counter) are left out once checked to be ids.
            "stream" => {
                let v: Vec<(String, Vec<(String, String)>)> =
                    redis::cmd("XRANGE").arg(&k).arg("-").arg("+").query(&mut c.con).unwrap();
                for (id, _) in &v {
                    let ok = id.split_once('-').is_some_and(|(ms, n)| {
                        [ms, n].iter().all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
                    });
                    assert!(ok, "{k}: entry id {id:?}");
                }
                stream_text(v.into_iter().map(|(_, f)| f).collect())
            }
            other => other.to_string(),
        };
        out.insert(k, content);
    }
    out
}

/// A change log's entries as `dump` shows them: fields in order, values masked.
fn stream_text(entries: Vec<Vec<(String, String)>>) -> String {
    let masked: Vec<Vec<(String, String)>> =
        entries.into_iter().map(|e| e.into_iter().map(|(f, v)| (f, mask_text(&v))).collect()).collect();
    format!("{masked:?}")
}

/// One random operation on a small population of users and two queues.
fn random_op(rng: &mut Rng, users: &[String], tickets: &[(String, String)]) -> (&'static str, Vec<String>) {
    let q = ["q", "other"][rng.below(4).min(1) as usize].to_string();
    let u = users[rng.below(users.len() as u64) as usize].clone();
    let someone = users[rng.below(users.len() as u64) as usize].clone();
    let code = |rng: &mut Rng| ["1", "2", "3"][rng.below(3) as usize].repeat(64);
    match rng.below(20) {
        // Straight in (entered and claimed) while nobody waits and there is room.
        18 | 19 => {
            let mut args = vec![q, u, format!("nick {}", rng.below(5))];
            if rng.below(2) == 0 {
                args.extend(["HOLDER".into(), format!("tab-{}", rng.below(2))]);
            }
            ("QUEUE.PASS", args)
        }
        // `other` has lanes (set before the run): entries with LANE or CODE there.
        16 => {
            let mut args = vec![q, u, format!("nick {}", rng.below(5))];
            match rng.below(3) {
                0 => args.extend(["LANE".into(), ["presale", "general", "vip"][rng.below(3) as usize].into()]),
                1 => args.extend(["CODE".into(), code(rng)]),
                _ => args.extend(["CODE".into(), code(rng), "LANE".into(), "presale".into()]),
            }
            ("QUEUE.ENTER", args)
        }
        17 => match rng.below(4) {
            0 | 1 => {
                let lane = ["presale", "general"][rng.below(2) as usize].to_string();
                ("QUEUE.CODES", vec![q, "ADD".into(), lane, (1 + rng.below(3)).to_string(), code(rng)])
            }
            2 => ("QUEUE.CODES", vec![q, "COUNTS".into()]),
            _ => ("QUEUE.CODES", vec![q, "REMOVE".into(), code(rng), code(rng)]),
        },
        0..=3 => ("QUEUE.ENTER", vec![q, u, format!("nick {}", rng.below(5))]),
        4 => ("QUEUE.STATUS", vec![q, u]),
        5 => ("QUEUE.RANKS", vec![q, u, someone, "nobody".into()]),
        6 => ("QUEUE.LEAVE", vec![q, u]),
        7 | 8 => match rng.below(3) {
            0 => ("QUEUE.PROMOTE", vec![q]),
            _ => ("QUEUE.PROMOTE", vec![q, "MAX".into(), (1 + rng.below(4)).to_string()]),
        },
        9 | 10 => {
            if tickets.is_empty() || rng.below(6) == 0 {
                ("TICKET.CLAIM", vec![q, format!("{}.AAAAAAAAAAAAAAAA", 1 + rng.below(40))])
            } else {
                // Mostly recent tickets, so that many are claimed while still good.
                let back = rng.below(tickets.len().min(4) as u64) as usize;
                let (tq, t) = tickets[tickets.len() - 1 - back].clone();
                match rng.below(3) {
                    // With a holder: a repeat by the same one answers the claim again.
                    0 | 1 => ("TICKET.CLAIM", vec![tq, t, "HOLDER".into(), format!("tab-{}", rng.below(2))]),
                    _ => ("TICKET.CLAIM", vec![tq, t]),
                }
            }
        }
        11 => ("SESSION.HEARTBEAT", vec![q, u, someone]),
        12 | 13 => ("SESSION.END", vec![q, u]),
        15 => match rng.below(3) {
            0 => ("QUEUE.LINE", vec![q, rng.below(30).to_string(), (1 + rng.below(4)).to_string()]),
            1 => {
                let lease = [1, 1_000, 60_000, 600_000][rng.below(4) as usize].to_string();
                let mut args = vec![q, format!("pod-{}", rng.below(2)), lease];
                args.extend((0..rng.below(4)).map(|_| users[rng.below(users.len() as u64) as usize].clone()));
                ("QUEUE.WATCH", args)
            }
            _ => ("QUEUE.UNWATCH", vec![q, format!("pod-{}", rng.below(2)), u, someone]),
        },
        _ => match rng.below(9) {
            // A sale's life: closed (closes_at 1, long past) now and then, inventory
            // set, sold and cleared, a message with spaces set and cleared.
            5 => {
                let at = ["0", "0", "0", "1"][rng.below(4) as usize];
                ("QUEUE.CONFIG", vec![q, "SET".into(), "closes_at".into(), at.into()])
            }
            6 => {
                let v = ["-1", "-1", "0", "5", "20"][rng.below(5) as usize];
                ("QUEUE.CONFIG", vec![q, "SET".into(), "inventory".into(), v.into()])
            }
            7 => {
                let m = ["", "doors close at nine", "ünïcödé"][rng.below(3) as usize];
                ("QUEUE.CONFIG", vec![q, "SET".into(), "message".into(), m.into()])
            }
            8 => match rng.below(2) {
                0 => ("QUEUE.SOLD", vec![q, rng.below(3).to_string()]),
                _ => ("QUEUE.SOLD", vec![q, rng.below(3).to_string(), "USER".into(), u]),
            },
            0 => ("QUEUE.CONFIG", vec![q, "SET".into(), "soft_cap".into(), rng.below(7).to_string()]),
            1 => ("QUEUE.CONFIG", vec![q, "SET".into(), "hard_cap".into(), rng.below(4).to_string()]),
            2 => ("QUEUE.CONFIG", vec![q, "GET".into(), "*".into()]),
            // Mostly open: an invite queue refuses every entry until it is open again.
            3 => {
                let mode = ["open", "open", "Identified", "invite"][rng.below(4) as usize];
                ("QUEUE.CONFIG", vec![q, "SET".into(), "entry".into(), mode.into()])
            }
            _ => ("QUEUE.INFO", vec![q]),
        },
    }
}

/// Runs `steps` random operations against `reference` and `other` in lockstep;
/// `other_backend()` says which backend serves each step on `other`.
fn lockstep(reference: &mut Client, other: &mut Client, steps: usize, mut other_backend: impl FnMut() -> Backend) {
    let mut rng = Rng(0x5EED_1234_ABCD_0001);
    let users: Vec<String> = (0..24).map(|i| format!("user-{i}")).collect();
    let mut tickets: Vec<(String, String)> = Vec::new();
    let compare = Compare::for_server(reference);
    let mut engines = Engines::default();
    let (mut passes, mut nil_passes) = (0, 0);
    // Queue `other` has lanes.
    let lanes: Vec<String> = ["other", "SET", "lanes", "presale,general"].map(String::from).to_vec();
    for c in [&mut *reference, &mut *other] {
        reply(c, "QUEUE.CONFIG", &lanes);
    }
    engines.reply("QUEUE.CONFIG", &lanes);
    for step in 0..steps {
        let (name, args) = random_op(&mut rng, &users, &tickets);
        other.backend = other_backend();
        let (rr, ro) = (reply(reference, name, &args), reply(other, name, &args));
        let re = engines.reply(name, &args);
        assert_eq!(
            compare.normal(&rr),
            compare.normal(&ro),
            "step {step}: {name} {args:?} (other served by {:?})",
            other.backend
        );
        assert_eq!(
            compare.normal(&rr),
            compare.normal(&re),
            "step {step}: {name} {args:?}: the engine in memory differs"
        );
        if name == "QUEUE.PASS" {
            match rr {
                Value::Map(_) => passes += 1,
                Value::Nil => nil_passes += 1,
                _ => {}
            }
        }
        collect_tickets(&args[0], &rr, &ro, &mut tickets, other);
        engines.adopt_ticket(&args[0], &rr);
    }
    let reference_data = dump(reference);
    assert_eq!(reference_data, dump(other), "final data differs");
    assert_eq!(reference_data, engines.dump(), "final data differs from the engine's in memory");
    for k in ["queue:{q}:log", "queue:{q}:watched", "queue:{q}:instances"] {
        assert!(reference_data.get(k).is_some_and(|v| v.len() > 2), "the run left nothing in {k} to compare");
    }
    let (q, o) = (reference.info("q"), reference.info("other"));
    let sum = |f: &str| testkit::field_int(&q, f) + testkit::field_int(&o, f);
    assert!(sum("promoted") > 40 && sum("claimed") > 10, "the run admitted too few to mean much: {q:?} {o:?}");
    assert!(passes > 5 && nil_passes > 5, "passes: {passes} let in, {nil_passes} nil");
}

#[test]
fn module_and_library_behave_identically() {
    let (m, l) = (ValkeyServer::start(Backend::Module), ValkeyServer::start(Backend::Lua));
    lockstep(&mut m.client3(), &mut l.client3(), 3000, || Backend::Lua);
}

#[test]
fn one_queue_served_by_both_alternately_needs_no_migration() {
    let reference = ValkeyServer::start(Backend::Module);
    let both = ValkeyServer::start(Backend::Module);
    let _: String =
        redis::cmd("FUNCTION").arg("LOAD").arg(testkit::lua_library()).query(&mut both.conn()).expect("load library");
    let mut flip = Rng(42);
    lockstep(&mut reference.client3(), &mut both.client3(), 3000, move || {
        if flip.below(2) == 0 {
            Backend::Module
        } else {
            Backend::Lua
        }
    });
}

/// The bulk string value of field `name` in a map reply.
fn field_of(m: &[(Value, Value)], name: &[u8]) -> Option<String> {
    m.iter().find_map(|(k, v)| match (k, v) {
        (Value::BulkString(k), Value::BulkString(v)) if k == name => Some(String::from_utf8_lossy(v).into_owned()),
        _ => None,
    })
}

/// Remembers a ticket issued in a reply (the same on both sides once masked), and
/// gives the other side's record the reference's secret, so one ticket name works on
/// both servers.
fn collect_tickets(queue: &str, rm: &Value, rl: &Value, tickets: &mut Vec<(String, String)>, cl: &mut Client) {
    let (Value::Map(fm), Value::Map(fl)) = (rm, rl) else { return };
    let find = |m: &Vec<(Value, Value)>| {
        m.iter().find_map(|(k, v)| match (k, v) {
            (Value::BulkString(k), Value::BulkString(v)) if k == b"ticketId" => {
                Some(String::from_utf8_lossy(v).into_owned())
            }
            _ => None,
        })
    };
    if let (Some(tm), Some(tl)) = (find(fm), find(fl)) {
        let (seq, secret) = tm.split_once('.').unwrap();
        let (_, lua_secret) = tl.split_once('.').unwrap();
        let queue_keys: Vec<String> = redis::cmd("KEYS").arg("queue:*:w:*").query(&mut cl.con).unwrap();
        for k in queue_keys {
            let v: Option<String> = redis::cmd("HGET").arg(&k).arg(seq).query(&mut cl.con).unwrap();
            if let Some(v) = v.filter(|v| v.contains(lua_secret)) {
                let _: () =
                    redis::cmd("HSET").arg(&k).arg(seq).arg(v.replace(lua_secret, secret)).query(&mut cl.con).unwrap();
            }
        }
        // A ticket a pass used at once: remembered (with a holder) in `claimed` only.
        let claimed = fm.iter().any(|(k, _)| matches!(k, Value::BulkString(k) if k == b"leaseMs"));
        if let Some(user) = field_of(fm, b"userId").filter(|_| claimed && tm != tl) {
            let key = format!("queue:{{{queue}}}:claimed");
            let held: Option<String> = redis::cmd("HGET").arg(&key).arg(&tl).query(&mut cl.con).unwrap();
            if let Some(v) = held {
                let _: () = redis::cmd("HDEL").arg(&key).arg(&tl).query(&mut cl.con).unwrap();
                let _: () = redis::cmd("HSET")
                    .arg(&key)
                    .arg(&tm)
                    .arg(v)
                    .arg(format!("#{user}"))
                    .arg(&tm)
                    .query(&mut cl.con)
                    .unwrap();
            }
        }
        let entry = (queue.to_string(), tm);
        if !tickets.contains(&entry) {
            tickets.push(entry);
        }
    }
}

/// Random, mostly malformed argument vectors: both backends refuse (or accept) them
/// with the same bytes.
#[test]
fn malformed_arguments_get_the_same_answers() {
    const WORDS: [&[u8]; 17] = [
        b"HOLDER",
        b"holder",
        b"entry",
        b"invite",
        b"q",
        b"u",
        b"MAX",
        b"max",
        b"SET",
        b"GET",
        b"*",
        b"soft_cap",
        b"-1",
        b"0",
        b"100001",
        b"1.AAAAAAAAAAAAAAAA",
        b"9007199254740992",
    ];
    let (m, l) = (ValkeyServer::start(Backend::Module), ValkeyServer::start(Backend::Lua));
    let (mut cm, mut cl) = (m.client3(), l.client3());
    let compare = Compare::for_server(&mut cm);
    let mut rng = Rng(0xBAD_A125);
    for step in 0..3000 {
        let name = testkit::COMMANDS[rng.below(testkit::COMMANDS.len() as u64) as usize];
        let args: Vec<Vec<u8>> = (0..1 + rng.below(5))
            .map(|_| match rng.below(4) {
                0 => (0..rng.below(70)).map(|_| rng.below(256) as u8).collect(),
                1 => rng.next_u64().to_string().into_bytes(),
                _ => WORDS[rng.below(WORDS.len() as u64) as usize].to_vec(),
            })
            .collect();
        let run = |c: &mut Client| match c.cmd(name, &args).query::<Value>(&mut c.con) {
            Ok(v) => compare.normal(&v),
            Err(e) => Value::SimpleString(format!("error: {}", testkit::error_text(&e))),
        };
        let (rm, rl) = (run(&mut cm), run(&mut cl));
        assert_eq!(rm, rl, "step {step}: {name} {args:?}");
    }
}

/// The third party of the lockstep: the admission engine (queue-core) over its
/// in-memory store, one per queue, replying as the module would (RESP3).
#[derive(Default)]
struct Engines {
    stores: BTreeMap<String, MemoryStore>,
}

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64
}

fn bulk(b: &[u8]) -> Value {
    Value::BulkString(b.to_vec())
}

fn map(order: &[&str], fields: Vec<(&str, Value)>) -> Value {
    Value::Map(
        order
            .iter()
            .map(|name| (bulk(name.as_bytes()), fields.iter().find(|(f, _)| f == name).expect("field").1.clone()))
            .collect(),
    )
}

/// QUEUE.ENTER's options as the engine takes them (the runs give them well formed).
fn invitation(opts: &[String]) -> engine::Invitation<'_> {
    let mut inv = engine::Invitation::default();
    for pair in opts.chunks(2) {
        match pair[0].as_str() {
            "LANE" => inv.lane = Some(pair[1].as_bytes()),
            _ => inv.code = Some(pair[1].as_bytes()),
        }
    }
    inv
}

fn standing_value(user: &[u8], st: &Standing, eta: Option<i64>, lanes: &Lanes) -> Value {
    let opt = |b: Option<&[u8]>| b.map_or(Value::Nil, bulk);
    let mut fields = vec![
        ("status", bulk(st.status().as_bytes())),
        ("rank", Value::Int(st.rank())),
        ("userId", bulk(user)),
        ("nickname", opt(st.nickname())),
        ("ticketId", opt(st.ticket())),
        ("estimatedWaitSeconds", eta.map_or(Value::Nil, Value::Int)),
        ("opensAt", st.opens_at().map_or(Value::Nil, Value::Int)),
    ];
    if !lanes.multi() {
        return map(&replies::STANDING, fields);
    }
    let lane = match st {
        Standing::Waiting { seq, .. } => lanes.lane_of(*seq).map(|i| lanes.name(i)),
        _ => None,
    };
    fields.push(("lane", opt(lane)));
    map(&replies::STANDING_LANE, fields)
}

impl Engines {
    fn store(&mut self, q: &str) -> &mut MemoryStore {
        let s = self.stores.entry(q.to_string()).or_insert_with(|| MemoryStore::new(now_ms(), 9));
        s.now = now_ms();
        s
    }

    /// The command's reply; then its change-log entry, if it wrote one, appended as a
    /// server does at a command's end.
    fn reply(&mut self, name: &str, args: &[String]) -> Value {
        let v = self.run(name, args);
        engine::close_log(self.store(&args[0]));
        v
    }

    fn run(&mut self, name: &str, args: &[String]) -> Value {
        let error = |e: queue_core::QueueError| Value::SimpleString(format!("error: {e}"));
        let s = self.store(&args[0]);
        let lanes = s.lanes();
        let user = |i: usize| args[i].as_bytes().to_vec();
        match name {
            "QUEUE.ENTER" => match engine::enter_with(s, &user(1), args[2].as_bytes(), invitation(&args[3..])) {
                Ok(st) => standing_value(&user(1), &st, engine::eta(s, &st), &lanes),
                Err(e) => error(e),
            },
            "QUEUE.STATUS" | "QUEUE.RANKS" => {
                let now = match engine::begin_observing(s) {
                    Ok(now) => now,
                    Err(e) => return error(e),
                };
                let mut all: Vec<Value> = args[1..]
                    .iter()
                    .map(|u| {
                        let st = engine::observe(s, &u.as_bytes().to_vec(), now);
                        standing_value(u.as_bytes(), &st, engine::eta(s, &st), &lanes)
                    })
                    .collect();
                if name == "QUEUE.STATUS" {
                    all.remove(0)
                } else {
                    Value::Array(all)
                }
            }
            "QUEUE.LINE" => {
                if let Err(e) = engine::begin_observing(s) {
                    return error(e);
                }
                let p = engine::line(s, args[1].parse().unwrap(), args[2].parse().unwrap());
                let users = p.users.iter().map(|u| bulk(u)).collect();
                let head = [p.first_rank, p.cursor, p.measured_per_min, p.rate].map(Value::Int);
                Value::Array(head.into_iter().chain([Value::Array(users)]).collect())
            }
            "QUEUE.LEAVE" => engine::leave(s, &user(1)).map_or_else(error, |b| Value::Int(i64::from(b))),
            "QUEUE.PROMOTE" => {
                let max = args.get(2).map(|m| m.parse().unwrap());
                match engine::promote(s, max) {
                    Ok(p) => map(&replies::PROMOTE, p.fields().iter().map(|&(f, v)| (f, Value::Int(v))).collect()),
                    Err(e) => error(e),
                }
            }
            "QUEUE.PASS" => match engine::pass(s, &user(1), args[2].as_bytes(), args.get(4).map(|h| h.as_bytes())) {
                Ok(Some((ticket, c))) => map(
                    &replies::CLAIM,
                    vec![
                        ("userId", bulk(&c.user)),
                        ("nickname", bulk(&c.nickname)),
                        ("ticketId", bulk(&ticket)),
                        ("leaseMs", Value::Int(c.lease_ms)),
                    ],
                ),
                Ok(None) => Value::Nil,
                Err(e) => error(e),
            },
            "TICKET.CLAIM" => match engine::claim_held(s, args[1].as_bytes(), args.get(3).map(|h| h.as_bytes())) {
                Ok(c) => map(
                    &replies::CLAIM,
                    vec![
                        ("userId", bulk(&c.user)),
                        ("nickname", bulk(&c.nickname)),
                        ("ticketId", bulk(args[1].as_bytes())),
                        ("leaseMs", Value::Int(c.lease_ms)),
                    ],
                ),
                Err(e) => error(e),
            },
            "SESSION.HEARTBEAT" => {
                let users: Vec<Vec<u8>> = args[1..].iter().map(|u| u.as_bytes().to_vec()).collect();
                engine::heartbeat(s, &users)
                    .map_or_else(error, |l| Value::Array(l.into_iter().map(|b| Value::Int(i64::from(b))).collect()))
            }
            "SESSION.END" => engine::end(s, &user(1)).map_or_else(error, |b| Value::Int(i64::from(b))),
            "QUEUE.WATCH" => {
                let users: Vec<Vec<u8>> = args[3..].iter().map(|u| u.as_bytes().to_vec()).collect();
                match engine::watch(s, args[1].as_bytes(), args[2].parse().unwrap(), &users) {
                    Ok(w) => {
                        let each = users
                            .iter()
                            .zip(&w.users)
                            .map(|(u, (num, st))| {
                                Value::Array(vec![Value::Int(*num), standing_value(u, st, engine::eta(s, st), &lanes)])
                            })
                            .collect();
                        Value::Array(vec![Value::Int(w.log), Value::Int(w.waiting), Value::Array(each)])
                    }
                    Err(e) => error(e),
                }
            }
            "QUEUE.UNWATCH" => {
                let users: Vec<Vec<u8>> = args[2..].iter().map(|u| u.as_bytes().to_vec()).collect();
                engine::unwatch(s, args[1].as_bytes(), &users).map_or_else(error, Value::Int)
            }
            "QUEUE.CONFIG" if args[1] == "SET" && args[2] == "lanes" => {
                s.set_lanes(args[3].as_bytes()).map_or_else(error, |_| Value::Okay)
            }
            "QUEUE.CODES" => {
                let hs: Vec<&[u8]> =
                    args.iter().skip(if args[1] == "ADD" { 4 } else { 2 }).map(|h| h.as_bytes()).collect();
                match args[1].as_str() {
                    "ADD" => engine::codes_add(s, args[2].as_bytes(), args[3].parse().unwrap(), &hs)
                        .map_or_else(error, Value::Int),
                    "REMOVE" => engine::codes_remove(s, &hs).map_or_else(error, Value::Int),
                    _ => match engine::codes_counts(s) {
                        Ok(c) => Value::Array(
                            c.into_iter()
                                .map(|(l, n, used, left)| {
                                    Value::Array(vec![bulk(&l), Value::Int(n), Value::Int(used), Value::Int(left)])
                                })
                                .collect(),
                        ),
                        Err(e) => error(e),
                    },
                }
            }
            "QUEUE.CONFIG" if args[1] == "SET" && args[2] == "closes_at" => {
                s.configure_sale(Some(args[3].parse().unwrap()), None, None).map_or_else(error, |_| Value::Okay)
            }
            "QUEUE.CONFIG" if args[1] == "SET" && args[2] == "inventory" => {
                s.configure_sale(None, Some(args[3].parse().unwrap()), None).map_or_else(error, |_| Value::Okay)
            }
            "QUEUE.CONFIG" if args[1] == "SET" && args[2] == "message" => {
                s.configure_sale(None, None, Some(args[3].as_bytes())).map_or_else(error, |_| Value::Okay)
            }
            "QUEUE.SOLD" => {
                let who = (args.len() == 4).then(|| user(3));
                match engine::sale::sold(s, args[1].parse().unwrap(), who.as_ref()) {
                    Ok(left) => left.map_or(Value::Nil, Value::Int),
                    Err(e) => error(e),
                }
            }
            "QUEUE.CONFIG" if args[1] == "SET" && args[2] == "entry" => {
                s.set_entry(args[3].as_bytes()).map_or_else(error, |_| Value::Okay)
            }
            "QUEUE.CONFIG" if args[1] == "SET" => {
                let v: i64 = args[3].parse().unwrap();
                s.configure(&[(args[2].as_str(), v)]).map_or_else(error, |_| Value::Okay)
            }
            "QUEUE.CONFIG" => {
                let c = engine::config(s);
                let mut fields: Vec<(&str, Value)> =
                    queue_core::config::FIELDS.iter().zip(c.values).map(|(f, v)| (f.name, Value::Int(v))).collect();
                fields.push(("entry", bulk(s.entry_mode().as_str().as_bytes())));
                fields.push(("lanes", bulk(&lanes.text())));
                map(&replies::CONFIG, fields)
            }
            "QUEUE.INFO" => match engine::info(s) {
                Ok(i) => {
                    let mut fields: Vec<(&str, Value)> =
                        i.fields().into_iter().map(|(f, v)| (f, Value::Int(v))).collect();
                    fields.push(("entry", bulk(i.entry.as_str().as_bytes())));
                    fields.push(("lanes", bulk(&lanes.text())));
                    fields.push(("inventory", i.inventory.map_or(Value::Nil, Value::Int)));
                    fields.push(("message", bulk(&i.message)));
                    let per_lane = i
                        .lane_counts
                        .iter()
                        .map(|l| Value::Array(vec![bulk(&l.lane), Value::Int(l.waiting), Value::Int(l.admitted)]));
                    fields.push((replies::LANE_COUNTS, Value::Array(per_lane.collect())));
                    map(&replies::INFO, fields)
                }
                Err(e) => error(e),
            },
            other => panic!("no engine twin for {other}"),
        }
    }

    /// Gives the engine's record of a ticket the reference's secret, so that one
    /// ticket name works everywhere.
    fn adopt_ticket(&mut self, queue: &str, reference: &Value) {
        let Value::Map(m) = reference else { return };
        let Some(t) = m.iter().find_map(|(k, v)| match (k, v) {
            (Value::BulkString(k), Value::BulkString(v)) if k == b"ticketId" => {
                Some(String::from_utf8_lossy(v).into_owned())
            }
            _ => None,
        }) else {
            return;
        };
        let (seq, secret) = t.split_once('.').unwrap();
        let seq: i64 = seq.parse().unwrap();
        let s = self.store(queue);
        // A ticket a pass used at once: remembered (with a holder) in `claimed` only.
        let claimed = m.iter().any(|(k, _)| matches!(k, Value::BulkString(k) if k == b"leaseMs"));
        if let Some(user) = field_of(m, b"userId").filter(|_| claimed) {
            let mark = format!("#{user}");
            if let Some(own) = Store::aux_hget(s, Aux::Claimed, mark.as_bytes()).filter(|o| *o != t.as_bytes()) {
                if let Some(v) = Store::aux_hget(s, Aux::Claimed, &own) {
                    Store::aux_hdel(s, Aux::Claimed, &own);
                    Store::aux_hset(s, Aux::Claimed, t.as_bytes(), &v);
                    Store::aux_hset(s, Aux::Claimed, mark.as_bytes(), t.as_bytes());
                }
            }
        }
        if let Some(rec) = Store::record(s, seq) {
            let rec = String::from_utf8(rec).unwrap();
            if let Some(rest) = rec.strip_prefix('P') {
                let parts: Vec<&str> = rest.splitn(3, '|').collect();
                let fixed = format!("P{}|{secret}|{}", parts[0], parts[2]);
                Store::put_record(s, seq, fixed.as_bytes());
            }
        }
    }

    /// Every key the engines hold, as `dump` shows a server's.
    fn dump(&self) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        for (q, s) in &self.stores {
            for (k, content) in s.keys(q) {
                let text = match content {
                    Content::Zset(v) => {
                        format!(
                            "{:?}",
                            v.iter().map(|(m, sc)| (m.clone(), mask_text(&sc.to_string()))).collect::<Vec<_>>()
                        )
                    }
                    Content::Hash(h) => {
                        format!("{:?}", h.iter().map(|(f, x)| (f.clone(), mask_text(x))).collect::<BTreeMap<_, _>>())
                    }
                    Content::List(v) => format!("{v:?}"),
                    Content::Stream(v) => stream_text(v),
                };
                out.insert(k, text);
            }
        }
        out
    }
}
