//! The manager in-process against real valkey-server processes, on both backends.

mod common;

use common::*;
use queue_client::events::QueueEvent;
use queue_manager::discovery::{self, REGISTRY_KEY};
use queue_manager::leader::LEADER_KEY;
use queue_manager::metrics;
use queue_manager::policy::PolicyConfig;
use std::time::{Duration, Instant};
use testkit::{Backend, ValkeyServer};

testkit::backend_tests!(
    promotes_on_a_discovered_queue,
    discovery_merges_keys_registry_and_flags,
    two_managers_only_one_promotes,
    a_paused_leader_that_lost_the_lease_does_not_promote,
    metrics_match_queue_info,
    resumes_after_valkey_comes_back,
    graceful_shutdown_hands_over_at_once,
);

/// A queue nobody configured, entered after the manager started, is served within a
/// discovery period, and the promotion is announced on the queue's channel.
fn promotes_on_a_discovered_queue(backend: Backend) {
    let server = ValkeyServer::start(backend);
    let mut c = server.client();
    block_on(async {
        let manager = Manager::start(fast_config(&server)).await;
        assert!(eventually(Duration::from_secs(5), async || manager.is_leader().await.then_some(())).await.is_some());

        // Listen for the event before anything happens.
        let mut events = queue_client::events::subscribe_all(server.url());
        let subscribed = eventually(Duration::from_secs(5), async || {
            let n: i64 = redis::cmd("PUBSUB").arg("NUMPAT").query(&mut server.conn()).unwrap();
            (n > 0).then_some(())
        })
        .await;
        assert!(subscribed.is_some(), "subscriber never subscribed");

        waiting_users(&mut c, "launch", "u", 3, &[("soft_cap", 2)]);
        let promoted = eventually(Duration::from_secs(5), async || {
            (info(&mut server.client(), "launch", "promoted") == 2).then_some(())
        })
        .await;
        assert!(promoted.is_some(), "the discovered queue was never promoted");
        assert_eq!(info(&mut c, "launch", "waiting"), 1);
        assert_eq!(testkit::field_str(&c.status("launch", "u-0"), "status").as_deref(), Some("PROMOTED"));

        let event: QueueEvent = tokio::time::timeout(Duration::from_secs(5), async {
            loop {
                let e = events.recv().await.expect("event stream closed");
                if e.queue == "launch" {
                    return e;
                }
            }
        })
        .await
        .expect("no promotion event");
        assert_eq!((event.promoted, event.waiting), (2, 1));
        assert!(event.at_ms > 0);
        assert!(manager.healthz().await["valkey"] == "up");
        manager.stop().await;
    });
}

/// Discovery reads the queues' keys, the registry set and the fixed list, and
/// ignores what is not a queue.
fn discovery_merges_keys_registry_and_flags(backend: Backend) {
    let server = ValkeyServer::start(backend);
    let mut c = server.client();
    c.enter("by-key", "u-1", "n");
    let mut con = server.conn();
    let _: () = redis::cmd("SADD").arg(REGISTRY_KEY).arg("registered").arg("bad name").query(&mut con).unwrap();
    let _: () = redis::cmd("SET").arg("queue:{not-a-zset}:waiting").arg("x").query(&mut con).unwrap();
    let _: () = redis::cmd("ZADD").arg("queue:{other}:stats").arg(1).arg("x").query(&mut con).unwrap();
    block_on(async {
        let client = queue_client::QueueClient::connect(&server.url()).await.unwrap();
        let fixed = vec!["fixed".to_string()];
        let found = discovery::discover(&client, &fixed).await.unwrap();
        let found: Vec<&str> = found.iter().map(String::as_str).collect();
        assert_eq!(found, ["by-key", "fixed", "registered"]);
    });
}

