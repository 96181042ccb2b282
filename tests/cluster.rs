//! The whole system on a Valkey Cluster of 3 primaries and 3 replicas (child
//! processes on loopback), on both backends: the three services take the seed list
//! with `--cluster`; queues are spread so every shard holds some; a swarm runs through
//! each shard's queue at once, and its audits must be zero. Then, during swarms, a
//! manual failover (CLUSTER FAILOVER) and a kill -9 of a primary (automatic
//! failover): the services recover by themselves, audits stay at zero, and the test
//! prints how long recovery took and what was lost.

use e2e::stores::{assert_clean, assert_safe, n, swarm, Services};
use e2e::{client_binary, e2e_tests, exits_cleanly, start_piped, type_line, StackOptions, CROWD};
use std::time::{Duration, Instant};
use testkit::cluster::Cluster;
use testkit::Backend;

e2e_tests!(journey_on_a_cluster, swarm_on_every_shard, failovers_during_a_swarm, a_queue_moves_shard_during_a_swarm);

/// Starts the cluster, configures one queue per shard and starts the services.
async fn setup(backend: Backend, opts: &StackOptions) -> (Cluster, Vec<String>, Services) {
    setup_on(&testkit::server_binary(), backend, opts).await
}

/// [`setup`] with another server binary.
async fn setup_on(binary: &str, backend: Backend, opts: &StackOptions) -> (Cluster, Vec<String>, Services) {
    let cluster = Cluster::start_on(binary, backend, 3, 1, &[]);
    let queues: Vec<String> = cluster.queues_per_shard("shard", 1).into_iter().flatten().collect();
    for q in &queues {
        let (cap, ttl, abandon) =
            (opts.soft_cap.to_string(), opts.ticket_ttl_ms.to_string(), opts.abandon_after_ms.to_string());
        let set = ["soft_cap", cap.as_str(), "ticket_ttl", ttl.as_str(), "abandon_after", abandon.as_str()];
        let args = [&[q.as_str(), "SET"][..], &set[..]].concat();
        cluster.owner(q).client().call("QUEUE.CONFIG", &args).expect("configure the queue");
    }
    let valkey = vec!["--valkey-url".to_string(), cluster.urls().join(","), "--cluster".to_string()];
    let services = Services::start(&valkey, &queues, opts).await;
    (cluster, queues, services)
}

fn options() -> StackOptions {
    StackOptions { soft_cap: 5, ticket_ttl_ms: 4000, abandon_after_ms: 3000, ..Default::default() }
}

/// A small swarm's arguments: `users` people, some abandoning, racing and polling.
fn swarm_args(users: u32, seed: u32) -> Vec<String> {
    let mut a: Vec<String> = ["--rate", "40"].into_iter().chain(CROWD).map(String::from).collect();
    a.extend(["--timeout-secs", "180"].map(String::from));
    a.extend(["--users".into(), users.to_string(), "--seed".into(), seed.to_string()]);
    a
}

