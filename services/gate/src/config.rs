//! Flags (with environment-variable fallbacks) and the configuration they make.

use crate::rules::{self, QueueSettings, Rules};
use crate::token::Keys;
use clap::Parser;
use service_kit::http::HttpLimits;
use service_kit::{duration, ms, secs, Common};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// The waiting room in front of any app. As a reverse proxy (--upstream) it forwards
/// admitted requests and sends everyone else to the waiting room; without --upstream
/// it answers forward-auth calls (GET /gate/auth) from nginx auth_request, Traefik
/// ForwardAuth, Caddy forward_auth or Envoy ext_authz. Promoted people claim their
/// ticket once at /gate/claim and get an admission token (a JWT, as a cookie or a
/// Bearer token); the gate renews their session lease while they are active.
///
/// Endpoints: /gate/auth, /gate/claim, /gate/leave, /gate/room/ (the waiting room,
/// proxied to --queue-api), /.well-known/jwks.json, /gate/healthz, /gate/metrics
/// (and /healthz, /metrics without --upstream). See docs/gate.md.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "queue-gate",
    version,
    about,
    long_about,
    mut_arg("listen", service_kit::default_listen("127.0.0.1:8090"))
)]
pub struct Flags {
    #[command(flatten)]
    pub common: Common,
    #[command(flatten)]
    pub http: HttpLimits,
    /// Reverse-proxy mode: the app's base URL (http://host:port); without it the gate
    /// answers only its own endpoints (forward-auth mode).
    #[arg(long, env = "GATE_UPSTREAM")]
    pub upstream: Option<String>,
    /// How long the app may take to begin its answer (else 504) (100ms to 1h).
    #[arg(long, env = "GATE_UPSTREAM_TIMEOUT", default_value = "60s", value_parser = duration(ms(100)..=secs(3600)))]
    pub upstream_timeout: Duration,
    /// A gated route, [HOST]/PREFIX=QUEUE (repeatable; env: comma-separated), e.g.
    /// /checkout=drop-42 or shop.example.com/tickets/=concert. A prefix matches whole
    /// path segments; the longest prefix wins, a route with a host before one without.
    #[arg(long = "route", env = "GATE_ROUTES", value_delimiter = ',')]
    pub routes: Vec<String>,
    /// A TOML rules file (routes, bypasses, per-queue idle and max session; see
    /// docs/gate.md), read on top of the flags.
    #[arg(long, env = "GATE_RULES")]
    pub rules: Option<PathBuf>,
    /// What a request no route matches gets: pass, or queue:NAME.
    #[arg(long, env = "GATE_UNMATCHED", default_value = "pass")]
    pub unmatched: String,
    /// A path prefix that never waits (repeatable; env: comma-separated), on top of
    /// /healthz, /favicon.ico, /robots.txt and static assets by extension.
    #[arg(long = "bypass-path", env = "GATE_BYPASS_PATHS", value_delimiter = ',')]
    pub bypass_paths: Vec<String>,
    /// File extensions that never wait (comma-separated; "" for none).
    #[arg(
        long,
        env = "GATE_STATIC_EXTENSIONS",
        value_delimiter = ',',
        default_value = "css,js,mjs,map,png,jpg,jpeg,gif,svg,ico,webp,avif,woff,woff2,ttf,otf"
    )]
    pub static_extensions: Vec<String>,
    /// A secret that lets staff and monitoring through: header `X-Queue-Bypass: S`
    /// or cookie `queue_bypass=S`.
    #[arg(long, env = "GATE_BYPASS_SECRET", hide_env_values = true)]
    pub bypass_secret: Option<String>,
    /// Client networks that never wait, CIDR (repeatable; env: comma-separated).
    #[arg(long = "bypass-network", env = "GATE_BYPASS_NETWORKS", value_delimiter = ',')]
    pub bypass_networks: Vec<String>,
    /// queue-api's base URL: the gate serves the waiting room same-origin by
    /// proxying /gate/room/* to it.
    #[arg(long, env = "QUEUE_API")]
    pub queue_api: Option<String>,
    /// Where unadmitted people are sent, with ?queue=Q&return=PATH appended.
    #[arg(long, env = "GATE_WAITING_ROOM", default_value = "/gate/room/")]
    pub waiting_room: String,
    /// A PKCS#8 PEM private key, Ed25519 (EdDSA) or P-256 (ES256) (repeatable; env:
    /// comma-separated). The first signs, all verify. Without one, a key is made at
    /// start (tokens then die with the process and other instances refuse them).
    #[arg(long = "key", env = "GATE_KEYS", value_delimiter = ',')]
    pub keys: Vec<PathBuf>,
    /// Writes a new Ed25519 private key (PKCS#8 PEM) to this file and exits.
    #[arg(long, value_name = "FILE")]
    pub write_key: Option<PathBuf>,
    /// Lifetime of an admission token (10s to 1d), at most the queue's idle time (so
    /// that no token outlives its lease); renewed once a tenth of it is gone.
    #[arg(long, env = "GATE_TOKEN_TTL", default_value = "10m", value_parser = duration(secs(10)..=secs(86_400)))]
    pub token_ttl: Duration,
    /// Someone not seen for this long is no longer renewed and the slot returns
    /// (1s to 1d; per queue in the rules file).
    #[arg(long, env = "GATE_IDLE", default_value = "5m", value_parser = duration(secs(1)..=secs(86_400)))]
    pub idle: Duration,
    /// The longest session, after which a person queues again (0: no limit; per
    /// queue in the rules file).
    #[arg(long, env = "GATE_MAX_SESSION", default_value = "0", value_parser = duration(Duration::ZERO..=secs(366 * 86_400)))]
    pub max_session: Duration,
    /// Time between two lease renewals (100ms to 1m): one SESSION.HEARTBEAT per queue
    /// per tick; a lapsed lease ends access within a tick.
    #[arg(long, env = "GATE_TICK", default_value = "1s", value_parser = duration(ms(100)..=secs(60)))]
    pub tick: Duration,
    /// The admission cookie's name.
    #[arg(long, env = "GATE_COOKIE_NAME", default_value = "queue_admission")]
    pub cookie_name: String,
    /// The admission cookie's Domain (for a waiting room on a sibling host); host-only
    /// when unset.
    #[arg(long, env = "GATE_COOKIE_DOMAIN")]
    pub cookie_domain: Option<String>,
    /// Let unadmitted requests through once Valkey has been unreachable this long
    /// (0: never, the default).
    #[arg(long, env = "GATE_FAIL_OPEN", default_value = "0", value_parser = duration(Duration::ZERO..=secs(86_400)))]
    pub fail_open: Duration,
    /// Who the client is behind your proxies: --trusted-proxies, --trust-proxy,
    /// --client-ip-header (docs/security.md, "The client's address"). A trusted
    /// peer's X-Forwarded-For/-Proto/-Host are believed; in forward-auth mode every
    /// caller is.
    #[command(flatten)]
    pub proxy: service_kit::ProxyFlags,
    /// Durable claims: --durable-replicas, --durable-timeout-ms, --durable-aof
    /// (docs/gate.md, "Durable claims").
    #[command(flatten)]
    pub durable: service_kit::flags::DurableFlags,
    /// Where /gate/auth reads the original request: nginx (X-Original-URI), forwarded
    /// (X-Forwarded-Uri, Traefik and Caddy), envoy (the path after /gate/auth), or auto
    /// (whichever one is present; a request carrying more than one is refused with 403,
    /// since a client may have added one that its proxy passed on).
    #[arg(long, env = "GATE_AUTH_CONVENTION", default_value = "auto")]
    pub auth_convention: AuthConvention,
    /// Forward auth: renew a token due for renewal on a browser's GET by a redirect
    /// through /gate/renew (which sets the cookie and comes back) instead of a
    /// Set-Cookie on the 200, for proxies that do not pass the auth answer's cookies
    /// to the client (Caddy forward_auth).
    #[arg(long, env = "GATE_RENEW_REDIRECT")]
    pub renew_redirect: bool,
    /// Proxy mode: serve plain requests on the fast path (on), or every request by
    /// the general path, hyper and the router (off: to compare the two, or to rule
    /// the fast path out). Both answer alike.
    #[arg(long, env = "GATE_FAST_PATH", default_value = "on", value_name = "on|off", action = clap::ArgAction::Set,
          value_parser = clap::builder::BoolishValueParser::new())]
    pub fast_path: bool,
    /// Let a visitor without a token straight in while nobody waits in the queue and
    /// a slot is free (QUEUE.PASS: entered and claimed in one command, the token set
    /// on that very answer); only when people wait or the room is full does the
    /// visitor go to the waiting room. On by default; per queue in the rules file.
    #[arg(long, env = "GATE_STRAIGHT_THROUGH", default_value = "true", value_name = "true|false",
          action = clap::ArgAction::Set, value_parser = clap::builder::BoolishValueParser::new())]
    pub straight_through: bool,
    /// Straight passes per client address per minute (0 to 10000; 0: no limit per
    /// address). A client that never keeps the cookie (a crawler, a script) takes at
    /// most this many slots a minute; past it that address goes to the waiting room.
    #[arg(long, env = "GATE_STRAIGHT_THROUGH_PER_ADDRESS", default_value = "6",
          value_parser = clap::value_parser!(u32).range(0..=10_000))]
    pub straight_through_per_address: u32,
    /// The origin visitors reach this gate at (https://shop.example.com), behind a
    /// load balancer: the waiting room's link for routes without a host name uses it
    /// instead of the gate's listening address.
    #[arg(long, env = "GATE_PUBLIC_URL")]
    pub public_url: Option<String>,
}

