//! The fair opening against a real valkey-server, per backend: the pre-queue, the
//! commitment, the opening in the seeded order (recomputed here with the sha1 and
//! sha2 crates, not queue-core's code), later arrivals at the back, a replica holding
//! the same state, and QUEUE.OPENING's bad arguments; a queue with lanes opening lane
//! by lane (each lane in the seeded order, the proof lane by lane), the same on both
//! backends byte for byte. Time moves by the test clock.

use redis::Value;
use sha1::{Digest, Sha1};
use sha2::Sha256;
use testkit::{as_string, digest, field_int, field_str, fields, Backend, Client, ValkeyServer};

testkit::backend_tests!(
    the_pre_queue_waits_and_nobody_is_promoted_before_the_opening,
    the_opening_places_everyone_in_the_committed_order,
    a_replica_holds_the_same_opening,
    opening_arguments_are_checked,
    a_queue_with_lanes_opens_each_lane_in_the_committed_order,
);

const T0: i64 = 1_700_000_000_000;
const OPENS: i64 = T0 + 60_000;

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}
fn sha1_hex(s: &str) -> String {
    hex(&Sha1::digest(s.as_bytes()))
}

/// The placed order of `users` under `seed`, as docs/commands.md defines it ("A verifiably fair opening").
fn expected_order(seed: &str, users: &[String]) -> Vec<String> {
    let mut keyed: Vec<(String, String)> = users
        .iter()
        .map(|u| {
            let h = sha1_hex(u);
            (sha1_hex(&format!("{seed}:{h}")), h)
        })
        .collect();
    keyed.sort();
    keyed.into_iter().map(|(_, h)| h).collect()
}

fn opening(c: &mut Client, q: &str) -> std::collections::HashMap<String, Value> {
    fields(&c.call("QUEUE.OPENING", &[q]).unwrap())
}

fn proof(c: &mut Client, q: &str, start: i64, count: i64) -> Vec<String> {
    match c.call("QUEUE.OPENING", &[q, "PROOF", &start.to_string(), &count.to_string()]).unwrap() {
        Value::Array(a) => a.iter().map(|v| as_string(v).unwrap()).collect(),
        other => panic!("not an array: {other:?}"),
    }
}

fn scheduled(b: Backend) -> (ValkeyServer, Client) {
    let s = ValkeyServer::builder(b).test_clock().start();
    let mut c = s.client();
    c.set_clock("q", T0);
    c.config_set("q", &[("soft_cap", 3), ("opens_at", OPENS)]);
    (s, c)
}

fn users(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("user-{i:03}")).collect()
}

fn the_pre_queue_waits_and_nobody_is_promoted_before_the_opening(b: Backend) {
    let (_s, mut c) = scheduled(b);
    let o = opening(&mut c, "q");
    assert_eq!(field_str(&o, "state").as_deref(), Some("scheduled"));
    assert_eq!(o.get("lanes"), None, "no lanes field without lanes");
    assert_eq!(field_int(&o, "opensAt"), OPENS);
    assert_eq!(o.get("seed"), Some(&Value::Nil));
    assert_eq!(o.get("openedAt"), Some(&Value::Nil));
    let commitment = field_str(&o, "commitment").unwrap();
    assert_eq!(commitment.len(), 64);
    for u in users(10) {
        let r = c.enter("q", &u, "n");
        assert_eq!(field_str(&r, "status").as_deref(), Some("WAITING"));
        assert_eq!(field_int(&r, "rank"), 0);
        assert_eq!(field_int(&r, "opensAt"), OPENS);
        assert_eq!(r.get("estimatedWaitSeconds"), Some(&Value::Nil));
    }
    // Re-entry keeps the place (and the count); leave takes out, once.
    c.enter("q", "user-000", "again");
    assert_eq!(field_int(&opening(&mut c, "q"), "entrants"), 10);
    assert_eq!(c.leave("q", "user-009"), 1);
    assert_eq!(c.leave("q", "user-009"), 0);
    assert_eq!(field_str(&c.status("q", "user-009"), "status").as_deref(), Some("UNKNOWN"));
    let st = c.status("q", "user-003");
    assert_eq!((field_int(&st, "rank"), field_int(&st, "opensAt")), (0, OPENS));
    // Nobody is promoted before the opening, even with room.
    c.set_clock("q", OPENS - 1);
    let p = c.promote("q", None);
    assert_eq!((field_int(&p, "promoted"), field_int(&p, "waiting")), (0, 0));
    assert_eq!(proof(&mut c, "q", 0, 100), Vec::<String>::new(), "no proof before the opening");
    // Moving the time keeps the commitment.
    c.config_set("q", &[("opens_at", OPENS + 1_000)]);
    assert_eq!(field_str(&opening(&mut c, "q"), "commitment"), Some(commitment));
    let info = c.info("q");
    assert_eq!(
        (field_int(&info, "waiting"), field_int(&info, "left"), field_int(&info, "opens_at")),
        (0, 1, OPENS + 1_000)
    );
}

