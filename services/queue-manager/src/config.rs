//! Flags (with environment-variable fallbacks) and the configuration they make.

use crate::policy::{PolicyConfig, PROMOTE_MAX_LIMIT};
use clap::Parser;
use std::net::SocketAddr;
use std::time::Duration;

/// The admission loop of the waiting room: calls QUEUE.PROMOTE on every queue, with
/// one active leader among its replicas.
#[derive(Debug, Clone, Parser)]
#[command(name = "queue-manager", version, about)]
pub struct Flags {
    /// Valkey URL; several, comma-separated, with --cluster.
    #[arg(long, env = "VALKEY_URL", default_value = "redis://127.0.0.1:6379/", value_delimiter = ',')]
    pub valkey_url: Vec<String>,
    /// Valkey is a cluster (the URLs are seed nodes).
    #[arg(long, env = "VALKEY_CLUSTER")]
    pub cluster: bool,
    /// Address of the HTTP server (/metrics, /healthz).
    #[arg(long, env = "LISTEN", default_value = "127.0.0.1:9091")]
    pub listen: SocketAddr,
    /// Milliseconds between two promotion rounds.
    #[arg(long, env = "TICK_MS", default_value_t = 1000, value_parser = clap::value_parser!(u64).range(100..=60_000))]
    pub tick_ms: u64,
    /// Milliseconds of the leader lease; a standby takes over within two of them.
    #[arg(long, env = "LEASE_MS", default_value_t = 3000, value_parser = clap::value_parser!(u64).range(300..=600_000))]
    pub lease_ms: u64,
    /// Milliseconds between two discoveries of the queues in the store.
    #[arg(long, env = "DISCOVER_MS", default_value_t = 5000, value_parser = clap::value_parser!(u64).range(100..=600_000))]
    pub discover_ms: u64,
    /// Queues always served, comma-separated, on top of those discovered.
    #[arg(long, env = "QUEUES", default_value = "default", value_delimiter = ',')]
    pub queues: Vec<String>,
    /// Adapt each queue's admission to the downstream health signal
    /// (hash queue:{Q}:health).
    #[arg(long, env = "ADAPTIVE")]
    pub adaptive: bool,
    /// With --adaptive: admit everyone (instead of no one) while no live signal exists.
    #[arg(long, env = "FAIL_OPEN")]
    pub fail_open: bool,
    /// With --adaptive: load at or above which the allowance is halved.
    #[arg(long, env = "HIGH_LOAD", default_value_t = 0.85)]
    pub high_load: f64,
    /// With --adaptive: load at or below which the allowance grows.
    #[arg(long, env = "LOW_LOAD", default_value_t = 0.6)]
    pub low_load: f64,
    /// With --adaptive: latency (ms) at or above which the allowance is halved (0: ignore latency).
    #[arg(long, env = "HIGH_LATENCY_MS", default_value_t = 0)]
    pub high_latency_ms: u64,
    /// With --adaptive: latency (ms) at or below which the allowance may grow (0: any).
    #[arg(long, env = "LOW_LATENCY_MS", default_value_t = 0)]
    pub low_latency_ms: u64,
    /// With --adaptive: the smallest increase of the per-tick allowance, and the
    /// first allowance after a closed period.
    #[arg(long, env = "ADAPTIVE_STEP", default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub adaptive_step: u32,
    /// With --adaptive: the per-tick allowance above which admission is unrestricted.
    #[arg(long, env = "ADAPTIVE_MAX", default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub adaptive_max: u32,
    /// With --adaptive: least milliseconds between two changes of the allowance.
    #[arg(long, env = "ADJUST_MS", default_value_t = 1000)]
    pub adjust_ms: u64,
}

/// Everything [`crate::run`] needs.
#[derive(Debug, Clone)]
pub struct Config {
    /// The server's URL, or a cluster's seed nodes.
    pub valkey_urls: Vec<String>,
    /// Whether `valkey_urls` name a cluster.
    pub cluster: bool,
    /// Where the HTTP server listens (used by [`crate::run`]).
    pub listen: SocketAddr,
    /// Time between two promotion rounds.
    pub tick: Duration,
    /// The leader lease.
    pub lease: Duration,
    /// Time between two discoveries.
    pub discover_every: Duration,
    /// Queues always served.
    pub queues: Vec<String>,
    /// The adaptive admission policy, when on.
    pub adaptive: Option<PolicyConfig>,
    /// Testing hook: while the value is true, the lease and promotion loops stand
    /// still where they are (as in a paused process); timers keep running.
    #[doc(hidden)]
    pub freeze: Option<tokio::sync::watch::Receiver<bool>>,
}

