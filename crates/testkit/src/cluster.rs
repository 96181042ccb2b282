//! A Valkey Cluster of child processes on loopback: `primaries` primaries, each owning
//! an equal range of the 16384 slots, and `replicas` replicas of each, formed with
//! CLUSTER ADDSLOTSRANGE, MEET and REPLICATE. Nodes are found again by their role
//! and slots at any time (after a failover a replica is a primary).

use crate::{wait_for, Backend, ValkeyServer};
use redis::Connection;
use std::time::{Duration, Instant};

/// A running cluster; every node is killed on drop.
pub struct Cluster {
    /// Every node, in start order (primaries first).
    pub nodes: Vec<ValkeyServer>,
    /// Slot ranges of the first primaries, in order.
    pub ranges: Vec<(u16, u16)>,
}

/// What `CLUSTER NODES` says about one node.
#[derive(Debug, Clone)]
pub struct NodeInfo {
    pub id: String,
    pub port: u16,
    pub primary: bool,
    pub failed: bool,
    /// The primary's id, for a replica.
    pub primary_id: Option<String>,
}

/// Parses `CLUSTER NODES` text.
pub fn parse_nodes(text: &str) -> Vec<NodeInfo> {
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            if f.len() < 8 {
                return None;
            }
            let port = f[1].split('@').next()?.rsplit(':').next()?.parse().ok()?;
            let flags = f[2];
            Some(NodeInfo {
                id: f[0].to_string(),
                port,
                primary: flags.contains("master"),
                failed: flags.contains("fail") && !flags.contains("fail?") || flags.contains("noaddr"),
                primary_id: (f[3] != "-").then(|| f[3].to_string()),
            })
        })
        .collect()
}

impl Cluster {
    /// Starts `primaries` primaries with `replicas` replicas each and waits until every
    /// node says the cluster is ok and every replica is in sync.
    pub fn start(backend: Backend, primaries: usize, replicas: usize) -> Cluster {
        Cluster::start_with(backend, primaries, replicas, &[])
    }

    /// [`Cluster::start`] with extra server arguments on every node.
    pub fn start_with(backend: Backend, primaries: usize, replicas: usize, extra: &[&str]) -> Cluster {
        Cluster::start_on(&crate::server_binary(), backend, primaries, replicas, extra)
    }

    /// [`Cluster::start_with`] with another server binary (e.g. [`crate::valkey9_binary`]).
    pub fn start_on(binary: &str, backend: Backend, primaries: usize, replicas: usize, extra: &[&str]) -> Cluster {
        let total = primaries * (1 + replicas);
        let nodes: Vec<ValkeyServer> =
            (0..total).map(|_| node_builder(ValkeyServer::builder(backend).binary(binary), extra).start()).collect();
        Cluster::form(nodes, primaries, replicas)
    }

    /// Forms a cluster of `nodes` started with [`node_builder`]'s arguments: the first
    /// `primaries` get the slots, the rest replicate them in turn.
    pub fn form(nodes: Vec<ValkeyServer>, primaries: usize, replicas: usize) -> Cluster {
        let total = primaries * (1 + replicas);
        assert_eq!(nodes.len(), total, "{primaries} primaries with {replicas} replicas each");
        let per = 16384 / primaries as u32;
        let ranges: Vec<(u16, u16)> = (0..primaries as u32)
            .map(|i| {
                let hi = if i + 1 == primaries as u32 { 16383 } else { (i + 1) * per - 1 };
                ((i * per) as u16, hi as u16)
            })
            .collect();
        for (node, (lo, hi)) in nodes.iter().zip(&ranges) {
            redis::cmd("CLUSTER").arg("ADDSLOTSRANGE").arg(lo).arg(hi).query::<()>(&mut node.conn()).unwrap();
        }
        for other in nodes.iter().skip(1) {
            let bus = bus_port(other);
            redis::cmd("CLUSTER")
                .arg("MEET")
                .arg(other.host())
                .arg(other.port)
                .arg(bus)
                .query::<()>(&mut nodes[0].conn())
                .unwrap();
        }
        let cluster = Cluster { nodes, ranges };
        let known = wait_for(Duration::from_secs(30), || {
            cluster.nodes.iter().all(|n| parse_nodes(&cluster_nodes(&mut n.conn())).len() == total).then_some(())
        });
        assert!(known.is_some(), "the nodes did not meet");
        let ids: Vec<String> = cluster.nodes.iter().map(|n| my_id(&mut n.conn())).collect();
        for r in 0..replicas {
            for (p, id) in ids.iter().enumerate().take(primaries) {
                let replica = &cluster.nodes[primaries * (1 + r) + p];
                redis::cmd("CLUSTER").arg("REPLICATE").arg(id).query::<()>(&mut replica.conn()).unwrap();
            }
        }
        cluster.wait_healthy(Duration::from_secs(60));
        cluster
    }

