//! The services' coordination keys and channels through the client (registry,
//! health signal, presence, leader lease, room pub/sub), on both protocols.

mod common;

use common::resp3;
use queue_client::announce::Subscription;
use queue_client::QueueClient;
use queue_client::QueueError;
use queue_core::keys;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::time::Duration;
use testkit::{Backend, ValkeyServer};

/// One server, and a client on it by each protocol.
async fn clients() -> (ValkeyServer, Vec<QueueClient>) {
    let server = ValkeyServer::start(Backend::Module);
    let resp2 = QueueClient::connect(&server.url()).await.unwrap();
    let resp3 = QueueClient::connect(&resp3(&server.url())).await.unwrap();
    (server, vec![resp2, resp3])
}

fn flush(server: &ValkeyServer) {
    let _: () = redis::cmd("FLUSHALL").query(&mut server.conn()).unwrap();
}

#[tokio::test]
async fn registry_and_scan_find_the_queues() {
    let (server, clients) = clients().await;
    for client in &clients {
        flush(&server);
        assert!(client.register_queue("registered").await.unwrap());
        assert!(!client.register_queue("registered").await.unwrap(), "already there");
        assert_eq!(client.registered_queues().await.unwrap(), vec!["registered"]);

        client.enter("waiting-q", "u-1", "alice").await.unwrap();
        let mut con = server.conn();
        let _: () =
            redis::cmd("ZADD").arg(keys::key("inside-q", keys::SESSIONS)).arg(1).arg("u").query(&mut con).unwrap();
        let _: () = redis::cmd("SET").arg(keys::key("not-a-zset", keys::WAITING)).arg("x").query(&mut con).unwrap();
        let _: () = redis::cmd("ZADD").arg(keys::key("other", keys::STATS)).arg(1).arg("x").query(&mut con).unwrap();
        let _: () = redis::cmd("ZADD").arg("queue:{bad name}:waiting").arg(1).arg("x").query(&mut con).unwrap();
        let want: BTreeSet<String> = ["inside-q", "waiting-q"].map(String::from).into();
        assert_eq!(client.scan_queues().await.unwrap(), want);

        flush(&server);
        let _: () = redis::cmd("SET").arg(keys::REGISTRY).arg("x").query(&mut con).unwrap();
        assert_eq!(client.registered_queues().await, Err(queue_client::ClientError::Refused(QueueError::WrongType)));
    }
}

#[tokio::test]
async fn health_readings_are_set_read_and_withdrawn() {
    let (server, clients) = clients().await;
    for client in &clients {
        flush(&server);
        assert!(client.health_readings("h").await.unwrap().is_empty());
        client.set_health("h", "chat-1", r#"{"load":0.5}"#).await.unwrap();
        client.set_health("h", "chat-2", r#"{"load":0.1}"#).await.unwrap();
        let want = HashMap::from([
            ("chat-1".to_string(), r#"{"load":0.5}"#.to_string()),
            ("chat-2".to_string(), r#"{"load":0.1}"#.to_string()),
        ]);
        assert_eq!(client.health_readings("h").await.unwrap(), want);
        let raw: Option<String> =
            redis::cmd("HGET").arg("queue:{h}:health").arg("chat-1").query(&mut server.conn()).unwrap();
        assert_eq!(raw.as_deref(), Some(r#"{"load":0.5}"#));
        assert!(client.remove_health("h", "chat-1").await.unwrap());
        assert!(!client.remove_health("h", "chat-1").await.unwrap());
        assert_eq!(client.health_readings("h").await.unwrap().len(), 1);
    }
}

#[tokio::test]
async fn presence_keeps_the_live_leases() {
    let (server, clients) = clients().await;
    for client in &clients {
        flush(&server);
        let mut con = server.conn();
        for (user, nickname, expiry) in [("u-1", "alice", 2000), ("u-2", "bob", 1000), ("u-3", "carol", 3000)] {
            let _: () =
                redis::cmd("HSET").arg(keys::key("p", keys::ACTIVE)).arg(user).arg(nickname).query(&mut con).unwrap();
            let _: () =
                redis::cmd("ZADD").arg(keys::key("p", keys::SESSIONS)).arg(expiry).arg(user).query(&mut con).unwrap();
        }
        let live: HashSet<String> = ["u-1", "u-3"].map(String::from).into();
        assert_eq!(client.live_sessions("p", 1000).await.unwrap(), live);
        assert_eq!(client.active_users("p").await.unwrap().len(), 3);
        let present = HashMap::from([("u-1".to_string(), "alice".to_string()), ("u-3".into(), "carol".into())]);
        assert_eq!(client.present_users("p", 1000).await.unwrap(), present);
        assert!(client.present_users("empty", 0).await.unwrap().is_empty());
    }
}

#[tokio::test]
async fn a_lease_is_renewed_and_released_only_by_its_holder() {
    let (server, clients) = clients().await;
    let period = Duration::from_secs(5);
    for client in &clients {
        flush(&server);
        assert!(client.acquire_lease(keys::LEADER, "a", period).await.unwrap());
        assert!(!client.acquire_lease(keys::LEADER, "b", period).await.unwrap());
        assert!(client.renew_lease(keys::LEADER, "a", period).await.unwrap());
        assert!(!client.renew_lease(keys::LEADER, "b", period).await.unwrap());
        let ttl: i64 = redis::cmd("PTTL").arg(keys::LEADER).query(&mut server.conn()).unwrap();
        assert!(ttl > 4000 && ttl <= 5000, "{ttl}");
        assert!(!client.release_lease(keys::LEADER, "b").await.unwrap());
        assert!(client.release_lease(keys::LEADER, "a").await.unwrap());
        assert!(!client.renew_lease(keys::LEADER, "a", period).await.unwrap());
        assert!(client.acquire_lease(keys::LEADER, "b", period).await.unwrap());
    }
}

#[tokio::test]
async fn room_messages_reach_the_subscribers() {
    let (server, clients) = clients().await;
    let mut rooms = Subscription::rooms(&server.url(), Some(Duration::from_secs(2))).await.unwrap();
    for client in &clients {
        assert_eq!(client.publish_room("r-1", "hello").await.unwrap(), 1);
        let heard = tokio::time::timeout(Duration::from_secs(5), rooms.next()).await.unwrap().unwrap();
        assert_eq!(heard.channel, "chat:{r-1}:room");
        assert_eq!(keys::room_of(&heard.channel), Some("r-1"));
        assert_eq!(heard.payload, b"hello");
    }
}
