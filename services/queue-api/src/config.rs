//! queue-api's flags (each with an environment-variable fallback), their defaults
//! written once, in the clap attributes.

use crate::{cors, identity, pages, templates};
use std::time::Duration;

/// queue-api: the waiting room's HTTP front. Every flag has an environment-variable
/// fallback.
#[derive(Debug, Clone, clap::Parser)]
#[command(name = "queue-api", version, about, mut_arg("listen", service_kit::default_listen("127.0.0.1:8080")))]
pub struct Config {
    #[command(flatten)]
    pub common: service_kit::Common,
    #[command(flatten)]
    pub http: service_kit::http::HttpLimits,
    /// Where admitted people go: the chat page (its `?ticketId=` is added).
    #[arg(long, env = "CHAT_URL", default_value = "http://127.0.0.1:8081/")]
    pub chat_url: String,
    /// `QUEUE=URL` (repeatable): where the page sends QUEUE's admitted people (with
    /// `ticketId`, `queue` and `return`), e.g. the gate's `/gate/claim`; other queues
    /// go to --chat-url.
    #[arg(long = "admit-url", env = "ADMIT_URLS", value_delimiter = ',', value_parser = pages::AdmitUrl::parse)]
    pub admit_url: Vec<pages::AdmitUrl>,
    /// A directory whose index.html replaces the waiting-room page (docs/pages.md
    /// lists its variables; its other files are served under assets/). Checked at
    /// start: an unknown variable is an error.
    #[arg(long, env = "TEMPLATES", value_parser = templates::Pages::from_flag)]
    pub templates: Option<templates::Pages>,
    /// Bearer token for the back office; without one the back office is disabled.
    #[arg(long, env = "ADMIN_TOKEN")]
    pub admin_token: Option<String>,
    /// Requests per second per client address on entry, status, leave and stream (0: no limit).
    #[arg(long, env = "RATE_LIMIT", default_value_t = 20.0)]
    pub rate_limit: f64,
    /// Burst per client address.
    #[arg(long, env = "RATE_BURST", default_value_t = 40.0)]
    pub rate_burst: f64,
    /// Origins whose pages may call the public queue API from a browser: a
    /// comma-separated list (`https://shop.example`), `*` for any, empty for none
    /// (the default: only the page this service serves).
    #[arg(long, env = "CORS_ORIGINS", default_value = "", value_parser = cors::Origins::parse)]
    pub cors_origins: cors::Origins,
    /// Who the client is behind your proxies (rate limits, stream limits and
    /// proof-of-work challenges are per client address): --trusted-proxies,
    /// --trust-proxy, --client-ip-header (docs/security.md, "The client's address").
    #[command(flatten)]
    pub proxy: service_kit::ProxyFlags,
    /// How often push streams are refreshed without a promotion announcement (100ms to 60s).
    #[arg(long, env = "PUSH_TICK", default_value = "1s",
          value_parser = service_kit::duration(Duration::from_millis(100)..=Duration::from_secs(60)))]
    pub push_tick: Duration,
    /// A push stream tells a change of rank, total or estimate at most once per this
    /// interval, the latest standing (0 to 60s; 0: every change at once). A promotion,
    /// a ticket, leaving, sold out, closed, a message, branding and a pause go out at
    /// once (docs/http-api.md, "Paced rank events").
    #[arg(long, env = "PUSH_INTERVAL", default_value = "2s",
          value_parser = service_kit::duration(Duration::ZERO..=Duration::from_secs(60)))]
    pub push_interval: Duration,
    /// An open push stream gets a comment line (`:`) this often unless it told its
    /// standing within half of it, so that proxies and load balancers in front do
    /// not cut it as idle (1s to 5m).
    #[arg(long, env = "STREAM_KEEP_ALIVE", default_value = "15s",
          value_parser = service_kit::duration(Duration::from_secs(1)..=Duration::from_secs(300)))]
    pub stream_keep_alive: Duration,
    /// Answer status polls from what this instance's push follower knows (no Valkey
    /// call per poll, answers up to --status-max-staleness behind; docs/http-api.md,
    /// "Status from the push follower"); off by default: every poll is read from Valkey
    /// and sees every change made before it.
    #[arg(long, env = "STATUS_FROM_FOLLOWER", default_value_t = false, action = clap::ArgAction::Set)]
    pub status_from_follower: bool,
    /// How long a person who stopped polling stays registered with the follower
    /// before it unregisters them (1s to 10m; the page polls every 3 s).
    #[arg(long, env = "POLL_GRACE", default_value = "15s",
          value_parser = service_kit::duration(Duration::from_secs(1)..=Duration::from_secs(600)))]
    pub poll_grace: Duration,
    /// How far behind Valkey a status answer from the follower may be at most: past
    /// it (the follower behind, reconnecting, Valkey away) polls are read from Valkey
    /// (100ms to 10s).
    #[arg(long, env = "STATUS_MAX_STALENESS", default_value = "1s",
          value_parser = service_kit::duration(Duration::from_millis(100)..=Duration::from_secs(10)))]
    pub status_max_staleness: Duration,
    /// How long a status poll of a person known here but not kept current (they
    /// entered again through another instance, say) waits for the follower's next
    /// registration to answer it, before it is read from Valkey (0 to 1s; 0: read at
    /// once, then registered). The people asked for their polls are gathered for
    /// half of it into one registration.
    #[arg(long, env = "POLL_HOLD", default_value = "100ms",
          value_parser = service_kit::duration(Duration::ZERO..=Duration::from_secs(1)))]
    pub poll_hold: Duration,
    /// Most pollers this instance registers with its push followers (0: no limit);
    /// past it a poll is answered from Valkey (the batched read) without registering
    /// its person, so that a flood of made-up pollers cannot grow the instance's
    /// memory or its QUEUE.WATCH calls without bound.
    #[arg(long, env = "MAX_POLLERS", default_value_t = 100_000)]
    pub max_pollers: usize,
    /// Secret proof-of-work challenges are signed with; every instance behind one
    /// load balancer needs the same (default: random bytes at start).
    #[arg(long, env = "POW_SECRET", hide_env_values = true)]
    pub pow_secret: Option<String>,
    /// Most push streams this instance holds open at once (0: no limit); past it a new
    /// stream is refused with 503 and Retry-After.
    #[arg(long, env = "MAX_STREAMS", default_value_t = 100_000)]
    pub max_streams: usize,
    /// Most push streams one client address holds open at once (0: no limit); past it
    /// a new stream from that address is refused with 429 and Retry-After.
    #[arg(long, env = "MAX_STREAMS_PER_ADDR", default_value_t = 64)]
    pub max_streams_per_addr: u32,
    /// Identity from the app's own login (docs/http-api.md, "Identity").
    #[command(flatten)]
    pub identity: IdentityFlags,
    /// Serve /bench/noop, a no-op handler benchmarks compare against.
    #[arg(long, env = "BENCH_ROUTES", default_value_t = false, hide = true)]
    pub bench_routes: bool,
}