    /// Waits until every live node says `cluster_state:ok`, sees every slot served,
    /// and every live replica's link to its primary is up; panics after `limit`.
    pub fn wait_healthy(&self, limit: Duration) {
        let ok = wait_for(limit, || self.is_healthy().then_some(()));
        assert!(ok.is_some(), "the cluster did not become healthy: {}", self.describe());
    }

    /// Whether every live node is ok and every live replica linked.
    pub fn is_healthy(&self) -> bool {
        self.live().all(|n| {
            let Ok(mut c) = n.try_conn() else { return false };
            let info: String = redis::cmd("CLUSTER").arg("INFO").query(&mut c).unwrap_or_default();
            if !info.contains("cluster_state:ok") || !info.contains("cluster_slots_ok:16384") {
                return false;
            }
            let repl: String = redis::cmd("INFO").arg("replication").query(&mut c).unwrap_or_default();
            repl.contains("role:master") || repl.contains("master_link_status:up")
        })
    }

    fn live(&self) -> impl Iterator<Item = &ValkeyServer> {
        self.nodes.iter().filter(|n| n.is_running())
    }

    /// Every live node's view, for failure messages.
    pub fn describe(&self) -> String {
        self.live().filter_map(|n| n.try_conn().ok().map(|mut c| cluster_nodes(&mut c))).next().unwrap_or_default()
    }

    /// The seed URLs (every node's).
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(ValkeyServer::url).collect()
    }

    /// The node serving `slot` now (asked of a live node).
    pub fn owner_of_slot(&self, slot: u16) -> &ValkeyServer {
        let port = self
            .live()
            .find_map(|n| {
                let mut c = n.try_conn().ok()?;
                let slots: redis::Value = redis::cmd("CLUSTER").arg("SLOTS").query(&mut c).ok()?;
                slot_owner(&slots, slot)
            })
            .expect("a live node knows the slot's owner");
        self.nodes.iter().find(|n| n.port == port).expect("a node of this cluster")
    }

    /// The slot of `key`.
    pub fn slot(&self, key: &str) -> u16 {
        let n = self.live().next().expect("a live node");
        redis::cmd("CLUSTER").arg("KEYSLOT").arg(key).query(&mut n.conn()).unwrap()
    }

    /// The node serving `key` now.
    pub fn owner(&self, key: &str) -> &ValkeyServer {
        self.owner_of_slot(self.slot(key))
    }

    /// A connection to the node serving `key`.
    pub fn conn_for(&self, key: &str) -> Connection {
        self.owner(key).conn()
    }

    /// For each of the first primaries' slot ranges, `per_shard` queue names starting
    /// with `prefix` whose slot is in it: names spread over every shard.
    pub fn queues_per_shard(&self, prefix: &str, per_shard: usize) -> Vec<Vec<String>> {
        let mut con = self.live().next().expect("a live node").conn();
        self.ranges
            .iter()
            .map(|&(lo, hi)| {
                (0..100_000)
                    .map(|i| format!("{prefix}-{i}"))
                    .filter(|name| {
                        let slot: u16 = redis::cmd("CLUSTER").arg("KEYSLOT").arg(name).query(&mut con).unwrap();
                        (lo..=hi).contains(&slot)
                    })
                    .take(per_shard)
                    .collect()
            })
            .collect()
    }

    /// The live primaries now.
    pub fn primaries(&self) -> Vec<&ValkeyServer> {
        let view = self.live().find_map(|n| n.try_conn().ok().map(|mut c| parse_nodes(&cluster_nodes(&mut c))));
        let view = view.unwrap_or_default();
        self.live().filter(|n| view.iter().any(|i| i.port == n.port && i.primary && !i.failed)).collect()
    }

    /// A live replica of `primary`.
    pub fn replica_of(&self, primary: &ValkeyServer) -> Option<&ValkeyServer> {
        let id = my_id(&mut primary.conn());
        let view = parse_nodes(&cluster_nodes(&mut primary.conn()));
        let port = view.iter().find(|i| i.primary_id.as_deref() == Some(id.as_str()) && !i.failed)?.port;
        self.live().find(|n| n.port == port)
    }

    /// Index of a node in `nodes`.
    pub fn index_of(&self, node: &ValkeyServer) -> usize {
        self.nodes.iter().position(|n| n.port == node.port).unwrap()
    }

    /// `CLUSTER FAILOVER` on a replica of `primary`'s: the replica takes over once
    /// it caught up (no write lost); returns the new primary's index and how long the
    /// switch took until the replica said it is a primary.
    pub fn manual_failover(&self, primary_index: usize) -> (usize, Duration) {
        let replica = self.replica_of(&self.nodes[primary_index]).expect("a replica");
        let r = self.index_of(replica);
        let started = Instant::now();
        redis::cmd("CLUSTER").arg("FAILOVER").query::<()>(&mut replica.conn()).unwrap();
        let promoted = wait_for(Duration::from_secs(30), || {
            let role: String = redis::cmd("INFO").arg("replication").query(&mut self.nodes[r].conn()).ok()?;
            role.contains("role:master").then_some(())
        });
        assert!(promoted.is_some(), "the replica was not promoted: {}", self.describe());
        (r, started.elapsed())
    }

    /// Moves `slot` to primary `to` with Valkey 9's atomic slot migration (`CLUSTER
    /// MIGRATESLOTS` on its owner: the slot's keys and then its ownership move as one,
    /// no key ever served from two places) and waits until every live node sees the new
    /// owner; returns how long that took.
    pub fn migrate_slot(&self, slot: u16, to: usize) -> Duration {
        let from = self.owner_of_slot(slot);
        let target = &self.nodes[to];
        assert_ne!(from.port, target.port, "slot {slot} is already on node {to}");
        let target_id = my_id(&mut target.conn());
        let started = Instant::now();
        redis::cmd("CLUSTER")
            .arg("MIGRATESLOTS")
            .arg("SLOTSRANGE")
            .arg(slot)
            .arg(slot)
            .arg("NODE")
            .arg(&target_id)
            .query::<()>(&mut from.conn())
            .unwrap_or_else(|e| panic!("CLUSTER MIGRATESLOTS: {e}"));
        let moved = wait_for(Duration::from_secs(60), || {
            self.live()
                .all(|n| {
                    let Ok(mut c) = n.try_conn() else { return false };
                    let slots: redis::Value =
                        redis::cmd("CLUSTER").arg("SLOTS").query(&mut c).unwrap_or(redis::Value::Nil);
                    slot_owner(&slots, slot) == Some(target.port)
                })
                .then_some(())
        });
        assert!(moved.is_some(), "slot {slot} did not move: {}", self.describe());
        started.elapsed()
    }

    /// SIGKILLs node `index` (a crash).
    pub fn kill(&mut self, index: usize) {
        self.nodes[index].kill();
    }
}

