//! The manager against a three-primary cluster: the lease key, the registry and
//! each queue live in different slots; there is no SCAN, so queues come from
//! `--queues` and the registry set.

mod common;

use common::*;
use queue_manager::discovery::REGISTRY_KEY;
use std::time::Duration;
use testkit::cluster::Cluster;
use testkit::Backend;

/// A queue name whose slot each primary owns, in node order.
fn queue_per_node(cluster: &Cluster) -> Vec<String> {
    cluster.queues_per_shard("c", 1).concat()
}

#[test]
fn promotes_queues_on_every_primary() {
    let cluster = Cluster::start(Backend::Module, 3, 0);
    let queues = queue_per_node(&cluster);
    // Two queues named on the command line, the third registered by queue-api.
    let _: () =
        redis::cmd("SADD").arg(REGISTRY_KEY).arg(&queues[2]).query(&mut cluster.owner(REGISTRY_KEY).conn()).unwrap();
    for q in &queues {
        waiting_users(&mut cluster.owner(q).client(), q, "u", 3, &[("soft_cap", 2)]);
    }
    block_on(async {
        let mut config = fast_config(&cluster.nodes[0]);
        config.cluster = true;
        config.valkey_urls = cluster.urls();
        config.queues = queues[..2].to_vec();
        let manager = Manager::start(config).await;
        let done = eventually(Duration::from_secs(20), async || {
            queues.iter().all(|q| info(&mut cluster.owner(q).client(), q, "promoted") == 2).then_some(())
        })
        .await;
        assert!(done.is_some(), "not every queue was promoted: {}", manager.healthz().await);
        assert!(manager.is_leader().await);
        let key = queue_manager::leader::LEADER_KEY;
        let holder: Option<String> = redis::cmd("GET").arg(key).query(&mut cluster.owner(key).conn()).unwrap();
        assert!(holder.is_some());
        let text = manager.metrics().await;
        for q in &queues {
            assert_eq!(queue_manager::metrics::value(&text, "queue_tickets_issued_total", Some(q)), Some(2.0), "{q}");
        }
        manager.stop().await;
    });
}
