//! FIFO with tickets claimed out of order: an older release numbered a newcomer
//! after the last one in line, which falls at or below the highest number holding a
//! ticket once that holder claims while earlier holders still hold theirs. The
//! newcomer was then taken for a ticket holder: skipped by every PROMOTE, overtaken,
//! and counted as a ticket given back when it left. Each case on both backends, with
//! the test clock; the last two write data the way the older release did and check
//! that it is repaired.

use testkit::{as_int, digest, field_int, field_str, Backend, Client, Rng, ValkeyServer};

testkit::backend_tests!(
    newcomer_after_an_out_of_order_claim_is_served_first,
    expired_tickets_around_a_newcomer_free_their_slots,
    newcomer_leaving_or_reentering_gives_back_no_ticket,
    promote_never_withdraws_a_valid_ticket,
    old_data_with_a_waiter_among_ticket_holders_is_repaired,
    old_data_with_drifted_counters_is_recounted,
    random_old_data_is_repaired_keeping_every_place,
    old_data_loaded_after_a_flush_is_repaired,
    a_repair_that_moves_numbers_writes_a_reset_entry,
);

const T0: i64 = 1_700_000_000_000;

fn server(b: Backend) -> (ValkeyServer, Client) {
    let s = ValkeyServer::builder(b).test_clock().start();
    let mut c = s.client();
    c.set_clock("q", T0);
    (s, c)
}

fn ticket(c: &mut Client, user: &str) -> String {
    let st = c.status("q", user);
    assert_eq!(field_str(&st, "status").as_deref(), Some("PROMOTED"), "{user}: {st:?}");
    field_str(&st, "ticketId").unwrap()
}

fn standing(c: &mut Client, user: &str) -> (String, i64) {
    let st = c.status("q", user);
    (field_str(&st, "status").unwrap(), field_int(&st, "rank"))
}

/// The reproduction: a and b get tickets, b claims, c and d arrive, b leaves.
fn out_of_order_claim(c: &mut Client) {
    c.config_set("q", &[("soft_cap", 2), ("ticket_ttl", 60_000), ("session_lease", 60_000)]);
    assert_eq!(field_str(&c.enter("q", "a", "A"), "status").as_deref(), Some("PROMOTED"));
    assert_eq!(field_str(&c.enter("q", "b", "B"), "status").as_deref(), Some("PROMOTED"));
    let tb = ticket(c, "b");
    c.claim("q", &tb).unwrap();
    let e = c.enter("q", "c", "C");
    assert_eq!((field_str(&e, "status").as_deref(), field_int(&e, "rank")), (Some("WAITING"), 1));
    let e = c.enter("q", "d", "D");
    assert_eq!((field_str(&e, "status").as_deref(), field_int(&e, "rank")), (Some("WAITING"), 2));
    assert_eq!(standing(c, "c"), ("WAITING".into(), 1));
}

fn newcomer_after_an_out_of_order_claim_is_served_first(b: Backend) {
    let (_s, mut c) = server(b);
    out_of_order_claim(&mut c);
    // b's slot goes to c inside SESSION.END; the next PROMOTE has nothing to do.
    assert_eq!(c.end("q", "b"), 1);
    assert_eq!(standing(&mut c, "c").0, "PROMOTED", "c entered first");
    let p = c.promote("q", None);
    assert_eq!(field_int(&p, "promoted"), 0);
    assert_eq!(standing(&mut c, "d"), ("WAITING".into(), 1));
    let i = c.info("q");
    assert_eq!((field_int(&i, "waiting"), field_int(&i, "joining"), field_int(&i, "active")), (1, 2, 0));
}