/// Which forward-auth convention /gate/auth follows (`--auth-convention`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum AuthConvention {
    Auto,
    Nginx,
    Forwarded,
    Envoy,
}

/// Everything the gate runs with.
#[derive(Debug, Clone)]
pub struct Config {
    pub target: queue_client::Target,
    pub limits: HttpLimits,
    pub upstream: Option<hyper::Uri>,
    pub upstream_timeout: Duration,
    pub rules: Rules,
    pub bypass_secret: Option<String>,
    pub queue_api: Option<hyper::Uri>,
    pub waiting_room: String,
    pub keys: Arc<Keys>,
    pub token_ttl: Duration,
    pub tick: Duration,
    pub cookie_name: String,
    pub cookie_domain: Option<String>,
    pub fail_open: Option<Duration>,
    /// Who the client is (the peer, or what trusted proxies say); in forward-auth
    /// mode the gate makes the peer always trusted (`Gate::new`).
    pub client_addrs: service_kit::ClientAddrs,
    pub auth_convention: AuthConvention,
    /// Forward auth: renew by a redirect through /gate/renew (`--renew-redirect`).
    pub renew_redirect: bool,
    /// Proxy mode: plain requests on the fast path (`--fast-path`, on by default).
    pub fast_path: bool,
    /// How durable a claim must be before the gate admits (`--durable-replicas`,
    /// `--durable-timeout-ms`, `--durable-aof`; off by default).
    pub durability: queue_client::Durability,
    /// Straight passes per client address per minute (0: no limit per address;
    /// `--straight-through-per-address`).
    pub straight_per_address: u32,
    /// The origin visitors reach this gate at, without a trailing slash
    /// (`--public-url`).
    pub public_url: Option<String>,
}