impl Config {
    /// The flags' defaults (whatever the environment says), for the server at `url`.
    pub fn new(url: impl Into<String>) -> Config {
        Config {
            valkey_urls: vec![url.into()],
            cluster: false,
            listen: SocketAddr::from(([127, 0, 0, 1], 9091)),
            tick: Duration::from_secs(1),
            lease: Duration::from_secs(3),
            discover_every: Duration::from_secs(5),
            queues: vec!["default".into()],
            adaptive: None,
            freeze: None,
        }
    }
}

impl Flags {
    /// Checks the flags together and makes the configuration.
    pub fn into_config(self) -> Result<Config, String> {
        let urls: Vec<String> =
            self.valkey_url.iter().map(|u| u.trim().to_string()).filter(|u| !u.is_empty()).collect();
        if urls.is_empty() {
            return Err("--valkey-url: no URL given".into());
        }
        if urls.len() > 1 && !self.cluster {
            return Err("--valkey-url: several URLs need --cluster".into());
        }
        let mut queues = Vec::new();
        for q in self.queues.iter().map(|q| q.trim()).filter(|q| !q.is_empty()) {
            if crate::discovery::valid(q).is_none() {
                return Err(format!("--queues: invalid queue name {q:?} (1-64 of A-Z a-z 0-9 . _ : -)"));
            }
            queues.push(q.to_string());
        }
        let load_ok = |v: f64| v.is_finite() && v >= 0.0;
        if !load_ok(self.high_load) || !load_ok(self.low_load) || self.low_load > self.high_load {
            return Err("--low-load and --high-load must be numbers with 0 <= low <= high".into());
        }
        if self.high_latency_ms > 0 && self.low_latency_ms > self.high_latency_ms {
            return Err("--low-latency-ms must not exceed --high-latency-ms".into());
        }
        let adaptive = self.adaptive.then(|| PolicyConfig {
            fail_open: self.fail_open,
            high_load: self.high_load,
            low_load: self.low_load,
            high_latency_ms: self.high_latency_ms,
            low_latency_ms: self.low_latency_ms,
            step: self.adaptive_step,
            ceiling: self.adaptive_max.min(PROMOTE_MAX_LIMIT),
            adjust_every: Duration::from_millis(self.adjust_ms),
        });
        Ok(Config {
            valkey_urls: urls,
            cluster: self.cluster,
            listen: self.listen,
            tick: Duration::from_millis(self.tick_ms),
            lease: Duration::from_millis(self.lease_ms),
            discover_every: Duration::from_millis(self.discover_ms),
            queues,
            adaptive,
            freeze: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Config, String> {
        let mut all = vec!["queue-manager"];
        all.extend_from_slice(args);
        Flags::try_parse_from(all).map_err(|e| e.to_string())?.into_config()
    }

    #[test]
    fn defaults_make_a_plain_local_run() {
        let c = parse(&[]).unwrap();
        assert_eq!(c.valkey_urls, ["redis://127.0.0.1:6379/"]);
        assert_eq!(c.listen.to_string(), "127.0.0.1:9091");
        assert_eq!(c.tick, Duration::from_secs(1));
        assert_eq!(c.lease, Duration::from_secs(3));
        assert_eq!(c.discover_every, Duration::from_secs(5));
        assert_eq!(c.queues, ["default"]);
        assert!(c.adaptive.is_none(), "adaptive admission is off unless asked for");
    }

    #[test]
    fn adaptive_defaults_to_fail_closed() {
        let c = parse(&["--adaptive", "--high-load", "0.9", "--low-load", "0.5"]).unwrap();
        let p = c.adaptive.unwrap();
        assert!(!p.fail_open);
        assert_eq!((p.high_load, p.low_load), (0.9, 0.5));
        assert!(parse(&["--adaptive", "--fail-open"]).unwrap().adaptive.unwrap().fail_open);
    }

    #[test]
    fn ranges_are_checked() {
        assert!(parse(&["--tick-ms", "100"]).is_ok());
        assert!(parse(&["--tick-ms", "99"]).is_err());
        assert!(parse(&["--tick-ms", "60001"]).is_err());
        assert!(parse(&["--lease-ms", "100"]).is_err());
        assert!(parse(&["--low-load", "0.9", "--high-load", "0.5"]).is_err());
        assert!(parse(&["--high-load", "NaN"]).is_err());
        assert!(parse(&["--queues", "a,b c"]).is_err());
        assert!(parse(&["--valkey-url", "redis://a:1,redis://b:2"]).is_err());
        assert_eq!(parse(&["--valkey-url", "redis://a:1,redis://b:2", "--cluster"]).unwrap().valkey_urls.len(), 2);
        assert_eq!(parse(&["--queues", "a, b,,launch"]).unwrap().queues, ["a", "b", "launch"]);
        assert!(parse(&["--queues", ""]).unwrap().queues.is_empty());
    }
}
