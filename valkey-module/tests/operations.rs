//! What operators rely on: command docs, the ACL category, INFO, keyspace events,
//! module configs.

use std::collections::HashSet;
use std::time::Duration;
use testkit::{field_int, field_str, Backend, ValkeyServer};

const COMMANDS: [&str; 13] = [
    "queue.enter",
    "queue.status",
    "queue.ranks",
    "queue.line",
    "queue.leave",
    "queue.promote",
    "ticket.claim",
    "session.heartbeat",
    "session.end",
    "queue.info",
    "queue.config",
    "queue.watch",
    "queue.unwatch",
];

/// Arguments after the queue that fit each command's arity.
fn sample_args(name: &str) -> Vec<&'static str> {
    match name {
        "queue.enter" => vec!["u", "n"],
        "queue.promote" => vec!["MAX", "5"],
        "queue.line" => vec!["0", "10"],
        "queue.info" => vec![],
        "queue.config" => vec!["GET", "soft_cap"],
        "queue.watch" => vec!["pod-1", "30000", "u"],
        "queue.unwatch" => vec!["pod-1", "u"],
        _ => vec!["u"],
    }
}

#[test]
fn every_command_is_documented_with_key_specs() {
    let s = ValkeyServer::start(Backend::Module);
    let mut con = s.conn3();
    for name in COMMANDS {
        let docs: redis::Value = redis::cmd("COMMAND").arg("DOCS").arg(name).query(&mut con).unwrap();
        let text = format!("{docs:?}");
        assert!(text.contains("summary") && text.contains("arguments"), "{name}: {text}");
        // COMMAND GETKEYS: the queue name is the key, so cluster routing works.
        let mut cmd = redis::cmd("COMMAND");
        cmd.arg("GETKEYS").arg(name).arg("myqueue").arg(sample_args(name));
        let keys: Vec<String> = cmd.query(&mut con).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(keys, vec!["myqueue".to_string()], "{name}");
    }
    let info: redis::Value = redis::cmd("COMMAND").arg("INFO").arg("queue.info").query(&mut con).unwrap();
    let text = format!("{info:?}");
    assert!(text.contains("readonly") && text.contains("@queue"), "{text}");
}

#[test]
fn the_acl_category_limits_a_service_user_to_queue_commands() {
    let s = ValkeyServer::start(Backend::Module);
    let mut con = s.conn();
    let cats: HashSet<String> =
        redis::cmd("ACL").arg("CAT").query::<Vec<String>>(&mut con).unwrap().into_iter().collect();
    assert!(cats.contains("queue"), "{cats:?}");
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("svc")
        .arg("on")
        .arg(">pw")
        .arg("~*")
        .arg("+@queue")
        .query(&mut con)
        .unwrap();
    for name in COMMANDS {
        let r: String = redis::cmd("ACL")
            .arg("DRYRUN")
            .arg("svc")
            .arg(name)
            .arg("q")
            .arg(sample_args(name))
            .query(&mut con)
            .unwrap();
        assert_eq!(r, "OK", "svc may run {name}");
    }
    let r: String = redis::cmd("ACL").arg("DRYRUN").arg("svc").arg("FLUSHALL").query(&mut con).unwrap();
    assert!(r.contains("no permissions"), "{r}");
    let mut svc =
        redis::Client::open(format!("redis://svc:pw@127.0.0.1:{}/", s.port)).unwrap().get_connection().unwrap();
    let v: redis::Value = redis::cmd("QUEUE.ENTER").arg("q").arg("u").arg("n").query(&mut svc).unwrap();
    assert!(matches!(v, redis::Value::Array(_)));
    let e = redis::cmd("SET").arg("k").arg("v").query::<()>(&mut svc).unwrap_err();
    assert_eq!(e.code(), Some("NOPERM"), "{e}");
}

#[test]
fn info_queue_shows_module_wide_counters() {
    let s = ValkeyServer::start(Backend::Module);
    let mut c = s.client();
    let t = field_str(&c.enter("a", "u1", "n"), "ticketId").unwrap();
    c.enter("b", "u1", "n");
    c.claim("a", &t).unwrap();
    let info: String = redis::cmd("INFO").arg("queue").query(&mut c.con).unwrap();
    for line in ["queue_entered:2", "queue_promoted:2", "queue_claimed:1"] {
        assert!(info.contains(line), "{line} missing in:\n{info}");
    }
}

#[test]
fn writes_send_keyspace_events_named_after_the_command() {
    let s = ValkeyServer::start(Backend::Module);
    let mut c = s.client();
    let _: () = redis::cmd("CONFIG").arg("SET").arg("notify-keyspace-events").arg("Eg").query(&mut c.con).unwrap();
    let mut sub_con = s.conn();
    let mut sub = sub_con.as_pubsub();
    sub.psubscribe("__keyevent@0__:*").unwrap();
    sub.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let t = field_str(&c.enter("q", "u", "n"), "ticketId").unwrap();
    c.claim("q", &t).unwrap();
    c.promote("q", None); // nothing to do: no event
    c.end("q", "u");
    let mut seen = Vec::new();
    while seen.len() < 3 {
        let msg = sub.get_message().expect("event");
        let payload: String = msg.get_payload().unwrap();
        seen.push((msg.get_channel_name().trim_start_matches("__keyevent@0__:").to_string(), payload));
    }
    let want: Vec<(String, String)> = [("queue.enter", "q"), ("ticket.claim", "q"), ("session.end", "q")]
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    assert_eq!(seen, want);
}

#[test]
fn module_configs_set_defaults_for_queues_without_their_own() {
    let s = ValkeyServer::builder(Backend::Module)
        .module_arg("default-soft-cap")
        .module_arg("3")
        .module_arg("default-rate")
        .module_arg("7")
        .start();
    let mut c = s.client();
    let info = c.info("q");
    assert_eq!((field_int(&info, "soft_cap"), field_int(&info, "rate")), (3, 7));
    let _: () = redis::cmd("CONFIG").arg("SET").arg("queue.default-soft-cap").arg("40").query(&mut c.con).unwrap();
    let got: Vec<String> = redis::cmd("CONFIG").arg("GET").arg("queue.default-soft-cap").query(&mut c.con).unwrap();
    assert_eq!(got, vec!["queue.default-soft-cap", "40"]);
    assert_eq!(field_int(&c.info("q"), "soft_cap"), 40);
    // A queue's own setting wins over the default.
    c.config_set("q", &[("soft_cap", 9)]);
    assert_eq!(field_int(&c.info("q"), "soft_cap"), 9);
    let e =
        redis::cmd("CONFIG").arg("SET").arg("queue.default-batch-max").arg("0").query::<()>(&mut c.con).unwrap_err();
    assert!(e.to_string().contains("argument must be between"), "{e}");
    let got: i64 = redis::cmd("QUEUE.CONFIG").arg("q").arg("GET").arg("batch_max").query(&mut c.con).unwrap();
    assert_eq!(got, 1000);
}

#[test]
fn a_bad_module_argument_refuses_to_load() {
    let port = testkit::free_port();
    let dir = tempfile_dir();
    let out = std::process::Command::new(testkit::server_binary())
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--dir", dir.to_str().unwrap()])
        .arg("--loadmodule")
        .arg(testkit::module_path())
        .args(["default-soft-cap", "-1"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let log = String::from_utf8_lossy(&out.stdout);
    assert!(log.contains("soft_cap must be an integer from 0 to 10000000"), "{log}");
}

fn tempfile_dir() -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("queue-badarg-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}