fn the_opening_places_everyone_in_the_committed_order(b: Backend) {
    let (_s, mut c) = scheduled(b);
    let commitment = field_str(&opening(&mut c, "q"), "commitment").unwrap();
    let all = users(40);
    for u in &all {
        c.enter("q", u, &format!("n-{u}"));
    }
    // The first command at the opening time opens the queue: here a STATUS.
    c.set_clock("q", OPENS);
    let first = c.status("q", &all[0]);
    assert_eq!(first.get("opensAt"), Some(&Value::Nil));
    let o = opening(&mut c, "q");
    assert_eq!(field_str(&o, "state").as_deref(), Some("open"));
    assert_eq!(o.get("lanes"), None, "no lanes field without lanes");
    assert_eq!((field_int(&o, "openedAt"), field_int(&o, "entrants")), (OPENS, 40));
    let seed = field_str(&o, "seed").unwrap();
    assert_eq!(hex(&Sha256::digest(seed.as_bytes())), commitment, "SHA-256(seed) is the commitment");
    let want = expected_order(&seed, &all);
    let mut got = proof(&mut c, "q", 0, 7);
    while got.len() < 40 {
        let page = proof(&mut c, "q", got.len() as i64, 7);
        assert!(!page.is_empty());
        got.extend(page);
    }
    assert_eq!(got, want);
    // Every rank is the placed one.
    for u in &all {
        let r = c.status("q", u);
        let pos = want.iter().position(|h| *h == sha1_hex(u)).unwrap() as i64;
        assert_eq!(field_int(&r, "rank"), pos + 1, "{u}");
        assert_eq!(field_str(&r, "nickname"), Some(format!("n-{u}")));
    }
    // Promotion follows the placed order; a later arrival joins at the back.
    c.set_clock("q", OPENS + 10);
    assert_eq!(field_int(&c.promote("q", None), "promoted"), 3);
    for (i, h) in want.iter().enumerate().take(5) {
        let u = all.iter().find(|u| sha1_hex(u) == *h).unwrap();
        let status = field_str(&c.status("q", u), "status").unwrap();
        assert_eq!(status, if i < 3 { "PROMOTED" } else { "WAITING" }, "{u}");
    }
    assert_eq!(field_int(&c.enter("q", "late", "l"), "rank"), 38);
    assert_eq!(field_int(&opening(&mut c, "q"), "entrants"), 40);
}

fn a_replica_holds_the_same_opening(b: Backend) {
    let primary = ValkeyServer::builder(b).test_clock().start();
    let replica = ValkeyServer::builder(b).test_clock().start_replica_of(&primary);
    let mut c = primary.client();
    c.set_clock("q", T0);
    c.config_set("q", &[("soft_cap", 2), ("opens_at", OPENS)]);
    for u in users(25) {
        c.enter("q", &u, "n");
    }
    c.set_clock("q", OPENS);
    c.promote("q", None);
    let acked: i64 = redis::cmd("WAIT").arg(1).arg(5000).query(&mut c.con).unwrap();
    assert_eq!(acked, 1);
    let mut rc = replica.conn();
    assert_eq!(digest(&mut c.con), digest(&mut rc), "replica digest differs from the primary's");
    let mut r = replica.client();
    assert_eq!(opening(&mut c, "q"), opening(&mut r, "q"));
    assert_eq!(proof(&mut c, "q", 0, 100), proof(&mut r, "q", 0, 100));
}

