//! The gate (services/gate) with real parts: real nginx (`auth_request`) and real
//! Caddy (`forward_auth`) from Debian, and the gate's own proxy mode, each in front of
//! the example upstream app (tests/gate/upstream.rs), which logs every request it
//! serves. On both backends:
//!
//! - a `queue-cli swarm --gate` through each: every user is sent to the waiting room,
//!   stands in line through the room's API under /gate/room/, claims at /gate/claim,
//!   asks the app for the gated path with its cookie (some with a Bearer token), then
//!   leaves or goes idle. The swarm's audits (FIFO, capacity, double claims, access
//!   after leaving) must read 0, and the upstream's log is audited (tests/gate/audit.rs):
//!   every request it served carried a token that verifies under the published JWKS
//!   for that user and queue, inside that user's admission, and the people inside at
//!   once never exceeded the soft cap; the requests it served are exactly those the
//!   swarm saw answered (nothing unadmitted got through);
//! - Valkey killed and restarted (AOF) under load through nginx: admitted people keep
//!   access throughout, a claim gets 503 with Retry-After while Valkey is away and
//!   succeeds after, and the line moves on;
//! - the gate's proxy mode on a 3-primary Valkey Cluster, a swarm per shard at once;
//! - each proxy's conventions: the redirect, the JSON answer, forged and spoofed
//!   credentials, an open redirect at /gate/claim, the app ending a session;
//! - a token renewed near its expiry reaching the browser: through nginx as the
//!   auth answer's Set-Cookie, through Caddy (which drops it) by `--renew-redirect`.
//!
//! Needs the release build of the workspace (the gate, the services, queue-cli, the
//! example `gate-upstream`) and nginx and caddy (scripts/install-deps.sh).

#[path = "gate/audit.rs"]
mod audit;
#[path = "gate/harness.rs"]
mod harness;

use audit::{audit, journal, Jwks};
use e2e::stores::{assert_clean, n, Services};
use e2e::{e2e_tests, StackOptions, ADMIN_TOKEN};
use harness::{Front, GateOptions, GateStack};
use queue_cli::gate::{ask, claim, http_client, leave, Answer, Claimed, Credential};
use serde_json::Value;
use std::time::{Duration, Instant};
use testkit::cluster::Cluster;
use testkit::{Backend, ValkeyServer};

e2e_tests!(
    swarm_through_nginx,
    swarm_through_caddy,
    swarm_through_the_proxy_mode,
    swarm_through_the_proxy_mode_straight_through,
    valkey_restarts_under_load_through_nginx,
    proxy_mode_on_a_cluster,
    spoofed_headers_through_nginx_and_caddy,
);

const SOFT_CAP: u64 = 8;
/// The gate's idle time, and so its tokens' longest life (a token never outlives its
/// lease); the swarm's idle users wait as long.
const IDLE_S: u64 = 4;

fn options() -> StackOptions {
    StackOptions { soft_cap: SOFT_CAP, ticket_ttl_ms: 4000, abandon_after_ms: 3000, ..Default::default() }
}

fn gate_options(routes: &[(&str, &str)]) -> GateOptions {
    GateOptions {
        routes: routes.iter().map(|(p, q)| (p.to_string(), q.to_string())).collect(),
        tick_ms: 200,
        idle_s: IDLE_S,
        token_ttl_s: 120,
        extra: Vec::new(),
    }
}

/// Sets the queue's soft cap and timings; a short lease, so that an idle person's
/// slot comes back within the run (the gate renews it every tick while they are active).
fn configure(c: &mut testkit::Client, queue: &str, opts: &StackOptions) {
    let (cap, ttl, abandon) =
        (opts.soft_cap.to_string(), opts.ticket_ttl_ms.to_string(), opts.abandon_after_ms.to_string());
    let set = ["soft_cap", &cap, "ticket_ttl", &ttl, "abandon_after", &abandon, "session_lease", "4000"];
    c.call("QUEUE.CONFIG", &[&[queue, "SET"][..], &set[..]].concat()).expect("configure the queue");
}