impl Config {
    /// The defaults for Valkey at `url`, forward-auth mode, a fresh key, no routes.
    pub fn new(url: &str) -> Config {
        Config {
            target: queue_client::Target::single(url.to_string()),
            limits: HttpLimits::default(),
            upstream: None,
            upstream_timeout: secs(60),
            rules: Rules::new(QueueSettings { idle: secs(300), max_session: None, straight_through: true }),
            bypass_secret: None,
            queue_api: None,
            waiting_room: "/gate/room/".into(),
            keys: Arc::new(Keys::ephemeral()),
            token_ttl: secs(600),
            tick: secs(1),
            cookie_name: "queue_admission".into(),
            cookie_domain: None,
            fail_open: None,
            client_addrs: service_kit::ClientAddrs::default(),
            auth_convention: AuthConvention::Auto,
            renew_redirect: false,
            fast_path: true,
            durability: queue_client::Durability::OFF,
            straight_per_address: 6,
            public_url: None,
        }
    }
}

/// A base URL for proxying: http, a host, no query.
pub fn parse_base_url(what: &str, s: &str) -> Result<hyper::Uri, String> {
    let uri: hyper::Uri = s.parse().map_err(|e| format!("{what} {s:?}: {e}"))?;
    if uri.scheme_str() != Some("http") || uri.host().is_none() {
        return Err(format!(
            "{what} {s:?}: expected http://host[:port][/path] (put TLS in front of the gate, not behind it)"
        ));
    }
    if uri.query().is_some() {
        return Err(format!("{what} {s:?}: no query allowed"));
    }
    Ok(uri)
}

