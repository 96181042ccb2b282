//! chat-server's flags (each with an environment-variable fallback), their defaults
//! written once, in the clap attributes.

use std::time::Duration;

/// chat-server: the WebSocket chat room behind the waiting room. Every flag has an
/// environment-variable fallback.
#[derive(Debug, Clone, clap::Parser)]
#[command(name = "chat-server", version, about, mut_arg("listen", service_kit::default_listen("127.0.0.1:8081")))]
pub struct Config {
    #[command(flatten)]
    pub common: service_kit::Common,
    #[command(flatten)]
    pub http: service_kit::http::HttpLimits,
    /// Who the client is behind your proxies (the per-address session limit and the
    /// failed-ticket limit count per client address): --trusted-proxies,
    /// --trust-proxy, --client-ip-header (docs/security.md, "The client's address").
    #[command(flatten)]
    pub proxy: service_kit::ProxyFlags,
    /// Durable claims: --durable-replicas, --durable-timeout-ms, --durable-aof
    /// (README, "Durable claims").
    #[command(flatten)]
    pub durable: service_kit::flags::DurableFlags,
    /// The queue (room) of a connection whose URL names none; its health signal is
    /// published even while nobody is connected.
    #[arg(long, env = "QUEUE", default_value = "default", value_parser = parse_queue)]
    pub queue: String,
    /// Time between heartbeats: one SESSION.HEARTBEAT per queue for all local users.
    /// Must stay well under the queue's session_lease (default 30s).
    #[arg(long, env = "HEARTBEAT", default_value = "5s", value_parser = period())]
    pub heartbeat: Duration,
    /// Time without a frame from the client before it is closed (1000 "idle") and its
    /// session ended. Pings do not count: only text and binary frames.
    #[arg(long, env = "IDLE_TIMEOUT", default_value = "2m", value_parser = period())]
    pub idle_timeout: Duration,
    /// Largest frame accepted from a client, in bytes; a larger one closes the
    /// connection with 1009.
    #[arg(long, env = "MAX_FRAME_BYTES", default_value_t = 4096,
          value_parser = clap::value_parser!(u32).range(64..=1_048_576))]
    pub max_frame_bytes: u32,
    /// Frames a connection may send per second, on average.
    #[arg(long, env = "MESSAGES_PER_SECOND", default_value_t = 5.0, value_parser = parse_positive)]
    pub messages_per_second: f64,
    /// Frames a connection may send in a burst.
    #[arg(long, env = "MESSAGE_BURST", default_value_t = 10.0, value_parser = parse_positive)]
    pub message_burst: f64,
    /// Sessions this instance is sized for: its health signal's load is local
    /// sessions divided by this.
    #[arg(long, env = "CAPACITY", default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..))]
    pub capacity: u64,
    /// Most sessions this instance holds at once (0: no limit); past it a handshake is
    /// taken and closed at once with 1013 (try again later), its ticket unclaimed.
    #[arg(long, env = "MAX_SESSIONS", default_value_t = 20_000)]
    pub max_sessions: usize,
    /// Most sessions one client address holds at once (0: no limit); past it, as above.
    #[arg(long, env = "MAX_SESSIONS_PER_ADDR", default_value_t = 1_000)]
    pub max_sessions_per_addr: u32,
    /// Failed ticket checks (unknown, used or malformed tickets) one client address
    /// may make per minute once its burst is spent; past it, 429. 0 (the default): no
    /// limit, since behind a proxy or load balancer every client has its address; set
    /// it where chat-server sees the clients' own addresses.
    #[arg(long, env = "TICKET_FAILURES_PER_MINUTE", default_value_t = 0.0, value_parser = parse_non_negative)]
    pub ticket_failures_per_minute: f64,
    /// Failed ticket checks one client address may make at once.
    #[arg(long, env = "TICKET_FAILURE_BURST", default_value_t = 20.0, value_parser = parse_positive)]
    pub ticket_failure_burst: f64,
    /// How often presence changes (joins, leaves) are sent to the room: all of a tick's
    /// changes in one PRESENCE_JOINED, one PRESENCE_LEFT and one system line.
    #[arg(long, env = "PRESENCE_TICK", default_value = "200ms",
          value_parser = service_kit::duration(Duration::from_millis(10)..=Duration::from_secs(10)))]
    pub presence_tick: Duration,
    /// This instance's name in the health signal and on the room channel (default:
    /// random).
    #[arg(long, env = "INSTANCE_ID")]
    pub instance_id: Option<String>,
    /// Time between two health signals.
    #[arg(long, env = "HEALTH_INTERVAL", default_value = "2s", value_parser = period())]
    pub health_interval: Duration,
    /// How long a health signal stays valid (the queue-manager ignores it after).
    #[arg(long, env = "HEALTH_TTL", default_value = "10s", value_parser = period())]
    pub health_ttl: Duration,
}

