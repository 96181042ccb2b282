//! Flags: one style for every service. Each service's flags are a clap derive parser
//! with an environment-variable fallback per flag (`env = "..."`) and its defaults
//! written once, in the attribute; [`Common`] is flattened into it; durations take
//! units ([`duration`]). A flag renamed on the way keeps its old spelling working,
//! hidden from `--help` ([`Renamed`]).

use crate::logging::LogFormat;
use clap::builder::TypedValueParser;
use clap::error::ErrorKind;
use std::ffi::{OsStr, OsString};
use std::net::SocketAddr;
use std::ops::RangeInclusive;
use std::path::PathBuf;
use std::time::Duration;

/// The flags every service takes. The listen address has no default here: each service
/// names its own with [`default_listen`].
#[derive(Debug, Clone, clap::Args)]
pub struct Common {
    /// Valkey URL: redis://[user:password@]host:port/, rediss:// for TLS; with
    /// --cluster, seed nodes, comma-separated.
    #[arg(long, env = "VALKEY_URL", default_value = "redis://127.0.0.1:6379/")]
    pub valkey_url: String,
    /// Valkey is a cluster (--valkey-url names seed nodes).
    #[arg(long, env = "VALKEY_CLUSTER")]
    pub cluster: bool,
    /// With rediss://: the CA that signed the servers' certificates (PEM), instead of
    /// the system's trust store.
    #[arg(long, env = "VALKEY_CA_FILE")]
    pub valkey_ca_file: Option<PathBuf>,
    /// With rediss://: this client's certificate (PEM), for servers that ask for one.
    #[arg(long, env = "VALKEY_CLIENT_CERT", requires = "valkey_client_key")]
    pub valkey_client_cert: Option<PathBuf>,
    /// With rediss://: the key of --valkey-client-cert (PEM).
    #[arg(long, env = "VALKEY_CLIENT_KEY", requires = "valkey_client_cert")]
    pub valkey_client_key: Option<PathBuf>,
    /// Address to listen on.
    #[arg(long, env = "LISTEN")]
    pub listen: SocketAddr,
    /// Log lines as text or as JSON objects, one a line (RUST_LOG sets the level).
    #[arg(long, env = "LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

impl Common {
    /// For tests and local runs: Valkey at `valkey_url`, any free loopback port, text logs.
    pub fn local(valkey_url: &str) -> Common {
        Common {
            valkey_url: valkey_url.to_string(),
            cluster: false,
            valkey_ca_file: None,
            valkey_client_cert: None,
            valkey_client_key: None,
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            log_format: LogFormat::Text,
        }
    }
}

impl Common {
    /// For tests: what `target` names, any free loopback port, text logs.
    pub fn local_target(target: &queue_client::Target) -> Common {
        Common {
            valkey_url: target.urls.join(","),
            cluster: target.cluster,
            valkey_ca_file: target.tls.ca_file.clone(),
            valkey_client_cert: target.tls.client_cert.clone(),
            valkey_client_key: target.tls.client_key.clone(),
            ..Common::local("")
        }
    }

    /// The store these flags name, checked (a usage error otherwise).
    pub fn valkey_target(&self) -> Result<queue_client::Target, String> {
        let tls = queue_client::TlsFiles {
            ca_file: self.valkey_ca_file.clone(),
            client_cert: self.valkey_client_cert.clone(),
            client_key: self.valkey_client_key.clone(),
        };
        queue_client::Target::parse(&self.valkey_url, self.cluster, tls)
    }