impl service_kit::Flags for Flags {
    type Config = Config;

    fn common(&self) -> &Common {
        &self.common
    }

    fn into_config(self) -> Result<Config, String> {
        if let Some(path) = &self.write_key {
            let pem = crate::token::der_to_pem(&crate::token::generate_ed25519_pkcs8());
            write_private(path, &pem).map_err(|e| format!("--write-key {}: {e}", path.display()))?;
            println!("wrote a new Ed25519 key to {}", path.display());
            std::process::exit(0);
        }
        let defaults = QueueSettings {
            idle: self.idle,
            max_session: (!self.max_session.is_zero()).then_some(self.max_session),
            straight_through: self.straight_through,
        };
        let mut rules = Rules::new(defaults);
        rules.unmatched = rules::parse_unmatched(&self.unmatched)?;
        for r in &self.routes {
            rules.add_route(rules::parse_route(r)?);
        }
        for p in &self.bypass_paths {
            let p = p.trim();
            if !p.starts_with('/') {
                return Err(format!("--bypass-path {p:?}: must start with /"));
            }
            rules
                .bypass_paths
                .push(rules::normalize_path(p).ok_or_else(|| format!("--bypass-path {p:?}: not a path"))?);
        }
        for n in &self.bypass_networks {
            rules.bypass_networks.push(rules::parse_network(n)?);
        }
        rules.static_extensions = self
            .static_extensions
            .iter()
            .map(|e| e.trim().trim_start_matches('.').to_ascii_lowercase())
            .filter(|e| !e.is_empty())
            .collect();
        if let Some(path) = &self.rules {
            rules.load_file(path)?;
        }
        if rules.routes().is_empty() && rules.unmatched == rules::Unmatched::Pass {
            tracing::warn!("no --route, --rules or --unmatched queue:NAME: every request passes without a queue");
        }
        let keys = if self.keys.is_empty() {
            tracing::warn!("no --key: signing with a key made at start (tokens die with this process; give every instance the same --key)");
            Keys::ephemeral()
        } else {
            Keys::from_files(&self.keys)?
        };
        if self.bypass_secret.as_deref().is_some_and(|s| s.len() < 16) {
            return Err("--bypass-secret: use at least 16 characters".into());
        }
        let cookie_ok = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b));
        if !cookie_ok(&self.cookie_name) {
            return Err(format!("--cookie-name {:?}: letters, digits, _ - . only", self.cookie_name));
        }
        if let Some(d) = &self.cookie_domain {
            if !cookie_ok(d) {
                return Err(format!("--cookie-domain {d:?}: a domain name"));
            }
        }
        let waiting_room = self.waiting_room.clone();
        if !(waiting_room.starts_with('/')
            || waiting_room.starts_with("https://")
            || waiting_room.starts_with("http://"))
        {
            return Err(format!("--waiting-room {waiting_room:?}: a path (/gate/room/) or an http(s) URL"));
        }
        let upstream = self.upstream.as_deref().map(|u| parse_base_url("--upstream", u)).transpose()?;
        let client_addrs = client_addrs(self.proxy, |name| std::env::var(name).ok())?;
        let public_url = self.public_url.as_deref().map(parse_public_url).transpose()?;
        Ok(Config {
            target: self.common.target(),
            limits: self.http,
            upstream,
            upstream_timeout: self.upstream_timeout,
            rules,
            bypass_secret: self.bypass_secret,
            queue_api: self.queue_api.as_deref().map(|u| parse_base_url("--queue-api", u)).transpose()?,
            waiting_room,
            keys: Arc::new(keys),
            token_ttl: self.token_ttl,
            tick: self.tick,
            cookie_name: self.cookie_name,
            cookie_domain: self.cookie_domain,
            fail_open: (!self.fail_open.is_zero()).then_some(self.fail_open),
            client_addrs,
            auth_convention: self.auth_convention,
            renew_redirect: self.renew_redirect,
            fast_path: self.fast_path,
            durability: self.durable.durability(),
            straight_per_address: self.straight_through_per_address,
            public_url,
        })
    }
}

