//! A sharded feed on a cluster (queue-client's feed.rs, which queue-api's push and
//! promotion subscriptions use) subscribes each channel once: no SSUBSCRIBE while the
//! subscriptions stand, however long; after a failover moves a channel's shard to
//! another node, it subscribes again there and hears the channel.

use queue_client::feed::Feed;
use queue_client::QueueClient;
use queue_core::keys::room_channel;
use std::time::{Duration, Instant};
use testkit::cluster::Cluster;

/// SSUBSCRIBE calls across the cluster's nodes since their stats were reset.
fn ssubscribes(cluster: &Cluster) -> u64 {
    let mut total = 0;
    for n in &cluster.nodes {
        let Ok(mut c) = n.try_conn() else { continue };
        let stats: String = redis::cmd("INFO").arg("commandstats").query(&mut c).unwrap();
        total += stats
            .lines()
            .find_map(|l| l.strip_prefix("cmdstat_ssubscribe:calls="))
            .map_or(0, |v| v.split(',').next().unwrap().parse::<u64>().unwrap());
    }
    total
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sharded_feed_subscribes_once_and_again_after_a_failover() {
    let cluster = Cluster::start(testkit::Backend::Module, 3, 1);
    let target = queue_client::Target::cluster(cluster.urls());
    let client = QueueClient::connect_target(&target, Default::default()).await.unwrap();
    let (mut feed, channels) = Feed::open(&target, queue_core::keys::PROMOTED_PATTERN, None).await.unwrap();
    let queues: Vec<String> = cluster.queues_per_shard("sub", 1).concat();
    for q in &queues {
        channels.add(&room_channel(q)).await.unwrap();
    }
    let (tx, mut heard) = tokio::sync::mpsc::unbounded_channel();
    let listener = tokio::spawn(async move {
        while let Some(a) = feed.next().await {
            if tx.send(a.channel).is_err() {
                return;
            }
        }
    });
    for n in &cluster.nodes {
        redis::cmd("CONFIG").arg("RESETSTAT").query::<()>(&mut n.conn()).unwrap();
    }
    tokio::time::sleep(Duration::from_millis(3500)).await;
    assert_eq!(ssubscribes(&cluster), 0, "no SSUBSCRIBE while the subscriptions stand");

    // The shard of the first queue fails over: the feed hears its channel again.
    let primary = cluster.index_of(cluster.owner(&room_channel(&queues[0])));
    cluster.manual_failover(primary);
    let channel = room_channel(&queues[0]);
    let deadline = Instant::now() + Duration::from_secs(20);
    'heard: loop {
        assert!(Instant::now() < deadline, "the channel was not heard after the failover");
        let _ = client.publish_room(&queues[0], "hello").await;
        let until = Instant::now() + Duration::from_millis(300);
        while let Ok(Some(c)) = tokio::time::timeout_at(until.into(), heard.recv()).await {
            if c == channel {
                break 'heard;
            }
        }
    }
    listener.abort();
}