fn opening_arguments_are_checked(b: Backend) {
    let (s, mut c) = scheduled(b);
    c.enter("q", "a", "a");
    let mut raw = s.conn();
    let before = digest(&mut raw);
    let arity = "ERR wrong number of arguments for 'queue.opening' command";
    let cases: Vec<(&str, Vec<&str>, &str)> = vec![
        ("QUEUE.OPENING", vec!["q", "PROOF"], arity),
        ("QUEUE.OPENING", vec!["q", "PROOF", "0"], arity),
        ("QUEUE.OPENING", vec!["q", "PROOF", "0", "1", "2"], arity),
        ("QUEUE.OPENING", vec!["q", "LIST", "0", "1"], "ERR syntax error"),
        ("QUEUE.OPENING", vec!["q", "PROOF", "x", "1"], "ERR value is not an integer or out of range"),
        ("QUEUE.OPENING", vec!["q", "PROOF", "-1", "1"], "ERR start must be an integer from 0 to 9007199254740991"),
        ("QUEUE.OPENING", vec!["q", "PROOF", "0", "0"], "ERR count must be an integer from 1 to 100000"),
        ("QUEUE.OPENING", vec!["q", "PROOF", "0", "100001"], "ERR count must be an integer from 1 to 100000"),
        ("QUEUE.OPENING", vec!["a b"], "ERR invalid queue name"),
        (
            "QUEUE.CONFIG",
            vec!["q", "SET", "opens_at", "-1"],
            "ERR opens_at must be an integer from 0 to 253402300799999",
        ),
        (
            "QUEUE.CONFIG",
            vec!["q", "SET", "opens_at", "253402300800000"],
            "ERR opens_at must be an integer from 0 to 253402300799999",
        ),
        ("QUEUE.CONFIG", vec!["q", "SET", "opens_at", "soon"], "ERR value is not an integer or out of range"),
    ];
    for (cmd, args, want) in &cases {
        let got = c.err(cmd, args);
        assert!(got.starts_with(want), "{cmd} {args:?}: got {got:?}, want {want:?}");
        assert_eq!(digest(&mut raw), before, "{cmd} {args:?} changed the data");
    }
    // A queue never scheduled answers state none.
    let o = opening(&mut c, "fresh");
    assert_eq!(field_str(&o, "state").as_deref(), Some("none"));
    assert_eq!((field_int(&o, "opensAt"), field_int(&o, "entrants")), (0, 0));
    assert_eq!(o.get("commitment"), Some(&Value::Nil));
    assert_eq!(o.get("lanes"), None, "no lanes field without lanes");
    assert_eq!(proof(&mut c, "fresh", 0, 10), Vec::<String>::new());
}

fn fields_of(c: &mut Client, name: &str, args: &[&str]) -> std::collections::HashMap<String, Value> {
    fields(&c.call(name, args).unwrap_or_else(|e| panic!("{name} {args:?}: {e}")))
}