/// `queue-cli swarm --gate` through `entrance` on `path` (queue `queue`); the exit
/// status, JSON report, stderr, and the journal's path.
async fn swarm(
    stack: &GateStack,
    services: &Services,
    queue: &str,
    path: &str,
    users: u32,
    seed: u32,
) -> (Option<i32>, Value, String, std::path::PathBuf) {
    let journal = stack.dir.path(&format!("journal-{queue}.jsonl"));
    let mut args: Vec<String> = [
        "swarm",
        "--api",
        &services.api.url(),
        "--chat",
        &services.chat.url(),
        "--queue",
        queue,
        "--admin-token",
        ADMIN_TOKEN,
        "--json",
        "--quiet",
        "--gate",
        &stack.entrance(),
        "--gate-path",
        path,
        "--gate-idle-secs",
        &IDLE_S.to_string(),
        "--gate-journal",
        &journal.display().to_string(),
        "--gate-idle",
        "0.2",
        "--gate-bearer",
        "0.15",
        "--gate-requests",
        "3",
        "--users",
        &users.to_string(),
        "--seed",
        &seed.to_string(),
        "--rate",
        "40",
        "--stay-secs",
        "0.6",
        "--timeout-secs",
        "240",
    ]
    .map(String::from)
    .to_vec();
    // The test crowd's abandons, claim races, replays and pollers (its stay is longer here).
    args.extend(e2e::CROWD[4..].iter().map(|s| s.to_string()));
    let out =
        tokio::process::Command::new(e2e::client_binary()).args(&args).output().await.expect("run queue-cli swarm");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let report: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("report is not JSON ({e}): {}\n{stderr}", String::from_utf8_lossy(&out.stdout)));
    (out.status.code(), report, stderr, journal)
}

/// The swarm's gate counters must be consistent and its audits zero. `straight`: the
/// gate's straight pass was on (else everyone was first sent to the room).
fn assert_gate_report(r: &Value, users: u32, straight: bool) {
    let g = &r["gate"];
    let f = |k: &str| g[k].as_u64().unwrap_or_else(|| panic!("gate.{k} missing in {r:#}"));
    for zero in ["passed_unadmitted", "wrong_user", "app_unverified", "access_after_leave"] {
        assert_eq!(f(zero), 0, "gate.{zero}: {r:#}");
    }
    let (passes, again) = (f("straight_through"), f("passed_again_after_leave"));
    if straight {
        assert!(passes > 0 && f("sent_to_room") > 0, "some went straight in, some to the busy room: {r:#}");
    } else {
        assert_eq!(passes + again, 0, "no straight pass while it is off: {r:#}");
    }
    assert_eq!(f("sent_to_room") + passes, u64::from(users), "everyone was sent to the room or let in: {r:#}");
    assert_eq!(f("claims") + passes, n(r, "admitted"), "{r:#}");
    assert_eq!(f("app_answered"), f("app_requests") + passes + again, "every admitted request was answered: {r:#}");
    assert_eq!(f("left") + f("idle"), f("claims") + passes, "{r:#}");
    assert_eq!(f("refused_after_leave") + again, f("left"), "after leaving, the old token opened nothing: {r:#}");
    assert!(f("left") > 0 && f("idle") > 0 && f("bearer_users") > 0, "the crowd took every way: {r:#}");
    // Every used ticket was refused again (people let straight in had none).
    assert!(n(r, "reuse_refused") <= f("left") && n(r, "reuse_refused") + passes >= f("left"), "{r:#}");
    if !straight {
        assert_eq!(n(r, "reuse_refused"), f("left"), "every used ticket was refused again: {r:#}");
    }
    assert!(f("claim_races") > 0, "{r:#}");
    assert!(
        n(r, "max_holding") >= SOFT_CAP / 2 && n(r, "max_holding") <= SOFT_CAP,
        "the cap was reached, not passed: {r:#}"
    );
}

/// The upstream's log audited against the gate's keys and the swarm's journals.
async fn assert_upstream_clean(
    stack: &GateStack,
    routes: &[(String, String)],
    journals: &[std::path::PathBuf],
    reports: &[&Value],
) -> audit::Audit {
    let log = stack.upstream_log().await;
    let jwks = Jwks::fetch(&stack.entrance()).await;
    let mut windows = std::collections::HashMap::new();
    for j in journals {
        windows.extend(journal(j));
    }
    let a = audit(&log, &jwks, routes, Some(&windows), SOFT_CAP);
    assert!(a.violations.is_empty(), "the upstream's log: {:#?}", a.violations);
    let answered: u64 = reports.iter().map(|r| r["gate"]["app_answered"].as_u64().unwrap()).sum();
    assert_eq!(a.gated, answered, "the app served exactly the requests the swarm saw answered, nothing more");
    let admitted: u64 = reports
        .iter()
        .flat_map(|r| {
            ["claims", "straight_through", "passed_again_after_leave"].map(|k| r["gate"][k].as_u64().unwrap())
        })
        .sum();
    assert_eq!(a.users.values().sum::<usize>() as u64, admitted, "every admitted person reached the app");
    a
}