impl service_kit::Flags for Config {
    type Config = Config;
    const RENAMED: &'static [service_kit::Renamed] = &[
        service_kit::Renamed::secs("heartbeat-secs", "HEARTBEAT_SECS", "heartbeat", "HEARTBEAT"),
        service_kit::Renamed::secs("idle-timeout-secs", "IDLE_TIMEOUT_SECS", "idle-timeout", "IDLE_TIMEOUT"),
        service_kit::Renamed::secs("health-secs", "HEALTH_SECS", "health-interval", "HEALTH_INTERVAL"),
        service_kit::Renamed::secs("health-ttl-secs", "HEALTH_TTL_SECS", "health-ttl", "HEALTH_TTL"),
    ];

    fn common(&self) -> &service_kit::Common {
        &self.common
    }

    fn into_config(self) -> Result<Config, String> {
        Ok(self)
    }
}

/// The periods above: more than 0, at most a day.
fn period() -> service_kit::flags::DurationParser {
    service_kit::duration(Duration::from_nanos(1)..=Duration::from_secs(86_400))
}

fn parse_positive(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(format!("{s:?} is not a positive number")),
    }
}

fn parse_non_negative(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        _ => Err(format!("{s:?} is not a number from 0 up")),
    }
}

fn parse_queue(s: &str) -> Result<String, String> {
    queue_core::keys::check_queue(s.as_bytes()).map(str::to_string).map_err(|e| e.to_string())
}

impl Config {
    /// The defaults `--help` states, for a local run and tests: Valkey at
    /// `valkey_url`, any free loopback port.
    pub fn local(valkey_url: &str) -> Config {
        Config { common: service_kit::Common::local(valkey_url), ..service_kit::flags::defaults() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use service_kit::flags::try_parse_args as parse;

    #[test]
    fn each_flag_has_its_own_help() {
        use clap::CommandFactory;
        let help = Config::command().render_long_help().to_string();
        let section = |flag: &str| {
            let start = help.find(&format!("--{flag} <")).unwrap_or_else(|| panic!("--{flag} in {help}"));
            let rest = &help[start + 2..];
            rest[..rest.find("\n      --").unwrap_or(rest.len())].to_string()
        };
        assert!(section("presence-tick").contains("presence changes"), "{}", section("presence-tick"));
        let failures = section("ticket-failures-per-minute");
        assert!(failures.contains("Failed ticket checks") && !failures.contains("presence"), "{failures}");
    }

    #[test]
    fn durations_with_units_and_the_old_seconds_flags() {
        let c = parse::<Config>(&[]).unwrap();
        assert_eq!(c.common.listen.to_string(), "127.0.0.1:8081");
        assert_eq!((c.heartbeat, c.idle_timeout), (Duration::from_secs(5), Duration::from_secs(120)));
        assert_eq!((c.health_interval, c.health_ttl), (Duration::from_secs(2), Duration::from_secs(10)));
        assert_eq!(
            (c.max_sessions, c.max_sessions_per_addr, c.presence_tick),
            (20_000, 1_000, Duration::from_millis(200))
        );
        let c = parse::<Config>(&["--heartbeat", "200ms", "--idle-timeout", "1h", "--health-interval", "1s"]).unwrap();
        assert_eq!((c.heartbeat, c.idle_timeout), (Duration::from_millis(200), Duration::from_secs(3600)));
        let c = parse::<Config>(&["--heartbeat-secs", "0.2", "--idle-timeout-secs", "3600", "--health-ttl-secs", "30"])
            .unwrap();
        assert_eq!((c.heartbeat, c.idle_timeout), (Duration::from_millis(200), Duration::from_secs(3600)));
        assert_eq!(c.health_ttl, Duration::from_secs(30));
        for bad in
            [&["--heartbeat", "0"][..], &["--heartbeat", "5"], &["--heartbeat-secs", "0"], &["--health-secs", "86401"]]
        {
            assert!(parse::<Config>(bad).is_err(), "{bad:?}");
        }
    }
}