    /// [`Common::valkey_target`] for flags already checked at startup.
    pub fn target(&self) -> queue_client::Target {
        self.valkey_target().unwrap_or_else(|e| {
            tracing::error!("{e}");
            queue_client::Target::single(self.valkey_url.clone())
        })
    }
}

/// The durable-claim flags of every service that claims tickets (chat-server, the
/// gate), flattened into its parser: a claim is acknowledged only once
/// `--durable-replicas` replicas hold it (`WAIT`), so that a failover right after it
/// cannot let the ticket in a second time. Off by default: `WAIT 1` on a server
/// without replicas would refuse every claim, and one server loses nothing to a
/// failover; set 1 where the primary has a replica.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct DurableFlags {
    /// Replicas that must hold a claim before it is acknowledged (WAIT), 0 to 64;
    /// 0: off, claims are acknowledged by the primary alone. Not confirmed in time:
    /// 503 with Retry-After, and the same client's retry gets the same admission.
    #[arg(long, env = "DURABLE_REPLICAS", default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=64))]
    pub durable_replicas: u32,
    /// How long a claim waits for those replicas, in milliseconds (1 to 10000).
    #[arg(long, env = "DURABLE_TIMEOUT_MS", default_value_t = 200, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub durable_timeout_ms: u64,
    /// Also wait until the claim is in the append-only file of the primary and of
    /// those replicas (WAITAOF; every one needs appendonly yes).
    #[arg(long, env = "DURABLE_AOF")]
    pub durable_aof: bool,
}

impl Default for DurableFlags {
    fn default() -> Self {
        DurableFlags { durable_replicas: 0, durable_timeout_ms: 200, durable_aof: false }
    }
}

impl DurableFlags {
    /// The setting these flags make, for [`queue_client::QueueClient::with_durability`].
    pub fn durability(&self) -> queue_client::Durability {
        queue_client::Durability {
            replicas: self.durable_replicas,
            timeout: Duration::from_millis(self.durable_timeout_ms),
            aof: self.durable_aof,
        }
    }
}

/// A service's default listen address, set on the flattened `--listen`:
/// `#[command(mut_arg("listen", service_kit::default_listen("127.0.0.1:8080")))]`.
pub fn default_listen(addr: &'static str) -> impl FnOnce(clap::Arg) -> clap::Arg {
    move |arg| arg.default_value(addr).required(false)
}

/// A service's flags: a clap parser holding [`Common`].
pub trait Flags: clap::Parser {
    /// What the service runs with (often the flags themselves).
    type Config;
    /// Old spellings of renamed flags, still accepted.
    const RENAMED: &'static [Renamed] = &[];
    fn common(&self) -> &Common;
    /// Checks the flags together; an error is a usage error (exit status 2).
    fn into_config(self) -> Result<Self::Config, String>;
}