fn expired_tickets_around_a_newcomer_free_their_slots(b: Backend) {
    let (_s, mut c) = server(b);
    out_of_order_claim(&mut c);
    c.config_set("q", &[("ticket_ttl", 1_000), ("abandon_after", 0)]);
    assert_eq!(c.end("q", "b"), 1);
    // a's ticket (60 s) holds; c gets b's slot with a 1 s ticket (inside SESSION.END).
    assert_eq!(field_int(&c.promote("q", None), "promoted"), 0);
    assert_eq!(standing(&mut c, "c").0, "PROMOTED");
    // Expired tickets are examined in the order they were issued: once a's expires
    // too, both slots come back and d is let in. No slot stays lost.
    c.set_clock("q", T0 + 61_000);
    let p = c.promote("q", None);
    assert_eq!((field_int(&p, "tickets_expired"), field_int(&p, "promoted")), (2, 1), "{p:?}");
    assert_eq!(standing(&mut c, "d").0, "PROMOTED");
    let i = c.info("q");
    assert_eq!((field_int(&i, "waiting"), field_int(&i, "joining"), field_int(&i, "active")), (0, 1, 0));
}

fn newcomer_leaving_or_reentering_gives_back_no_ticket(b: Backend) {
    let (_s, mut c) = server(b);
    out_of_order_claim(&mut c);
    // c leaves: a still holds its ticket, b is inside: 2 of 2 slots in use.
    assert_eq!(c.leave("q", "c"), 1);
    let i = c.info("q");
    assert_eq!((field_int(&i, "waiting"), field_int(&i, "joining"), field_int(&i, "active")), (1, 1, 1));
    // d re-enters: still one ticket out, nobody admitted over the cap.
    assert_eq!(standing(&mut c, "d"), ("WAITING".into(), 1));
    let e = c.enter("q", "d", "D");
    assert_eq!((field_str(&e, "status").as_deref(), field_int(&e, "rank")), (Some("WAITING"), 1));
    let p = c.promote("q", None);
    assert_eq!((field_int(&p, "promoted"), field_int(&p, "joining"), field_int(&p, "active")), (0, 1, 1));
    let i = c.info("q");
    assert_eq!(field_int(&i, "left"), 1);
    assert!(field_int(&i, "joining") >= 0 && field_int(&i, "joining") + field_int(&i, "active") <= 2);
}

fn promote_never_withdraws_a_valid_ticket(b: Backend) {
    let (_s, mut c) = server(b);
    out_of_order_claim(&mut c);
    let ta = ticket(&mut c, "a");
    assert_eq!(c.end("q", "b"), 1);
    let tc = ticket(&mut c, "c");
    for _ in 0..3 {
        let p = c.promote("q", None);
        assert_eq!((field_int(&p, "promoted"), field_int(&p, "dropped")), (0, 0));
    }
    assert_eq!(field_str(&c.claim("q", &ta).unwrap(), "userId").as_deref(), Some("a"));
    assert_eq!(field_str(&c.claim("q", &tc).unwrap(), "userId").as_deref(), Some("c"));
    assert_eq!(standing(&mut c, "d"), ("WAITING".into(), 1));
}

/// Writes the line as the older release left it after the reproduction and one more
/// PROMOTE: a (1) and d (3) hold tickets, c (2) waits among them, e (4) and f (5)
/// wait behind; `joining` and `p_max` as given.
fn write_old_data(c: &mut Client, joining: i64, p_max: i64) -> (String, String) {
    c.config_set("q", &[("soft_cap", 3), ("ticket_ttl", 60_000), ("session_lease", 60_000)]);
    let exp = T0 + 60_000;
    let (ta, td) = ("1.AAAAAAAAAAAAAAAA".to_string(), "3.DDDDDDDDDDDDDDDD".to_string());
    let mut pipe = redis::pipe();
    for (user, seq) in [("a", 1), ("c", 2), ("d", 3), ("e", 4), ("f", 5)] {
        pipe.cmd("ZADD").arg("queue:{q}:waiting").arg(seq).arg(user).ignore();
    }
    let records = [
        (1, format!("P{exp}|AAAAAAAAAAAAAAAA|A")),
        (2, format!("{T0}:C")),
        (3, format!("P{exp}|DDDDDDDDDDDDDDDD|D")),
        (4, format!("{T0}:E")),
        (5, format!("{T0}:F")),
    ];
    for (seq, rec) in &records {
        pipe.cmd("HSET").arg("queue:{q}:w:0").arg(seq).arg(rec).ignore();
    }
    pipe.cmd("HSET").arg("queue:{q}:stats").arg("joining").arg(joining).arg("p_max").arg(p_max).ignore();
    pipe.query::<()>(&mut c.con).unwrap();
    (ta, td)
}

