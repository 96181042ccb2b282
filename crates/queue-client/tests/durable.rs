//! Durable claims against a real primary and replica, on both backends: a claim is
//! acknowledged once the replica holds it; a replica that does not answer in time
//! makes it `NotDurable`, and the same holder's retry (from this client or another)
//! gets the same admission once the replica is back, never before; nobody else does.

use queue_client::{Claim, ClientError, Durability, QueueClient, QueueError, Status};
use std::time::Duration;
use testkit::{Backend, ValkeyServer};

/// A primary serving `backend` (the Lua library is loaded by the client on a bare
/// server) and one replica that lets `DEBUG SLEEP` freeze it.
fn primary_and_replica(backend: Backend) -> (ValkeyServer, ValkeyServer) {
    let primary = ValkeyServer::start(backend);
    let replica = ValkeyServer::builder(backend).arg("--enable-debug-command").arg("local").start_replica_of(&primary);
    (primary, replica)
}

/// Freezes `server` for `d` (`DEBUG SLEEP`: it answers nothing, its replication
/// acknowledgements included); the returned thread ends when it thaws.
fn freeze(server: &ValkeyServer, d: Duration) -> std::thread::JoinHandle<()> {
    let mut con = server.conn();
    let (tx, rx) = std::sync::mpsc::channel();
    let handle = std::thread::spawn(move || {
        tx.send(()).unwrap();
        let _: redis::Value = redis::cmd("DEBUG").arg("SLEEP").arg(d.as_secs_f64()).query(&mut con).unwrap();
    });
    rx.recv().unwrap();
    // The DEBUG SLEEP is on its way once the thread runs; give it time to arrive.
    std::thread::sleep(Duration::from_millis(100));
    handle
}

fn durable(replicas: u32, timeout_ms: u64) -> Durability {
    Durability { replicas, timeout: Duration::from_millis(timeout_ms), aof: false }
}

async fn ticket(client: &QueueClient, q: &str, user: &str) -> String {
    let s = client.enter(q, user, user).await.unwrap();
    assert_eq!(s.status, Status::Promoted, "{s:?}");
    s.ticket_id.unwrap()
}

fn not_durable(r: Result<Claim, ClientError>) {
    assert!(matches!(r, Err(ClientError::NotDurable(_))), "{r:?}");
}