/// The flags with every default `--help` states and nothing else: no argument, the
/// environment ignored. Tests and local runs start from these and set what they need,
/// so a default is written once, in its clap attribute.
pub fn defaults<F: Flags>() -> F {
    let command = F::command().mut_args(|a| a.env(None::<&'static str>));
    let name = command.get_name().to_string();
    let matches = command.try_get_matches_from([name]).expect("every flag has a default or is optional");
    F::from_arg_matches(&matches).expect("the defaults make flags")
}

/// Parses the process's arguments, exiting with clap's usage error (status 2) or
/// help/version text when asked.
pub fn parse<F: Flags>() -> F {
    try_parse_from(std::env::args_os()).unwrap_or_else(|e| e.exit())
}

/// Parses `args` (the program name first), taking the old spellings of renamed flags
/// from `args` and from the environment.
pub fn try_parse_from<F: Flags>(args: impl IntoIterator<Item = impl Into<OsString>>) -> Result<F, clap::Error> {
    let args: Vec<OsString> = args.into_iter().map(Into::into).collect();
    F::try_parse_from(modernize(args, F::RENAMED, |name| std::env::var(name).ok()))
}

/// [`try_parse_from`] with the command's own name put first (for tests).
pub fn try_parse_args<F: Flags>(args: &[&str]) -> Result<F, clap::Error> {
    let name = F::command().get_name().to_string();
    try_parse_from(std::iter::once(name.as_str()).chain(args.iter().copied()))
}

/// Exits with `message` as a usage error of `F`'s command (status 2).
pub fn usage_error<F: Flags>(message: String) -> ! {
    F::command().error(ErrorKind::ValueValidation, message).exit()
}

/// `n` milliseconds, for duration bounds in flag attributes: `duration(ms(100)..=secs(60))`.
pub const fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// `n` seconds; see [`ms`].
pub const fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// A value parser for durations with units: `250ms`, `1s`, `2m 30s`, `1h` (a bare `0`
/// is zero), within `range`: `value_parser = duration(Duration::from_millis(100)..=Duration::from_secs(60))`.
pub fn duration(range: RangeInclusive<Duration>) -> DurationParser {
    DurationParser { min: *range.start(), max: *range.end() }
}

/// See [`duration`].
#[derive(Debug, Clone, Copy)]
pub struct DurationParser {
    min: Duration,
    max: Duration,
}

impl DurationParser {
    pub fn parse(&self, text: &str) -> Result<Duration, String> {
        let d =
            humantime::parse_duration(text.trim()).map_err(|e| format!("{e} (a number with a unit: 500ms, 2s, 1m)"))?;
        if d < self.min || d > self.max {
            let (min, max) = (humantime::format_duration(self.min), humantime::format_duration(self.max));
            return Err(format!("must be from {min} to {max}"));
        }
        Ok(d)
    }
}

impl TypedValueParser for DurationParser {
    type Value = Duration;

    fn parse_ref(&self, cmd: &clap::Command, arg: Option<&clap::Arg>, value: &OsStr) -> Result<Duration, clap::Error> {
        let text = value.to_string_lossy();
        self.parse(&text).map_err(|why| {
            let arg = arg.map_or_else(|| "the value".to_string(), |a| format!("'{a}'"));
            let mut cmd = cmd.clone();
            cmd.error(ErrorKind::ValueValidation, format!("invalid value '{text}' for {arg}: {why}"))
        })
    }
}

/// A flag renamed to take a duration with units whose old spelling took a bare number
/// (of milliseconds or seconds): `--tick-ms 100` and `TICK_MS=100` still work, as
/// `--tick 100ms`. The old variable counts only when neither spelling of the flag is
/// given and the new variable is not set.
#[derive(Debug, Clone, Copy)]
pub struct Renamed {
    old_flag: &'static str,
    old_env: &'static str,
    new_flag: &'static str,
    new_env: &'static str,
    /// Whether the old spelling counted seconds (fractions allowed), not milliseconds.
    seconds: bool,
}

impl Renamed {
    /// `--{old_flag}`/`{old_env}` took whole milliseconds; now `--{new_flag}`/`{new_env}`.
    pub const fn millis(
        old_flag: &'static str,
        old_env: &'static str,
        new_flag: &'static str,
        new_env: &'static str,
    ) -> Renamed {
        Renamed { old_flag, old_env, new_flag, new_env, seconds: false }
    }

    /// `--{old_flag}`/`{old_env}` took seconds; now `--{new_flag}`/`{new_env}`.
    pub const fn secs(
        old_flag: &'static str,
        old_env: &'static str,
        new_flag: &'static str,
        new_env: &'static str,
    ) -> Renamed {
        Renamed { old_flag, old_env, new_flag, new_env, seconds: true }
    }

    /// An old value in the new form (`100` → `100ms`); any other value is passed on as
    /// it is, for the new flag's parser to take (`2s`) or refuse.
    fn convert(&self, old: &OsStr) -> OsString {
        let text = old.to_string_lossy();
        let text = text.trim();
        let d = if self.seconds {
            text.parse::<f64>().ok().filter(|s| s.is_finite() && *s >= 0.0 && *s < 1e12).map(Duration::from_secs_f64)
        } else {
            text.parse::<u64>().ok().map(Duration::from_millis)
        };
        match d {
            Some(d) => humantime::format_duration(d).to_string().into(),
            None => old.to_os_string(),
        }
    }

    fn names(&self, arg: &OsStr, flag: &str) -> Option<Option<OsString>> {
        let arg = arg.to_str()?.strip_prefix("--")?.strip_prefix(flag)?;
        match arg.strip_prefix('=') {
            Some(value) => Some(Some(value.into())),
            None if arg.is_empty() => Some(None),
            None => None,
        }
    }
}

/// `args` with every old spelling of `renamed` in its new form, and the old
/// environment variables that count (see [`Renamed`]) appended as flags.
pub fn modernize(args: Vec<OsString>, renamed: &[Renamed], env: impl Fn(&str) -> Option<String>) -> Vec<OsString> {
    let mut out = Vec::with_capacity(args.len());
    let mut given = vec![false; renamed.len()];
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        if arg == "--" {
            out.push(arg);
            out.extend(args.by_ref());
            break;
        }
        let mut matched = false;
        for (i, r) in renamed.iter().enumerate() {
            if r.names(&arg, r.new_flag).is_some() {
                given[i] = true;
            } else if let Some(inline) = r.names(&arg, r.old_flag) {
                given[i] = true;
                matched = true;
                out.push(format!("--{}", r.new_flag).into());
                if let Some(value) = inline.or_else(|| args.next()) {
                    out.push(r.convert(&value));
                }
            }
        }
        if !matched {
            out.push(arg);
        }
    }
    for (r, _) in renamed.iter().zip(given).filter(|(_, given)| !given) {
        if env(r.new_env).is_none() {
            if let Some(old) = env(r.old_env) {
                out.push(format!("--{}", r.new_flag).into());
                out.push(r.convert(OsStr::new(&old)));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{CommandFactory, Parser};

    const RENAMED: &[Renamed] = &[
        Renamed::millis("tick-ms", "TICK_MS", "tick", "TICK"),
        Renamed::secs("beat-secs", "BEAT_SECS", "beat", "BEAT"),
    ];

    #[derive(Debug, Parser)]
    #[command(name = "svc", mut_arg("listen", default_listen("127.0.0.1:9")))]
    struct Svc {
        #[command(flatten)]
        common: Common,
        #[arg(long, env = "SVC_TEST_TICK", default_value = "1s",
              value_parser = duration(Duration::from_millis(100)..=Duration::from_secs(60)))]
        tick: Duration,
        #[arg(long, default_value = "5s", value_parser = duration(Duration::from_nanos(1)..=Duration::from_secs(86_400)))]
        beat: Duration,
    }

    impl Flags for Svc {
        type Config = Svc;
        const RENAMED: &'static [Renamed] = RENAMED;
        fn common(&self) -> &Common {
            &self.common
        }
        fn into_config(self) -> Result<Svc, String> {
            Ok(self)
        }
    }

    fn args(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    fn parse(v: &[&str]) -> Result<Svc, String> {
        try_parse_args::<Svc>(v).map_err(|e| e.to_string())
    }

    #[test]
    fn defaults_and_units() {
        let s = parse(&[]).unwrap();
        assert_eq!(s.common.listen.to_string(), "127.0.0.1:9");
        assert_eq!(s.common.valkey_url, "redis://127.0.0.1:6379/");
        assert_eq!(s.common.log_format, LogFormat::Text);
        assert_eq!((s.tick, s.beat), (Duration::from_secs(1), Duration::from_secs(5)));
        let s =
            parse(&["--tick", "250ms", "--beat", "2m 30s", "--log-format", "json", "--listen", "0.0.0.0:1"]).unwrap();
        assert_eq!((s.tick, s.beat), (Duration::from_millis(250), Duration::from_secs(150)));
        assert_eq!((s.common.log_format, s.common.listen.port()), (LogFormat::Json, 1));
    }

    #[test]
    fn valkey_connection_flags() {
        let s = parse(&[]).unwrap();
        let t = s.common.valkey_target().unwrap();
        assert_eq!((t.urls.len(), t.cluster, t.is_tls()), (1, false, false));
        let s = parse(&["--valkey-url", "redis://a:1,redis://b:2", "--cluster"]).unwrap();
        assert_eq!(s.common.valkey_target().unwrap(), queue_client::Target::cluster(["redis://a:1", "redis://b:2"]));
        let s = parse(&["--valkey-url", "redis://a:1,redis://b:2"]).unwrap();
        assert!(s.common.valkey_target().unwrap_err().contains("--cluster"));
        let e = parse(&["--valkey-client-cert", "c.pem"]).unwrap_err();
        assert!(e.contains("--valkey-client-key"), "{e}");
        let s = parse(&["--valkey-url", "redis://a:1", "--valkey-ca-file", "ca.pem"]).unwrap();
        assert!(s.common.valkey_target().unwrap_err().contains("rediss://"));
        let s = parse(&["--valkey-url", "rediss://svc:pw@a:1", "--valkey-ca-file", "/nonexistent/ca.pem"]).unwrap();
        assert!(s.common.valkey_target().unwrap_err().contains("no such file"));
    }

    #[test]
    fn durations_need_a_unit_and_stay_in_range() {
        for bad in ["100", "50ms", "61s", "soon"] {
            let e = parse(&["--tick", bad]).unwrap_err();
            assert!(e.contains("--tick") && e.contains(bad), "{bad}: {e}");
        }
        assert!(parse(&["--beat", "0"]).unwrap_err().contains("must be from 1ns to 1day"));
        assert_eq!(parse(&["--tick", "100ms"]).unwrap().tick, Duration::from_millis(100));
    }

    #[test]
    fn old_spellings_take_their_old_units() {
        assert_eq!(parse(&["--tick-ms", "100"]).unwrap().tick, Duration::from_millis(100));
        assert_eq!(parse(&["--tick-ms=250"]).unwrap().tick, Duration::from_millis(250));
        assert_eq!(parse(&["--beat-secs", "0.2"]).unwrap().beat, Duration::from_millis(200));
        assert_eq!(parse(&["--beat-secs", "90"]).unwrap().beat, Duration::from_secs(90));
        assert!(parse(&["--tick-ms", "99"]).is_err(), "the new range holds");
        assert_eq!(parse(&["--tick-ms", "2s"]).unwrap().tick, Duration::from_secs(2), "a unit given is taken");
        assert!(parse(&["--tick-ms", "0.5"]).is_err());
        assert!(parse(&["--beat-secs", "0"]).is_err());
        assert!(parse(&["--tick-ms", "100", "--tick", "1s"]).is_err(), "one spelling at a time");
    }

    #[test]
    fn old_environment_variables_count_when_nothing_newer_is_given() {
        let env = |vars: &'static [(&'static str, &'static str)]| {
            move |k: &str| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string())
        };
        let m = |a: &[&str], vars| modernize(args(a), RENAMED, env(vars));
        assert_eq!(m(&["svc"], &[("TICK_MS", "300")]), args(&["svc", "--tick", "300ms"]));
        assert_eq!(m(&["svc"], &[("TICK_MS", "300"), ("TICK", "1s")]), args(&["svc"]));
        assert_eq!(m(&["svc", "--tick", "2s"], &[("TICK_MS", "300")]), args(&["svc", "--tick", "2s"]));
        assert_eq!(m(&["svc", "--tick-ms", "5"], &[("TICK_MS", "300")]), args(&["svc", "--tick", "5ms"]));
        assert_eq!(m(&["svc"], &[("BEAT_SECS", "1.5")]), args(&["svc", "--beat", "1s 500ms"]));
        assert_eq!(m(&["svc", "--", "--tick-ms", "1"], &[]), args(&["svc", "--", "--tick-ms", "1"]));
        assert_eq!(m(&["svc", "--tick-msx", "1"], &[]), args(&["svc", "--tick-msx", "1"]));
    }

    /// Flags with a variable no other test reads, so setting it races nothing.
    #[derive(Debug, Parser)]
    #[command(name = "envsvc", mut_arg("listen", default_listen("127.0.0.1:9")))]
    struct EnvSvc {
        #[command(flatten)]
        common: Common,
        #[arg(long, env = "FLAGS_DEFAULTS_TEST_TICK", default_value = "1s",
              value_parser = duration(Duration::from_millis(100)..=Duration::from_secs(60)))]
        tick: Duration,
    }

    impl Flags for EnvSvc {
        type Config = EnvSvc;
        fn common(&self) -> &Common {
            &self.common
        }
        fn into_config(self) -> Result<EnvSvc, String> {
            Ok(self)
        }
    }

    #[test]
    fn defaults_ignore_the_environment() {
        std::env::set_var("FLAGS_DEFAULTS_TEST_TICK", "7s");
        let run = try_parse_args::<EnvSvc>(&[]).unwrap();
        let d = defaults::<EnvSvc>();
        std::env::remove_var("FLAGS_DEFAULTS_TEST_TICK");
        assert_eq!(run.tick, Duration::from_secs(7), "a run takes the variable");
        assert_eq!((d.tick, d.common.listen.port()), (Duration::from_secs(1), 9));
        assert_eq!(d.common.valkey_url, "redis://127.0.0.1:6379/");
    }

    #[test]
    fn old_spellings_stay_out_of_the_help() {
        let help = Svc::command().render_long_help().to_string();
        assert!(help.contains("--tick") && help.contains("--log-format") && help.contains("[default: 127.0.0.1:9]"));
        assert!(!help.contains("tick-ms"));
    }
}