async fn swarm_on_every_shard(backend: Backend) {
    let (cluster, queues, services) = setup(backend, &options()).await;
    // Every shard holds a queue.
    let owners: std::collections::BTreeSet<u16> = queues.iter().map(|q| cluster.owner(q).port).collect();
    assert_eq!(owners.len(), 3, "one queue per shard");
    // CI runs 60 people per queue; bench/cluster-swarm.sh sets more.
    let users: u32 = std::env::var("CLUSTER_SWARM_USERS").ok().and_then(|v| v.parse().ok()).unwrap_or(60);
    let seed: u32 = std::env::var("CLUSTER_SWARM_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(0);
    let runs = queues.iter().enumerate().map(|(i, q)| {
        let args = swarm_args(users, seed * 10 + i as u32 + 1);
        let services = &services;
        async move {
            let a: Vec<&str> = args.iter().map(String::as_str).collect();
            (q.clone(), swarm(services, q, &a).await)
        }
    });
    for (q, (code, r, stderr)) in e2e::join_all(runs).await {
        assert_clean(code, &r, &stderr);
        assert_eq!(n(&r, "entered"), u64::from(users), "{q}: {r:#}");
        assert_eq!(n(&r, "admitted") + n(&r, "abandoned"), u64::from(users), "{q}: {r:#}");
        assert!(n(&r, "messages_echoed") > 0, "chat went through the shard's room: {q}: {r:#}");
        eprintln!("cluster swarm {q} ({backend:?}): {}", summary(&r));
    }
}

fn summary(r: &serde_json::Value) -> String {
    let f = |k: &str| r[k].as_u64().unwrap_or(0);
    format!(
        "entered {} admitted {} abandoned {} messages_echoed {} max_holding {} errors {} in {:.1} s",
        f("entered"),
        f("admitted"),
        f("abandoned"),
        f("messages_echoed"),
        f("max_holding"),
        f("errors"),
        r["duration_seconds"].as_f64().unwrap_or(0.0)
    )
}

/// Enters users straight into `queue` through queue-api until one entry succeeds
/// after `since`; the time from `since` to that entry.
async fn first_entry_after(api: &str, queue: &str, since: Instant, tag: &str) -> Duration {
    let http = reqwest::Client::builder().timeout(Duration::from_secs(3)).build().unwrap();
    for i in 0..600 {
        let body = serde_json::json!({"nickname": format!("{tag}{i}"), "queue": queue});
        let r = http.post(format!("{api}/api/queue/entry")).json(&body).send().await;
        if r.is_ok_and(|r| r.status().is_success()) {
            return since.elapsed();
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("no successful entry within the deadline");
}

/// Counts the tickets, sessions and waiting users the queue's primary holds.
fn info(cluster: &Cluster, q: &str) -> std::collections::HashMap<String, i64> {
    let v = cluster.owner(q).client().call("QUEUE.INFO", &[q]).expect("QUEUE.INFO");
    testkit::fields(&v).iter().filter_map(|(k, v)| testkit::as_int(v).map(|n| (k.clone(), n))).collect()
}

async fn failovers_during_a_swarm(backend: Backend) {
    let (mut cluster, queues, mut services) = setup(backend, &options()).await;
    let api = services.api.url();

    // 1. A manual failover of the first queue's shard while a swarm runs through it.
    let q = queues[0].clone();
    let primary = cluster.index_of(cluster.owner(&q));
    let args = swarm_args(80, 7);
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let run = swarm(&services, &q, &a);
    let failover = async {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let before = info(&cluster, &q);
        let started = Instant::now();
        let (new_primary, promoted_in) = cluster.manual_failover(primary);
        let entry_in = first_entry_after(&api, &q, started, "manual").await;
        (before, new_primary, promoted_in, entry_in)
    };
    let ((code, r, stderr), (_before, new_primary, promoted_in, entry_in)) = tokio::join!(run, failover);
    assert_ne!(new_primary, primary);
    eprintln!(
        "manual failover ({backend:?}): promoted in {promoted_in:?}, first entry after {entry_in:?}; swarm: {}",
        summary(&r)
    );
    assert_clean(code, &r, &stderr);
    assert!(services.all_running());

    // 2. kill -9 of the second queue's primary during a swarm: the replica takes over
    // by itself (cluster-node-timeout 2 s).
    cluster.wait_healthy(Duration::from_secs(30));
    let q = queues[1].clone();
    let victim = cluster.index_of(cluster.owner(&q));
    let replica = cluster.index_of(cluster.replica_of(&cluster.nodes[victim]).expect("a replica"));
    let args = swarm_args(80, 8);
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let run = swarm(&services, &q, &a);
    // Entries acknowledged right before the kill: how many does the new primary know?
    // On a second queue of the same shard that forgets nobody (no abandonment, long
    // tickets), so that a 404 afterwards can only be a lost write.
    let probe_q = cluster
        .queues_per_shard("probe", 1)
        .into_iter()
        .flatten()
        .find(|p| cluster.owner(p).port == cluster.nodes[victim].port)
        .unwrap();
    let set = ["soft_cap", "1", "ticket_ttl", "600000", "abandon_after", "600000"];
    cluster
        .owner(&probe_q)
        .client()
        .call("QUEUE.CONFIG", &[&[probe_q.as_str(), "SET"][..], &set[..]].concat())
        .unwrap();
    let probe = tokio::spawn(probe_entries(api.clone(), probe_q.clone(), Duration::from_millis(2500)));
    let crash = async {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let killed = Instant::now();
        cluster.kill(victim);
        let promoted = async {
            loop {
                let role: String =
                    redis::cmd("INFO").arg("replication").query(&mut cluster.nodes[replica].conn()).unwrap_or_default();
                if role.contains("role:master") {
                    return killed.elapsed();
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        };
        let promoted = tokio::time::timeout(Duration::from_secs(60), promoted).await.expect("automatic failover");
        let entry = first_entry_after(&api, &q, killed, "crash").await;
        (promoted, entry)
    };
    let ((code, r, stderr), (promoted_in, entry_in)) = tokio::join!(run, crash);
    eprintln!(
        "kill -9 failover ({backend:?}): promoted after {promoted_in:?}, first entry after {entry_in:?}; swarm: {} \
         (503s while the shard had no primary: {} errors, {} gave up)",
        summary(&r),
        n(&r, "errors"),
        n(&r, "dropped")
    );
    // While the shard has no primary its queue answers 503 (the swarm counts those as
    // errors and the people as gone); fairness and capacity hold throughout.
    assert_safe(&r);
    let _ = (code, stderr);
    assert!(services.all_running(), "every service recovered by itself");
    let acked = probe.await.unwrap();
    let mut lost = 0;
    let http = reqwest::Client::new();
    for user in &acked {
        let r = http.get(format!("{api}/api/queue/status?userId={user}&queue={probe_q}")).send().await.unwrap();
        if r.status() == reqwest::StatusCode::NOT_FOUND {
            lost += 1;
        }
    }
    eprintln!(
        "kill -9 failover ({backend:?}): {lost} of {} entries acknowledged before the kill were lost",
        acked.len()
    );
    assert!(lost <= acked.len());
}

/// Resharding: a queue's slot moves to another primary (Valkey 9's atomic slot
/// migration, `CLUSTER MIGRATESLOTS`) while a swarm goes through it. The services
/// follow the move by themselves (commands by the new topology, the announcements'
/// sharded subscription re-made on the new owner, the manager's discovery scanning the
/// new primaries), the audits stay at zero, nobody is lost, and a second swarm after
/// the move goes through the queue on its new shard.
async fn a_queue_moves_shard_during_a_swarm(backend: Backend) {
    let (cluster, queues, mut services) = setup_on(&testkit::valkey9_binary(), backend, &options()).await;
    let api = services.api.url();
    let q = queues[0].clone();
    let slot = cluster.slot(&q);
    let from = cluster.owner(&q).port;
    let to = cluster.primaries().iter().map(|n| cluster.index_of(n)).find(|&i| cluster.nodes[i].port != from).unwrap();
    let args = swarm_args(80, 9);
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let run = swarm(&services, &q, &a);
    let mv = async {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let took = cluster.migrate_slot(slot, to);
        let entry = first_entry_after(&api, &q, Instant::now(), "moved").await;
        (took, entry)
    };
    let ((code, r, stderr), (took, entry)) = tokio::join!(run, mv);
    assert_eq!(cluster.owner(&q).port, cluster.nodes[to].port, "the queue lives on its new shard");
    eprintln!(
        "slot migration ({backend:?}): slot {slot} moved in {took:?}, next entry took {entry:?}; swarm: {}",
        summary(&r)
    );
    assert_clean(code, &r, &stderr);
    assert_eq!(n(&r, "entered"), 80, "{r:#}");
    assert_eq!(n(&r, "admitted") + n(&r, "abandoned"), 80, "{r:#}");
    assert!(services.all_running());
    let args = swarm_args(30, 10);
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let (code, r, stderr) = swarm(&services, &q, &a).await;
    assert_clean(code, &r, &stderr);
    assert_eq!(n(&r, "admitted") + n(&r, "abandoned"), 30, "after the move: {r:#}");
    assert!(n(&r, "messages_echoed") > 0, "the chat room followed the queue: {r:#}");

    // Back to where it came from after a change on the new shard: the old owner must
    // serve the queue's state as it is now, not what it knew of it before (the module
    // keeps a per-queue cache of settings and counters). First until nothing moves: those
    // who abandoned by closing the page leave the line after `abandon_after`, unclaimed
    // tickets expire, and the manager promotes whoever still waits.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let m = info(&cluster, &q);
        if ["waiting", "joining", "active"].iter().all(|k| m.get(*k) == Some(&0)) {
            break;
        }
        assert!(Instant::now() < deadline, "the queue never came to rest: {m:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    cluster.owner(&q).client().call("QUEUE.CONFIG", &[q.as_str(), "SET", "soft_cap", "7"]).unwrap();
    // What does not move with the clock (leases lapse, the rate decays, tokens refill).
    let lasting = |m: std::collections::HashMap<String, i64>| -> std::collections::BTreeMap<String, i64> {
        let keep = ["waiting", "joining", "promoted", "claimed", "expired", "dropped", "left", "ended", "soft_cap"];
        m.into_iter().filter(|(k, _)| keep.contains(&k.as_str())).collect()
    };
    let before = lasting(info(&cluster, &q));
    let home = cluster.index_of(cluster.nodes.iter().find(|n| n.port == from).unwrap());
    cluster.migrate_slot(slot, home);
    assert_eq!(cluster.owner(&q).port, from);
    let got = cluster.owner(&q).client().call("QUEUE.CONFIG", &[q.as_str(), "GET", "soft_cap"]).unwrap();
    assert_eq!(testkit::as_int(&got).or_else(|| testkit::as_string(&got).and_then(|s| s.parse().ok())), Some(7));
    let after = lasting(info(&cluster, &q));
    assert_eq!(after.len(), 9, "{after:?}");
    assert_eq!(after, before, "the queue's counters came back whole: {after:?} {before:?}");
    let (code, r, stderr) = swarm(&services, &q, &a).await;
    assert_clean(code, &r, &stderr);
    assert_eq!(n(&r, "admitted") + n(&r, "abandoned"), 30, "back home: {r:#}");
}

/// Enters people into `queue` one after another for `for_how_long`; the userIds
/// whose entry was acknowledged.
async fn probe_entries(api: String, queue: String, for_how_long: Duration) -> Vec<String> {
    let http = reqwest::Client::builder().timeout(Duration::from_secs(2)).build().unwrap();
    let until = Instant::now() + for_how_long;
    let mut acked = Vec::new();
    let mut i = 0;
    while Instant::now() < until {
        i += 1;
        let body = serde_json::json!({"nickname": format!("probe{i}"), "queue": queue});
        if let Ok(r) = http.post(format!("{api}/api/queue/entry")).json(&body).send().await {
            if r.status().is_success() {
                if let Ok(v) = r.json::<serde_json::Value>().await {
                    acked.extend(v["userId"].as_str().map(str::to_string));
                }
            }
        }
    }
    acked
}

/// `queue-cli join` on the last shard's queue with a soft cap of 1: alice is let in
/// and chats, bob waits at rank 1, and when alice quits her freed place goes to bob at
/// once (announced on the shard with SPUBLISH), who chats in the same room.
async fn journey_on_a_cluster(backend: Backend) {
    let opts = StackOptions { soft_cap: 1, ..Default::default() };
    let (_cluster, queues, services) = setup(backend, &opts).await;
    let q = queues[2].clone();
    let join = |nickname: &str| {
        let args: Vec<String> = ["join", "--api", &services.api.url(), "--chat", &services.chat.url()]
            .iter()
            .map(|s| s.to_string())
            .chain(["--queue".to_string(), q.clone(), "--nickname".to_string(), nickname.to_string()])
            .collect();
        start_piped(client_binary(), &args)
    };
    let (mut alice, mut alice_out) = join("alice");
    alice_out.expect("connected", |l| l.starts_with("connected to chat as alice")).await;
    let (mut bob, mut bob_out) = join("bob");
    bob_out.expect("waiting at rank 1", |l| l.starts_with("waiting: rank 1")).await;
    type_line(&mut alice, "hello from shard three").await;
    alice_out.expect("her own message, through the room", |l| l.ends_with("alice: hello from shard three")).await;
    type_line(&mut alice, "/quit").await;
    alice_out.expect("leaving", |l| l == "left the chat").await;
    exits_cleanly(&mut alice, &alice_out).await;
    bob_out.expect("admitted", |l| l.starts_with("admitted: ticket ")).await;
    bob_out.expect("connected", |l| l.starts_with("connected to chat as bob")).await;
    type_line(&mut bob, "hi").await;
    bob_out.expect("his message", |l| l.ends_with("bob: hi")).await;
    type_line(&mut bob, "/quit").await;
    exits_cleanly(&mut bob, &bob_out).await;
}