/// `straight`: with the gate's straight pass on (no limit per address: the swarm's
/// users all come from one), so that people arriving while nobody waits go straight
/// in and the others walk the room.
async fn swarm_through(backend: Backend, front: Front, straight: bool) {
    let queue = "drop".to_string();
    let opts = options();
    let valkey = ValkeyServer::start(backend);
    configure(&mut valkey.client(), &queue, &opts);
    let flags = vec!["--valkey-url".to_string(), valkey.url()];
    let mut go = gate_options(&[("/checkout", &queue)]);
    if straight {
        go.extra = ["--straight-through", "true", "--straight-through-per-address", "0"].map(String::from).to_vec();
    }
    let stack = GateStack::start("swarm", front, &flags, std::slice::from_ref(&queue), &opts, &go).await;
    let users = 150;
    let (code, r, stderr, journal) = swarm(&stack, &stack.services, &queue, "/checkout", users, 1).await;
    assert_clean(code, &r, &stderr);
    assert_gate_report(&r, users, straight);
    assert_eq!(n(&r, "admitted") + n(&r, "abandoned"), u64::from(users), "{r:#}");
    let a = assert_upstream_clean(&stack, &go.routes, &[journal], &[&r]).await;
    // Idle people's leases lapse by themselves (idle time, then the lease).
    let deadline = Instant::now() + Duration::from_secs(30);
    let info = loop {
        let info = testkit::fields(&valkey.client().call("QUEUE.INFO", &[&queue]).unwrap());
        let active = testkit::field_int(&info, "active");
        if active == 0 || Instant::now() > deadline {
            break info;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(testkit::field_int(&info, "active"), 0, "every session ended or lapsed: {info:?}");
    let again = r["gate"]["passed_again_after_leave"].as_u64().unwrap();
    assert_eq!(
        testkit::field_int(&info, "claimed") as u64,
        n(&r, "admitted") + again,
        "Valkey counted the same claims (a straight pass is one)"
    );
    eprintln!(
        "{front:?} ({backend:?}): {} users, {} admitted, {} app requests audited, most inside at once {:?} (soft cap {SOFT_CAP}), {:.1} s",
        users,
        n(&r, "admitted"),
        a.gated,
        a.most_inside,
        r["duration_seconds"].as_f64().unwrap_or(0.0)
    );
}

async fn swarm_through_nginx(backend: Backend) {
    swarm_through(backend, Front::Nginx, false).await
}

async fn swarm_through_caddy(backend: Backend) {
    swarm_through(backend, Front::Caddy, false).await
}

async fn swarm_through_the_proxy_mode(backend: Backend) {
    swarm_through(backend, Front::Proxy, false).await
}

async fn swarm_through_the_proxy_mode_straight_through(backend: Backend) {
    swarm_through(backend, Front::Proxy, true).await
}

async fn proxy_mode_on_a_cluster(backend: Backend) {
    let opts = options();
    let cluster = Cluster::start(backend, 3, 0);
    let queues: Vec<String> = cluster.queues_per_shard("gate", 1).into_iter().flatten().collect();
    let owners: std::collections::BTreeSet<u16> = queues.iter().map(|q| cluster.owner(q).port).collect();
    assert_eq!(owners.len(), 3, "one queue per shard");
    for q in &queues {
        configure(&mut cluster.owner(q).client(), q, &opts);
    }
    let flags = vec!["--valkey-url".to_string(), cluster.urls().join(","), "--cluster".to_string()];
    let paths: Vec<String> = (0..queues.len()).map(|i| format!("/shop-{i}")).collect();
    let routes: Vec<(&str, &str)> = paths.iter().map(String::as_str).zip(queues.iter().map(String::as_str)).collect();
    let go = gate_options(&routes);
    let stack = GateStack::start("cluster", Front::Proxy, &flags, &queues, &opts, &go).await;
    let users = 60;
    let runs = queues.iter().zip(&paths).enumerate().map(|(i, (q, p))| {
        let stack = &stack;
        async move { swarm(stack, &stack.services, q, p, users, i as u32 + 1).await }
    });
    let results = e2e::join_all(runs).await;
    let mut journals = Vec::new();
    for (code, r, stderr, j) in &results {
        assert_clean(*code, r, stderr);
        assert_gate_report(r, users, false);
        journals.push(j.clone());
    }
    let reports: Vec<&Value> = results.iter().map(|(_, r, _, _)| r).collect();
    let a = assert_upstream_clean(&stack, &go.routes, &journals, &reports).await;
    assert_eq!(a.users.len(), 3, "every shard's queue reached the app: {a:?}");
    eprintln!("cluster ({backend:?}): {} app requests audited, most inside at once {:?}", a.gated, a.most_inside);
}

/// One person through the room's API under the gate: entered, and its standing.
async fn enter(entrance: &str, queue: &str, i: usize) -> queue_client::Standing {
    let api = queue_cli::api::Api::new(
        queue_cli::api::Api::http_client(),
        &format!("{entrance}/gate/room"),
        queue,
        Some(format!("10.9.0.{i}")),
    );
    api.enter(&format!("p{i}")).await.unwrap_or_else(|e| panic!("entry {i} through the room: {e}"))
}

async fn valkey_restarts_under_load_through_nginx(backend: Backend) {
    let queue = "drop".to_string();
    let opts = StackOptions { soft_cap: 4, ticket_ttl_ms: 30_000, abandon_after_ms: 60_000, ..Default::default() };
    // AOF written at every command: a kill -9 loses nothing.
    let mut valkey =
        ValkeyServer::builder(backend).arg("--appendonly").arg("yes").arg("--appendfsync").arg("always").start();
    configure(&mut valkey.client(), &queue, &opts);
    valkey.client().call("QUEUE.CONFIG", &[&queue, "SET", "session_lease", "10000"]).unwrap();
    let flags = vec!["--valkey-url".to_string(), valkey.url()];
    // Tokens live the idle time and are not renewed while Valkey is away: admitted
    // people keep access through an outage shorter than that.
    let mut go = gate_options(&[("/checkout", &queue)]);
    go.idle_s = 60;
    let stack = GateStack::start("restart", Front::Nginx, &flags, std::slice::from_ref(&queue), &opts, &go).await;
    let entrance = stack.entrance();
    let http = http_client();

    // Four promoted at once (three claim now, one keeps its ticket), two wait.
    let mut people = Vec::new();
    for i in 0..6 {
        people.push(enter(&entrance, &queue, i).await);
    }
    assert!(people[..4].iter().all(|s| s.ticket_id.is_some()) && people[4..].iter().all(|s| s.ticket_id.is_none()));
    let mut inside = Vec::new();
    for p in &people[..3] {
        match claim(&http, &entrance, "queue_admission", &queue, p.ticket_id.as_deref().unwrap(), "/checkout").await {
            Claimed::Admitted(token, _) => inside.push(Credential::Cookie("queue_admission".into(), token)),
            other => panic!("claim: {other:?}"),
        }
    }

    // Load: the admitted people ask for the gated path without pause.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let load: Vec<_> = inside
        .iter()
        .cloned()
        .map(|cred| {
            let (http, url, stop) = (http.clone(), format!("{entrance}/checkout"), stop.clone());
            tokio::spawn(async move {
                let mut answers = Vec::new();
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    answers.push((Instant::now(), ask(&http, &url, Some(&cred)).await));
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                answers
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;

    valkey.kill();
    let down_at = Instant::now();
    // The gate notices (its health turns 503) and claims are refused for now.
    let gate_health = format!("{}/gate/healthz", stack.gate.url());
    let noticed = async {
        while reqwest::get(&gate_health).await.map(|r| r.status().as_u16()).unwrap_or(0) != 503 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(20), noticed).await.expect("the gate noticed Valkey was away");
    let waiting_ticket = people[3].ticket_id.clone().unwrap();
    match claim(&http, &entrance, "queue_admission", &queue, &waiting_ticket, "/checkout").await {
        Claimed::Refused(503, Some(_), _) => {}
        other => panic!("a claim while Valkey is away: expected 503 with Retry-After, got {other:?}"),
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    valkey.restart();
    let up_at = Instant::now();

    // Claims resume: the kept ticket is claimed.
    let deadline = Instant::now() + Duration::from_secs(20);
    let fourth = loop {
        match claim(&http, &entrance, "queue_admission", &queue, &waiting_ticket, "/checkout").await {
            Claimed::Admitted(token, _) => break Credential::Cookie("queue_admission".into(), token),
            Claimed::Refused(503, ..) | Claimed::Failed(_) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await
            }
            other => panic!("the kept ticket after the restart: {other:?}"),
        }
    };
    let resumed_after = up_at.elapsed();
    assert!(matches!(ask(&http, &format!("{entrance}/checkout"), Some(&fourth)).await, Answer::App(200, ..)));
    // The line moves on: one leaves, the first waiter is promoted and claims.
    leave(&http, &entrance, &queue, &inside[0]).await.expect("leave");
    let api =
        queue_cli::api::Api::new(queue_cli::api::Api::http_client(), &format!("{entrance}/gate/room"), &queue, None);
    let promoted = api
        .follow(
            &people[4].user_id,
            true,
            Duration::from_millis(100),
            Instant::now() + Duration::from_secs(20),
            |_, _| {},
        )
        .await
        .expect("the first waiter follows its place");
    let ticket = promoted.ticket_id.expect("promoted after a leave");
    assert!(matches!(
        claim(&http, &entrance, "queue_admission", &queue, &ticket, "/checkout").await,
        Claimed::Admitted(..)
    ));
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);

    let mut during = 0;
    let mut total = 0;
    for (who, task) in load.into_iter().enumerate() {
        for (at, answer) in task.await.unwrap() {
            // inside[0] left near the end: its answers after that are not access.
            if who == 0 && matches!(answer, Answer::Room(_)) {
                continue;
            }
            total += 1;
            during += usize::from(at > down_at && at < up_at);
            assert!(matches!(answer, Answer::App(200, ..)), "an admitted person lost access: {answer:?}");
        }
    }
    assert!(during > 10, "requests were served while Valkey was away: {during}");
    let a = assert_upstream_clean_no_journal(&stack, &go.routes, opts.soft_cap).await;
    eprintln!(
        "valkey restart ({backend:?}): {total} requests by admitted people all served, {during} of them while Valkey was away ({:.1} s); claims resumed {:.2} s after the restart; {} app requests audited",
        up_at.duration_since(down_at).as_secs_f64(),
        resumed_after.as_secs_f64(),
        a.gated
    );
}

/// The upstream's log audited against the keys alone (no swarm journal).
async fn assert_upstream_clean_no_journal(
    stack: &GateStack,
    routes: &[(String, String)],
    soft_cap: u64,
) -> audit::Audit {
    let log = stack.upstream_log().await;
    let jwks = Jwks::fetch(&stack.entrance()).await;
    let a = audit(&log, &jwks, routes, None, soft_cap);
    assert!(a.violations.is_empty(), "the upstream's log: {:#?}", a.violations);
    a
}

/// A client's own forwarding headers, sent through the real nginx and the real Caddy,
/// choose neither the path the gate decides on nor the address it checks against
/// the bypass networks: each of these asks for the gated /checkout unadmitted and
/// must be sent to the waiting room, never reach the app.
async fn spoofed_headers_through_nginx_and_caddy(backend: Backend) {
    let queue = "drop".to_string();
    let opts = options();
    let valkey = ValkeyServer::start(backend);
    configure(&mut valkey.client(), &queue, &opts);
    let flags = vec!["--valkey-url".to_string(), valkey.url()];
    let mut go = gate_options(&[("/checkout", &queue)]);
    go.extra = ["--bypass-network", "10.9.0.0/16"].map(String::from).to_vec();
    let spoofs: &[(&str, &[(&str, &str)])] = &[
        ("X-Original-URI", &[("x-original-uri", "/about")]),
        ("X-Forwarded-Uri", &[("x-forwarded-uri", "/about")]),
        ("X-Real-IP", &[("x-real-ip", "10.9.1.2")]),
        ("X-Forwarded-For", &[("x-forwarded-for", "10.9.1.2")]),
        ("X-Forwarded-For and X-Real-IP", &[("x-forwarded-for", "1.2.3.4"), ("x-real-ip", "10.9.1.2")]),
        ("X-Forwarded-Host", &[("x-forwarded-host", "elsewhere.test")]),
    ];
    for front in [Front::Caddy, Front::Nginx] {
        let stack = GateStack::start("spoof", front, &flags, std::slice::from_ref(&queue), &opts, &go).await;
        let http = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
        let entrance = stack.entrance();
        for (what, headers) in spoofs {
            let mut r = http.get(format!("{entrance}/checkout")).header("accept", "text/html");
            for (k, v) in *headers {
                r = r.header(*k, *v);
            }
            let r = r.send().await.unwrap();
            let status = r.status().as_u16();
            let body = r.text().await.unwrap_or_default();
            assert!(
                status == 302 || status == 403,
                "{front:?}: a spoofed {what} reached the app unadmitted: {status} {body:.200}"
            );
        }
        let served = stack.upstream_log().await;
        let gated: Vec<_> = served.iter().filter(|l| l.to_string().contains("/checkout")).collect();
        assert!(gated.is_empty(), "{front:?}: the app served gated requests: {gated:?}");
    }
}

/// A token renewed near its expiry reaches the browser through the real proxies, so
/// an active person stays in past their first token's life (3 s here: the idle time):
/// through nginx as the auth answer's Set-Cookie (`add_header`), through Caddy, whose
/// `forward_auth` drops the 200's cookies, by the gate's `--renew-redirect` (a browser's
/// GET goes through /gate/renew, which sets the cookie and comes back).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewed_cookie_reaches_the_browser_through_nginx_and_caddy() {
    let queue = "drop".to_string();
    let opts = options();
    let valkey = ValkeyServer::start(Backend::Module);
    configure(&mut valkey.client(), &queue, &opts);
    let flags = vec!["--valkey-url".to_string(), valkey.url()];
    for (front, extra) in [(Front::Caddy, vec!["--renew-redirect".to_string()]), (Front::Nginx, vec![])] {
        let mut go = gate_options(&[("/checkout", &queue)]);
        go.idle_s = 3;
        go.extra = extra;
        let stack = GateStack::start("renew", front, &flags, std::slice::from_ref(&queue), &opts, &go).await;
        let entrance = stack.entrance();
        let http = http_client();
        let ticket = enter(&entrance, &queue, 1).await.ticket_id.expect("promoted at once");
        let mut token = match claim(&http, &entrance, "queue_admission", &queue, &ticket, "/checkout").await {
            Claimed::Admitted(token, _) => token,
            other => panic!("{front:?}: claim: {other:?}"),
        };
        let set_cookie = |r: &reqwest::Response| {
            r.headers()
                .get_all("set-cookie")
                .iter()
                .filter_map(|v| v.to_str().ok()?.split(';').next()?.strip_prefix("queue_admission="))
                .map(str::to_string)
                .find(|v| !v.is_empty())
        };
        let browse = |url: String, token: &str| {
            let cookie = format!("queue_admission={token}");
            let r = http.get(url).header("accept", "text/html").header("cookie", cookie).send();
            async move { r.await.unwrap() }
        };
        let (started, mut renewals, mut served) = (Instant::now(), 0, 0);
        while started.elapsed() < Duration::from_millis(5000) {
            let r = browse(format!("{entrance}/checkout"), &token).await;
            let location = r.headers().get("location").map(|l| l.to_str().unwrap().to_string());
            match (r.status().as_u16(), location) {
                (200, _) => {
                    served += 1;
                    if let Some(fresh) = set_cookie(&r) {
                        token = fresh;
                        renewals += 1;
                    }
                }
                (302, Some(to)) if to.starts_with("/gate/renew?") => {
                    let r = browse(format!("{entrance}{to}"), &token).await;
                    assert_eq!(r.status(), 303, "{front:?}: /gate/renew");
                    assert_eq!(r.headers()["location"], "/checkout", "{front:?}: back where the person was");
                    token = set_cookie(&r).unwrap_or_else(|| panic!("{front:?}: /gate/renew set no cookie"));
                    renewals += 1;
                }
                (code, to) => panic!(
                    "{front:?}: an active person was refused after {:?}: {code} {to:?} ({renewals} renewals)",
                    started.elapsed()
                ),
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        assert!(renewals >= 2, "{front:?}: {renewals} renewals in 5 s of 3 s tokens");
        eprintln!("{front:?}: {served} requests served over 5 s on 3 s tokens, {renewals} renewals");
    }
}

/// Straight through while there is room, through each front: the gate's proxy mode,
/// nginx `auth_request` (the auth answer's Set-Cookie passed on) and Caddy
/// `forward_auth` (`--renew-redirect`: the cookie set on one redirect to the same URL).
/// On an idle queue the first request reaches the app admitted (the app's log shows
/// the person) with ONE Valkey call (QUEUE.PASS, INFO commandstats), none after; a
/// full room sends the next visitor to the room; a client that never keeps the cookie
/// takes at most its address's passes; in proxy mode a flood of first requests from
/// many addresses never passes the cap, and the app's `Queue-Sold` lowers the inventory
/// without reaching the client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn straight_through_the_proxy_nginx_and_caddy() {
    const CAP: u64 = 10;
    const PER_ADDRESS: usize = 3;
    let queue = "drop".to_string();
    let opts = options();
    for front in [Front::Proxy, Front::Nginx, Front::Caddy] {
        let valkey = ValkeyServer::start(Backend::Module);
        configure(&mut valkey.client(), &queue, &opts);
        valkey
            .client()
            .call("QUEUE.CONFIG", &[&queue, "SET", "soft_cap", &CAP.to_string(), "inventory", "50"])
            .unwrap();
        let flags = vec!["--valkey-url".to_string(), valkey.url()];
        let mut go = gate_options(&[("/checkout", &queue)]);
        go.extra = ["--straight-through", "true", "--straight-through-per-address", &PER_ADDRESS.to_string()]
            .map(String::from)
            .to_vec();
        match front {
            // The test names each client by X-Forwarded-For.
            Front::Proxy => go.extra.extend(["--trusted-proxies".to_string(), "127.0.0.1".to_string()]),
            Front::Caddy => go.extra.push("--renew-redirect".to_string()),
            Front::Nginx => {}
        }
        let stack = GateStack::start("straight", front, &flags, std::slice::from_ref(&queue), &opts, &go).await;
        let entrance = stack.entrance();
        let qc = queue_client::QueueClient::connect(&valkey.url()).await.unwrap();
        let http = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
        let get = |path: &str, addr: &str, cookie: Option<&str>| {
            let mut r = http.get(format!("{entrance}{path}")).header("accept", "text/html");
            if front == Front::Proxy {
                r = r.header("x-forwarded-for", addr);
            }
            if let Some(c) = cookie {
                r = r.header("cookie", format!("queue_admission={c}"));
            }
            async move { r.send().await.unwrap() }
        };
        let set_cookie = |r: &reqwest::Response| {
            r.headers()
                .get_all("set-cookie")
                .iter()
                .filter_map(|v| v.to_str().ok()?.split(';').next()?.strip_prefix("queue_admission="))
                .map(str::to_string)
                .find(|v| !v.is_empty())
        };
        let location = |r: &reqwest::Response| {
            r.headers().get("location").map(|l| l.to_str().unwrap().to_string()).unwrap_or_default()
        };
        let calls = |command: &str| -> u64 {
            let info = valkey.client().call("INFO", &["commandstats"]).unwrap();
            let text = match info {
                redis::Value::BulkString(b) => String::from_utf8_lossy(&b).into_owned(),
                redis::Value::VerbatimString { text, .. } => text,
                other => panic!("INFO: {other:?}"),
            };
            let prefix = format!("cmdstat_{command}:calls=");
            text.lines()
                .find_map(|l| l.strip_prefix(&prefix))
                .map_or(0, |r| r.split(',').next().unwrap().parse().unwrap())
        };
        tokio::time::sleep(Duration::from_millis(500)).await;
        valkey.client().call("CONFIG", &["RESETSTAT"]).unwrap();

        // 1. The first visitor on the idle queue: straight to the app.
        let addr = "198.51.100.7";
        let r = get("/checkout", addr, None).await;
        let token = set_cookie(&r).unwrap_or_else(|| panic!("{front:?}: no cookie on the first answer"));
        let r = if front == Front::Caddy {
            // Caddy drops a 200's cookies: the gate sets it on one redirect to the same URL.
            assert_eq!((r.status().as_u16(), location(&r).as_str()), (302, "/checkout"), "{front:?}");
            get("/checkout", addr, Some(&token)).await
        } else {
            r
        };
        assert_eq!(r.status(), 200, "{front:?}: the first request reaches the app");
        let answer: Value = r.json().await.unwrap();
        let user =
            answer["user"].as_str().unwrap_or_else(|| panic!("{front:?}: the app saw no X-Queue-User: {answer}"));
        assert_eq!(answer["queue"], "drop");
        assert_eq!(calls("queue.pass"), 1, "{front:?}: one Valkey call for the first request");
        for _ in 0..3 {
            let r = get("/checkout", addr, Some(&token)).await;
            assert_eq!(r.status(), 200);
        }
        for c in ["queue.pass", "queue.enter", "ticket.claim"] {
            assert_eq!(calls(c), u64::from(c == "queue.pass"), "{front:?}: {c} after the first request");
        }
        let log = stack.upstream_log().await;
        assert!(
            log.iter().any(|l| l["user"] == user && l["uri"].as_str().unwrap_or("").starts_with("/checkout")),
            "{front:?}: the app's log shows the person: {log:?}"
        );
        assert!(
            log.iter().filter(|l| l["uri"].as_str().unwrap_or("").starts_with("/checkout")).all(|l| l["user"] == user),
            "{front:?}: nothing unadmitted reached the app"
        );
        assert_eq!(qc.info(&queue).await.unwrap().active, 1);

        // 2. The room full (people claiming their tickets): the next visitor goes there.
        for i in 1..CAP {
            let t = qc.enter(&queue, &format!("f{i}"), "f").await.unwrap().ticket_id.expect("promoted");
            qc.claim(&queue, &t).await.unwrap();
        }
        let r = get("/checkout", addr, None).await;
        assert_eq!(r.status(), 302, "{front:?}: the room is full");
        // (nginx's `return 302` writes the link absolute.)
        assert!(location(&r).contains("/gate/room/?queue=drop"), "{front:?}: {}", location(&r));
        assert!(set_cookie(&r).is_none());
        for i in 1..CAP {
            qc.end_session(&queue, &format!("f{i}")).await.unwrap();
        }
        tokio::time::sleep(Duration::from_millis(400)).await;

        // 3. A crawler that never sends the cookie back, from the same address: what is
        // left of the address's passes this minute (one), then the room.
        let mut passes = 0;
        for _ in 0..8 {
            let r = get("/checkout", addr, None).await;
            if set_cookie(&r).is_some() {
                passes += 1;
            } else {
                assert!(location(&r).contains("/gate/room/"), "{front:?}: {} {}", r.status(), location(&r));
            }
        }
        assert_eq!(passes, PER_ADDRESS - 2, "{front:?}: a cookieless client takes at most its address's passes");
        assert_eq!(qc.info(&queue).await.unwrap().active, 2, "{front:?}");

        if front == Front::Proxy {
            // 4. A flood of first requests from many addresses: never past the cap.
            let flood = (0..40).map(|i| get("/checkout", &format!("203.0.113.{i}"), None));
            let answers = e2e::join_all(flood).await;
            let through = answers.iter().filter(|r| r.status() == 200).count() as u64;
            let info = qc.info(&queue).await.unwrap();
            assert!(info.active <= CAP, "the flood passed the cap: {info:?}");
            assert_eq!(info.active, 2 + through, "every 200 is a session: {info:?}");

            // 5. The app reports a sale: off the answer, into the queue's inventory.
            let r = get("/checkout/pay?sold=2", addr, Some(&token)).await;
            assert_eq!(r.status(), 200);
            assert!(r.headers().get("queue-sold").is_none(), "Queue-Sold reached the client");
            let r = get("/checkout/pay?sold=-4", addr, Some(&token)).await;
            assert!(r.headers().get("queue-sold").is_none());
            let deadline = Instant::now() + Duration::from_secs(10);
            while qc.info(&queue).await.unwrap().inventory != Some(48) && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
            assert_eq!(qc.info(&queue).await.unwrap().inventory, Some(48), "the sale counted once, the bad value not");
        }
        eprintln!("{front:?}: straight through with one QUEUE.PASS; full room and crawler sent to the room");
    }
}