fn check_repaired(c: &mut Client, ta: &str, td: &str) {
    assert_eq!(standing(c, "c"), ("WAITING".into(), 1), "c entered before e and f");
    assert_eq!(standing(c, "e"), ("WAITING".into(), 2));
    assert_eq!(standing(c, "f"), ("WAITING".into(), 3));
    let i = c.info("q");
    assert_eq!((field_int(&i, "waiting"), field_int(&i, "joining")), (3, 2));
    // Numbers moved after the last ticket holder, in order; the marker is set.
    let line: Vec<(String, i64)> =
        redis::cmd("ZRANGE").arg("queue:{q}:waiting").arg(0).arg(-1).arg("WITHSCORES").query(&mut c.con).unwrap();
    let line: Vec<(&str, i64)> = line.iter().map(|(u, s)| (u.as_str(), *s)).collect();
    assert_eq!(line, vec![("a", 1), ("d", 3), ("c", 4), ("e", 5), ("f", 6)]);
    let rec: Option<String> = redis::cmd("HGET").arg("queue:{q}:w:0").arg(4).query(&mut c.con).unwrap();
    assert!(rec.is_some_and(|r| r.ends_with(":C")));
    let layout: Option<i64> = redis::cmd("HGET").arg("queue:{q}:stats").arg("layout").query(&mut c.con).unwrap();
    assert_eq!(layout, Some(2));
    // c is served next, the tickets out stay good, a newcomer goes to the back.
    let p = c.promote("q", None);
    assert_eq!((field_int(&p, "promoted"), field_int(&p, "dropped")), (1, 0), "{p:?}");
    assert_eq!(standing(c, "c").0, "PROMOTED");
    assert_eq!(standing(c, "e"), ("WAITING".into(), 1));
    let e = c.enter("q", "g", "G");
    assert_eq!(field_int(&e, "rank"), 3);
    assert_eq!(field_str(&c.claim("q", ta).unwrap(), "userId").as_deref(), Some("a"));
    assert_eq!(field_str(&c.claim("q", td).unwrap(), "userId").as_deref(), Some("d"));
    let i = c.info("q");
    assert_eq!((field_int(&i, "waiting"), field_int(&i, "joining"), field_int(&i, "active")), (3, 1, 2));
}

fn old_data_with_a_waiter_among_ticket_holders_is_repaired(b: Backend) {
    let (_s, mut c) = server(b);
    let (ta, td) = write_old_data(&mut c, 2, 3);
    check_repaired(&mut c, &ta, &td);
}

fn old_data_with_drifted_counters_is_recounted(b: Backend) {
    // A waiter among the holders who left was counted as a ticket given back.
    let (_s, mut c) = server(b);
    let (ta, td) = write_old_data(&mut c, -1, 3);
    // The first command to touch the line repairs it, whichever it is.
    assert_eq!(as_int(&c.call("QUEUE.LEAVE", &["q", "nobody"]).unwrap()), Some(0));
    check_repaired(&mut c, &ta, &td);
}

/// The module remembers which queues it saw with the layout marker; a flush (or a
/// load) forgets them, so older data written afterwards is still repaired.
fn old_data_loaded_after_a_flush_is_repaired(b: Backend) {
    let (_s, mut c) = server(b);
    c.enter("q", "someone", "S");
    c.status("q", "someone");
    let _: () = redis::cmd("FLUSHALL").query(&mut c.con).unwrap();
    c.set_clock("q", T0);
    let (ta, td) = write_old_data(&mut c, 2, 3);
    check_repaired(&mut c, &ta, &td);
}

