//! Bad arguments get a clear error and change nothing; random argument vectors never
//! hurt the server.

use proptest::prelude::*;
use testkit::{digest, Backend, Client, ValkeyServer};

testkit::backend_tests!(bad_arguments_are_refused_and_change_nothing, random_argument_vectors_never_hurt);

/// A queue with someone waiting (watched by push instance `pod`), someone promoted
/// and someone inside.
fn populated(b: Backend) -> (ValkeyServer, Client, String) {
    let s = ValkeyServer::start(b);
    let mut c = s.client();
    c.config_set("q", &[("soft_cap", 2)]);
    let t = testkit::field_str(&c.enter("q", "inside", "i"), "ticketId").unwrap();
    c.call("TICKET.CLAIM", &["q", &t, "HOLDER", "tab-1"]).expect("CLAIM with a holder");
    let t = testkit::field_str(&c.enter("q", "promoted", "p"), "ticketId").unwrap();
    c.enter("q", "waiting", "w");
    c.call("QUEUE.WATCH", &["q", "pod", "30000", "waiting"]).expect("WATCH");
    (s, c, t)
}

const ARITY: &str = "ERR wrong number of arguments for";
const BAD_USER: &str = "ERR invalid userId: 1 to 64 characters from A-Z a-z 0-9 . _ : @ -";
const BAD_QUEUE: &str = "ERR invalid queue name: 1 to 64 characters from A-Z a-z 0-9 . _ : -";
const BAD_NICK: &str = "ERR invalid nickname: 1 to 32 bytes, no control characters";
const NOT_INT: &str = "ERR value is not an integer or out of range";
const BAD_INSTANCE: &str = "ERR invalid instance: 1 to 64 characters from A-Z a-z 0-9 . _ : @ -";
const BAD_LEASE: &str = "ERR leaseMs must be an integer from 1 to 600000";
const SYNTAX: &str = "ERR syntax error";
const BAD_CODE: &str = "ERR invalid code: 64 hex digits 0-9 a-f (its SHA-256)";
const NO_LANES: &str = "ERR this queue has no lanes";
const NOCODE: &str = "NOCODE unknown or used-up access code";
const WRONGLANE: &str = "WRONGLANE the access code is for another lane";
const USES: &str = "ERR uses must be an integer from 1 to 1000000";
const BAD_LANES: &str =
    "ERR lanes must be up to 8 distinct names of 1 to 32 characters from A-Z a-z 0-9 _ -, separated by commas";
const BAD_HOLDER: &str = "ERR invalid holder: 1 to 64 characters from A-Z a-z 0-9 . _ : @ -";
const BAD_ENTRY: &str = "ERR entry must be one of open, identified, invite";