/// `--public-url`: an http(s) origin (a host, maybe a port; no path, query or user),
/// returned without a trailing slash.
pub fn parse_public_url(s: &str) -> Result<String, String> {
    let bad = |why: &str| format!("--public-url {s:?}: {why} (expected https://host[:port])");
    let uri: hyper::Uri = s.trim().parse().map_err(|e| bad(&format!("{e}")))?;
    if !matches!(uri.scheme_str(), Some("http" | "https")) {
        return Err(bad("http or https only"));
    }
    let Some(authority) = uri.authority() else { return Err(bad("no host")) };
    if authority.host().is_empty() || authority.as_str().contains('@') {
        return Err(bad("a host name without a user"));
    }
    if uri.query().is_some() || !matches!(uri.path(), "" | "/") {
        return Err(bad("an origin, without a path or query"));
    }
    Ok(format!("{}://{}", uri.scheme_str().unwrap_or("https"), authority.as_str().to_ascii_lowercase()))
}

/// Who the client is: `proxy`'s flags, with the gate's old variables
/// `GATE_TRUST_PROXY` and `GATE_CLIENT_IP_HEADER` still taken when the shared ones
/// (`TRUST_PROXY`, `CLIENT_IP_HEADER`) are not given.
fn client_addrs(
    mut proxy: service_kit::ProxyFlags,
    env: impl Fn(&str) -> Option<String>,
) -> Result<service_kit::ClientAddrs, String> {
    if !proxy.trust_proxy {
        proxy.trust_proxy = env("GATE_TRUST_PROXY").is_some_and(|v| matches!(v.trim(), "1" | "true" | "yes" | "on"));
    }
    if proxy.client_ip_header.is_none() {
        if let Some(h) = env("GATE_CLIENT_IP_HEADER").filter(|h| !h.trim().is_empty()) {
            let name = hyper::header::HeaderName::from_bytes(h.trim().as_bytes())
                .map_err(|_| format!("GATE_CLIENT_IP_HEADER {h:?}: a header name such as X-Real-IP"))?;
            proxy.client_ip_header = Some(name);
        }
    }
    Ok(service_kit::ClientAddrs::new(&proxy))
}