/// A cluster node's server arguments on `builder`: cluster mode with an explicit bus
/// port, `cluster-node-timeout` 2000 ms, AOF on, then `extra`.
pub fn node_builder(builder: crate::ServerBuilder, extra: &[&str]) -> crate::ServerBuilder {
    // Explicit bus ports: the default (port + 10000) may be taken or out of range.
    let bus = crate::free_port();
    let mut b = builder
        .arg("--cluster-enabled")
        .arg("yes")
        .arg("--cluster-config-file")
        .arg("nodes.conf")
        .arg("--cluster-port")
        .arg(bus.to_string())
        .arg("--cluster-node-timeout")
        .arg("2000")
        .arg("--appendonly")
        .arg("yes");
    for a in extra {
        b = b.arg(*a);
    }
    b
}

/// The cluster bus port a node was started with.
fn bus_port(node: &ValkeyServer) -> u16 {
    let v: Vec<String> = redis::cmd("CONFIG").arg("GET").arg("cluster-port").query(&mut node.conn()).unwrap();
    v[1].parse().unwrap()
}

fn my_id(c: &mut Connection) -> String {
    redis::cmd("CLUSTER").arg("MYID").query(c).unwrap()
}

/// `CLUSTER NODES` text.
pub fn cluster_nodes(c: &mut Connection) -> String {
    redis::cmd("CLUSTER").arg("NODES").query(c).unwrap_or_default()
}

fn slot_owner(slots: &redis::Value, slot: u16) -> Option<u16> {
    let redis::Value::Array(ranges) = slots else { return None };
    for r in ranges {
        let redis::Value::Array(f) = r else { continue };
        let (Some(lo), Some(hi)) = (f.first().and_then(crate::as_int), f.get(1).and_then(crate::as_int)) else {
            continue;
        };
        if (lo..=hi).contains(&i64::from(slot)) {
            let redis::Value::Array(primary) = f.get(2)? else { return None };
            return primary.get(1).and_then(crate::as_int).map(|p| p as u16);
        }
    }
    None
}