async fn through_a_frozen_replica(backend: Backend) {
    let (primary, replica) = primary_and_replica(backend);
    let plain = QueueClient::connect(&primary.url()).await.unwrap();
    let client = plain.clone().with_durability(durable(1, 300)).unwrap();
    assert_eq!(client.durability(), durable(1, 300));
    let q = "durable";

    // A live replica confirms at once.
    let t1 = ticket(&client, q, "u-1").await;
    let c1 = client.claim_as(q, &t1, "holder-1").await.unwrap();
    assert_eq!((c1.user_id.as_str(), c1.ticket_id.as_str()), ("u-1", t1.as_str()));

    // A frozen replica: the claim is made but not acknowledged.
    let t2 = ticket(&client, q, "u-2").await;
    let thaw = freeze(&replica, Duration::from_secs(3));
    not_durable(client.claim_as(q, &t2, "holder-2").await);
    // The same holder's retry through another client (another instance, a fresh
    // connection that never wrote the claim) still waits for the replica: the claim
    // is not confirmed before the replica holds it.
    let other = QueueClient::connect(&primary.url()).await.unwrap().with_durability(durable(1, 300)).unwrap();
    not_durable(other.claim_as(q, &t2, "holder-2").await);
    // Nobody else gets the ticket meanwhile.
    assert_eq!(client.claim_as(q, &t2, "stranger").await, Err(ClientError::Refused(QueueError::NoTicket)));
    assert_eq!(plain.claim(q, &t2).await, Err(ClientError::Refused(QueueError::NoTicket)));
    thaw.join().unwrap();

    // Once the replica is back, the holder's retry gets the same admission.
    let again = other.claim_as(q, &t2, "holder-2").await.unwrap();
    assert_eq!(
        (again.user_id.as_str(), again.ticket_id.as_str(), again.nickname.as_str()),
        ("u-2", t2.as_str(), "u-2")
    );
    assert_eq!(client.claim_as(q, &t2, "holder-2").await.unwrap(), again);
    assert_eq!(client.claim_as(q, &t2, "holder-3").await, Err(ClientError::Refused(QueueError::NoTicket)));
    // And the replica holds the session.
    let mut rc = replica.conn();
    let info: String = redis::cmd("INFO").arg("replication").query(&mut rc).unwrap();
    assert!(info.contains("role:slave"), "{info}");
    assert_eq!(plain.info(q).await.unwrap().active, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn module_claims_wait_for_the_replica() {
    through_a_frozen_replica(Backend::Module).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lua_claims_wait_for_the_replica() {
    through_a_frozen_replica(Backend::Bare).await;
}

/// A pass with a holder waits for the replica as a claim does: a frozen replica makes
/// it `NotDurable`, naming the ticket it used; `claim_as` with that ticket and holder
/// is the retry, answered once the replica holds the pass. A nil pass waits for nothing.
async fn passes_wait_for_the_replica(backend: Backend) {
    let (primary, replica) = primary_and_replica(backend);
    let client = QueueClient::connect(&primary.url()).await.unwrap().with_durability(durable(1, 300)).unwrap();
    let q = "durable-pass";
    client.config_set(q, &[("soft_cap", 2)]).await.unwrap();
    let a = client.pass(q, "u-1", "ann", Some("tab-1")).await.unwrap().expect("room");
    assert_eq!(a.user_id, "u-1");
    let thaw = freeze(&replica, Duration::from_secs(3));
    let r = client.pass(q, "u-2", "bo", Some("tab-2")).await;
    let Err(ClientError::NotDurable(why)) = &r else { panic!("{r:?}") };
    let ticket = why.rsplit("ticket ").next().unwrap().split(':').next().unwrap().to_string();
    // Inside already: a second pass is nil (and waits for nothing).
    assert_eq!(client.pass(q, "u-2", "bo", Some("tab-2")).await.unwrap(), None);
    thaw.join().unwrap();
    let again = client.claim_as(q, &ticket, "tab-2").await.unwrap();
    assert_eq!(
        (again.user_id.as_str(), again.ticket_id.as_str(), again.nickname.as_str()),
        ("u-2", ticket.as_str(), "bo")
    );
    // Full: nil.
    assert_eq!(client.pass(q, "u-3", "cy", Some("tab-3")).await.unwrap(), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn module_passes_wait_for_the_replica() {
    passes_wait_for_the_replica(Backend::Module).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lua_passes_wait_for_the_replica() {
    passes_wait_for_the_replica(Backend::Bare).await;
}

async fn without_replicas(backend: Backend) {
    let server = ValkeyServer::start(backend);
    let client = QueueClient::connect(&server.url()).await.unwrap();
    assert_eq!(client.durability(), Durability::OFF);
    let q = "single";
    // Durability off: claims as before, with or without a holder.
    let t = ticket(&client, q, "u-1").await;
    assert_eq!(client.claim(q, &t).await.unwrap().user_id, "u-1");
    let t = ticket(&client, q, "u-2").await;
    let c = client.claim_as(q, &t, "h").await.unwrap();
    assert_eq!(client.claim_as(q, &t, "h").await.unwrap(), c);
    // Asking for a replica that does not exist can never be confirmed.
    let durable = client.clone().with_durability(durable(1, 50)).unwrap();
    let t = ticket(&client, q, "u-3").await;
    not_durable(durable.claim_as(q, &t, "h").await);
    // A bad holder changes nothing.
    let t = ticket(&client, q, "u-4").await;
    let bad = client.claim_as(q, &t, "no spaces").await;
    assert!(matches!(&bad, Err(ClientError::InvalidArgument(m)) if m.contains("holder")), "{bad:?}");
    assert_eq!(client.claim(q, &t).await.unwrap().user_id, "u-4");
    // Settings out of range are refused.
    assert!(matches!(
        client.clone().with_durability(Durability { timeout: Duration::ZERO, ..durable.durability() }),
        Err(ClientError::InvalidArgument(_))
    ));
}

#[tokio::test]
async fn module_without_replicas() {
    without_replicas(Backend::Module).await;
}

#[tokio::test]
async fn lua_without_replicas() {
    without_replicas(Backend::Bare).await;
}

#[tokio::test]
async fn waitaof_needs_the_append_only_file() {
    let server = ValkeyServer::builder(Backend::Module).arg("--appendonly").arg("yes").start();
    let client = QueueClient::connect(&server.url())
        .await
        .unwrap()
        .with_durability(Durability { replicas: 0, timeout: Duration::from_millis(500), aof: true })
        .unwrap();
    let t = ticket(&client, "aof", "u-1").await;
    assert_eq!(client.claim_as("aof", &t, "h").await.unwrap().user_id, "u-1");
    // Without appendonly the server refuses WAITAOF: not a durable claim.
    let plain = ValkeyServer::start(Backend::Module);
    let client = QueueClient::connect(&plain.url())
        .await
        .unwrap()
        .with_durability(Durability { replicas: 0, timeout: Duration::from_millis(500), aof: true })
        .unwrap();
    let t = ticket(&client, "aof", "u-1").await;
    assert!(client.claim_as("aof", &t, "h").await.is_err());
}

/// Percentile `p` (0-100) of sorted microseconds.
fn pct(sorted: &[u64], p: f64) -> u64 {
    sorted[((sorted.len() as f64 - 1.0) * p / 100.0).round() as usize]
}

fn median(mut v: Vec<u64>) -> u64 {
    v.sort_unstable();
    v[v.len() / 2]
}

/// Microseconds of each claim of `n` fresh tickets, one after the other.
async fn claim_latencies(client: &QueueClient, setup: &QueueClient, q: &str, tag: &str, n: usize) -> Vec<u64> {
    let mut tickets = Vec::with_capacity(n);
    for i in 0..n {
        tickets.push(ticket(setup, q, &format!("{tag}-{i}")).await);
    }
    let mut out = Vec::with_capacity(n);
    for (i, t) in tickets.iter().enumerate() {
        let start = std::time::Instant::now();
        client.claim_as(q, t, &format!("h{i}")).await.unwrap();
        out.push(start.elapsed().as_micros() as u64);
    }
    out.sort_unstable();
    out
}

/// Claims per second `conc` tasks sustain for about `secs`.
async fn claim_rate(client: &QueueClient, setup: &QueueClient, q: &str, tag: &str, conc: usize, n: usize) -> f64 {
    let mut tickets = Vec::with_capacity(n);
    for i in 0..n {
        tickets.push(ticket(setup, q, &format!("{tag}-{i}")).await);
    }
    let tickets = std::sync::Arc::new(std::sync::Mutex::new(tickets));
    let start = std::time::Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..conc {
        let (c, tickets, q) = (client.clone(), tickets.clone(), q.to_string());
        tasks.push(tokio::spawn(async move {
            loop {
                let Some(t) = tickets.lock().unwrap().pop() else { break };
                c.claim_as(&q, &t, "h").await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    n as f64 / start.elapsed().as_secs_f64()
}

/// Microseconds of `cmd` alone and of `cmd` then `WAIT 1 1000` in one pipeline, on
/// one connection: what a WAIT after QUEUE.ENTER or QUEUE.PROMOTE would cost.
fn with_and_without_wait(
    con: &mut redis::Connection,
    make: &mut dyn FnMut(usize) -> redis::Cmd,
    n: usize,
) -> (u64, u64) {
    let (mut plain, mut waited) = (Vec::new(), Vec::new());
    for i in 0..n {
        let start = std::time::Instant::now();
        let _: redis::Value = make(2 * i).query(con).unwrap();
        plain.push(start.elapsed().as_micros() as u64);
        let start = std::time::Instant::now();
        let mut pipe = redis::pipe();
        pipe.add_command(make(2 * i + 1)).cmd("WAIT").arg(1).arg(1000);
        let (_, acked): (redis::Value, i64) = pipe.query(con).unwrap();
        assert_eq!(acked, 1);
        waited.push(start.elapsed().as_micros() as u64);
    }
    (median(plain), median(waited))
}

/// The cost figures of bench/claim-durable.sh: claim latency with durable claims off
/// and on (one replica on loopback), interleaved rounds; claims per second at
/// `CONC` at once; what a WAIT after QUEUE.ENTER and QUEUE.PROMOTE costs.
/// `ROUNDS` (5), `CLAIMS` per round and setting (2000), `CONC` (32).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a benchmark: bash bench/claim-durable.sh"]
async fn durable_claim_cost() {
    let env = |k: &str, d: usize| std::env::var(k).ok().and_then(|v| v.parse().ok()).unwrap_or(d);
    let (rounds, n, conc) = (env("ROUNDS", 5), env("CLAIMS", 2000), env("CONC", 32));
    let (primary, _replica) = primary_and_replica(Backend::Module);
    let setup = QueueClient::connect(&primary.url()).await.unwrap();
    let off = setup.clone();
    let on = setup.clone().with_durability(durable(1, 1000)).unwrap();
    let q = "bench";
    setup.config_set(q, &[("soft_cap", 10_000_000)]).await.unwrap();
    let (mut p50, mut p99) = ((Vec::new(), Vec::new()), (Vec::new(), Vec::new()));
    for r in 0..rounds {
        // Interleaved, the order swapped every round.
        let order: [(&QueueClient, bool); 2] =
            if r % 2 == 0 { [(&off, false), (&on, true)] } else { [(&on, true), (&off, false)] };
        for (client, durable) in order {
            let l = claim_latencies(client, &setup, q, &format!("r{r}-{durable}"), n).await;
            let (a, b) = if durable { (&mut p50.1, &mut p99.1) } else { (&mut p50.0, &mut p99.0) };
            a.push(pct(&l, 50.0));
            b.push(pct(&l, 99.0));
        }
    }
    let show = |v: &Vec<u64>| {
        let (mut s, m) = (v.clone(), median(v.clone()));
        s.sort_unstable();
        format!("{m} us (rounds {}..{})", s[0], s[s.len() - 1])
    };
    println!("claim-durable: {rounds} rounds of {n} claims per setting, one at a time, module, 1 replica on loopback");
    println!("claim-durable: off p50 {}  p99 {}", show(&p50.0), show(&p99.0));
    println!("claim-durable: on  p50 {}  p99 {}", show(&p50.1), show(&p99.1));
    let (mut r_off, mut r_on) = (Vec::new(), Vec::new());
    for r in 0..rounds {
        r_off.push(claim_rate(&off, &setup, q, &format!("t{r}-off"), conc, n).await as u64);
        r_on.push(claim_rate(&on, &setup, q, &format!("t{r}-on"), conc, n).await as u64);
    }
    println!(
        "claim-durable: claims/s with {conc} at once: off {}  on {}",
        show(&r_off).replace(" us", ""),
        show(&r_on).replace(" us", "")
    );

    // WAIT after QUEUE.ENTER and QUEUE.PROMOTE, on one connection.
    let mut con = primary.conn();
    let _: () = redis::cmd("QUEUE.CONFIG").arg("w").arg("SET").arg("soft_cap").arg(1).query(&mut con).unwrap();
    let (enter, enter_wait) = with_and_without_wait(
        &mut con,
        &mut |i| {
            let mut c = redis::cmd("QUEUE.ENTER");
            c.arg("w").arg(format!("e-{i}")).arg("n");
            c
        },
        n,
    );
    let _: () = redis::cmd("QUEUE.CONFIG").arg("w").arg("SET").arg("soft_cap").arg(10_000_000).query(&mut con).unwrap();
    let (promote, promote_wait) = with_and_without_wait(
        &mut con,
        &mut |_| {
            let mut c = redis::cmd("QUEUE.PROMOTE");
            c.arg("w").arg("MAX").arg(1);
            c
        },
        n / 2,
    );
    println!("claim-durable: QUEUE.ENTER median {enter} us, with WAIT 1 {enter_wait} us");
    println!("claim-durable: QUEUE.PROMOTE MAX 1 median {promote} us, with WAIT 1 {promote_wait} us");
}
