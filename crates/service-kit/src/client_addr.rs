//! The client's address, read one way by every service: the connection's peer, or,
//! when the peer is a proxy the operator named, the address that proxy (and any
//! further named proxies before it) put in `X-Forwarded-For`.
//!
//! A proxy such as nginx with `$proxy_add_x_forwarded_for` *appends* the address it
//! saw to whatever `X-Forwarded-For` the client sent. So only the entries appended
//! by proxies of ours can be believed, and those are at the right-hand end: the
//! client's address is the rightmost entry that is not itself one of our proxies.
//! The first entry is whatever the client wrote (until 2026-11 queue-api took it,
//! and a client picked its own rate-limit bucket: docs/security.md).
//!
//! - `--trusted-proxies CIDR,...` (`TRUSTED_PROXIES`): the proxies in front. A peer
//!   outside these is the client, whatever headers it sends.
//! - `--trust-proxy` (`TRUST_PROXY`): shorthand for "the peer is a trusted proxy,
//!   whoever it is" (the service cannot be reached except through one proxy). With it
//!   alone, the client is the last `X-Forwarded-For` entry.
//! - `--client-ip-header NAME` (`CLIENT_IP_HEADER`): behind a trusted proxy, read the
//!   client's address from this header, which the proxy sets itself (`X-Real-IP`,
//!   `CF-Connecting-IP`), instead of `X-Forwarded-For`. One value only.

use axum::extract::{ConnectInfo, FromRequestParts};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderName};
use ipnet::IpNet;
use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

/// The flags every service that serves clients takes (flattened into its config).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ProxyFlags {
    /// Proxies in front of this service, as addresses or CIDR ranges, comma-separated
    /// (`10.0.0.0/8,192.0.2.7`). From a connection of one of them, the client's
    /// address is the rightmost X-Forwarded-For entry that is not one of them; a
    /// connection from anywhere else is the client itself, whatever it sends.
    #[arg(long, env = "TRUSTED_PROXIES", value_delimiter = ',', value_parser = parse_net)]
    pub trusted_proxies: Vec<IpNet>,
    /// Shorthand: the peer is a trusted proxy, whoever it is (only when nothing can
    /// reach this service except through your proxy). With it alone, the client is the
    /// last X-Forwarded-For entry, the one that proxy appended.
    #[arg(long, env = "TRUST_PROXY")]
    pub trust_proxy: bool,
    /// Behind a trusted proxy: the client's address is this header's one value
    /// (e.g. X-Real-IP or CF-Connecting-IP, which the proxy must set itself), not
    /// X-Forwarded-For's.
    #[arg(long, env = "CLIENT_IP_HEADER", value_parser = parse_header)]
    pub client_ip_header: Option<HeaderName>,
}

/// `10.0.0.0/8`, `::1/128`, or a bare address (`192.0.2.7`, one host).
pub fn parse_net(text: &str) -> Result<IpNet, String> {
    let text = text.trim();
    if let Ok(net) = text.parse::<IpNet>() {
        // Addresses are compared as IPv4 once mapped ones are unwrapped, so a range
        // written in the mapped form (::ffff:10.0.0.0/104) is taken as the IPv4 range.
        if let IpNet::V6(v6) = net {
            if let (Some(v4), true) = (v6.addr().to_ipv4_mapped(), v6.prefix_len() >= 96) {
                let v4 = ipnet::Ipv4Net::new(v4, v6.prefix_len() - 96).expect("a prefix of at most 32");
                return Ok(IpNet::V4(v4.trunc()));
            }
        }
        return Ok(net.trunc());
    }
    text.parse::<IpAddr>()
        .map(|ip| IpNet::from(canonical_ip(ip)))
        .map_err(|_| format!("'{text}' is neither an address nor a CIDR range (10.0.0.0/8)"))
}

fn parse_header(text: &str) -> Result<HeaderName, String> {
    HeaderName::from_bytes(text.trim().as_bytes()).map_err(|_| format!("'{text}' is not a header name"))
}