/// Random lines as the older release could leave them (numbers rising with gaps,
/// ticket holders only up to `p_max`, waiting users anywhere, `joining` off by one
/// or not), each repaired by a random first command, with a replica attached: the
/// order of the line is kept, ticket holders keep their numbers and their tickets
/// claim, waiting users get ranks 1..n in line order after every holder, counters
/// are recounted, and the replica ends with the primary's data.
fn random_old_data_is_repaired_keeping_every_place(b: Backend) {
    let primary = ValkeyServer::builder(b).test_clock().start();
    let replica = ValkeyServer::builder(b).test_clock().start_replica_of(&primary);
    let mut rc = replica.conn();
    let mut c = primary.client();
    let mut rng = Rng(0x0FF1_CE00_D00D);
    for case in 0..150 {
        let q = format!("r{case}");
        c.set_clock(&q, T0);
        c.config_set(&q, &[("soft_cap", 1000), ("ticket_ttl", 60_000), ("abandon_after", 0)]);
        let n = rng.range(1, 60) as usize;
        let mut seq = 0;
        let mut line = Vec::new(); // (user, seq, holds)
        for i in 0..n {
            seq += rng.range(1, 3);
            line.push((format!("u{i}"), seq, rng.chance(40)));
        }
        // p_max: at or above the last holder; nobody after it holds a ticket.
        let last_holder = line.iter().filter(|m| m.2).map(|m| m.1).max().unwrap_or(0);
        let p_max = if last_holder == 0 { 0 } else { last_holder + rng.range(0, 4) };
        for m in line.iter_mut() {
            if m.1 > p_max {
                m.2 = false;
            }
        }
        let holders = line.iter().filter(|m| m.2).count() as i64;
        let mut pipe = redis::pipe();
        let key = |s: &str| format!("queue:{{{q}}}:{s}");
        for (i, (user, seq, holds)) in line.iter().enumerate() {
            pipe.cmd("ZADD").arg(key("waiting")).arg(*seq).arg(user).ignore();
            let rec = if *holds { format!("P{}|{:0>16}|n{i}", T0 + 60_000, i) } else { format!("{T0}:n{i}") };
            pipe.cmd("HSET").arg(key(&format!("w:{}", seq / 32))).arg(*seq).arg(rec).ignore();
        }
        let joining = holders + rng.range(-1, 1);
        pipe.cmd("HSET").arg(key("stats")).arg("joining").arg(joining).arg("p_max").arg(p_max).ignore();
        pipe.query::<()>(&mut c.con).unwrap();

        // Any command that reads the line repairs it first.
        let first = rng.below(4);
        let _ = match first {
            0 => c.call("QUEUE.STATUS", &[&q, "nobody"]),
            1 => c.call("QUEUE.LEAVE", &[&q, "nobody"]),
            2 => c.call("QUEUE.PROMOTE", &[&q, "MAX", "0"]),
            _ => c.call("TICKET.CLAIM", &[&q, "1.AAAAAAAAAAAAAAAA"]),
        };
        let stored: Vec<(String, i64)> =
            redis::cmd("ZRANGE").arg(key("waiting")).arg(0).arg(-1).arg("WITHSCORES").query(&mut c.con).unwrap();
        // Ticket holders first, with their numbers; then waiting users, in the order
        // they entered, each numbered after the one before.
        let holders_first: Vec<&(String, i64, bool)> =
            line.iter().filter(|m| m.2).chain(line.iter().filter(|m| !m.2)).collect();
        let users: Vec<&str> = stored.iter().map(|m| m.0.as_str()).collect();
        let want: Vec<&str> = holders_first.iter().map(|m| m.0.as_str()).collect();
        assert_eq!(users, want, "case {case}: waiting users must follow every ticket holder, in entry order");
        let mut last = 0;
        let mut rank = 0;
        for ((user, seq, holds), (_, now_seq)) in holders_first.iter().map(|m| (&m.0, &m.1, &m.2)).zip(&stored) {
            let st = c.status(&q, user);
            if *holds {
                assert_eq!(now_seq, seq, "case {case}: holder {user} was renumbered");
                assert_eq!(field_str(&st, "status").as_deref(), Some("PROMOTED"), "case {case}: {user}");
                assert_eq!(field_str(&st, "ticketId"), Some(format!("{seq}.{:0>16}", &user[1..])));
            } else {
                rank += 1;
                assert_eq!(field_str(&st, "status").as_deref(), Some("WAITING"), "case {case}: {user}");
                assert_eq!(field_int(&st, "rank"), rank, "case {case}: rank of {user}");
            }
            assert!(*now_seq > last, "case {case}: {user} numbered {now_seq} after {last}");
            last = *now_seq;
        }
        let i = c.info(&q);
        assert_eq!(field_int(&i, "joining"), holders, "case {case}");
        assert_eq!(field_int(&i, "waiting"), rank, "case {case}");
        // The first waiting user is served next; a newcomer goes to the back.
        let p = c.promote(&q, Some(1));
        assert_eq!(field_int(&p, "promoted"), i64::from(rank > 0), "case {case}: {p:?}");
        if let Some(first) = line.iter().find(|m| !m.2) {
            assert_eq!(field_str(&c.status(&q, &first.0), "status").as_deref(), Some("PROMOTED"), "case {case}");
        }
        let e = c.enter(&q, "newcomer", "N");
        // Behind those still waiting; in at once (rank 0) when nobody is.
        assert_eq!(field_int(&e, "rank"), if rank >= 2 { rank } else { 0 }, "case {case}");
        for (user, seq, holds) in &line {
            if *holds {
                let t = format!("{seq}.{:0>16}", &user[1..]);
                assert_eq!(field_str(&c.claim(&q, &t).unwrap(), "userId").as_deref(), Some(user.as_str()));
            }
        }
    }
    let acked: i64 = redis::cmd("WAIT").arg(1).arg(5000).query(&mut c.con).unwrap();
    assert_eq!(acked, 1);
    if digest(&mut c.con) != digest(&mut rc) {
        let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut c.con).unwrap();
        let differ: Vec<(String, String, String)> = keys
            .into_iter()
            .filter_map(|k| {
                let dump = |con: &mut redis::Connection| -> String {
                    let t: String = redis::cmd("TYPE").arg(&k).query(con).unwrap();
                    let v: redis::Value = match t.as_str() {
                        "zset" => redis::cmd("ZRANGE").arg(&k).arg(0).arg(-1).arg("WITHSCORES").query(con).unwrap(),
                        "hash" => redis::cmd("HGETALL").arg(&k).query(con).unwrap(),
                        _ => redis::cmd("GET").arg(&k).query(con).unwrap(),
                    };
                    format!("{v:?}")
                };
                let (p, r) = (dump(&mut c.con), dump(&mut rc));
                (p != r).then_some((k, p, r))
            })
            .collect();
        panic!("replica differs from the primary: {differ:?}");
    }
}

