//! Which requests are gated, by which queue: routes (host and path prefix to queue),
//! bypass rules, what an unmatched request gets, and per-queue session settings;
//! from flags and from a TOML rules file.
//!
//! Matching is done on the normalized path ([`normalize_path`]): percent escapes
//! decoded and repeated slashes collapsed, so that `/%63heckout` and `//checkout` are
//! both `/checkout`. A path whose decoding would change its segments (an encoded `/`
//! or `\`, a `.` or `..` segment, literal or encoded, `..;`) is not a path the gate
//! reads: the app might resolve it differently, so it is refused (400).
//!
//! A prefix matches case-insensitively (gating too much is the safe side) and up to a
//! segment end: `/checkout` matches `/checkout`, `/checkout/pay`, `/checkout;jsessionid=1`
//! and `/checkout.json`, but not `/checkouts`; a prefix ending in `/` matches what is
//! below it. Static assets by extension pass without a queue only outside gated routes,
//! unless a route opts in (`static_assets = true` in the rules file).

use ipnet::IpNet;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::Path;
use std::time::Duration;

/// File extensions served without a queue by default (static assets).
pub const STATIC_EXTENSIONS: &[&str] = &[
    "css", "js", "mjs", "map", "png", "jpg", "jpeg", "gif", "svg", "ico", "webp", "avif", "woff", "woff2", "ttf", "otf",
];

/// Paths that bypass the queue by default.
pub const DEFAULT_BYPASS_PATHS: &[&str] = &["/healthz", "/favicon.ico", "/robots.txt"];

/// One route: requests for `host` (any host when None) under `prefix` go through `queue`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    pub host: Option<String>,
    pub prefix: String,
    pub queue: String,
    /// Whether static assets by extension under this prefix pass without a queue.
    pub static_assets: bool,
}

/// What a request no route matches gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unmatched {
    /// Passes without a queue (the default).
    Pass,
    /// Goes through this queue.
    Queue(String),
}

/// Session settings of one queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueSettings {
    /// Someone not seen for this long is no longer renewed.
    pub idle: Duration,
    /// The longest session (None: no limit); past it the person queues again.
    pub max_session: Option<Duration>,
    /// Whether a visitor without a token goes straight in while nobody waits and a
    /// slot is free (`--straight-through`, `straight_through` per queue).
    pub straight_through: bool,
}

/// All the rules.
#[derive(Debug, Clone)]
pub struct Rules {
    /// Longest prefix first; for one prefix, host-specific routes first.
    routes: Vec<Route>,
    pub unmatched: Unmatched,
    pub bypass_paths: Vec<String>,
    pub bypass_networks: Vec<IpNet>,
    pub static_extensions: Vec<String>,
    pub defaults: QueueSettings,
    pub queues: BTreeMap<String, QueueSettings>,
}

/// Why a request is let through without an admission.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bypass {
    Path,
    StaticAsset,
    Network,
}

impl Rules {
    pub fn new(defaults: QueueSettings) -> Rules {
        Rules {
            routes: Vec::new(),
            unmatched: Unmatched::Pass,
            bypass_paths: DEFAULT_BYPASS_PATHS.iter().map(|s| s.to_string()).collect(),
            bypass_networks: Vec::new(),
            static_extensions: STATIC_EXTENSIONS.iter().map(|s| s.to_string()).collect(),
            defaults,
            queues: BTreeMap::new(),
        }
    }

    pub fn add_route(&mut self, route: Route) {
        self.routes.push(route);
        self.routes.sort_by(|a, b| b.prefix.len().cmp(&a.prefix.len()).then(b.host.is_some().cmp(&a.host.is_some())));
    }

    pub fn routes(&self) -> &[Route] {
        &self.routes
    }

    /// The route a request to `host` (port ignored, any case) and `path` (normalized)
    /// goes through, if any.
    pub fn route_for(&self, host: &str, path: &str) -> Option<&Route> {
        let host = strip_port(host);
        self.routes
            .iter()
            .find(|r| r.host.as_deref().is_none_or(|h| host_matches(h, host)) && prefix_matches(&r.prefix, path))
    }

    /// The queue for a request to `host` and `path` (normalized), or None when it
    /// passes unmatched.
    pub fn queue_for(&self, host: &str, path: &str) -> Option<&str> {
        match (self.route_for(host, path), &self.unmatched) {
            (Some(r), _) => Some(&r.queue),
            (None, Unmatched::Pass) => None,
            (None, Unmatched::Queue(q)) => Some(q),
        }
    }