fn bad_arguments_are_refused_and_change_nothing(b: Backend) {
    let (s, mut c, ticket) = populated(b);
    let mut raw = s.conn();
    let long = "x".repeat(65);
    // A queue with lanes where someone waits; a code of `presale`, one used up.
    let (code, other_code, used_code) = ("a".repeat(64), "b".repeat(64), "d".repeat(64));
    let upper_code = "A".repeat(64);
    c.call("QUEUE.CONFIG", &["l", "SET", "lanes", "presale,general", "soft_cap", "0"]).expect("lanes");
    c.call("QUEUE.CODES", &["l", "ADD", "presale", "1", &code]).expect("ADD");
    c.call("QUEUE.CODES", &["l", "ADD", "presale", "1", &used_code]).expect("ADD");
    c.call("QUEUE.ENTER", &["l", "w", "w", "CODE", &used_code]).expect("ENTER with a code");
    // The ticket `inside` used, claimed again below by a holder it never had.
    let used: String = redis::cmd("HGET").arg("queue:{q}:claimed").arg("#inside").query(&mut raw).unwrap();
    let cases: Vec<(&str, Vec<&str>, String)> = vec![
        ("QUEUE.ENTER", vec!["q", "u"], format!("{ARITY} 'queue.enter' command")),
        // QUEUE.ENTER Q userId nickname [LANE l] [CODE h]: options in pairs, each once.
        ("QUEUE.ENTER", vec!["q", "u", "n", "extra"], SYNTAX.into()),
        ("QUEUE.ENTER", vec!["q", "u", "n", "LANE"], SYNTAX.into()),
        ("QUEUE.ENTER", vec!["q", "u", "n", "FLOOR", "x"], SYNTAX.into()),
        ("QUEUE.ENTER", vec!["q", "u", "n", "LANE", "a", "lane", "b"], SYNTAX.into()),
        ("QUEUE.ENTER", vec!["q", "u", "n", "CODE", "abc"], BAD_CODE.into()),
        ("QUEUE.ENTER", vec!["q", "u", "n", "CODE", &upper_code], BAD_CODE.into()),
        ("QUEUE.ENTER", vec!["q", "u", "n", "CODE", &code, "CODE", &code], SYNTAX.into()),
        // Lanes and codes in a queue without lanes.
        ("QUEUE.ENTER", vec!["q", "u", "n", "LANE", "presale"], NO_LANES.into()),
        ("QUEUE.ENTER", vec!["q", "u", "n", "CODE", &code], NO_LANES.into()),
        ("QUEUE.CODES", vec!["q", "ADD", "presale", "1", &code], NO_LANES.into()),
        // A queue with lanes: unknown lanes and codes, a code of another lane.
        ("QUEUE.ENTER", vec!["l", "u", "n", "LANE", "vip"], "ERR unknown lane 'vip'".into()),
        ("QUEUE.ENTER", vec!["l", "u", "n", "CODE", &other_code], NOCODE.into()),
        ("QUEUE.ENTER", vec!["l", "u", "n", "CODE", &used_code], NOCODE.into()),
        ("QUEUE.ENTER", vec!["l", "u", "n", "CODE", &code, "LANE", "general"], WRONGLANE.into()),
        ("QUEUE.ENTER", vec!["l", "u", "n", "LANE", "general", "CODE", &code], WRONGLANE.into()),
        ("QUEUE.CODES", vec!["l"], format!("{ARITY} 'queue.codes' command")),
        ("QUEUE.CODES", vec!["l", "ADD", "presale", "1"], format!("{ARITY} 'queue.codes' command")),
        ("QUEUE.CODES", vec!["l", "ADD", "vip", "1", &code], "ERR unknown lane 'vip'".into()),
        ("QUEUE.CODES", vec!["l", "ADD", "presale", "0", &code], USES.into()),
        ("QUEUE.CODES", vec!["l", "ADD", "presale", "1000001", &code], USES.into()),
        ("QUEUE.CODES", vec!["l", "ADD", "presale", "x", &code], NOT_INT.into()),
        ("QUEUE.CODES", vec!["l", "ADD", "presale", "1", &code, "nothex"], BAD_CODE.into()),
        ("QUEUE.CODES", vec!["l", "REMOVE"], format!("{ARITY} 'queue.codes' command")),
        ("QUEUE.CODES", vec!["l", "REMOVE", "zz"], BAD_CODE.into()),
        ("QUEUE.CODES", vec!["l", "COUNTS", "x"], format!("{ARITY} 'queue.codes' command")),
        ("QUEUE.CODES", vec!["l", "CLEAR"], SYNTAX.into()),
        ("QUEUE.CODES", vec!["a{b}", "COUNTS"], BAD_QUEUE.into()),
        ("QUEUE.CONFIG", vec!["l", "SET", "lanes", "a,a"], BAD_LANES.into()),
        ("QUEUE.CONFIG", vec!["l", "SET", "lanes", "a,,b"], BAD_LANES.into()),
        ("QUEUE.CONFIG", vec!["l", "SET", "lanes", "a b,c"], BAD_LANES.into()),
        ("QUEUE.CONFIG", vec!["l", "SET", "lanes", "a,b,c,d,e,f,g,h,i"], BAD_LANES.into()),
        // People wait in `l`: its lanes stay.
        (
            "QUEUE.CONFIG",
            vec!["l", "SET", "lanes", "presale,general,late"],
            "ERR lanes can change only while nobody waits".into(),
        ),
        ("QUEUE.ENTER", vec!["q", "", "n"], BAD_USER.into()),
        ("QUEUE.ENTER", vec!["q", "a b", "n"], BAD_USER.into()),
        ("QUEUE.ENTER", vec!["q", &long, "n"], BAD_USER.into()),
        ("QUEUE.ENTER", vec!["q", "u", ""], BAD_NICK.into()),
        ("QUEUE.ENTER", vec!["q", "u", "a\nb"], BAD_NICK.into()),
        ("QUEUE.ENTER", vec!["q", "u", &long], BAD_NICK.into()),
        ("QUEUE.ENTER", vec!["a{b}", "u", "n"], BAD_QUEUE.into()),
        ("QUEUE.ENTER", vec!["", "u", "n"], BAD_QUEUE.into()),
        ("QUEUE.STATUS", vec!["q"], format!("{ARITY} 'queue.status' command")),
        ("QUEUE.STATUS", vec!["q", "a|b"], BAD_USER.into()),
        ("QUEUE.RANKS", vec!["q"], format!("{ARITY} 'queue.ranks' command")),
        ("QUEUE.RANKS", vec!["q", "ok", "not ok"], BAD_USER.into()),
        ("QUEUE.LEAVE", vec!["q", "waiting", "x"], format!("{ARITY} 'queue.leave' command")),
        ("QUEUE.PROMOTE", vec!["q", "MAX"], format!("{ARITY} 'queue.promote' command")),
        ("QUEUE.PROMOTE", vec!["q", "MAX", "-5"], "ERR MAX must be an integer from 0 to 100000".into()),
        ("QUEUE.PROMOTE", vec!["q", "MAX", "100001"], "ERR MAX must be an integer from 0 to 100000".into()),
        ("QUEUE.PROMOTE", vec!["q", "MAX", "ten"], NOT_INT.into()),
        ("QUEUE.PROMOTE", vec!["q", "MAX", "99999999999999999999"], NOT_INT.into()),
        ("QUEUE.PROMOTE", vec!["q", "LIMIT", "3"], "ERR syntax error".into()),
        ("TICKET.CLAIM", vec!["q"], format!("{ARITY} 'ticket.claim' command")),
        ("TICKET.CLAIM", vec!["q", "nope"], "NOTICKET unknown or already used ticket".into()),
        // TICKET.CLAIM Q ticketId [HOLDER h]: checked before anything is read.
        ("TICKET.CLAIM", vec!["q", &ticket, "HOLDER"], format!("{ARITY} 'ticket.claim' command")),
        ("TICKET.CLAIM", vec!["q", &ticket, "HOLDER", "h", "x"], format!("{ARITY} 'ticket.claim' command")),
        ("TICKET.CLAIM", vec!["q", &ticket, "OWNER", "h"], "ERR syntax error".into()),
        ("TICKET.CLAIM", vec!["q", &ticket, "HOLDER", ""], BAD_HOLDER.into()),
        ("TICKET.CLAIM", vec!["q", &ticket, "HOLDER", "a b"], BAD_HOLDER.into()),
        ("TICKET.CLAIM", vec!["q", &ticket, "HOLDER", "{h}"], BAD_HOLDER.into()),
        ("TICKET.CLAIM", vec!["q", &ticket, "HOLDER", &long], BAD_HOLDER.into()),
        (
            "TICKET.CLAIM",
            vec!["q", "a b", "HOLDER", "h"],
            "ERR invalid ticketId: 1 to 64 characters from A-Z a-z 0-9 . _ : @ -".into(),
        ),
        ("TICKET.CLAIM", vec!["a{b}", &ticket, "HOLDER", "h"], BAD_QUEUE.into()),
        // A used ticket claimed again by a holder that never claimed it.
        ("TICKET.CLAIM", vec!["q", &used, "HOLDER", "h"], "NOTICKET unknown or already used ticket".into()),
        // QUEUE.PASS Q userId nickname [HOLDER h]: ENTER's and CLAIM's checks.
        ("QUEUE.PASS", vec!["q", "u"], format!("{ARITY} 'queue.pass' command")),
        ("QUEUE.PASS", vec!["q", "u", "n", "HOLDER"], format!("{ARITY} 'queue.pass' command")),
        ("QUEUE.PASS", vec!["q", "u", "n", "HOLDER", "h", "x"], format!("{ARITY} 'queue.pass' command")),
        ("QUEUE.PASS", vec!["q", "a b", "n"], BAD_USER.into()),
        ("QUEUE.PASS", vec!["q", "u", ""], BAD_NICK.into()),
        ("QUEUE.PASS", vec!["q", "u", "a\nb"], BAD_NICK.into()),
        ("QUEUE.PASS", vec!["q", "u", "n", "OWNER", "h"], "ERR syntax error".into()),
        ("QUEUE.PASS", vec!["q", "u", "n", "HOLDER", "a b"], BAD_HOLDER.into()),
        ("QUEUE.PASS", vec!["q", "u", "n", "HOLDER", &long], BAD_HOLDER.into()),
        ("QUEUE.PASS", vec!["a{b}", "u", "n"], BAD_QUEUE.into()),
        // QUEUE.SOLD with USER reports at least one unit.
        ("QUEUE.SOLD", vec!["q", "0", "USER", "u"], "ERR n must be an integer from 1 to 1000000000000".into()),
        ("SESSION.HEARTBEAT", vec!["q"], format!("{ARITY} 'session.heartbeat' command")),
        ("SESSION.END", vec!["q", "a b"], BAD_USER.into()),
        ("QUEUE.INFO", vec!["q", "x"], format!("{ARITY} 'queue.info' command")),
        ("QUEUE.CONFIG", vec!["q", "GET"], format!("{ARITY} 'queue.config' command")),
        ("QUEUE.CONFIG", vec!["q", "GET", "colour"], "ERR unknown config field 'colour'".into()),
        ("QUEUE.CONFIG", vec!["q", "SET", "soft_cap"], format!("{ARITY} 'queue.config' command")),
        (
            "QUEUE.CONFIG",
            vec!["q", "SET", "soft_cap", "-1"],
            "ERR soft_cap must be an integer from 0 to 10000000".into(),
        ),
        ("QUEUE.CONFIG", vec!["q", "SET", "rate", "1.5"], NOT_INT.into()),
        // All-or-nothing: the good first pair is not applied either.
        (
            "QUEUE.CONFIG",
            vec!["q", "SET", "soft_cap", "5", "batch_max", "0"],
            "ERR batch_max must be an integer from 1 to 100000".into(),
        ),
        ("QUEUE.CONFIG", vec!["q", "FROB", "x"], "ERR syntax error".into()),
        ("QUEUE.CONFIG", vec!["q", "SET", "entry", "closed"], BAD_ENTRY.into()),
        (
            "QUEUE.CONFIG",
            vec!["q", "SET", "entry", "invite", "soft_cap", "-1"],
            "ERR soft_cap must be an integer from 0 to 10000000".into(),
        ),
        ("QUEUE.CONFIG", vec!["q", "SET", "soft_cap", "3", "entry", ""], BAD_ENTRY.into()),
        ("QUEUE.CONFIG", vec!["q", "SET", "entry", "7"], BAD_ENTRY.into()),
        // QUEUE.WATCH Q instance leaseMs [userId ...]: the instance is named like a
        // userId; nothing changes, not even the lease, when anything is refused.
        ("QUEUE.WATCH", vec!["q"], format!("{ARITY} 'queue.watch' command")),
        ("QUEUE.WATCH", vec!["q", "pod"], format!("{ARITY} 'queue.watch' command")),
        ("QUEUE.WATCH", vec!["q", "", "1000"], BAD_INSTANCE.into()),
        ("QUEUE.WATCH", vec!["q", "a b", "1000"], BAD_INSTANCE.into()),
        ("QUEUE.WATCH", vec!["q", "{pod}", "1000", "waiting"], BAD_INSTANCE.into()),
        ("QUEUE.WATCH", vec!["q", &long, "1000"], BAD_INSTANCE.into()),
        ("QUEUE.WATCH", vec!["q", "pod", "0"], BAD_LEASE.into()),
        ("QUEUE.WATCH", vec!["q", "pod", "-1", "waiting"], BAD_LEASE.into()),
        ("QUEUE.WATCH", vec!["q", "pod", "600001"], BAD_LEASE.into()),
        ("QUEUE.WATCH", vec!["q", "pod", "9223372036854775807"], BAD_LEASE.into()),
        ("QUEUE.WATCH", vec!["q", "pod", "1.5"], NOT_INT.into()),
        ("QUEUE.WATCH", vec!["q", "pod", "soon", "waiting"], NOT_INT.into()),
        ("QUEUE.WATCH", vec!["q", "pod", "99999999999999999999"], NOT_INT.into()),
        ("QUEUE.WATCH", vec!["q", "pod", "1000", "waiting", "not ok"], BAD_USER.into()),
        ("QUEUE.WATCH", vec!["q", "pod", "1000", ""], BAD_USER.into()),
        ("QUEUE.WATCH", vec!["a{b}", "pod", "1000"], BAD_QUEUE.into()),
        // QUEUE.UNWATCH Q instance userId [userId ...].
        ("QUEUE.UNWATCH", vec!["q"], format!("{ARITY} 'queue.unwatch' command")),
        ("QUEUE.UNWATCH", vec!["q", "pod"], format!("{ARITY} 'queue.unwatch' command")),
        ("QUEUE.UNWATCH", vec!["q", "a b", "waiting"], BAD_INSTANCE.into()),
        ("QUEUE.UNWATCH", vec!["q", &long, "waiting"], BAD_INSTANCE.into()),
        ("QUEUE.UNWATCH", vec!["q", "pod", "waiting", "a|b"], BAD_USER.into()),
        ("QUEUE.UNWATCH", vec!["", "pod", "waiting"], BAD_QUEUE.into()),
    ];
    let before = digest(&mut raw);
    for (cmd, args, want) in &cases {
        let got = c.err(cmd, args);
        assert!(got.starts_with(want.as_str()), "{cmd} {args:?}: got {got:?}, want {want:?}");
        assert_eq!(digest(&mut raw), before, "{cmd} {args:?} changed the data");
    }
    // The codes' key of another type: ENTER with a code and QUEUE.CODES refuse.
    let _: () = redis::cmd("SET").arg("queue:{wc}:codes").arg("x").query(&mut raw).unwrap();
    c.call("QUEUE.CONFIG", &["wc", "SET", "lanes", "a,b"]).expect("lanes");
    let before = digest(&mut raw);
    for args in [vec!["wc", "u", "n", "CODE", &code], vec!["wc", "COUNTS"], vec!["wc", "ADD", "a", "1", &code]] {
        let cmd = if args.len() == 5 && args[1] == "u" { "QUEUE.ENTER" } else { "QUEUE.CODES" };
        let got = c.err(cmd, &args);
        assert_eq!(got, "WRONGTYPE Operation against a key holding the wrong kind of value", "{cmd} {args:?}");
    }
    assert_eq!(digest(&mut raw), before);
    // Wrong key types: every command refuses, nothing changes.
    let _: () = redis::cmd("SET").arg("queue:{w}:waiting").arg("x").query(&mut raw).unwrap();
    let _: () = redis::cmd("SET").arg("queue:{w}:stats").arg("x").query(&mut raw).unwrap();
    let before = digest(&mut raw);
    for (cmd, args) in [
        ("QUEUE.ENTER", vec!["w", "u", "n"]),
        ("QUEUE.STATUS", vec!["w", "u"]),
        ("QUEUE.PROMOTE", vec!["w"]),
        ("TICKET.CLAIM", vec!["w", "t"]),
        ("SESSION.END", vec!["w", "u"]),
        ("QUEUE.INFO", vec!["w"]),
        ("QUEUE.WATCH", vec!["w", "pod", "1000", "u"]),
        ("QUEUE.UNWATCH", vec!["w", "pod", "u"]),
    ] {
        let got = c.err(cmd, &args);
        assert_eq!(got, "WRONGTYPE Operation against a key holding the wrong kind of value", "{cmd}");
    }
    assert_eq!(digest(&mut raw), before);
    // The claims' key of another type: a claim with a holder refuses, even of a good
    // ticket, and nothing changes; one without a holder does not read it.
    let t = testkit::field_str(&c.enter("z", "zed", "z"), "ticketId").unwrap();
    let _: () = redis::cmd("SET").arg("queue:{z}:claimed").arg("x").query(&mut raw).unwrap();
    let before = digest(&mut raw);
    let got = c.err("TICKET.CLAIM", &["z", &t, "HOLDER", "tab-1"]);
    assert_eq!(got, "WRONGTYPE Operation against a key holding the wrong kind of value");
    assert_eq!(digest(&mut raw), before);
    c.claim("z", &t).expect("a claim without a holder");
    assert_eq!(c.end("z", "zed"), 1, "the session ends, the claims' key untouched");
    // The watchers' keys of another type: WATCH and UNWATCH refuse, nothing changes.
    for (key, cmd, args) in [
        ("queue:{x}:watched", "QUEUE.WATCH", vec!["x", "pod", "1000", "u"]),
        ("queue:{x}:watched", "QUEUE.UNWATCH", vec!["x", "pod", "u"]),
        ("queue:{y}:instances", "QUEUE.WATCH", vec!["y", "pod", "1000"]),
    ] {
        let _: () = redis::cmd("SET").arg(key).arg("x").query(&mut raw).unwrap();
        let before = digest(&mut raw);
        let got = c.err(cmd, &args);
        assert_eq!(got, "WRONGTYPE Operation against a key holding the wrong kind of value", "{cmd} {args:?}");
        assert_eq!(digest(&mut raw), before, "{cmd} {args:?}");
    }
    // Good arguments at the edges are taken: an instance with '@', 64 characters, the
    // shortest and longest leases, no users.
    let i64chars = "p".repeat(64);
    for args in [
        vec!["q", "pod@host-1:7000", "1"],
        vec!["q", &i64chars, "600000", "waiting", "nobody"],
        vec!["q", "pod", "1", "waiting"],
    ] {
        c.call("QUEUE.WATCH", &args).unwrap_or_else(|e| panic!("WATCH {args:?}: {e}"));
    }
    let n = testkit::as_int(&c.call("QUEUE.UNWATCH", &["q", "pod", "waiting", "nobody"]).unwrap());
    assert_eq!(n, Some(1), "pod's registration of waiting went; nobody had none");
}

