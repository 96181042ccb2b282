//! The client against a server running the module (started by the testkit harness).

mod common;

use common::{error_mapping, eventually, fast_options, kill_and_expect_fast_failures, resp3, round_trip};
use queue_client::QueueError;
use queue_client::{Backend, ClientError, QueueClient, Status};
use std::time::{Duration, Instant};
use testkit::ValkeyServer;

#[tokio::test]
async fn detects_the_module() {
    let server = ValkeyServer::start(testkit::Backend::Module);
    let client = QueueClient::connect(&server.url()).await.unwrap();
    assert_eq!(client.backend(), Backend::Module);
    client.ping().await.unwrap();
    // Nothing was loaded beside the module.
    assert_eq!(common::library_code(&mut server.conn()), None);
}

#[tokio::test]
async fn every_call_round_trips_resp2() {
    let server = ValkeyServer::start(testkit::Backend::Module);
    let client = QueueClient::connect(&server.url()).await.unwrap();
    round_trip(&client, "rt").await;
}

#[tokio::test]
async fn every_call_round_trips_resp3() {
    let server = ValkeyServer::start(testkit::Backend::Module);
    let client = QueueClient::connect(&resp3(&server.url())).await.unwrap();
    assert_eq!(client.backend(), Backend::Module);
    round_trip(&client, "rt3").await;
}

#[tokio::test]
async fn errors_map_to_variants() {
    let server = ValkeyServer::start(testkit::Backend::Module);
    let client = QueueClient::connect(&server.url()).await.unwrap();
    error_mapping(&client, "errs").await;

    redis::cmd("SET").arg("queue:{wt}:waiting").arg("x").query::<()>(&mut server.conn()).unwrap();
    assert_eq!(client.enter("wt", "u", "n").await.unwrap_err(), ClientError::Refused(QueueError::WrongType));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clones_share_one_connection_across_tasks() {
    let server = ValkeyServer::start(testkit::Backend::Module);
    let client = QueueClient::connect(&server.url()).await.unwrap();
    let tasks: Vec<_> = (0..8)
        .map(|i| {
            let c = client.clone();
            tokio::spawn(async move { c.enter("many", &format!("u-{i}"), "n").await.unwrap() })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let info = client.info("many").await.unwrap();
    assert_eq!(info.waiting + info.joining, 8);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn survives_the_server_going_away() {
    let mut server = ValkeyServer::start(testkit::Backend::Module);
    let options = fast_options();
    let client = QueueClient::connect_with(&server.url(), options.clone()).await.unwrap();
    assert_eq!(client.enter("rc", "u-1", "n").await.unwrap().status, Status::Promoted);

    kill_and_expect_fast_failures(&mut server, &client, &options).await;

    server.restart(); // same port, empty
    let back = eventually(Duration::from_secs(20), || client.status("rc", "u-1")).await.unwrap();
    assert_eq!(back.status, Status::Unknown, "the restarted server has no data");
    assert_eq!(client.enter("rc", "u-2", "n").await.unwrap().status, Status::Promoted);
}

#[tokio::test]
async fn connect_to_nothing_is_unavailable() {
    let port = testkit::free_port();
    let options = queue_client::ConnectOptions { reconnect_retries: 1, ..fast_options() };
    let started = Instant::now();
    let err = QueueClient::connect_with(&format!("redis://127.0.0.1:{port}/"), options).await.unwrap_err();
    assert!(err.is_unavailable(), "{err:?}");
    assert!(started.elapsed() < Duration::from_secs(10));
    let bad = QueueClient::connect("nonsense://x").await.unwrap_err();
    assert!(matches!(bad, ClientError::InvalidArgument(_)), "{bad:?}");
}

#[tokio::test]
async fn a_service_user_limited_to_the_queue_commands_still_finds_the_module() {
    let server = ValkeyServer::start(testkit::Backend::Module);
    redis::cmd("ACL")
        .arg(&["SETUSER", "svc", "on", ">pw", "~*", "+@queue", "+ping"][..])
        .query::<()>(&mut server.conn())
        .unwrap();
    let url = format!("redis://svc:pw@127.0.0.1:{}/", server.port);
    let client = QueueClient::connect(&url).await.unwrap();
    assert_eq!(client.backend(), Backend::Module, "MODULE LIST is forbidden: found by asking QUEUE.INFO");
    assert_eq!(client.enter("acl", "u", "n").await.unwrap().status, Status::Promoted);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recovers_after_an_outage_longer_than_the_reconnect_schedule() {
    let mut server = ValkeyServer::start(testkit::Backend::Module);
    // One reconnection attempt, about a second after the loss: soon given up.
    let options = queue_client::ConnectOptions { reconnect_retries: 1, ..fast_options() };
    let client = QueueClient::connect_with(&server.url(), options).await.unwrap();
    client.ping().await.unwrap();

    server.kill();
    assert!(client.ping().await.unwrap_err().is_unavailable());
    tokio::time::sleep(Duration::from_secs(3)).await; // the schedule is over by now
    assert!(client.ping().await.unwrap_err().is_unavailable());

    server.restart();
    eventually(Duration::from_secs(15), || client.ping()).await.unwrap();
    assert_eq!(client.enter("late", "u", "n").await.unwrap().status, Status::Promoted);
}
