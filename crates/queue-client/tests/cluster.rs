//! The client against a three-primary cluster (testkit's), with the module and without it.

mod common;

use common::{error_mapping, installed_version, library_code, round_trip};
use queue_client::{Backend, QueueClient, Status, LIBRARY_VERSION};
use std::time::Duration;
use testkit::cluster::Cluster;

/// A queue name whose slot each primary owns, in node order.
fn queue_per_node(cluster: &Cluster, prefix: &str) -> Vec<String> {
    cluster.queues_per_shard(prefix, 1).concat()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn module_cluster() {
    let cluster = Cluster::start(testkit::Backend::Module, 3, 0);
    let client = QueueClient::connect_cluster(&cluster.urls()).await.unwrap();
    assert_eq!(client.backend(), Backend::Module);
    client.ping().await.unwrap();
    for q in queue_per_node(&cluster, "rt") {
        round_trip(&client, &q).await;
    }
    error_mapping(&client, "errs").await;
    for n in &cluster.nodes {
        assert_eq!(library_code(&mut n.conn()), None, "nothing loaded beside the module");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bare_cluster_gets_the_library_on_every_primary() {
    let cluster = Cluster::start(testkit::Backend::Bare, 3, 0);
    let client = QueueClient::connect_cluster(&cluster.urls()).await.unwrap();
    assert_eq!(client.backend(), Backend::Lua);
    for n in &cluster.nodes {
        assert_eq!(installed_version(&mut n.conn()), LIBRARY_VERSION);
    }
    let queues = queue_per_node(&cluster, "rt");
    for q in &queues {
        round_trip(&client, q).await;
    }

    // A second client finds the library everywhere and loads nothing.
    let codes: Vec<_> = cluster.nodes.iter().map(|n| library_code(&mut n.conn())).collect();
    let second = QueueClient::connect_cluster(&cluster.urls()).await.unwrap();
    assert_eq!(second.backend(), Backend::Lua);
    assert_eq!(cluster.nodes.iter().map(|n| library_code(&mut n.conn())).collect::<Vec<_>>(), codes);

    // One primary loses its functions: the next call there loads them again.
    redis::cmd("FUNCTION").arg("FLUSH").query::<()>(&mut cluster.nodes[2].conn()).unwrap();
    assert_eq!(second.enter(&queues[2], "late", "n").await.unwrap().status, Status::Promoted);
    assert_eq!(installed_version(&mut cluster.nodes[2].conn()), LIBRARY_VERSION);
}

/// On a cluster the queue's announcements go over sharded pub/sub: the engine's own
/// (a freed place filled inside LEAVE) and the services' (a chat room), each heard by a feed that SSUBSCRIBEd
/// to the channel on its shard, for a queue on every primary.
async fn sharded_announcements(backend: testkit::Backend) {
    use queue_client::events::{promoted_channel, QueueEvent};
    use queue_client::feed::Feed;
    let cluster = Cluster::start(backend, 3, 0);
    let target = queue_client::Target::cluster(cluster.urls());
    let client = QueueClient::connect_target(&target, Default::default()).await.unwrap();
    let (mut feed, channels) = Feed::open(&target, queue_core::keys::PROMOTED_PATTERN, None).await.unwrap();
    assert!(channels.is_sharded());
    for q in queue_per_node(&cluster, "ann") {
        channels.add(&promoted_channel(&q)).await.unwrap();
        channels.add(&queue_core::keys::room_channel(&q)).await.unwrap();
        // A place freed inside a command (LEAVE) is filled and announced by the engine.
        client.config_set(&q, &[("soft_cap", 1)]).await.unwrap();
        client.enter(&q, "u1", "n").await.unwrap();
        client.enter(&q, "u2", "n").await.unwrap();
        client.leave(&q, "u1").await.unwrap();
        let heard = tokio::time::timeout(Duration::from_secs(5), feed.next()).await.unwrap().unwrap();
        assert_eq!(heard.channel, promoted_channel(&q));
        let event: QueueEvent = serde_json::from_slice(&heard.payload).unwrap();
        assert_eq!((event.queue.as_str(), event.promoted), (q.as_str(), 1));
        assert_eq!(client.status(&q, "u2").await.unwrap().status, Status::Promoted);
        assert_eq!(client.publish_room(&q, "hello").await.unwrap(), 1, "one sharded subscriber");
        let heard = tokio::time::timeout(Duration::from_secs(5), feed.next()).await.unwrap().unwrap();
        assert_eq!((heard.channel, heard.payload), (queue_core::keys::room_channel(&q), b"hello".to_vec()));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn module_sharded_announcements() {
    sharded_announcements(testkit::Backend::Module).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lua_sharded_announcements() {
    sharded_announcements(testkit::Backend::Lua).await;
}
