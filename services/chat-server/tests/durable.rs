//! Durable claims (`--durable-replicas`) with a real primary and replica, on both
//! backends: the handshake waits for the replica; a replica that does not answer in
//! time gets the client a 503 `not_durable`, and its retry with the same ticket and
//! holder gets in once the replica is back; a stranger with the ticket id does not.

mod common;

use common::{queue_client, snapshot_users, ticket, try_connect, Chat, Client};
use std::time::Duration;
use testkit::{Backend, ValkeyServer};

/// Freezes `server` for `d` (`DEBUG SLEEP`); the thread ends when it thaws.
fn freeze(server: &ValkeyServer, d: Duration) -> std::thread::JoinHandle<()> {
    let mut con = server.conn();
    let handle = std::thread::spawn(move || {
        let _: redis::Value = redis::cmd("DEBUG").arg("SLEEP").arg(d.as_secs_f64()).query(&mut con).unwrap();
    });
    std::thread::sleep(Duration::from_millis(200));
    handle
}

fn with_holder(url: &str, holder: &str) -> String {
    format!("{url}&holder={holder}")
}

async fn retry_by_the_same_holder(b: Backend) {
    let primary = ValkeyServer::start(b);
    let replica = ValkeyServer::builder(b).arg("--enable-debug-command").arg("local").start_replica_of(&primary);
    let qc = queue_client(&primary).await;
    let mut config = chat_server::Config::local(&primary.url());
    config.durable.durable_replicas = 1;
    config.durable.durable_timeout_ms = 300;
    let chat = Chat::start(config).await;

    // A live replica: in at once, with or without a holder.
    let alice = ticket(&qc, "default", "u-alice", "alice").await;
    let (a, snap) = Client::join(&with_holder(&chat.url(&alice, None), "alice-tab")).await;
    assert_eq!(snapshot_users(&snap), vec!["u-alice"]);
    let seed = ticket(&qc, "default", "u-seed", "seed").await;
    let (s, _) = Client::join(&chat.url(&seed, None)).await;

    // A bad holder changes nothing.
    let bob = ticket(&qc, "default", "u-bob", "bob").await;
    let (status, body) = try_connect(&with_holder(&chat.url(&bob, None), "no%20spaces")).await.err().unwrap();
    assert_eq!((status, body["error"].as_str()), (400, Some("bad_holder")), "{body}");

    // A frozen replica: 503 not_durable, Retry-After; the ticket is bob's holder's.
    let thaw = freeze(&replica, Duration::from_secs(3));
    let (status, body) = try_connect(&with_holder(&chat.url(&bob, None), "bob-tab")).await.err().unwrap();
    assert_eq!((status, body["error"].as_str()), (503, Some("not_durable")), "{body}");
    // A stranger who learned the ticket id gets nothing, with or without a holder.
    let (status, _) = try_connect(&with_holder(&chat.url(&bob, None), "stranger")).await.err().unwrap();
    assert_eq!(status, 401);
    let (status, _) = try_connect(&chat.url(&bob, None)).await.err().unwrap();
    assert_eq!(status, 401);
    thaw.join().unwrap();

    // The same holder's retry gets in.
    let (b2, snap) = Client::join(&with_holder(&chat.url(&bob, None), "bob-tab")).await;
    assert!(snapshot_users(&snap).contains(&"u-bob".to_string()), "{snap}");

    let m = chat.metrics().await;
    assert!(m.contains("chatserver_handshakes_refused_total{reason=\"not_durable\"} 1"), "{m}");
    assert!(m.contains("chatserver_claims_not_durable_total 1"), "{m}");
    for c in [a, s, b2] {
        c.close().await;
    }
    chat.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn module_retry_by_the_same_holder() {
    retry_by_the_same_holder(Backend::Module).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lua_retry_by_the_same_holder() {
    retry_by_the_same_holder(Backend::Bare).await;
}

/// Durable claims off (the default) and no replica: as before, the holder ignored
/// (a used ticket is refused whoever repeats it).
#[tokio::test]
async fn off_by_default_changes_nothing() {
    let server = ValkeyServer::start(Backend::Module);
    let qc = queue_client(&server).await;
    let config = chat_server::Config::local(&server.url());
    assert_eq!(config.durable, service_kit::flags::DurableFlags::default());
    let chat = Chat::start(config).await;
    let alice = ticket(&qc, "default", "u-alice", "alice").await;
    let (a, _) = Client::join(&with_holder(&chat.url(&alice, None), "tab")).await;
    let (status, _) = try_connect(&with_holder(&chat.url(&alice, None), "tab")).await.err().unwrap();
    assert_eq!(status, 401);
    a.close().await;
    chat.stop().await;
}
