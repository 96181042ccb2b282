//! Network namespaces for partition tests: every node in a namespace of its own,
//! joined by veth pairs to a bridge that lives in a hub namespace, which a last veth
//! pair links to this (the root) namespace, where the clients run. Every link is
//! virtual; nothing leaves the machine, and the root namespace's firewall is never
//! touched (the bridge is in the hub, whose own firewall is empty). A cut is an
//! iptables DROP inside one node's namespace, of the traffic to and from one other
//! address; healing removes it. Everything is deleted on drop.
//!
//! Needs root and `ip netns`: [`Network::available`] says whether this machine allows it.

use crate::cluster::{node_builder, Cluster};
use crate::{Backend, ValkeyServer};
use std::process::Command;

/// A hub namespace with its bridge and one namespace per node, each with its address.
pub struct Network {
    prefix: String,
    /// (namespace, address) of each node, in order.
    pub nodes: Vec<(String, String)>,
    /// The root namespace's address on the bridge.
    pub gateway: String,
}

/// Runs `ip` with `args`; the error names the command and what it printed.
fn ip(args: &[&str]) -> Result<(), String> {
    run("ip", args)
}

fn run(program: &str, args: &[&str]) -> Result<(), String> {
    let out = Command::new(program).args(args).output().map_err(|e| format!("{program}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("{program} {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()))
    }
}

impl Network {
    /// Whether namespaces can be made here (root, `ip netns` permitted): tries one.
    pub fn available() -> Result<(), String> {
        let name = format!("vqprobe{}", std::process::id());
        ip(&["netns", "add", &name])?;
        ip(&["netns", "del", &name])
    }

    /// `count` node namespaces on a fresh /24 of 10.213.0.0/16 (chosen from the
    /// process id, so that two runs at once do not collide).
    pub fn create(count: usize) -> Result<Network, String> {
        assert!(count < 200, "at most 199 nodes");
        let id = std::process::id() % 250;
        let prefix = format!("vq{id}");
        let subnet = format!("10.213.{id}");
        let mut net = Network { prefix: prefix.clone(), nodes: Vec::new(), gateway: format!("{subnet}.1") };
        let hub = net.hub();
        ip(&["netns", "add", &hub])?;
        let inside = |ns: &str, args: &[&str]| {
            let mut all = vec!["netns", "exec", ns, "ip"];
            all.extend_from_slice(args);
            ip(&all)
        };
        inside(&hub, &["link", "add", "br0", "type", "bridge"])?;
        inside(&hub, &["link", "set", "br0", "up"])?;
        let up = format!("{prefix}up");
        ip(&["link", "add", &up, "type", "veth", "peer", "name", "up0", "netns", &hub])?;
        ip(&["addr", "add", &format!("{}/24", net.gateway), "dev", &up])?;
        ip(&["link", "set", &up, "up"])?;
        inside(&hub, &["link", "set", "up0", "master", "br0"])?;
        inside(&hub, &["link", "set", "up0", "up"])?;
        for i in 0..count {
            let ns = format!("{prefix}n{i}");
            let addr = format!("{subnet}.{}", 10 + i);
            ip(&["netns", "add", &ns])?;
            net.nodes.push((ns.clone(), addr.clone()));
            let port = format!("p{i}");
            ip(&["link", "add", "eth0", "netns", &ns, "type", "veth", "peer", "name", &port, "netns", &hub])?;
            inside(&hub, &["link", "set", &port, "master", "br0"])?;
            inside(&hub, &["link", "set", &port, "up"])?;
            inside(&ns, &["addr", "add", &format!("{addr}/24"), "dev", "eth0"])?;
            inside(&ns, &["link", "set", "eth0", "up"])?;
            inside(&ns, &["link", "set", "lo", "up"])?;
        }
        Ok(net)
    }

    fn hub(&self) -> String {
        format!("{}hub", self.prefix)
    }

    /// Node `node` stops hearing from and reaching `peer` (an address): a DROP both
    /// ways inside `node`'s namespace. Everyone else still reaches both.
    pub fn cut(&self, node: usize, peer: &str) -> Result<(), String> {
        self.rules("-A", node, peer)
    }

    /// Undoes [`Network::cut`].
    pub fn heal(&self, node: usize, peer: &str) -> Result<(), String> {
        self.rules("-D", node, peer)
    }

    fn rules(&self, op: &str, node: usize, peer: &str) -> Result<(), String> {
        let ns = &self.nodes[node].0;
        run("ip", &["netns", "exec", ns, "iptables", op, "INPUT", "-s", peer, "-j", "DROP"])?;
        run("ip", &["netns", "exec", ns, "iptables", op, "OUTPUT", "-d", peer, "-j", "DROP"])
    }

    /// A cluster of `primaries` primaries with `replicas` replicas each, node `i` in
    /// namespace `i` (this network needs that many), as [`Cluster::start_on`] forms it.
    pub fn cluster(
        &self,
        binary: &str,
        backend: Backend,
        primaries: usize,
        replicas: usize,
        extra: &[&str],
    ) -> Cluster {
        let total = primaries * (1 + replicas);
        assert!(self.nodes.len() >= total, "{total} nodes need as many namespaces");
        let nodes: Vec<ValkeyServer> = self.nodes[..total]
            .iter()
            .map(|(ns, addr)| {
                node_builder(ValkeyServer::builder(backend).binary(binary).in_netns(ns, addr), extra).start()
            })
            .collect();
        Cluster::form(nodes, primaries, replicas)
    }

    /// The index of the node listening on `addr`.
    pub fn index_of(&self, addr: &str) -> Option<usize> {
        self.nodes.iter().position(|(_, a)| a == addr)
    }
}

impl Drop for Network {
    fn drop(&mut self) {
        // Deleting a namespace deletes its end of each veth pair, and so the pair.
        for (ns, _) in &self.nodes {
            let _ = ip(&["netns", "del", ns]);
        }
        let _ = ip(&["netns", "del", &self.hub()]);
    }
}