    /// Whether the request passes without an admission whatever its route:
    /// `assets` says whether static assets by extension may (outside gated routes,
    /// or in a route that opted in).
    pub fn bypass(&self, path: &str, client: Option<IpAddr>, assets: bool) -> Option<Bypass> {
        if self.bypass_paths.iter().any(|p| bypass_prefix_matches(p, path)) {
            return Some(Bypass::Path);
        }
        if assets && is_static_asset(path, &self.static_extensions) {
            return Some(Bypass::StaticAsset);
        }
        if let Some(ip) = client {
            let ip = canonical_ip(ip);
            if self.bypass_networks.iter().any(|n| n.contains(&ip)) {
                return Some(Bypass::Network);
            }
        }
        None
    }

    /// The session settings of `queue`.
    pub fn settings(&self, queue: &str) -> QueueSettings {
        self.queues.get(queue).copied().unwrap_or(self.defaults)
    }

    /// Reads a TOML rules file on top of these rules (see docs/gate.md for its shape).
    pub fn load_file(&mut self, path: &Path) -> Result<(), String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("rules file {}: {e}", path.display()))?;
        self.load_toml(&text).map_err(|e| format!("rules file {}: {e}", path.display()))
    }

    /// [`Rules::load_file`] from the file's text.
    pub fn load_toml(&mut self, text: &str) -> Result<(), String> {
        let file: RulesFile = toml::from_str(text).map_err(|e| e.to_string())?;
        if let Some(u) = file.unmatched {
            self.unmatched = parse_unmatched(&u)?;
        }
        if let Some(paths) = file.bypass_paths {
            for p in paths {
                self.bypass_paths.push(check_prefix(&p)?);
            }
        }
        if let Some(nets) = file.bypass_networks {
            for n in nets {
                self.bypass_networks.push(parse_network(&n)?);
            }
        }
        if let Some(exts) = file.static_extensions {
            self.static_extensions = exts.into_iter().map(|e| e.trim_start_matches('.').to_ascii_lowercase()).collect();
        }
        for r in file.route {
            check_queue(&r.queue)?;
            let host = r.host.filter(|h| !h.is_empty()).map(|h| h.to_ascii_lowercase());
            let static_assets = r.static_assets.unwrap_or(false);
            self.add_route(Route { host, prefix: check_prefix(&r.prefix)?, queue: r.queue, static_assets });
        }
        for (name, q) in file.queue {
            check_queue(&name)?;
            let parse = |what: &str, v: &Option<String>| -> Result<Option<Duration>, String> {
                v.as_deref().map(|s| parse_duration(s).map_err(|e| format!("queue {name}: {what}: {e}"))).transpose()
            };
            let idle = parse("idle", &q.idle)?.unwrap_or(self.defaults.idle);
            let max_session = match parse("max_session", &q.max_session)? {
                Some(d) if d.is_zero() => None,
                Some(d) => Some(d),
                None => self.defaults.max_session,
            };
            if idle.is_zero() {
                return Err(format!("queue {name}: idle must be more than 0"));
            }
            let straight_through = q.straight_through.unwrap_or(self.defaults.straight_through);
            self.queues.insert(name, QueueSettings { idle, max_session, straight_through });
        }
        Ok(())
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RulesFile {
    unmatched: Option<String>,
    bypass_paths: Option<Vec<String>>,
    bypass_networks: Option<Vec<String>>,
    static_extensions: Option<Vec<String>>,
    #[serde(default)]
    route: Vec<RouteEntry>,
    #[serde(default)]
    queue: BTreeMap<String, QueueEntry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RouteEntry {
    host: Option<String>,
    prefix: String,
    queue: String,
    static_assets: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct QueueEntry {
    idle: Option<String>,
    max_session: Option<String>,
    straight_through: Option<bool>,
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    service_kit::duration(Duration::ZERO..=Duration::from_secs(366 * 86_400)).parse(s)
}

/// `--route [HOST]/PREFIX=QUEUE`.
pub fn parse_route(s: &str) -> Result<Route, String> {
    let (target, queue) = s.rsplit_once('=').ok_or_else(|| format!("route {s:?}: expected [HOST]/PREFIX=QUEUE"))?;
    check_queue(queue).map_err(|e| format!("route {s:?}: {e}"))?;
    let slash = target.find('/').ok_or_else(|| format!("route {s:?}: the prefix must start with /"))?;
    let (host, prefix) = target.split_at(slash);
    let host = (!host.is_empty()).then(|| host.to_ascii_lowercase());
    let prefix = check_prefix(prefix).map_err(|e| format!("route {s:?}: {e}"))?;
    Ok(Route { host, prefix, queue: queue.to_string(), static_assets: false })
}

/// `--unmatched pass|queue:NAME`.
pub fn parse_unmatched(s: &str) -> Result<Unmatched, String> {
    match s {
        "pass" => Ok(Unmatched::Pass),
        _ => match s.strip_prefix("queue:") {
            Some(q) => check_queue(q).map(|_| Unmatched::Queue(q.to_string())),
            None => Err(format!("unmatched {s:?}: expected pass or queue:NAME")),
        },
    }
}

/// `--bypass-network CIDR` (a bare address is one host).
pub fn parse_network(s: &str) -> Result<IpNet, String> {
    let s = s.trim();
    s.parse::<IpNet>()
        .or_else(|_| s.parse::<IpAddr>().map(IpNet::from))
        .map_err(|_| format!("network {s:?}: expected an address or CIDR such as 10.0.0.0/8"))
}

fn check_queue(q: &str) -> Result<(), String> {
    queue_core::keys::check_queue(q.as_bytes())
        .map(|_| ())
        .map_err(|_| format!("queue {q:?}: names are 1 to 64 letters, digits or . _ : -"))
}

fn check_prefix(p: &str) -> Result<String, String> {
    if !p.starts_with('/') {
        return Err(format!("prefix {p:?} must start with /"));
    }
    let normalized = normalize_path(p).ok_or_else(|| format!("prefix {p:?} is not a usable path"))?;
    // Keep a trailing slash: it says "what is below", which normalization keeps too.
    Ok(normalized)
}

/// Whether `prefix` covers `path`: any case, up to a segment end (`/`, `;` path
/// parameters, `.` an extension, or the end).
pub fn prefix_matches(prefix: &str, path: &str) -> bool {
    if prefix == "/" {
        return true;
    }
    let head = prefix.trim_end_matches('/');
    let Some(start) = path.get(..head.len()) else { return false };
    if !start.eq_ignore_ascii_case(head) {
        return false;
    }
    match path.as_bytes().get(head.len()) {
        None => true,
        Some(b'/' | b';' | b'.') => true,
        Some(_) => false,
    }
}

/// A bypass prefix covers less than a route's: same case, whole segments only
/// (`/healthz` covers `/healthz` and `/healthz/x`, not `/HEALTHZ`, `/healthz.php` or
/// `/healthz;x`), the narrow reading being the safe side for letting through.
fn bypass_prefix_matches(prefix: &str, path: &str) -> bool {
    match path.strip_prefix(prefix) {
        Some(rest) => prefix.ends_with('/') || rest.is_empty() || rest.starts_with('/'),
        None => prefix.ends_with('/') && path.len() + 1 == prefix.len() && prefix.starts_with(path),
    }
}

fn is_static_asset(path: &str, extensions: &[String]) -> bool {
    // A `;` could hide a gated path from us while the app ignores what follows it
    // (`/checkout;x.css` is /checkout to a servlet container).
    if path.contains(';') {
        return false;
    }
    let last = path.rsplit('/').next().unwrap_or("");
    match last.rsplit_once('.') {
        Some((stem, ext)) if !stem.is_empty() => extensions.iter().any(|e| e.eq_ignore_ascii_case(ext)),
        _ => false,
    }
}

fn strip_port(host: &str) -> &str {
    if host.starts_with('[') {
        return host.split_once(']').map_or(host, |(h, _)| &h[1..]);
    }
    match host.rsplit_once(':') {
        Some((h, port)) if port.bytes().all(|b| b.is_ascii_digit()) => h,
        _ => host,
    }
}

/// `*.example.com` matches any subdomain of example.com (not example.com itself).
fn host_matches(pattern: &str, host: &str) -> bool {
    let host = host.trim_end_matches('.');
    match pattern.strip_prefix("*.") {
        Some(domain) => {
            host.len() > domain.len() + 1
                && host[host.len() - domain.len()..].eq_ignore_ascii_case(domain)
                && host.as_bytes()[host.len() - domain.len() - 1] == b'.'
        }
        None => pattern.eq_ignore_ascii_case(host),
    }
}

/// An IPv4-mapped IPv6 address as the IPv4 address it is.
pub fn canonical_ip(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// How many times a path is percent-decoded; one still changing after that is refused.
const DECODE_ROUNDS: usize = 3;

/// The path as the rules see it: percent escapes decoded (repeatedly, so double
/// encoding does not hide a prefix), backslashes read as slashes, repeated slashes
/// collapsed. None for a path that is not one, or that the app could read as other
/// segments than the gate: not starting with `/`, control characters or invalid
/// UTF-8 once decoded, an encoded `/` or `\` (%2F, %5C, at any depth), a `.` or `..`
/// segment (literal or encoded, also `..;x`), or still changing after the last round.
pub fn normalize_path(raw: &str) -> Option<String> {
    if !raw.starts_with('/') {
        return None;
    }
    let separators = |s: &str| s.bytes().filter(|b| matches!(b, b'/' | b'\\')).count();
    let mut decoded = raw.to_string();
    let mut rounds = 0;
    while decoded.contains('%') {
        let next = percent_encoding::percent_decode_str(&decoded).decode_utf8().ok()?.into_owned();
        if next == decoded {
            break;
        }
        if rounds == DECODE_ROUNDS || separators(&next) != separators(&decoded) {
            return None;
        }
        decoded = next;
        rounds += 1;
    }
    if decoded.chars().any(|c| c.is_control()) {
        return None;
    }
    let decoded = decoded.replace('\\', "/");
    let mut out = String::with_capacity(decoded.len());
    for seg in decoded.split('/').filter(|s| !s.is_empty()) {
        // `..;x` is `..` to servlet containers.
        if matches!(seg.split(';').next(), Some("." | "..")) {
            return None;
        }
        out.push('/');
        out.push_str(seg);
    }
    if out.is_empty() || decoded.ends_with('/') {
        out.push('/');
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> QueueSettings {
        QueueSettings { idle: Duration::from_secs(300), max_session: None, straight_through: true }
    }

    #[test]
    fn normalization_table() {
        for (raw, want) in [
            ("/", Some("/")),
            ("/checkout", Some("/checkout")),
            ("/checkout/", Some("/checkout/")),
            ("//checkout", Some("/checkout")),
            ("/%63heckout", Some("/checkout")),
            ("/%2563heckout", Some("/checkout")),
            ("/a\\checkout", Some("/a/checkout")),
            ("/checkout;jsessionid=1", Some("/checkout;jsessionid=1")),
            // Decoding would change the segments: refused.
            ("/static/../checkout", None),
            ("/checkout/..", None),
            ("/checkout/.", None),
            ("/./checkout", None),
            ("/checkout/..%2Fabout", None),
            ("/checkout%2fpay", None),
            ("/checkout%5Cpay", None),
            ("/checkout/%252Fabout", None),
            ("/checkout/%2e%2e/healthz", None),
            ("/checkout/%252e%252e/healthz", None),
            ("/checkout/..;/about", None),
            ("/a\\..\\checkout", None),
            ("/%25252563heckout", None),
            ("/%00", None),
            ("/%ff", None),
            ("checkout", None),
        ] {
            assert_eq!(normalize_path(raw).as_deref(), want, "{raw}");
        }
    }

    #[test]
    fn prefixes_match_whole_segments() {
        for (prefix, path, want) in [
            ("/checkout", "/checkout", true),
            ("/checkout", "/checkout/pay", true),
            ("/checkout", "/checkouts", false),
            ("/checkout", "/CHECKOUT", true),
            ("/checkout", "/Checkout/pay", true),
            ("/checkout", "/checkout;jsessionid=1", true),
            ("/checkout", "/checkout.json", true),
            ("/checkout", "/check", false),
            ("/tickets/", "/tickets/1", true),
            ("/tickets/", "/tickets", true),
            ("/tickets/", "/TICKETS.json", true),
            ("/tickets/", "/ticketsx", false),
            ("/", "/anything", true),
        ] {
            assert_eq!(prefix_matches(prefix, path), want, "{prefix} {path}");
        }
    }

    /// The attack paths of the review, through the whole reading: each must be
    /// refused (None) or gated by the /checkout route, never pass.
    #[test]
    fn attack_paths_are_gated_or_refused() {
        let mut rules = Rules::new(settings());
        rules.add_route(parse_route("/checkout=drop").unwrap());
        for raw in [
            "/checkout;jsessionid=1",
            "/checkout/..",
            "/checkout/..%2Fabout",
            "/checkout/%2e%2e/healthz",
            "/CHECKOUT",
            "/checkout.json",
            "/checkout.js",
            "/checkout/x.png",
            "/checkout;x.css",
            "/Checkout/app.JS",
            "//checkout",
            "/%63heckout",
            "/%2563heckout",
            "/static/../checkout",
            "/static/%2e%2e/checkout",
        ] {
            let Some(path) = normalize_path(raw) else { continue };
            let queue = rules.queue_for("shop.test", &path);
            assert_eq!(queue, Some("drop"), "{raw} read as {path} is not gated");
            let assets = rules.route_for("shop.test", &path).is_none_or(|r| r.static_assets);
            assert_eq!(rules.bypass(&path, None, assets), None, "{raw} bypasses");
        }
    }

    #[test]
    fn routes_longest_prefix_then_host() {
        let mut rules = Rules::new(settings());
        rules.add_route(parse_route("/checkout=drop-42").unwrap());
        rules.add_route(parse_route("/tickets/=concert").unwrap());
        rules.add_route(parse_route("shop.example.com/checkout=shop-drop").unwrap());
        rules.add_route(parse_route("/checkout/vip=vip").unwrap());
        assert_eq!(rules.queue_for("x.test", "/checkout"), Some("drop-42"));
        assert_eq!(rules.queue_for("SHOP.example.com:8443", "/checkout/a"), Some("shop-drop"));
        assert_eq!(rules.queue_for("shop.example.com", "/checkout/vip/1"), Some("vip"));
        assert_eq!(rules.queue_for("x.test", "/tickets/9"), Some("concert"));
        assert_eq!(rules.queue_for("x.test", "/about"), None);
        rules.unmatched = parse_unmatched("queue:site").unwrap();
        assert_eq!(rules.queue_for("x.test", "/about"), Some("site"));
        assert!(parse_route("checkout=q").is_err());
        assert!(parse_route("/checkout=bad queue").is_err());
        assert!(parse_unmatched("maybe").is_err());
    }

    #[test]
    fn bypasses() {
        let mut rules = Rules::new(settings());
        rules.bypass_networks.push(parse_network("10.0.0.0/8").unwrap());
        rules.bypass_networks.push(parse_network("::1").unwrap());
        assert_eq!(rules.bypass("/healthz", None, true), Some(Bypass::Path));
        for not_healthz in ["/HEALTHZ", "/healthz.php", "/healthz;x", "/healthzz"] {
            assert_eq!(rules.bypass(not_healthz, None, false), None, "{not_healthz}");
        }
        assert_eq!(rules.bypass("/site/app.JS", None, true), Some(Bypass::StaticAsset));
        assert_eq!(rules.bypass("/checkout/app.js", None, false), None, "not in a gated route");
        assert_eq!(rules.bypass("/checkout;x.css", None, true), None);
        assert_eq!(rules.bypass("/.css", None, true), None);
        let net = |ip: &str| rules.bypass("/checkout", Some(ip.parse().unwrap()), false);
        assert_eq!(net("10.1.2.3"), Some(Bypass::Network));
        assert_eq!(net("::ffff:10.1.2.3"), Some(Bypass::Network));
        assert_eq!(net("11.1.2.3"), None);
        assert!(host_matches("*.example.com", "a.example.com"));
        assert!(!host_matches("*.example.com", "example.com"));
        assert!(!host_matches("*.example.com", "aexample.com"));
    }

    #[test]
    fn rules_file() {
        let mut rules = Rules::new(settings());
        rules
            .load_toml(
                r#"
                unmatched = "pass"
                bypass_paths = ["/api/public/"]
                bypass_networks = ["192.168.0.0/16"]
                [[route]]
                prefix = "/checkout"
                queue = "drop-42"
                [[route]]
                host = "tickets.example.com"
                prefix = "/"
                queue = "concert"
                [queue.drop-42]
                idle = "2m"
                max_session = "30m"
                [queue.concert]
                straight_through = false
                "#,
            )
            .unwrap();
        assert_eq!(rules.queue_for("a", "/checkout/x"), Some("drop-42"));
        assert_eq!(rules.queue_for("tickets.example.com", "/x"), Some("concert"));
        assert_eq!(rules.bypass("/api/public/x", None, true), Some(Bypass::Path));
        assert!(!rules.route_for("a", "/checkout/x").unwrap().static_assets);
        rules.load_toml("[[route]]\nprefix = \"/shop\"\nqueue = \"q\"\nstatic_assets = true").unwrap();
        assert!(rules.route_for("a", "/shop/a.css").unwrap().static_assets);
        assert_eq!(
            rules.settings("drop-42"),
            QueueSettings {
                idle: Duration::from_secs(120),
                max_session: Some(Duration::from_secs(1800)),
                straight_through: true
            }
        );
        assert_eq!(rules.settings("concert"), QueueSettings { straight_through: false, ..settings() });
        assert_eq!(rules.settings("other"), settings());
        let mut bad = Rules::new(settings());
        assert!(bad.load_toml("[[route]]\nprefix = \"x\"\nqueue = \"q\"").is_err());
        assert!(bad.load_toml("typo = 1").is_err());
        assert!(bad.load_toml("[queue.q]\nidle = \"soon\"").is_err());
        assert!(bad.load_toml("[queue.q]\nstraight_through = \"maybe\"").is_err());
    }
}