/// Two replicas: exactly one leads, and tickets are issued at one PROMOTE per tick
/// (batch_max 1 makes every PROMOTE issue exactly one ticket), not two.
fn two_managers_only_one_promotes(backend: Backend) {
    let server = ValkeyServer::start(backend);
    let mut c = server.client();
    waiting_users(&mut c, "q", "u", 300, &[]);
    block_on(async {
        let mut config = fast_config(&server);
        config.queues = vec!["q".into()];
        let a = Manager::start(config.clone()).await;
        let b = Manager::start(config.clone()).await;
        let one = eventually(Duration::from_secs(5), async || {
            let (la, lb) = (a.is_leader().await, b.is_leader().await);
            (la != lb).then_some(())
        })
        .await;
        assert!(one.is_some(), "no single leader");

        c.config_set("q", &[("batch_max", 1), ("soft_cap", 100_000)]);
        // Let both run a while; then count what one window issued.
        assert!(eventually(Duration::from_secs(5), async || (info(&mut c, "q", "promoted") > 0).then_some(()))
            .await
            .is_some());
        let (start, before) = (Instant::now(), info(&mut c, "q", "promoted"));
        let mut leaders_seen = Vec::new();
        while start.elapsed() < Duration::from_secs(2) {
            leaders_seen.push((a.is_leader().await, b.is_leader().await));
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let (issued, elapsed) = (info(&mut c, "q", "promoted") - before, start.elapsed());
        let ticks = (elapsed.as_millis() / config.tick.as_millis()) as i64;
        assert!(issued <= ticks + 2, "{issued} tickets in {ticks} ticks: more than one manager promotes");
        assert!(issued >= ticks / 3, "{issued} tickets in {ticks} ticks: promotion stalled");
        // Never two at once. A leader counts itself one only while its lease is surely
        // its own, so a late renewal on a busy machine can show none for a moment.
        assert!(leaders_seen.iter().all(|(la, lb)| !(*la && *lb)), "two leaders at once: {leaders_seen:?}");
        let one = leaders_seen.iter().filter(|(la, lb)| la != lb).count();
        assert!(one * 2 >= leaders_seen.len(), "mostly no leader: {leaders_seen:?}");
        a.stop().await;
        b.stop().await;
    });
}

/// A leader frozen past its lease, whose key another replica then took, wakes up
/// with a promotion tick due and room in the queue, and must not promote: its
/// fencing deadline has passed and its renewal fails. When the key becomes free it
/// leads (and promotes) again, which shows the setup would have promoted.
fn a_paused_leader_that_lost_the_lease_does_not_promote(backend: Backend) {
    let server = ValkeyServer::start(backend);
    let mut c = server.client();
    waiting_users(&mut c, "q", "u", 5, &[]);
    block_on(async {
        let mut config = fast_config(&server);
        config.queues = vec!["q".into()];
        let manager = Manager::start(config).await;
        assert!(eventually(Duration::from_secs(5), async || manager.is_leader().await.then_some(())).await.is_some());
        let token = lease_holder(&server).expect("lease key");

        manager.freeze(true);
        // Its lease runs out while it is frozen; another replica takes the key.
        let expired = eventually(Duration::from_secs(5), async || lease_holder(&server).is_none().then_some(())).await;
        assert!(expired.is_some(), "the lease never expired");
        another_replica_takes_the_lease(&server);
        c.config_set("q", &[("soft_cap", 100)]);
        assert!(!manager.is_leader().await, "a frozen leader past its deadline reports leadership");

        manager.freeze(false);
        // A negative check needs a window: 10 ticks and more than a lease period.
        let until = Instant::now() + Duration::from_millis(1000);
        while Instant::now() < until {
            assert_eq!(info(&mut c, "q", "promoted"), 0, "the woken replica promoted without the lease");
            assert!(!manager.is_leader().await);
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(lease_holder(&server).as_deref(), Some(OTHER_REPLICA), "the woken replica took the lease");

        // The other replica goes away: ours takes over and promotes.
        let _: () = redis::cmd("DEL").arg(LEADER_KEY).query(&mut server.conn()).unwrap();
        let resumed =
            eventually(Duration::from_secs(5), async || (info(&mut c, "q", "promoted") == 5).then_some(())).await;
        assert!(resumed.is_some(), "never promoted after regaining the lease");
        assert_eq!(lease_holder(&server).as_deref(), Some(token.as_str()));
        manager.stop().await;
    });
}

/// Every series of /metrics equals the queue's QUEUE.INFO, with each counter moved
/// off zero: tickets issued, expired unclaimed, waiters dropped for silence.
fn metrics_match_queue_info(backend: Backend) {
    let server = ValkeyServer::start(backend);
    let mut c = server.client();
    block_on(async {
        let mut config = fast_config(&server);
        config.queues = vec!["m".into()];
        let manager = Manager::start(config).await;
        // One user inside.
        waiting_users(&mut c, "m", "in", 1, &[("soft_cap", 1)]);
        settle(&mut c, "first promotion", |c| info(c, "m", "promoted") == 1).await;
        let ticket = testkit::field_str(&c.status("m", "in-0"), "ticketId").unwrap();
        c.claim("m", &ticket).unwrap();
        // Four tickets that expire unclaimed.
        c.config_set("m", &[("soft_cap", 0), ("ticket_ttl", 100)]);
        for i in 0..4 {
            c.enter("m", &format!("late-{i}"), "n");
        }
        c.config_set("m", &[("soft_cap", 3)]);
        settle(&mut c, "tickets expire", |c| info(c, "m", "expired") == 4 && info(c, "m", "joining") == 0).await;
        // Two waiters dropped for silence, then two who stay.
        c.config_set("m", &[("soft_cap", 1), ("abandon_after", 100)]);
        c.enter("m", "quiet-1", "n");
        c.enter("m", "quiet-2", "n");
        settle(&mut c, "silent waiters dropped", |c| info(c, "m", "dropped") == 2).await;
        c.config_set("m", &[("abandon_after", 0)]);
        c.enter("m", "stay-1", "n");
        c.enter("m", "stay-2", "n");

        let text = manager.metrics().await;
        let i = c.info("m");
        let want = [
            ("queue_waiting_users", "waiting"),
            ("queue_joining_users", "joining"),
            ("queue_current_users", "active"),
            ("queue_soft_cap", "soft_cap"),
            ("queue_available_slots", "available_slots"),
            ("queue_tickets_issued_total", "promoted"),
            ("queue_tickets_expired_total", "expired"),
            ("queue_dropped_users_total", "dropped"),
        ];
        for (series, field) in want {
            let got = metrics::value(&text, series, Some("m"));
            assert_eq!(got, Some(testkit::field_int(&i, field) as f64), "{series} vs {field}\n{text}");
        }
        let expected =
            [("waiting", 2), ("active", 1), ("soft_cap", 1), ("promoted", 5), ("expired", 4), ("dropped", 2)];
        for (field, v) in expected {
            assert_eq!(testkit::field_int(&i, field), v, "{field}");
        }
        assert_eq!(metrics::value(&text, "queue_manager_is_leader", None), Some(1.0));
        assert_eq!(metrics::value(&text, "queue_manager_valkey_up", None), Some(1.0));
        assert!(text.contains("# TYPE queue_tickets_issued_total counter"));
        manager.stop().await;
    });
}

/// Valkey dies: the manager reports it, loses leadership, and once the server is
/// back (empty: no persistence) leads and promotes again by itself.
fn resumes_after_valkey_comes_back(backend: Backend) {
    let mut server = ValkeyServer::start(backend);
    block_on(async {
        let mut config = fast_config(&server);
        config.queues = vec!["r".into()];
        let manager = Manager::start(config).await;
        assert!(eventually(Duration::from_secs(5), async || manager.is_leader().await.then_some(())).await.is_some());

        server.kill();
        let down = eventually(Duration::from_secs(10), async || {
            let h = manager.healthz().await;
            (h["valkey"] == "down" && h["leader"] == false).then_some(())
        })
        .await;
        assert!(down.is_some(), "never noticed Valkey down: {}", manager.healthz().await);

        server.restart();
        let mut c = server.client();
        waiting_users(&mut c, "r", "u", 3, &[("soft_cap", 2)]);
        let back =
            eventually(Duration::from_secs(30), async || (info(&mut c, "r", "promoted") == 2).then_some(())).await;
        assert!(back.is_some(), "no promotion after Valkey came back: {}", manager.healthz().await);
        let h = manager.healthz().await;
        assert_eq!((h["valkey"].as_str(), h["leader"].as_bool()), (Some("up"), Some(true)));
        manager.stop().await;
    });
}

/// A leader shutting down gives the lease up: the key is gone when `serve` returns
/// and the standby leads well within one lease period.
fn graceful_shutdown_hands_over_at_once(backend: Backend) {
    let server = ValkeyServer::start(backend);
    block_on(async {
        let mut config = fast_config(&server);
        config.lease = Duration::from_secs(3);
        let a = Manager::start(config.clone()).await;
        assert!(eventually(Duration::from_secs(5), async || a.is_leader().await.then_some(())).await.is_some());
        let b = Manager::start(config.clone()).await;
        // b has tried and stands by.
        let standby = eventually(Duration::from_secs(5), async || {
            (b.healthz().await["valkey"] == "up" && !b.is_leader().await).then_some(())
        })
        .await;
        assert!(standby.is_some());
        let started = Instant::now();
        a.stop().await;
        let took = eventually(Duration::from_secs(5), async || b.is_leader().await.then_some(started.elapsed())).await;
        let took = took.expect("the standby never took over");
        assert!(took < config.lease, "takeover after a graceful stop took {took:?}");
        b.stop().await;
        assert_eq!(lease_holder(&server), None);
    });
}

/// Started while Valkey is away: it serves /healthz at once (down, not leading),
/// keeps trying, and leads and promotes once the server is up.
#[test]
fn starts_before_valkey_and_connects_when_it_comes() {
    let mut server = ValkeyServer::start(Backend::Module);
    server.kill();
    block_on(async {
        let mut config = fast_config(&server);
        config.queues = vec!["late".into()];
        let manager = Manager::start(config).await;
        let h = manager.healthz().await;
        assert_eq!((h["valkey"].as_str(), h["leader"].as_bool()), (Some("down"), Some(false)));
        assert_eq!(metrics::value(&manager.metrics().await, "queue_manager_valkey_up", None), Some(0.0));

        server.restart();
        let mut c = server.client();
        waiting_users(&mut c, "late", "u", 2, &[("soft_cap", 5)]);
        let promoted =
            eventually(Duration::from_secs(30), async || (info(&mut c, "late", "promoted") == 2).then_some(())).await;
        assert!(promoted.is_some(), "never connected: {}", manager.healthz().await);
        assert!(manager.is_leader().await);
        manager.stop().await;
    });
}

/// A URL that can never work ends `serve` with an error instead of retrying forever.
#[test]
fn an_invalid_url_is_an_error() {
    block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let config = queue_manager::Config::local("nonsense://x");
        let run = queue_manager::serve(listener, config, std::future::pending());
        let result = tokio::time::timeout(Duration::from_secs(10), run).await.expect("serve did not return");
        assert!(matches!(&result, Err(e) if e.kind() == std::io::ErrorKind::InvalidInput), "{result:?}");
    });
}