/// Lanes and an opening together: each entrant keeps its lane in the pre-queue (the
/// lane of its latest entry), an access code's use is consumed at entry, and at the
/// opening each lane's entrants are placed at the back of that lane in the seeded
/// order; the proof lists lane by lane.
fn a_queue_with_lanes_opens_each_lane_in_the_committed_order(b: Backend) {
    let s = ValkeyServer::builder(b).test_clock().start();
    let mut c = s.client();
    c.set_clock("q", T0);
    c.config_set("q", &[("soft_cap", 2)]);
    c.call("QUEUE.CONFIG", &["q", "SET", "lanes", "first,middle,last"]).unwrap();
    c.config_set("q", &[("opens_at", OPENS)]);
    // And the other way round: lanes set on a queue already scheduled.
    c.set_clock("r", T0);
    c.config_set("r", &[("opens_at", OPENS)]);
    c.call("QUEUE.CONFIG", &["r", "SET", "lanes", "a,b"]).unwrap();
    let code = "c0de".repeat(16);
    c.call("QUEUE.CODES", &["q", "ADD", "first", "1", &code]).unwrap();
    let (mut first, mut middle, mut last) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..12 {
        let u = format!("f-{i:02}");
        let r = fields_of(&mut c, "QUEUE.ENTER", &["q", &u, "n", "LANE", "first"]);
        assert_eq!((field_str(&r, "status").as_deref(), field_int(&r, "rank")), (Some("WAITING"), 0));
        assert_eq!(field_int(&r, "opensAt"), OPENS);
        first.push(u);
    }
    fields_of(&mut c, "QUEUE.ENTER", &["q", "by-code", "n", "CODE", &code]);
    first.push("by-code".into());
    assert!(
        c.err("QUEUE.ENTER", &["q", "late-code", "n", "CODE", &code]).starts_with("NOCODE"),
        "the code's one use is consumed"
    );
    for i in 0..9 {
        let u = format!("m-{i:02}");
        fields_of(&mut c, "QUEUE.ENTER", &["q", &u, "n", "LANE", "middle"]);
        middle.push(u);
    }
    for i in 0..15 {
        let u = format!("l-{i:02}");
        c.enter("q", &u, "n");
        last.push(u);
    }
    // Entering again before the opening keeps the place but takes the new lane.
    fields_of(&mut c, "QUEUE.ENTER", &["q", "m-00", "n", "LANE", "first"]);
    middle.retain(|u| u != "m-00");
    first.push("m-00".into());
    let o = opening(&mut c, "q");
    assert_eq!(field_int(&o, "entrants"), 37);
    let per_lane = vec![("first".into(), 14), ("middle".into(), 8), ("last".into(), 15)];
    assert_eq!(lanes_of(&o), Some(per_lane.clone()), "the pre-queue's entrants per lane");
    assert_eq!(lanes_of(&opening(&mut c, "r")), Some(vec![("a".into(), 0), ("b".into(), 0)]));
    assert_eq!(
        c.err("QUEUE.CONFIG", &["q", "SET", "lanes", "x,y"]),
        "ERR lanes can change only while nobody waits",
        "the pre-queue's entries name their lanes"
    );
    // The opening.
    c.set_clock("q", OPENS);
    c.status("q", "f-00");
    let o = opening(&mut c, "q");
    assert_eq!((field_str(&o, "state").as_deref(), field_int(&o, "entrants")), (Some("open"), 37));
    let seed = field_str(&o, "seed").unwrap();
    let mut want = expected_order(&seed, &first);
    want.extend(expected_order(&seed, &middle));
    want.extend(expected_order(&seed, &last));
    assert_eq!(proof(&mut c, "q", 0, 100), want, "the proof lists lane by lane, each in the seeded order");
    let runs: String = redis::cmd("HGET").arg("queue:{q}:opening").arg("lane_entrants").query(&mut c.con).unwrap();
    assert_eq!(runs, format!("{},{},{}", first.len(), middle.len(), last.len()));
    assert_eq!(lanes_of(&o), Some(per_lane), "each lane's run of the proof");
    // A verifier splits the proof by these counts: each run is in the seeded order.
    let mut at = 0;
    for (_, n) in lanes_of(&o).unwrap() {
        let run = &want[at..at + n as usize];
        let mut sorted = run.to_vec();
        sorted.sort_by_key(|h| (sha1_hex(&format!("{seed}:{h}")), h.clone()));
        assert_eq!(run, &sorted[..]);
        at += n as usize;
    }
    assert_eq!(at, want.len());
    for (lane, users) in [("first", &first), ("middle", &middle), ("last", &last)] {
        for u in users.iter() {
            let r = c.status("q", u);
            let pos = want.iter().position(|h| *h == sha1_hex(u)).unwrap() as i64;
            assert_eq!(field_int(&r, "rank"), pos + 1, "{u}");
            assert_eq!(field_str(&r, "lane").as_deref(), Some(lane), "{u}");
        }
    }
    // Admission takes the first lane first; a later arrival joins the back of its lane.
    c.set_clock("q", OPENS + 10);
    assert_eq!(field_int(&c.promote("q", None), "promoted"), 2);
    let head = all_of(&first, &want[..2]);
    for u in &head {
        assert_eq!(field_str(&c.status("q", u), "status").as_deref(), Some("PROMOTED"), "{u}");
    }
    let r = fields_of(&mut c, "QUEUE.ENTER", &["q", "late", "n", "LANE", "middle"]);
    assert_eq!(field_int(&r, "rank"), (first.len() - 2 + middle.len() + 1) as i64, "ahead of the last lane");
}

/// QUEUE.OPENING's `lanes`: (name, entrants) per lane; None when absent.
fn lanes_of(o: &std::collections::HashMap<String, Value>) -> Option<Vec<(String, i64)>> {
    let Value::Array(lanes) = o.get("lanes")? else { panic!("lanes: {:?}", o.get("lanes")) };
    Some(
        lanes
            .iter()
            .map(|l| match l {
                Value::Array(p) => match &p[..] {
                    [Value::BulkString(name), Value::Int(n)] => (String::from_utf8(name.clone()).unwrap(), *n),
                    other => panic!("lane {other:?}"),
                },
                other => panic!("lane {other:?}"),
            })
            .collect(),
    )
}

