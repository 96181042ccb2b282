//! Flags (with environment-variable fallbacks) and the configuration they make.

use crate::policy::{PolicyConfig, PROMOTE_MAX_LIMIT};
use clap::Parser;
use service_kit::{duration, ms, secs, Common, Renamed};
use std::net::SocketAddr;
use std::time::Duration;

/// The admission loop of the waiting room: calls QUEUE.PROMOTE on every queue, with
/// one active leader among its replicas.
#[derive(Debug, Clone, Parser)]
#[command(name = "queue-manager", version, about, mut_arg("listen", service_kit::default_listen("127.0.0.1:9091")))]
pub struct Flags {
    #[command(flatten)]
    pub common: Common,
    /// Time between two promotion rounds (100ms to 60s).
    #[arg(long, env = "TICK", default_value = "1s", value_parser = duration(ms(100)..=secs(60)))]
    pub tick: Duration,
    /// The leader lease (300ms to 10m); a standby takes over within two of them.
    #[arg(long, env = "LEASE", default_value = "3s", value_parser = duration(ms(300)..=secs(600)))]
    pub lease: Duration,
    /// Time between two discoveries of the queues in the store (100ms to 10m).
    #[arg(long, env = "DISCOVER_EVERY", default_value = "5s", value_parser = duration(ms(100)..=secs(600)))]
    pub discover_every: Duration,
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
    /// With --adaptive: latency at or above which the allowance is halved (0: ignore latency).
    #[arg(long, env = "HIGH_LATENCY", default_value = "0", value_parser = duration(Duration::ZERO..=Duration::MAX))]
    pub high_latency: Duration,
    /// With --adaptive: latency at or below which the allowance may grow (0: any).
    #[arg(long, env = "LOW_LATENCY", default_value = "0", value_parser = duration(Duration::ZERO..=Duration::MAX))]
    pub low_latency: Duration,
    /// With --adaptive: the smallest increase of the per-tick allowance, and the
    /// first allowance after a closed period.
    #[arg(long, env = "ADAPTIVE_STEP", default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub adaptive_step: u32,
    /// With --adaptive: the per-tick allowance above which admission is unrestricted.
    #[arg(long, env = "ADAPTIVE_MAX", default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub adaptive_max: u32,
    /// With --adaptive: least time between two changes of the allowance.
    #[arg(long, env = "ADJUST_EVERY", default_value = "1s", value_parser = duration(Duration::ZERO..=Duration::MAX))]
    pub adjust_every: Duration,
}

/// Everything [`crate::serve`] needs.
#[derive(Debug, Clone)]
pub struct Config {
    /// The server's URL, or a cluster's seed nodes.
    pub valkey_urls: Vec<String>,
    /// Whether `valkey_urls` name a cluster.
    pub cluster: bool,
    /// The store, TLS files included (`valkey_urls` and `cluster` are its parts,
    /// kept for callers that set them directly; [`Config::store`] reconciles them).
    pub target: queue_client::Target,
    /// Where the HTTP server listens (`service_kit::start` binds it).
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
    /// The flags' defaults (whatever the environment says), for the server at `url`
    /// (taken as it is: a URL that can never work makes `serve` fail).
    pub fn local(url: impl Into<String>) -> Config {
        let defaults = service_kit::flags::defaults::<Flags>();
        let mut c = service_kit::Flags::into_config(defaults).expect("the defaults are valid");
        let url: String = url.into();
        c.valkey_urls = vec![url.clone()];
        c.target = queue_client::Target::single(url);
        c
    }

    /// What to connect to: the target, with `valkey_urls` and `cluster` as set.
    pub fn store(&self) -> queue_client::Target {
        queue_client::Target { urls: self.valkey_urls.clone(), cluster: self.cluster, tls: self.target.tls.clone() }
    }
}

impl service_kit::Flags for Flags {
    type Config = Config;
    const RENAMED: &'static [Renamed] = &[
        Renamed::millis("tick-ms", "TICK_MS", "tick", "TICK"),
        Renamed::millis("lease-ms", "LEASE_MS", "lease", "LEASE"),
        Renamed::millis("discover-ms", "DISCOVER_MS", "discover-every", "DISCOVER_EVERY"),
        Renamed::millis("high-latency-ms", "HIGH_LATENCY_MS", "high-latency", "HIGH_LATENCY"),
        Renamed::millis("low-latency-ms", "LOW_LATENCY_MS", "low-latency", "LOW_LATENCY"),
        Renamed::millis("adjust-ms", "ADJUST_MS", "adjust-every", "ADJUST_EVERY"),
    ];

    fn common(&self) -> &Common {
        &self.common
    }

    /// Checks the flags together and makes the configuration.
    fn into_config(self) -> Result<Config, String> {
        let target = self.common.valkey_target()?;
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
        if !self.high_latency.is_zero() && self.low_latency > self.high_latency {
            return Err("--low-latency must not exceed --high-latency".into());
        }
        let millis = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        let adaptive = self.adaptive.then(|| PolicyConfig {
            fail_open: self.fail_open,
            high_load: self.high_load,
            low_load: self.low_load,
            high_latency_ms: millis(self.high_latency),
            low_latency_ms: millis(self.low_latency),
            step: self.adaptive_step,
            ceiling: self.adaptive_max.min(PROMOTE_MAX_LIMIT),
            adjust_every: self.adjust_every,
        });
        Ok(Config {
            valkey_urls: target.urls.clone(),
            cluster: target.cluster,
            target,
            listen: self.common.listen,
            tick: self.tick,
            lease: self.lease,
            discover_every: self.discover_every,
            queues,
            adaptive,
            freeze: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use service_kit::Flags as _;

    fn parse(args: &[&str]) -> Result<Config, String> {
        service_kit::flags::try_parse_args::<Flags>(args).map_err(|e| e.to_string())?.into_config()
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
    fn durations_take_units() {
        let c = parse(&["--tick", "250ms", "--lease", "2s", "--discover-every", "1m"]).unwrap();
        assert_eq!((c.tick, c.lease, c.discover_every), (ms(250), secs(2), secs(60)));
        let c = parse(&["--adaptive", "--high-latency", "500ms", "--low-latency", "100ms", "--adjust-every", "2s"])
            .unwrap();
        let p = c.adaptive.unwrap();
        assert_eq!((p.high_latency_ms, p.low_latency_ms, p.adjust_every), (500, 100, secs(2)));
        assert!(parse(&["--tick", "100"]).is_err(), "a unit is needed");
        assert!(parse(&["--low-latency", "1s", "--high-latency", "500ms"]).is_err());
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