impl service_kit::Flags for Config {
    type Config = Config;
    const RENAMED: &'static [service_kit::Renamed] =
        &[service_kit::Renamed::millis("push-tick-ms", "PUSH_TICK_MS", "push-tick", "PUSH_TICK")];

    fn common(&self) -> &service_kit::Common {
        &self.common
    }

    fn into_config(self) -> Result<Config, String> {
        self.identity.check()?;
        Ok(self)
    }
}

impl Config {
    /// The defaults `--help` states, for a local run and tests: Valkey at
    /// `valkey_url`, any free loopback port.
    pub fn local(valkey_url: &str) -> Config {
        Config { common: service_kit::Common::local(valkey_url), ..service_kit::flags::defaults() }
    }
}

/// The identity flags: the app login's keys, issuer, audience, where the token comes
/// from and which claim names the person.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct IdentityFlags {
    /// A JWKS file (RFC 7517) with the public keys the app's login signs its access
    /// tokens with (RSA: RS256, EC P-256: ES256, OKP Ed25519: EdDSA); identity is off
    /// without it.
    #[arg(long = "identity-jwks", env = "IDENTITY_JWKS", value_parser = identity::JwksFile::parse)]
    pub jwks: Option<identity::JwksFile>,
    /// The same keys fetched from a URL instead of a file (https://, or http:// to a
    /// loopback address): fetched at start (no start without them), then again every
    /// --identity-jwks-refresh-secs and when a token names an unknown kid (at most
    /// once per 30s). A failed fetch keeps the last good keys.
    #[arg(long = "identity-jwks-url", env = "IDENTITY_JWKS_URL", value_parser = crate::jwks::JwksUrl::parse)]
    pub jwks_url: Option<crate::jwks::JwksUrl>,
    /// How often the keys of --identity-jwks-url are fetched again, in seconds (a
    /// shorter `Cache-Control: max-age` of the answer, not below 30s, wins).
    #[arg(long = "identity-jwks-refresh-secs", env = "IDENTITY_JWKS_REFRESH_SECS", default_value_t = 300,
          value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub jwks_refresh_secs: u64,
    /// The `iss` every token must carry (required with --identity-jwks).
    #[arg(long = "identity-issuer", env = "IDENTITY_ISSUER")]
    pub issuer: Option<String>,
    /// The `aud` a token must name (required with --identity-jwks).
    #[arg(long = "identity-audience", env = "IDENTITY_AUDIENCE")]
    pub audience: Option<String>,
    /// `QUEUE=AUDIENCE` (repeatable): the audience tokens for QUEUE must name instead
    /// of --identity-audience.
    #[arg(long = "identity-queue-audience", env = "IDENTITY_QUEUE_AUDIENCES", value_delimiter = ',',
          value_parser = identity::QueueAudience::parse)]
    pub queue_audience: Vec<identity::QueueAudience>,
    /// The cookie that carries the token from a browser (besides `Authorization: Bearer`).
    #[arg(long = "identity-cookie", env = "IDENTITY_COOKIE")]
    pub cookie: Option<String>,
    /// The claim that names the person.
    #[arg(long = "identity-claim", env = "IDENTITY_CLAIM", default_value = "sub")]
    pub claim: String,
    /// How far `exp` and `nbf` may be off (clocks differ), at most 5m.
    #[arg(long = "identity-leeway", env = "IDENTITY_LEEWAY", default_value = "30s",
          value_parser = service_kit::duration(Duration::ZERO..=Duration::from_secs(300)))]
    pub leeway: Duration,
    /// The claim that names the lanes a person may enter (a string, or a list such as
    /// the person's groups): the first of the queue's lanes it names is the one they
    /// enter. Lanes are never taken from a request's body.
    #[arg(long = "identity-lane-claim", env = "IDENTITY_LANE_CLAIM")]
    pub lane_claim: Option<String>,
}

