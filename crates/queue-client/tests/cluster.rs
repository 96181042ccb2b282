//! The client against a three-primary cluster, with the module and without it.

mod common;

use common::{error_mapping, installed_version, library_code, round_trip};
use queue_client::{Backend, QueueClient, Status, LIBRARY_VERSION};
use std::time::Duration;
use testkit::ValkeyServer;

/// Slot ranges of the three primaries.
const RANGES: [(u16, u16); 3] = [(0, 5460), (5461, 10922), (10923, 16383)];

/// Three cluster nodes on loopback, each owning a third of the slots, once every node
/// says the cluster is ok.
fn start_cluster(backend: testkit::Backend) -> Vec<ValkeyServer> {
    // Explicit bus ports: the default (port + 10000) may be taken or out of range.
    let bus_ports: Vec<u16> = (0..3).map(|_| testkit::free_port()).collect();
    let nodes: Vec<ValkeyServer> = bus_ports
        .iter()
        .map(|bus| {
            ValkeyServer::builder(backend)
                .arg("--cluster-enabled")
                .arg("yes")
                .arg("--cluster-config-file")
                .arg("nodes.conf")
                .arg("--cluster-port")
                .arg(bus.to_string())
                .start()
        })
        .collect();
    for (node, (lo, hi)) in nodes.iter().zip(RANGES) {
        redis::cmd("CLUSTER").arg("ADDSLOTSRANGE").arg(lo).arg(hi).query::<()>(&mut node.conn()).unwrap();
    }
    for (other, bus) in nodes.iter().zip(&bus_ports).skip(1) {
        redis::cmd("CLUSTER")
            .arg("MEET")
            .arg("127.0.0.1")
            .arg(other.port)
            .arg(bus)
            .query::<()>(&mut nodes[0].conn())
            .unwrap();
    }
    let ready = testkit::wait_for(Duration::from_secs(30), || {
        nodes
            .iter()
            .all(|n| {
                let info: String = redis::cmd("CLUSTER").arg("INFO").query(&mut n.conn()).unwrap_or_default();
                info.contains("cluster_state:ok") && info.contains("cluster_known_nodes:3")
            })
            .then_some(())
    });
    assert!(ready.is_some(), "the cluster did not form");
    nodes
}

fn urls(nodes: &[ValkeyServer]) -> Vec<String> {
    nodes.iter().map(ValkeyServer::url).collect()
}

/// A queue name whose slot each primary owns, in node order.
fn queue_per_node(nodes: &[ValkeyServer], prefix: &str) -> Vec<String> {
    let mut con = nodes[0].conn();
    RANGES
        .iter()
        .map(|&(lo, hi)| {
            (0..2000)
                .map(|i| format!("{prefix}-{i}"))
                .find(|name| {
                    let slot: u16 = redis::cmd("CLUSTER").arg("KEYSLOT").arg(name).query(&mut con).unwrap();
                    (lo..=hi).contains(&slot)
                })
                .expect("a name in every range")
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn module_cluster() {
    let nodes = start_cluster(testkit::Backend::Module);
    let client = QueueClient::connect_cluster(&urls(&nodes)).await.unwrap();
    assert_eq!(client.backend(), Backend::Module);
    client.ping().await.unwrap();
    for q in queue_per_node(&nodes, "rt") {
        round_trip(&client, &q).await;
    }
    error_mapping(&client, "errs").await;
    for n in &nodes {
        assert_eq!(library_code(&mut n.conn()), None, "nothing loaded beside the module");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bare_cluster_gets_the_library_on_every_primary() {
    let nodes = start_cluster(testkit::Backend::Bare);
    let client = QueueClient::connect_cluster(&urls(&nodes)).await.unwrap();
    assert_eq!(client.backend(), Backend::Lua);
    for n in &nodes {
        assert_eq!(installed_version(&mut n.conn()), LIBRARY_VERSION);
    }
    let queues = queue_per_node(&nodes, "rt");
    for q in &queues {
        round_trip(&client, q).await;
    }

    // A second client finds the library everywhere and loads nothing.
    let codes: Vec<_> = nodes.iter().map(|n| library_code(&mut n.conn())).collect();
    let second = QueueClient::connect_cluster(&urls(&nodes)).await.unwrap();
    assert_eq!(second.backend(), Backend::Lua);
    assert_eq!(nodes.iter().map(|n| library_code(&mut n.conn())).collect::<Vec<_>>(), codes);

    // One primary loses its functions: the next call there loads them again.
    redis::cmd("FUNCTION").arg("FLUSH").query::<()>(&mut nodes[2].conn()).unwrap();
    assert_eq!(second.enter(&queues[2], "late", "n").await.unwrap().status, Status::Promoted);
    assert_eq!(installed_version(&mut nodes[2].conn()), LIBRARY_VERSION);
}

/// On a cluster the queue's announcements go over sharded pub/sub: the engine's own
/// (a freed place filled inside LEAVE) and the services' (a chat room), each heard by a feed that SSUBSCRIBEd
/// to the channel on its shard, for a queue on every primary.
async fn sharded_announcements(backend: testkit::Backend) {
    use queue_client::events::{promoted_channel, QueueEvent};
    use queue_client::feed::Feed;
    let nodes = start_cluster(backend);
    let target = queue_client::Target::cluster(urls(&nodes));
    let client = QueueClient::connect_target(&target, Default::default()).await.unwrap();
    let (mut feed, channels) = Feed::open(&target, queue_core::keys::PROMOTED_PATTERN, None).await.unwrap();
    assert!(channels.is_sharded());
    for q in queue_per_node(&nodes, "ann") {
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