/// A permission Valkey refuses (here the lease key, left out of the manager's rule)
/// is named in /healthz (`refused`, the command and the key), never reported as
/// Valkey being down; the manager does not lead without its lease.
#[test]
fn a_refused_permission_is_named_not_down() {
    block_on(async {
        let server = ValkeyServer::start(Backend::Module);
        let rule = "on >pw -@all +ping +get +set +eval +pexpire +del +scan +smembers +hgetall +publish ~queue:* \
                    ~queue-registry resetchannels &queue:{*}:promoted";
        let mut setuser = redis::cmd("ACL");
        setuser.arg("SETUSER").arg("manager").arg(rule.split_whitespace().collect::<Vec<_>>()).arg("(+@queue ~*)");
        setuser.query::<()>(&mut server.conn()).unwrap();
        let mut config = fast_config(&server);
        config.valkey_urls = vec![format!("redis://manager:pw@127.0.0.1:{}/", server.port)];
        let manager = Manager::start(config).await;
        let seen = eventually(Duration::from_secs(10), async || {
            Some(manager.healthz().await).filter(|h| h["valkey"] == "refused")
        })
        .await;
        let Some(health) = seen else { panic!("never named the refusal: {}", manager.healthz().await) };
        let refused = health["refused"].as_str().unwrap_or_default();
        assert!(refused.starts_with("NOPERM") && refused.contains("queue-manager:leader"), "{health}");
        assert!(!manager.is_leader().await);
        manager.stop().await;
    });
}

