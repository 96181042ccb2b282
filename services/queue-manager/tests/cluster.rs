//! The manager against a three-primary cluster: the lease key, the registry and
//! each queue live in different slots; there is no SCAN, so queues come from
//! `--queues` and the registry set.

mod common;

use common::*;
use queue_manager::discovery::REGISTRY_KEY;
use std::time::Duration;
use testkit::{Backend, ValkeyServer};

/// Slot ranges of the three primaries.
const RANGES: [(u16, u16); 3] = [(0, 5460), (5461, 10922), (10923, 16383)];

/// Three cluster nodes on loopback, each owning a third of the slots, once every
/// node says the cluster is ok.
fn start_cluster(backend: Backend) -> Vec<ValkeyServer> {
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
        let mut meet = redis::cmd("CLUSTER");
        meet.arg("MEET").arg("127.0.0.1").arg(other.port).arg(bus);
        meet.query::<()>(&mut nodes[0].conn()).unwrap();
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

/// The node owning `key`'s slot.
fn owner<'a>(nodes: &'a [ValkeyServer], key: &str) -> &'a ValkeyServer {
    let slot: u16 = redis::cmd("CLUSTER").arg("KEYSLOT").arg(key).query(&mut nodes[0].conn()).unwrap();
    let i = RANGES.iter().position(|&(lo, hi)| (lo..=hi).contains(&slot)).unwrap();
    &nodes[i]
}

/// A queue name whose slot each primary owns, in node order.
fn queue_per_node(nodes: &[ValkeyServer]) -> Vec<String> {
    (0..3)
        .map(|n| {
            (0..2000)
                .map(|i| format!("c-{i}"))
                .find(|name| std::ptr::eq(owner(nodes, name), &nodes[n]))
                .expect("a name in every range")
        })
        .collect()
}

#[test]
fn promotes_queues_on_every_primary() {
    let nodes = start_cluster(Backend::Module);
    let queues = queue_per_node(&nodes);
    // Two queues named on the command line, the third registered by queue-api.
    let _: () =
        redis::cmd("SADD").arg(REGISTRY_KEY).arg(&queues[2]).query(&mut owner(&nodes, REGISTRY_KEY).conn()).unwrap();
    for q in &queues {
        waiting_users(&mut owner(&nodes, q).client(), q, "u", 3, &[("soft_cap", 2)]);
    }
    block_on(async {
        let mut config = fast_config(&nodes[0]);
        config.cluster = true;
        config.valkey_urls = nodes.iter().map(ValkeyServer::url).collect();
        config.queues = queues[..2].to_vec();
        let manager = Manager::start(config).await;
        let done = eventually(Duration::from_secs(20), async || {
            queues.iter().all(|q| info(&mut owner(&nodes, q).client(), q, "promoted") == 2).then_some(())
        })
        .await;
        assert!(done.is_some(), "not every queue was promoted: {}", manager.healthz().await);
        assert!(manager.is_leader().await);
        let key = queue_manager::leader::LEADER_KEY;
        let holder: Option<String> = redis::cmd("GET").arg(key).query(&mut owner(&nodes, key).conn()).unwrap();
        assert!(holder.is_some());
        let text = manager.metrics().await;
        for q in &queues {
            assert_eq!(queue_manager::metrics::value(&text, "queue_tickets_issued_total", Some(q)), Some(2.0), "{q}");
        }
        manager.stop().await;
    });
}
