//! Least-privilege ACL users, one per service, with the rules docs/cluster-tls-acl.md
//! gives ("Least-privilege ACL users"): each service runs a swarm under its own user
//! (both backends) with nothing it needs
//! refused, and each user is refused everything else tried here; on one server and
//! on a cluster of 3 primaries and 3 replicas (with the cluster additions).

use e2e::stores::{assert_clean, swarm, Services};
use e2e::{e2e_tests, StackOptions};
use redis::Connection;
use testkit::cluster::Cluster;
use testkit::{Backend, ValkeyServer};

e2e_tests!(each_service_under_its_own_rule, each_service_under_its_own_rule_on_a_cluster);

/// With the module: what each service reads or publishes, on its keys and channels,
/// and, in a selector, the queue commands (category `queue`) on any queue name (a
/// queue command's key is the bare queue name; the module touches only that queue's
/// `queue:{Q}:*` keys).
const MODULE_RULES: [(&str, &str); 3] = [
    ("queue-api", "-@all +ping +sadd +sismember +exists +set +hget +hgetall +publish +psubscribe +xrange +xrevrange ~queue:* ~queue-registry resetchannels &queue:{*}:promoted &queue:{*}:changes (+@queue ~*)"),
    (
        "queue-manager",
        "-@all +ping +get +set +eval +pexpire +del +scan +smembers +hgetall +publish ~queue:* ~queue-registry ~queue-manager:leader resetchannels &queue:{*}:promoted (+@queue ~*)",
    ),
    ("chat-server", "-@all +ping +zrange +hgetall +hset +hdel +publish +psubscribe ~queue:* resetchannels &chat:{*}:room (+@queue ~*)"),
];

/// With the Lua library, instead of the module's selector: FCALL and FCALL_RO on
/// any queue name, and the commands the library's functions call, on `queue:*` keys
/// (its announcements and published changes need `&queue:{*}:promoted
/// &queue:{*}:changes` on every service).
const LUA_SELECTOR: &str = "(+fcall +fcall_ro ~*)";
const LUA_COMMANDS: &str = "+get +set +del +type +time +hget +hgetall +hlen +hset +hdel +lrange +rpush +zadd +zcard +zcount +zrange +zrank +zrem +zscore +xadd +publish +spublish";

fn rule(backend: Backend, service: &str) -> String {
    let base = MODULE_RULES.iter().find(|(s, _)| *s == service).unwrap().1;
    match backend {
        Backend::Module => base.to_string(),
        _ => base
            .replace("(+@queue ~*)", &format!("{LUA_COMMANDS} {LUA_SELECTOR}"))
            .replace("resetchannels &queue:{*}:promoted &queue:{*}:changes", "resetchannels")
            .replace("resetchannels", "resetchannels &queue:{*}:promoted &queue:{*}:changes"),
    }
}

/// On a cluster every service also uses sharded pub/sub and reads the topology, and
/// queue-api finds the queues it listens to (the registry and every primary's keys).
const CLUSTER_ADDITIONS: &str = "+spublish +ssubscribe +cluster|slots";
const CLUSTER_API_ADDITIONS: &str = "+scan +smembers";

fn cluster_rule(backend: Backend, service: &str) -> String {
    let mut r = rule(backend, service);
    let extra = match service {
        "queue-api" => format!("{CLUSTER_ADDITIONS} {CLUSTER_API_ADDITIONS} "),
        _ => format!("{CLUSTER_ADDITIONS} "),
    };
    r.insert_str(r.find('(').expect("a selector"), &extra);
    r
}

/// Splits a rule into ACL SETUSER arguments (a selector in parentheses is one).
fn rule_args(rule: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = rule;
    while let Some(open) = rest.find('(') {
        out.extend(rest[..open].split_whitespace().map(str::to_string));
        let close = rest[open..].find(')').unwrap() + open;
        out.push(rest[open..=close].to_string());
        rest = &rest[close + 1..];
    }
    out.extend(rest.split_whitespace().map(str::to_string));
    out
}

/// Probes the client makes and handles when refused (it then asks another way).
const EXPECTED_PROBES: [&str; 3] = ["module|list", "function|list", "client|setinfo"];

const SERVICES: [&str; 3] = ["queue-api", "queue-manager", "chat-server"];

/// Creates the three users on one server, with `rule` giving each one's rule.
fn create_users(admin: &mut Connection, rule: impl Fn(&str) -> String) {
    for service in SERVICES {
        let r = rule(service);
        let mut cmd = redis::cmd("ACL");
        cmd.arg("SETUSER").arg(service).arg("reset").arg("on").arg(">pw");
        for part in rule_args(&r) {
            cmd.arg(part);
        }
        cmd.query::<()>(admin).unwrap_or_else(|e| panic!("{service}: {r}: {e}"));
    }
    let _: () = redis::cmd("ACL").arg("LOG").arg("RESET").query(admin).unwrap();
}

/// What this server refused since the users were made, besides the probes the
/// client handles.
fn refusals(admin: &mut Connection) -> Vec<String> {
    let log: Vec<redis::Value> = redis::cmd("ACL").arg("LOG").query(admin).unwrap();
    log.iter()
        .map(|e| {
            let f = testkit::fields(e);
            format!(
                "{} {} {}",
                testkit::field_str(&f, "username").unwrap_or_default(),
                testkit::field_str(&f, "reason").unwrap_or_default(),
                testkit::field_str(&f, "object").unwrap_or_default()
            )
        })
        .filter(|line| !EXPECTED_PROBES.iter().any(|p| line.ends_with(p)))
        .collect()
}