fn arg_strategy() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        Just(b"q".to_vec()),
        Just(b"waiting".to_vec()),
        Just(b"MAX".to_vec()),
        Just(b"SET".to_vec()),
        Just(b"GET".to_vec()),
        Just(b"soft_cap".to_vec()),
        Just(b"*".to_vec()),
        Just(b"HOLDER".to_vec()),
        Just(b"entry".to_vec()),
        Just(b"invite".to_vec()),
        Just(b"LANE".to_vec()),
        Just(b"CODE".to_vec()),
        Just(b"lanes".to_vec()),
        "-?[0-9]{1,21}".prop_map(|s| s.into_bytes()),
        proptest::collection::vec(any::<u8>(), 0..80),
    ]
}

fn random_argument_vectors_never_hurt(b: Backend) {
    let (s, c, _t) = populated(b);
    let raw = std::cell::RefCell::new(s.conn());
    let c = std::cell::RefCell::new(c);
    let mut runner =
        proptest::test_runner::TestRunner::new(ProptestConfig { cases: 1500, ..ProptestConfig::default() });
    let strategy = (0..testkit::COMMANDS.len(), proptest::collection::vec(arg_strategy(), 1..7));
    runner
        .run(&strategy, |(i, args)| {
            let cmd = testkit::command_for(b, testkit::COMMANDS[i], &args);
            let mut raw = raw.borrow_mut();
            let before = digest(&mut raw);
            let reply: redis::RedisResult<redis::Value> = cmd.query(&mut c.borrow_mut().con);
            if let Err(e) = &reply {
                // A refusal is clean: a known prefix, and nothing changed.
                let text = testkit::error_text(e);
                prop_assert!(
                    [
                        "ERR ",
                        "WRONGTYPE ",
                        "NOTICKET ",
                        "EXPIRED ",
                        "INSIDE ",
                        "FULL ",
                        "INVITE ",
                        "NOCODE ",
                        "WRONGLANE "
                    ]
                    .iter()
                    .any(|p| text.starts_with(p)),
                    "unexpected error {text:?}"
                );
                prop_assert!(!text.contains("internal error"), "{text}");
                prop_assert_eq!(digest(&mut raw), before);
            }
            let pong: String = redis::cmd("PING").query(&mut raw).unwrap();
            prop_assert_eq!(pong, "PONG");
            Ok(())
        })
        .unwrap();
    // The queue still works afterwards.
    let info = c.borrow_mut().info("q");
    assert!(testkit::field_int(&info, "active") <= 2);
}
