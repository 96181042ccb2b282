//! Bad arguments get a clear error and change nothing; random argument vectors never
//! hurt the server.

use proptest::prelude::*;
use testkit::{digest, Backend, Client, ValkeyServer};

testkit::backend_tests!(bad_arguments_are_refused_and_change_nothing, random_argument_vectors_never_hurt);

/// A queue with someone waiting, someone promoted and someone inside.
fn populated(b: Backend) -> (ValkeyServer, Client, String) {
    let s = ValkeyServer::start(b);
    let mut c = s.client();
    c.config_set("q", &[("soft_cap", 2)]);
    let t = testkit::field_str(&c.enter("q", "inside", "i"), "ticketId").unwrap();
    c.claim("q", &t).unwrap();
    let t = testkit::field_str(&c.enter("q", "promoted", "p"), "ticketId").unwrap();
    c.enter("q", "waiting", "w");
    (s, c, t)
}

const ARITY: &str = "ERR wrong number of arguments for";
const BAD_USER: &str = "ERR invalid userId: 1 to 64 characters from A-Z a-z 0-9 . _ : @ -";
const BAD_QUEUE: &str = "ERR invalid queue name: 1 to 64 characters from A-Z a-z 0-9 . _ : -";
const BAD_NICK: &str = "ERR invalid nickname: 1 to 32 bytes, no control characters";
const NOT_INT: &str = "ERR value is not an integer or out of range";

fn bad_arguments_are_refused_and_change_nothing(b: Backend) {
    let (s, mut c, _ticket) = populated(b);
    let mut raw = s.conn();
    let long = "x".repeat(65);
    let cases: Vec<(&str, Vec<&str>, String)> = vec![
        ("QUEUE.ENTER", vec!["q", "u"], format!("{ARITY} 'queue.enter' command")),
        ("QUEUE.ENTER", vec!["q", "u", "n", "extra"], format!("{ARITY} 'queue.enter' command")),
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
    ];
    let before = digest(&mut raw);
    for (cmd, args, want) in &cases {
        let got = c.err(cmd, args);
        assert!(got.starts_with(want.as_str()), "{cmd} {args:?}: got {got:?}, want {want:?}");
        assert_eq!(digest(&mut raw), before, "{cmd} {args:?} changed the data");
    }
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
    ] {
        let got = c.err(cmd, &args);
        assert_eq!(got, "WRONGTYPE Operation against a key holding the wrong kind of value", "{cmd}");
    }
    assert_eq!(digest(&mut raw), before);
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
                    ["ERR ", "WRONGTYPE ", "NOTICKET ", "EXPIRED ", "INSIDE ", "FULL "]
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