/// Each user, logged in on `port`, is refused everything it does not need.
fn refused_everything_else(port: u16) {
    for service in SERVICES {
        let url = format!("redis://{service}:pw@127.0.0.1:{port}/");
        let mut c = redis::Client::open(url).unwrap().get_connection().unwrap();
        let mut refused = |args: &[&str]| {
            let e = redis::cmd(args[0]).arg(&args[1..]).query::<redis::Value>(&mut c).unwrap_err();
            assert_eq!(e.code(), Some("NOPERM"), "{service} {args:?}: {e}");
        };
        refused(&["FLUSHALL"]);
        refused(&["CONFIG", "GET", "*"]);
        refused(&["KEYS", "*"]);
        refused(&["GET", "someone-elses-key"]);
        refused(&["SET", "someone-elses-key", "x"]);
        refused(&["PUBLISH", "other-channel", "x"]);
        refused(&["SPUBLISH", "other-channel", "x"]);
        refused(&["ACL", "LIST"]);
        refused(&["FUNCTION", "FLUSH"]);
        refused(&["CLUSTER", "RESET"]);
        if service != "queue-manager" {
            refused(&["SET", "queue-manager:leader", "x"]);
            refused(&["EVAL", "return 1", "0"]);
        }
        if service != "chat-server" {
            refused(&["PUBLISH", "chat:{default}:room", "x"]);
            refused(&["SPUBLISH", "chat:{default}:room", "x"]);
        }
    }
}

async fn each_service_under_its_own_rule(backend: Backend) {
    let valkey = ValkeyServer::start(backend);
    let mut admin = valkey.conn();
    create_users(&mut admin, |service| rule(backend, service));
    let opts = StackOptions { soft_cap: 5, ..Default::default() };
    valkey.client().call("QUEUE.CONFIG", &["default", "SET", "soft_cap", "5"]).unwrap();
    let url = |user: &str| format!("redis://{user}:pw@127.0.0.1:{}/", valkey.port);
    // Each service with its own user: start them one by one with their URL.
    let services = Services::start_each(
        [
            vec!["--valkey-url".to_string(), url("chat-server")],
            vec!["--valkey-url".to_string(), url("queue-manager")],
            vec!["--valkey-url".to_string(), url("queue-api")],
        ],
        &["default".to_string()],
        &opts,
    )
    .await;
    let args = ["--users", "40", "--rate", "40", "--stay-secs", "0.2", "--messages", "1", "--timeout-secs", "120"];
    let (code, r, stderr) = swarm(&services, "default", &args).await;
    assert_clean(code, &r, &stderr);

    // Nothing the services needed was refused (besides the probes they handle).
    let refused = refusals(&mut admin);
    assert!(refused.is_empty(), "refused while serving: {refused:#?}");
    // And everything else is refused.
    refused_everything_else(valkey.port);
}

/// The same on a cluster: the users exist on every node (ACL rules are per node), the
/// services take the seed list with `--cluster`, one queue per shard, a swarm through
/// each, and no node refused anything the services needed.
async fn each_service_under_its_own_rule_on_a_cluster(backend: Backend) {
    let cluster = Cluster::start(backend, 3, 1);
    for node in &cluster.nodes {
        create_users(&mut node.conn(), |service| cluster_rule(backend, service));
    }
    let queues: Vec<String> = cluster.queues_per_shard("acl", 1).into_iter().flatten().collect();
    for q in &queues {
        cluster.owner(q).client().call("QUEUE.CONFIG", &[q.as_str(), "SET", "soft_cap", "5"]).unwrap();
    }
    let opts = StackOptions { soft_cap: 5, ..Default::default() };
    let seeds = |user: &str| {
        let urls: Vec<String> =
            cluster.primaries().iter().map(|n| format!("redis://{user}:pw@127.0.0.1:{}/", n.port)).collect();
        vec!["--valkey-url".to_string(), urls.join(","), "--cluster".to_string()]
    };
    let services =
        Services::start_each([seeds("chat-server"), seeds("queue-manager"), seeds("queue-api")], &queues, &opts).await;
    let args = ["--users", "20", "--rate", "40", "--stay-secs", "0.2", "--messages", "1", "--timeout-secs", "120"];
    for q in &queues {
        let (code, r, stderr) = swarm(&services, q, &args).await;
        assert_clean(code, &r, &stderr);
        assert!(e2e::stores::n(&r, "messages_echoed") > 0, "chat went through {q}'s shard: {r:#}");
    }
    for node in &cluster.nodes {
        let refused = refusals(&mut node.conn());
        assert!(refused.is_empty(), "node {} refused while serving: {refused:#?}", node.port);
    }
    refused_everything_else(cluster.primaries()[0].port);
}

#[test]
fn the_readme_gives_these_rules() {
    let readme = std::fs::read_to_string(testkit::workspace_root().join("docs/cluster-tls-acl.md")).unwrap();
    for (service, r) in MODULE_RULES {
        assert!(readme.contains(r), "docs/cluster-tls-acl.md lacks {service}'s rule: {r}");
    }
    assert!(
        readme.contains(LUA_COMMANDS) && readme.contains(LUA_SELECTOR),
        "docs/cluster-tls-acl.md lacks the Lua library's rule"
    );
    for extra in [CLUSTER_ADDITIONS, CLUSTER_API_ADDITIONS] {
        assert!(readme.contains(&format!("`{extra}`")), "docs/cluster-tls-acl.md lacks the cluster addition {extra}");
    }
}
