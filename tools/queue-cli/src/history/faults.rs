//! The cluster a history run owns (3 primaries, 3 replicas, `cluster-node-timeout`
//! 2000 ms, AOF on) and the one fault it injects into the shard that serves the
//! run's queue, then heals. Blocking code: the run calls it on a thread of its own.

use super::record::Recorder;
use std::time::{Duration, Instant};
use testkit::cluster::Cluster;
use testkit::netns::Network;
use testkit::{wait_for, Backend};

/// The faults a run can inject.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Fault {
    /// No fault: the baseline.
    None,
    /// kill -9 of the queue's primary: its replica takes over; the old primary is
    /// restarted from its AOF and rejoins as a replica.
    Kill,
    /// SIGSTOP of the queue's primary for 5 s (2.5 node timeouts: its replica takes
    /// over), then SIGCONT: it comes back as a replica.
    Stop,
    /// The queue's primary and its replica cut from each other for 5 s (an iptables
    /// DROP inside the replica's network namespace) while clients keep writing to
    /// the primary; then healed.
    Partition,
    /// kill -9 of the queue's replica, restarted from its AOF.
    Restart,
    /// The queue's own slot moved to another primary during the run, with Valkey 9's
    /// atomic slot migration.
    Migrate,
}

impl Fault {
    pub fn name(self) -> &'static str {
        match self {
            Fault::None => "none",
            Fault::Kill => "kill",
            Fault::Stop => "stop",
            Fault::Partition => "partition",
            Fault::Restart => "restart",
            Fault::Migrate => "migrate",
        }
    }
}

/// A cluster with, for the partition, the namespaces its nodes run in.
pub struct Setup {
    /// Dropped before the network: the nodes stop first.
    pub cluster: Cluster,
    pub network: Option<Network>,
}

impl Setup {
    /// Starts the cluster `fault` needs: the nodes in network namespaces for a
    /// partition, Valkey 9 for a slot migration.
    pub fn start(fault: Fault, backend: Backend) -> Result<Setup, String> {
        let binary = if fault == Fault::Migrate { testkit::valkey9_binary() } else { testkit::server_binary() };
        if fault == Fault::Partition {
            Network::available().map_err(|e| format!("network namespaces are not permitted here: {e}"))?;
            let network = Network::create(6)?;
            let cluster = network.cluster(&binary, backend, 3, 1, &[]);
            return Ok(Setup { cluster, network: Some(network) });
        }
        Ok(Setup { cluster: Cluster::start_on(&binary, backend, 3, 1, &[]), network: None })
    }
}

/// The slot every key of `queue` hashes to.
pub fn queue_slot(cluster: &Cluster, queue: &str) -> u16 {
    cluster.slot(&queue_core::keys::key(queue, "x"))
}

fn wait_new_owner(cluster: &Cluster, slot: u16, old_port: u16) -> Option<Duration> {
    let start = Instant::now();
    wait_for(Duration::from_secs(30), || (cluster.owner_of_slot(slot).port != old_port).then_some(()))
        .map(|_| start.elapsed())
}

/// Injects `fault` into the shard serving `queue`, heals it, and waits until the
/// cluster is healthy again; notes each step in the history.
pub fn inject(setup: &mut Setup, fault: Fault, queue: &str, rec: &Recorder) -> Result<(), String> {
    let slot = queue_slot(&setup.cluster, queue);
    let cluster = &mut setup.cluster;
    let primary = cluster.index_of(cluster.owner_of_slot(slot));
    let port = cluster.nodes[primary].port;
    match fault {
        Fault::None => return Ok(()),
        Fault::Kill => {
            rec.note(format!("kill -9 of primary :{port} (slot {slot})"));
            cluster.kill(primary);
            let took = wait_new_owner(cluster, slot, port).ok_or("no replica took over after the kill")?;
            rec.note(format!("failover done after {} ms", took.as_millis()));
            std::thread::sleep(Duration::from_secs(1));
            cluster.nodes[primary].restart();
            rec.note(format!("old primary :{port} restarted from its AOF"));
        }
        Fault::Stop => {
            rec.note(format!("SIGSTOP of primary :{port} (slot {slot})"));
            if !cluster.nodes[primary].signal("STOP") {
                return Err("SIGSTOP not delivered".into());
            }
            std::thread::sleep(Duration::from_secs(5));
            cluster.nodes[primary].signal("CONT");
            rec.note(format!("SIGCONT of :{port}"));
        }
        Fault::Partition => {
            let network = setup.network.as_ref().ok_or("the partition needs the namespaced cluster")?;
            let replica = cluster.replica_of(&cluster.nodes[primary]).ok_or("the primary has no replica")?;
            let (r_host, p_host) = (replica.host().to_string(), cluster.nodes[primary].host().to_string());
            let r = network.index_of(&r_host).ok_or("the replica is in no namespace")?;
            rec.note(format!("cut between primary {p_host} and its replica {r_host}"));
            network.cut(r, &p_host)?;
            std::thread::sleep(Duration::from_secs(5));
            network.heal(r, &p_host)?;
            rec.note("cut healed");
        }
        Fault::Restart => {
            let replica = cluster.replica_of(&cluster.nodes[primary]).ok_or("the primary has no replica")?;
            let r = cluster.index_of(replica);
            let rport = cluster.nodes[r].port;
            rec.note(format!("kill -9 of replica :{rport} of :{port}"));
            cluster.kill(r);
            std::thread::sleep(Duration::from_secs(1));
            cluster.nodes[r].restart();
            rec.note(format!("replica :{rport} restarted from its AOF"));
        }
        Fault::Migrate => {
            let to = (0..cluster.nodes.len())
                .find(|&i| i != primary && cluster.primaries().iter().any(|p| p.port == cluster.nodes[i].port))
                .ok_or("no other primary")?;
            rec.note(format!("slot {slot} migrating from :{port} to :{}", cluster.nodes[to].port));
            let took = cluster.migrate_slot(slot, to);
            rec.note(format!("slot {slot} moved in {} ms", took.as_millis()));
        }
    }
    let healthy = wait_for(Duration::from_secs(60), || cluster.is_healthy().then_some(()));
    rec.note(if healthy.is_some() { "cluster healthy" } else { "cluster NOT healthy after 60 s" });
    healthy.ok_or_else(|| format!("the cluster did not heal: {}", cluster.describe()))
}