/// Adaptive admission end to end: nobody is admitted without a signal
/// (fail-closed), admission opens on a good signal, closes down step by step on a
/// bad one, and closes at once when the signal lapses.
#[test]
fn adaptive_admission_follows_the_health_signal() {
    let server = ValkeyServer::start(Backend::Module);
    let mut c = server.client();
    waiting_users(&mut c, "a", "u", 3000, &[("soft_cap", 100_000)]);
    let health = |load: f64, expires_in_ms: i64| {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
        let reading = format!(r#"{{"load":{load},"latencyMs":5,"expiresAtMs":{}}}"#, now + expires_in_ms);
        let _: () =
            redis::cmd("HSET").arg("queue:{a}:health").arg("chat-1").arg(reading).query(&mut server.conn()).unwrap();
    };
    block_on(async {
        let mut config = fast_config(&server);
        config.queues = vec!["a".into()];
        config.adaptive = Some(PolicyConfig {
            step: 1,
            ceiling: 10_000,
            adjust_every: Duration::from_millis(200),
            ..PolicyConfig::default()
        });
        let manager = Manager::start(config).await;
        let limit = async || metrics::value(&manager.metrics().await, "queue_admission_limit", Some("a"));
        assert!(eventually(Duration::from_secs(5), async || (limit().await == Some(0.0)).then_some(()))
            .await
            .is_some());
        // No signal: a window of several ticks admits no one.
        let until = Instant::now() + Duration::from_millis(600);
        while Instant::now() < until {
            assert_eq!(info(&mut c, "a", "promoted"), 0, "admitted without a health signal");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }

        health(0.1, 60_000);
        let opened =
            eventually(Duration::from_secs(10), async || (info(&mut c, "a", "promoted") >= 20).then_some(())).await;
        assert!(opened.is_some(), "a good signal did not open admission");
        assert!(limit().await.unwrap() >= 1.0);

        health(0.99, 60_000);
        let closed = eventually(Duration::from_secs(10), async || (limit().await == Some(0.0)).then_some(())).await;
        assert!(closed.is_some(), "a bad signal did not close admission: {:?}", limit().await);
        let frozen = info(&mut c, "a", "promoted");
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(info(&mut c, "a", "promoted"), frozen, "admitted while closed");
        assert!(info(&mut c, "a", "waiting") > 0, "the queue drained: the test proves nothing");

        health(0.1, 60_000);
        assert!(eventually(Duration::from_secs(10), async || (limit().await > Some(0.0)).then_some(()))
            .await
            .is_some());
        // The reading expires: closed on the next tick.
        health(0.1, -1);
        let lapsed = eventually(Duration::from_secs(5), async || (limit().await == Some(0.0)).then_some(())).await;
        assert!(lapsed.is_some(), "an expired signal did not close admission");
        manager.stop().await;
    });
}

/// Polls `check` (every 20 ms, 10 s at most) until it holds.
async fn settle(c: &mut testkit::Client, what: &str, check: impl Fn(&mut testkit::Client) -> bool) {
    let ok = eventually(Duration::from_secs(10), async || check(c).then_some(())).await;
    assert!(ok.is_some(), "{what}: {:?}", c.info("m"));
}