/// A layout repair moves waiting users' numbers in a way no entry lists: the change
/// log gets one entry with `reset` (docs/commands.md, "The change log and watchers"),
/// so watchers ask again; data already in the current layout writes none.
fn a_repair_that_moves_numbers_writes_a_reset_entry(b: Backend) {
    let (_s, mut c) = server(b);
    write_old_data(&mut c, 2, 3);
    assert_eq!(as_int(&c.call("QUEUE.LEAVE", &["q", "nobody"]).unwrap()), Some(0));
    let log: Vec<(String, Vec<(String, String)>)> =
        redis::cmd("XRANGE").arg("queue:{q}:log").arg("-").arg("+").query(&mut c.con).unwrap();
    let fields: Vec<Vec<(String, String)>> = log.into_iter().map(|(_, f)| f).collect();
    let want: Vec<(String, String)> =
        [("n", "1"), ("reset", "1"), ("waiting", "3")].iter().map(|(f, v)| (f.to_string(), v.to_string())).collect();
    assert_eq!(fields, vec![want]);
    let xlen = |c: &mut Client| -> i64 { redis::cmd("XLEN").arg("queue:{q}:log").query(&mut c.con).unwrap() };
    c.status("q", "e");
    assert_eq!(xlen(&mut c), 1, "repaired once");
}