impl IdentityFlags {
    /// The other identity flags make sense only with keys, and keys need an issuer
    /// and an audience.
    pub fn check(&self) -> Result<(), String> {
        if self.jwks.is_some() && self.jwks_url.is_some() {
            return Err("--identity-jwks (a file) and --identity-jwks-url are two sources of the same keys: \
                        give one"
                .into());
        }
        if self.jwks.is_none() && self.jwks_url.is_none() {
            if self.issuer.is_some()
                || self.audience.is_some()
                || self.cookie.is_some()
                || !self.queue_audience.is_empty()
                || self.lane_claim.is_some()
            {
                return Err("--identity-issuer, --identity-audience, --identity-cookie, \
                            --identity-queue-audience and --identity-lane-claim need --identity-jwks \
                            or --identity-jwks-url (the keys tokens are checked with)"
                    .into());
            }
            return Ok(());
        }
        if self.issuer.as_deref().is_none_or(str::is_empty) || self.audience.as_deref().is_none_or(str::is_empty) {
            return Err(
                "--identity-jwks (or --identity-jwks-url) needs --identity-issuer and --identity-audience".into()
            );
        }
        if let Some(c) = &self.cookie {
            if c.is_empty() || !c.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)) {
                return Err(format!("--identity-cookie {c:?} is not a cookie name"));
            }
        }
        if self.claim.is_empty() {
            return Err("--identity-claim must name a claim".into());
        }
        if self.lane_claim.as_deref() == Some("") {
            return Err("--identity-lane-claim must name a claim".into());
        }
        Ok(())
    }

    /// The verifier these flags describe; None when identity is off. With
    /// --identity-jwks-url the keys are fetched here (an error if that fails) and kept
    /// fresh in the background while the verifier lives; `counters` count the fetches.
    pub async fn verifier(
        &self,
        counters: Option<crate::jwks::FetchCounters>,
    ) -> Result<Option<identity::Verifier>, String> {
        self.check()?;
        let keys = match (&self.jwks, &self.jwks_url) {
            (Some(jwks), _) => identity::KeySource::Fixed(jwks.0.clone()),
            (None, Some(url)) => {
                let every = Duration::from_secs(if self.jwks_refresh_secs == 0 { 300 } else { self.jwks_refresh_secs });
                let remote = crate::jwks::Remote::start(url.clone(), every, counters)
                    .await
                    .map_err(|e| format!("--identity-jwks-url: {e}"))?;
                identity::KeySource::Remote(remote)
            }
            (None, None) => return Ok(None),
        };
        let per_queue = self.queue_audience.iter().map(|q| (q.queue.clone(), q.audience.clone())).collect();
        Ok(Some(
            identity::Verifier::with_source(
                keys,
                self.issuer.clone().unwrap_or_default(),
                self.audience.clone().unwrap_or_default(),
                per_queue,
                self.claim.clone(),
                self.leeway,
            )
            .with_lane_claim(self.lane_claim.clone()),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use service_kit::flags::try_parse_args as parse;

    #[test]
    fn flags_and_their_defaults() {
        let c = parse::<Config>(&[]).unwrap();
        assert_eq!((c.common.listen.to_string(), c.push_tick), ("127.0.0.1:8080".to_string(), Duration::from_secs(1)));
        assert_eq!((c.rate_limit, c.rate_burst, c.proxy.trust_proxy), (20.0, 40.0, false));
        assert!(c.proxy.trusted_proxies.is_empty() && c.proxy.client_ip_header.is_none());
        assert_eq!((c.max_streams, c.max_streams_per_addr), (100_000, 64));
        let c = parse::<Config>(&["--max-streams", "5", "--max-streams-per-addr", "0"]).unwrap();
        assert_eq!((c.max_streams, c.max_streams_per_addr), (5, 0));
        assert_eq!(parse::<Config>(&["--push-tick", "250ms"]).unwrap().push_tick, Duration::from_millis(250));
        let c = parse::<Config>(&[]).unwrap();
        assert_eq!(
            (c.status_from_follower, c.poll_grace, c.status_max_staleness),
            (false, Duration::from_secs(15), Duration::from_secs(1))
        );
        let on = ["--status-from-follower", "true", "--poll-grace", "30s", "--status-max-staleness", "250ms"];
        let c = parse::<Config>(&on).unwrap();
        assert_eq!(
            (c.status_from_follower, c.poll_grace, c.status_max_staleness),
            (true, Duration::from_secs(30), Duration::from_millis(250))
        );
        assert!(parse::<Config>(&["--status-max-staleness", "50ms"]).is_err());
        assert_eq!(parse::<Config>(&[]).unwrap().max_pollers, 100_000);
        assert_eq!(parse::<Config>(&["--max-pollers", "7"]).unwrap().max_pollers, 7);
        assert!(parse::<Config>(&["--poll-grace", "0s"]).is_err());
        assert!(parse::<Config>(&["--status-from-follower", "maybe"]).is_err());
        assert_eq!(
            parse::<Config>(&["--push-tick-ms", "250"]).unwrap().push_tick,
            Duration::from_millis(250),
            "the old spelling"
        );
        for bad in ["99ms", "61s", "1000"] {
            assert!(parse::<Config>(&["--push-tick", bad]).is_err(), "{bad}");
        }
    }

    #[test]
    fn stream_keep_alive() {
        assert_eq!(parse::<Config>(&[]).unwrap().stream_keep_alive, Duration::from_secs(15));
        let c = parse::<Config>(&["--stream-keep-alive", "1s"]).unwrap();
        assert_eq!(c.stream_keep_alive, Duration::from_secs(1));
        for bad in ["0s", "999ms", "301s", "soon"] {
            assert!(parse::<Config>(&["--stream-keep-alive", bad]).is_err(), "{bad}");
        }
    }

    #[test]
    fn push_interval() {
        assert_eq!(parse::<Config>(&[]).unwrap().push_interval, Duration::from_secs(2));
        for (text, want) in [("0s", 0), ("0", 0), ("500ms", 500), ("60s", 60_000)] {
            let c = parse::<Config>(&["--push-interval", text]).unwrap();
            assert_eq!(c.push_interval, Duration::from_millis(want), "{text}");
        }
        for bad in ["61s", "-1s", "1000", "soon", ""] {
            assert!(parse::<Config>(&["--push-interval", bad]).is_err(), "{bad}");
        }
    }
    #[tokio::test]
    async fn identity_flags() {
        let c = parse::<Config>(&[]).unwrap();
        assert!(c.identity.jwks.is_none() && c.identity.verifier(None).await.unwrap().is_none(), "off by default");
        assert_eq!((c.identity.claim.as_str(), c.identity.leeway), ("sub", Duration::from_secs(30)));
        assert!(parse::<Config>(&["--identity-issuer", "x"]).unwrap().identity.check().is_err(), "no keys");
        let path = std::env::temp_dir().join(format!("queue-api-jwks-{}.json", std::process::id()));
        let x = "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo";
        std::fs::write(&path, format!(r#"{{"keys":[{{"kty":"OKP","crv":"Ed25519","kid":"a","x":"{x}"}}]}}"#)).unwrap();
        let jwks = path.to_str().unwrap();
        assert!(parse::<Config>(&["--identity-jwks", jwks]).unwrap().identity.check().is_err(), "no issuer");
        let args = [
            "--identity-jwks",
            jwks,
            "--identity-issuer",
            "https://login",
            "--identity-audience",
            "shop",
            "--identity-cookie",
            "sid",
            "--identity-queue-audience",
            "vip=vip-app",
            "--identity-leeway",
            "5s",
        ];
        let c = parse::<Config>(&args).unwrap();
        let v = c.identity.verifier(None).await.unwrap().unwrap();
        assert_eq!((v.audience("shop"), v.audience("vip")), ("shop", "vip-app"));
        let mut bad = args.to_vec();
        bad[7] = "bad cookie";
        assert!(parse::<Config>(&bad).unwrap().identity.check().is_err());
        for (flag, value) in [
            ("--identity-leeway", "6m"),
            ("--identity-queue-audience", "vip"),
            ("--identity-queue-audience", "bad name=x"),
        ] {
            assert!(parse::<Config>(&[flag, value]).is_err(), "{flag} {value}");
        }
        // The keys from a URL instead: not both, https or loopback http only.
        let url = ["--identity-jwks-url", "https://login.example/jwks.json"];
        let c = parse::<Config>(&[&args[..], &url[..]].concat()).unwrap();
        assert!(c.identity.check().unwrap_err().contains("give one"), "a file and a URL");
        let c = parse::<Config>(&[&args[2..], &url[..]].concat()).unwrap();
        c.identity.check().unwrap();
        assert_eq!(c.identity.jwks_refresh_secs, 300);
        assert!(parse::<Config>(&url).unwrap().identity.check().is_err(), "no issuer");
        for bad in ["http://login.example/jwks.json", "file:///etc/jwks.json", "https://"] {
            assert!(parse::<Config>(&["--identity-jwks-url", bad]).is_err(), "{bad}");
        }
        assert!(parse::<Config>(&["--identity-jwks-url", "http://127.0.0.1:8000/jwks.json"]).is_ok());
        for bad in ["0", "86401", "5m"] {
            assert!(parse::<Config>(&["--identity-jwks-refresh-secs", bad]).is_err(), "{bad}");
        }
        assert_eq!(parse::<Config>(&["--identity-jwks-refresh-secs", "60"]).unwrap().identity.jwks_refresh_secs, 60);
        std::fs::write(&path, "{}").unwrap();
        assert!(parse::<Config>(&["--identity-jwks", jwks]).is_err(), "not a JWKS");
        std::fs::remove_file(&path).unwrap();
        assert!(parse::<Config>(&["--identity-jwks", jwks]).is_err(), "no such file");
    }
}
