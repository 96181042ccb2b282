//! The fair opening against a real valkey-server, per backend: the pre-queue, the
//! commitment, the opening in the seeded order (recomputed here with the sha1 and
//! sha2 crates, not queue-core's code), later arrivals at the back, a replica holding
//! the same state, and QUEUE.OPENING's bad arguments. Time moves by the test clock.

use redis::Value;
use sha1::{Digest, Sha1};
use sha2::Sha256;
use testkit::{as_string, digest, field_int, field_str, fields, Backend, Client, ValkeyServer};

testkit::backend_tests!(
    the_pre_queue_waits_and_nobody_is_promoted_before_the_opening,
    the_opening_places_everyone_in_the_committed_order,
    a_replica_holds_the_same_opening,
    opening_arguments_are_checked,
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
    assert_eq!(proof(&mut c, "fresh", 0, 10), Vec::<String>::new());
}