/// The users of `users` whose idHashes are `hashes`, in that order.
fn all_of(users: &[String], hashes: &[String]) -> Vec<String> {
    hashes.iter().map(|h| users.iter().find(|u| sha1_hex(u) == *h).unwrap().clone()).collect()
}

/// The same entries, lanes, code and opening on both backends, with the seed fixed
/// (written over the drawn one before anyone enters): every reply and the data after
/// the opening are the same, byte for byte.
#[test]
fn both_backends_open_lanes_byte_for_byte() {
    let run = |b: Backend| {
        let s = ValkeyServer::builder(b).test_clock().start();
        let mut c = s.client();
        c.set_clock("q", T0);
        c.config_set("q", &[("soft_cap", 2)]);
        c.call("QUEUE.CONFIG", &["q", "SET", "lanes", "gold,silver,plain"]).unwrap();
        c.config_set("q", &[("opens_at", OPENS)]);
        let seed = "5eed".repeat(16);
        let commitment = hex(&Sha256::digest(seed.as_bytes()));
        redis::cmd("HSET")
            .arg("queue:{q}:opening")
            .arg("seed")
            .arg(&seed)
            .arg("commitment")
            .arg(&commitment)
            .query::<()>(&mut c.con)
            .unwrap();
        let code = "ab".repeat(32);
        let mut replies = vec![c.call("QUEUE.CODES", &["q", "ADD", "silver", "2", &code]).unwrap()];
        for i in 0..30 {
            let u = format!("u{i}");
            let args: Vec<&str> = match i % 4 {
                0 => vec!["q", &u, "n", "LANE", "gold"],
                1 if i < 6 => vec!["q", &u, "n", "CODE", &code],
                2 => vec!["q", &u, "n", "LANE", "silver"],
                _ => vec!["q", &u, "n"],
            };
            replies.push(c.call("QUEUE.ENTER", &args).unwrap());
        }
        replies.push(c.call("QUEUE.OPENING", &["q"]).unwrap());
        c.set_clock("q", OPENS);
        for u in ["u0", "u1", "u2", "u3", "u29"] {
            replies.push(c.call("QUEUE.STATUS", &["q", u]).unwrap());
        }
        replies.push(c.call("QUEUE.OPENING", &["q"]).unwrap());
        replies.push(c.call("QUEUE.OPENING", &["q", "PROOF", "0", "100"]).unwrap());
        replies.push(c.call("QUEUE.CODES", &["q", "COUNTS"]).unwrap());
        (replies, dump(&mut c.con))
    };
    let (module, module_digest) = run(Backend::Module);
    let (lua, lua_digest) = run(Backend::Lua);
    for (i, (m, l)) in module.iter().zip(&lua).enumerate() {
        assert_eq!(m, l, "reply {i}");
    }
    assert_eq!(module.len(), lua.len());
    assert_eq!(module_digest, lua_digest, "the data differ");
}

/// Every key with its type and contents (a stream's entries without their ids,
/// which are clock readings).
fn dump(con: &mut redis::Connection) -> Vec<(String, String)> {
    let mut keys: Vec<String> = redis::cmd("KEYS").arg("*").query(con).unwrap();
    keys.sort();
    let mut out = Vec::new();
    for k in keys {
        let t: String = redis::cmd("TYPE").arg(&k).query(con).unwrap();
        let v: Value = match t.as_str() {
            "hash" => redis::cmd("HGETALL").arg(&k).query(con),
            "zset" => redis::cmd("ZRANGE").arg(&k).arg(0).arg(-1).arg("WITHSCORES").query(con),
            "list" => redis::cmd("LRANGE").arg(&k).arg(0).arg(-1).query(con),
            "string" => redis::cmd("GET").arg(&k).query(con),
            "stream" => redis::cmd("XRANGE").arg(&k).arg("-").arg("+").query(con).map(|v: Value| match v {
                Value::Array(es) => Value::Array(
                    es.into_iter()
                        .map(|e| match e {
                            Value::Array(mut p) if p.len() == 2 => p.remove(1),
                            other => other,
                        })
                        .collect(),
                ),
                other => other,
            }),
            other => panic!("{k}: type {other}"),
        }
        .unwrap();
        let text = match &v {
            Value::Map(m) => {
                let mut f: Vec<String> = m.iter().map(|(a, b)| format!("{a:?}={b:?}")).collect();
                f.sort();
                f.join(" ")
            }
            other => format!("{other:?}"),
        };
        out.push((format!("{k} {t}"), text));
    }
    out
}