fn write_private(path: &std::path::Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path)?;
    f.write_all(text.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use service_kit::Flags as _;

    fn parse(args: &[&str]) -> Result<Config, String> {
        service_kit::flags::try_parse_args::<Flags>(args).map_err(|e| e.to_string())?.into_config()
    }

    #[test]
    fn flags_make_the_config() {
        let c = parse(&["--route", "/checkout=drop-42", "--route", "a.test/tickets/=concert", "--max-session", "30m"])
            .unwrap();
        assert_eq!(c.rules.queue_for("a.test", "/tickets/1"), Some("concert"));
        assert_eq!(c.rules.settings("x").max_session, Some(secs(1800)));
        assert_eq!(c.token_ttl, secs(600));
        assert!(c.upstream.is_none() && c.fail_open.is_none());
        assert!(parse(&["--upstream", "https://x"]).is_err());
        assert!(parse(&["--upstream", "http://127.0.0.1:3000"]).is_ok());
        assert!(parse(&["--bypass-secret", "short"]).is_err());
        assert!(parse(&["--unmatched", "queue:bad name"]).is_err());
        assert!(parse(&["--key", "/nonexistent/key.pem"]).unwrap_err().contains("key file"));
        assert!(parse(&["--waiting-room", "javascript:alert(1)"]).is_err());
        assert_eq!(parse(&[]).unwrap().auth_convention, AuthConvention::Auto);
        assert_eq!(parse(&["--auth-convention", "forwarded"]).unwrap().auth_convention, AuthConvention::Forwarded);
        assert!(parse(&["--auth-convention", "x-original-uri"]).is_err());
        assert!(parse(&["--client-ip-header", "X-Real-IP"]).is_ok());
        assert!(parse(&["--client-ip-header", "bad header"]).is_err());
        assert!(parse(&["--trusted-proxies", "10.0.0.0/8,nginx"]).is_err());
        assert!(parse(&[]).unwrap().fast_path);
        assert!(!parse(&["--fast-path", "off"]).unwrap().fast_path);
        assert!(parse(&["--fast-path", "on"]).unwrap().fast_path);
        assert!(parse(&["--fast-path", "sometimes"]).is_err());
        let c = parse(&[]).unwrap();
        assert!(c.rules.defaults.straight_through && c.straight_per_address == 6 && c.public_url.is_none());
        assert!(!parse(&["--straight-through", "false"]).unwrap().rules.defaults.straight_through);
        assert!(parse(&["--straight-through", "perhaps"]).is_err());
        assert_eq!(parse(&["--straight-through-per-address", "0"]).unwrap().straight_per_address, 0);
        assert!(parse(&["--straight-through-per-address", "-1"]).is_err());
        assert!(parse(&["--straight-through-per-address", "10001"]).is_err());
        let public = |u: &str| parse(&["--public-url", u]).map(|c| c.public_url.unwrap());
        assert_eq!(public("https://Shop.Example.com/").unwrap(), "https://shop.example.com");
        assert_eq!(public("http://10.0.0.1:8080").unwrap(), "http://10.0.0.1:8080");
        for bad in
            ["shop.example.com", "ftp://x", "https://x/path", "https://x/?q=1", "https://u@x", "javascript:alert(1)"]
        {
            assert!(public(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn who_the_client_is_with_the_old_variables() {
        let flags = |args: &[&str]| service_kit::flags::try_parse_args::<Flags>(args).unwrap().proxy;
        let peer: std::net::IpAddr = "192.0.2.1".parse().unwrap();
        let mut h = hyper::HeaderMap::new();
        h.insert("x-forwarded-for", "6.6.6.6, 198.51.100.4".parse().unwrap());
        h.insert("x-real-ip", "203.0.113.5".parse().unwrap());
        let none = |_: &str| None;
        // Proxy mode trusts nobody unless told.
        let proxy_mode = client_addrs(flags(&["--upstream", "http://a"]), none).unwrap();
        assert_eq!(proxy_mode.client(&h, peer), Some(peer));
        let named = client_addrs(flags(&["--trusted-proxies", "192.0.2.0/24"]), none).unwrap();
        assert_eq!(named.client(&h, peer), Some("198.51.100.4".parse().unwrap()));
        // The old variables still count.
        let old = |name: &str| match name {
            "GATE_TRUST_PROXY" => Some("true".to_string()),
            "GATE_CLIENT_IP_HEADER" => Some("X-Real-IP".to_string()),
            _ => None,
        };
        let old_spelling = client_addrs(flags(&["--upstream", "http://a"]), old).unwrap();
        assert_eq!(old_spelling.client(&h, peer), Some("203.0.113.5".parse().unwrap()));
        let bad = |name: &str| (name == "GATE_CLIENT_IP_HEADER").then(|| "bad header".to_string());
        assert!(client_addrs(flags(&[]), bad).is_err());
    }
}