/// An IPv4 address written as IPv6 (`::ffff:1.2.3.4`, what a dual-stack socket
/// reports) as the IPv4 address it is, so that ranges and buckets see one address.
pub fn canonical_ip(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// Who the client is behind the proxies in front (see the module's doc).
#[derive(Debug, Clone, Default)]
pub struct ClientAddrs {
    trusted: Vec<IpNet>,
    trust_peer: bool,
    header: Option<HeaderName>,
}

impl ClientAddrs {
    pub fn new(flags: &ProxyFlags) -> ClientAddrs {
        ClientAddrs {
            trusted: flags.trusted_proxies.clone(),
            trust_peer: flags.trust_proxy,
            header: flags.client_ip_header.clone(),
        }
    }

    /// The same, with the peer always a trusted proxy (the gate's forward-auth mode,
    /// whose every caller is the proxy asking about a request).
    pub fn trusting_peer(mut self) -> ClientAddrs {
        self.trust_peer = true;
        self
    }

    /// Whether any proxy is trusted at all (headers are ever read).
    pub fn any_trusted(&self) -> bool {
        self.trust_peer || !self.trusted.is_empty()
    }

    fn is_proxy(&self, ip: IpAddr) -> bool {
        let ip = canonical_ip(ip);
        self.trusted.iter().any(|n| n.contains(&ip))
    }

    /// Whether the connection's other end is a proxy of ours, whose forwarding
    /// headers (`X-Forwarded-For/-Proto/-Host`) are believed.
    pub fn peer_trusted(&self, peer: IpAddr) -> bool {
        self.trust_peer || self.is_proxy(peer)
    }

    /// The client's address: the peer's, or behind a trusted proxy the configured
    /// header's one value, else the rightmost X-Forwarded-For entry that is not a
    /// trusted proxy (every entry trusted: the leftmost). None when a trusted proxy
    /// sent no usable address (the header missing or doubled, an entry that is not an
    /// address where the walk stopped): never the proxy's own address, which would put
    /// everyone behind it in one bucket.
    pub fn client(&self, headers: &HeaderMap, peer: IpAddr) -> Option<IpAddr> {
        let peer = canonical_ip(peer);
        if !self.peer_trusted(peer) {
            return Some(peer);
        }
        if let Some(name) = &self.header {
            let mut values = headers.get_all(name).iter();
            let (Some(one), None) = (values.next(), values.next()) else { return None };
            return one.to_str().ok()?.trim().parse().ok().map(canonical_ip);
        }
        // Every X-Forwarded-For line, in order, is one list; walk it from the right, as
        // bytes: only the entries the walk reaches are read, so whatever a client wrote
        // further left (bytes that are not text included) changes nothing.
        let lines: Vec<&[u8]> = headers.get_all("x-forwarded-for").iter().map(|v| v.as_bytes()).collect();
        let mut last = None;
        for entry in lines.iter().rev().flat_map(|line| line.rsplit(|&b| b == b',')) {
            let entry = entry.trim_ascii();
            if entry.is_empty() {
                continue;
            }
            let ip = canonical_ip(parse_entry(std::str::from_utf8(entry).ok()?)?);
            if !self.is_proxy(ip) {
                return Some(ip);
            }
            last = Some(ip);
        }
        last
    }

    /// [`client`](Self::client), or the peer's address when a trusted proxy gave
    /// none (for limits, which must key on something).
    pub fn client_or_peer(&self, headers: &HeaderMap, peer: IpAddr) -> IpAddr {
        self.client(headers, peer).unwrap_or_else(|| canonical_ip(peer))
    }
}

/// The key a per-address limit counts `ip` under: an IPv4 address itself, an IPv6
/// address as its /64 (the smallest network one subscriber is given: with the whole
/// address as key, a client would take a fresh bucket for every request).
pub fn limit_key(ip: IpAddr) -> IpAddr {
    match canonical_ip(ip) {
        IpAddr::V6(v6) => IpAddr::V6(std::net::Ipv6Addr::from(u128::from(v6) & !((1u128 << 64) - 1))),
        v4 => v4,
    }
}

/// One X-Forwarded-For entry: an address, an IPv6 address in brackets, either with
/// a port (`192.0.2.1:4711`, `[2001:db8::1]:4711`, as some proxies write them).
fn parse_entry(entry: &str) -> Option<IpAddr> {
    if let Ok(ip) = entry.parse() {
        return Some(ip);
    }
    if let Ok(sock) = entry.parse::<SocketAddr>() {
        return Some(sock.ip());
    }
    entry.strip_prefix('[')?.strip_suffix(']')?.parse().ok()
}

/// A state that knows who the client is.
pub trait HasClientAddrs {
    fn client_addrs(&self) -> &ClientAddrs;
}

impl<T: HasClientAddrs> HasClientAddrs for Arc<T> {
    fn client_addrs(&self) -> &ClientAddrs {
        (**self).client_addrs()
    }
}

/// The extractor for per-address limits: the client's address as
/// [`ClientAddrs::client_or_peer`] reads it, as its [`limit_key`] (an IPv6 address as
/// its /64), from the request in place (no copy of its headers). The server puts the
/// peer's address on every request it serves (`ConnectInfo`); without it (a request
/// made in a unit test) the peer is 0.0.0.0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientAddr(pub IpAddr);

impl<S: HasClientAddrs + Send + Sync> FromRequestParts<S> for ClientAddr {
    type Rejection = Infallible;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Infallible> {
        let peer = parts
            .extensions
            .get::<ConnectInfo<SocketAddr>>()
            .map_or(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED), |c| c.0.ip());
        Ok(ClientAddr(limit_key(state.client_addrs().client_or_peer(&parts.headers, peer))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn flags(args: &[&str]) -> ProxyFlags {
        #[derive(clap::Parser)]
        struct F {
            #[command(flatten)]
            p: ProxyFlags,
        }
        use clap::Parser;
        F::try_parse_from(std::iter::once("x").chain(args.iter().copied())).unwrap().p
    }

    fn xff(values: &[&str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for v in values {
            h.append("x-forwarded-for", HeaderValue::from_str(v).unwrap());
        }
        h
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn an_untrusted_peer_is_the_client_whatever_it_sends() {
        let c = ClientAddrs::new(&flags(&["--trusted-proxies", "10.0.0.0/8"]));
        assert_eq!(c.client(&xff(&["1.2.3.4"]), ip("203.0.113.9")), Some(ip("203.0.113.9")));
        let none = ClientAddrs::new(&flags(&[]));
        assert!(!none.any_trusted());
        assert_eq!(none.client(&xff(&["1.2.3.4"]), ip("10.0.0.1")), Some(ip("10.0.0.1")));
    }

    #[test]
    fn the_rightmost_entry_that_is_not_a_trusted_proxy() {
        let c = ClientAddrs::new(&flags(&["--trusted-proxies", "10.0.0.0/8,192.0.2.7"]));
        // nginx appended the client's real address to the client's own header.
        assert_eq!(c.client(&xff(&["6.6.6.6, 198.51.100.4"]), ip("10.1.1.1")), Some(ip("198.51.100.4")));
        // Two proxies of ours: a load balancer at 192.0.2.7, then an ingress at 10.1.1.1.
        assert_eq!(c.client(&xff(&["6.6.6.6, 198.51.100.4, 192.0.2.7"]), ip("10.1.1.1")), Some(ip("198.51.100.4")));
        // Several header lines are one list, in order.
        assert_eq!(c.client(&xff(&["6.6.6.6", "198.51.100.4", "10.2.2.2"]), ip("10.1.1.1")), Some(ip("198.51.100.4")));
        // Every entry is ours: the leftmost (an internal client).
        assert_eq!(c.client(&xff(&["10.3.3.3, 10.2.2.2"]), ip("10.1.1.1")), Some(ip("10.3.3.3")));
        // No header from a trusted proxy: nothing to go on.
        assert_eq!(c.client(&HeaderMap::new(), ip("10.1.1.1")), None);
        assert_eq!(c.client_or_peer(&HeaderMap::new(), ip("10.1.1.1")), ip("10.1.1.1"));
        // Garbage where the walk reaches it: unknown, never a guess past it.
        assert_eq!(c.client(&xff(&["1.2.3.4, unknown"]), ip("10.1.1.1")), None);
        // Garbage further left than the client is never read.
        assert_eq!(c.client(&xff(&["garbage, 198.51.100.4"]), ip("10.1.1.1")), Some(ip("198.51.100.4")));
    }

    #[test]
    fn trust_proxy_takes_the_last_entry() {
        let c = ClientAddrs::new(&flags(&["--trust-proxy"]));
        assert_eq!(c.client(&xff(&["6.6.6.6, 198.51.100.4"]), ip("203.0.113.1")), Some(ip("198.51.100.4")));
        assert!(c.peer_trusted(ip("203.0.113.1")));
        let forward_auth = ClientAddrs::new(&flags(&[])).trusting_peer();
        assert_eq!(forward_auth.client(&xff(&["6.6.6.6, 198.51.100.4"]), ip("127.0.0.1")), Some(ip("198.51.100.4")));
    }

    #[test]
    fn a_named_header_has_one_value() {
        let c = ClientAddrs::new(&flags(&["--trusted-proxies", "127.0.0.1", "--client-ip-header", "X-Real-IP"]));
        let mut h = xff(&["6.6.6.6"]);
        h.insert("x-real-ip", HeaderValue::from_static("198.51.100.4"));
        assert_eq!(c.client(&h, ip("127.0.0.1")), Some(ip("198.51.100.4")));
        h.append("x-real-ip", HeaderValue::from_static("6.6.6.6"));
        assert_eq!(c.client(&h, ip("127.0.0.1")), None, "two values");
        assert_eq!(c.client(&h, ip("203.0.113.1")), Some(ip("203.0.113.1")), "not from a trusted proxy");
    }

    #[test]
    fn entries_with_ports_brackets_and_mapped_addresses() {
        let c = ClientAddrs::new(&flags(&["--trusted-proxies", "10.0.0.0/8"]));
        assert_eq!(c.client(&xff(&["198.51.100.4:4711"]), ip("10.0.0.1")), Some(ip("198.51.100.4")));
        assert_eq!(c.client(&xff(&["[2001:db8::1]:4711"]), ip("10.0.0.1")), Some(ip("2001:db8::1")));
        assert_eq!(c.client(&xff(&["[2001:db8::1]"]), ip("10.0.0.1")), Some(ip("2001:db8::1")));
        // A dual-stack socket's peer ::ffff:10.0.0.1 is the trusted 10.0.0.1.
        assert_eq!(c.client(&xff(&["198.51.100.4"]), ip("::ffff:10.0.0.1")), Some(ip("198.51.100.4")));
        assert_eq!(c.client(&xff(&["::ffff:198.51.100.4"]), ip("10.0.0.1")), Some(ip("198.51.100.4")));
    }

    #[test]
    fn bytes_left_of_the_client_are_never_read() {
        let c = ClientAddrs::new(&flags(&["--trusted-proxies", "10.0.0.0/8"]));
        let mut h = HeaderMap::new();
        h.insert("x-forwarded-for", HeaderValue::from_bytes(b"\xff\xfe, 198.51.100.4").unwrap());
        assert_eq!(c.client(&h, ip("10.0.0.1")), Some(ip("198.51.100.4")));
        h.insert("x-forwarded-for", HeaderValue::from_bytes(b"198.51.100.4, \xff").unwrap());
        assert_eq!(c.client(&h, ip("10.0.0.1")), None, "reached: unknown");
    }

    #[test]
    fn limits_count_an_ipv6_network_as_one() {
        assert_eq!(limit_key(ip("2001:db8:1:2:aaaa::1")), ip("2001:db8:1:2::"));
        assert_eq!(limit_key(ip("2001:db8:1:2:ffff::9")), limit_key(ip("2001:db8:1:2::1")));
        assert_ne!(limit_key(ip("2001:db8:1:3::1")), limit_key(ip("2001:db8:1:2::1")));
        assert_eq!(limit_key(ip("198.51.100.4")), ip("198.51.100.4"));
        assert_eq!(limit_key(ip("::ffff:198.51.100.4")), ip("198.51.100.4"));
    }

    #[test]
    fn flags_parse_and_refuse() {
        let f = flags(&["--trusted-proxies", "10.0.0.0/8, 192.0.2.7 ,::1", "--client-ip-header", "CF-Connecting-IP"]);
        assert_eq!(f.trusted_proxies.len(), 3);
        assert_eq!(f.client_ip_header.unwrap(), "cf-connecting-ip");
        assert_eq!(parse_net("10.1.2.3/8").unwrap().to_string(), "10.0.0.0/8");
        assert_eq!(parse_net("::ffff:10.0.0.0/104").unwrap().to_string(), "10.0.0.0/8");
        assert_eq!(parse_net("::ffff:10.0.0.1").unwrap().to_string(), "10.0.0.1/32");
        assert!(parse_net("10.0.0.0/33").is_err());
        assert!(parse_net("nginx").is_err());
        assert!(parse_header("bad header").is_err());
    }
}
