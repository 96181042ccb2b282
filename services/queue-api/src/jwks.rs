//! `--identity-jwks-url`: the app login's keys fetched over HTTPS (or plain HTTP to a
//! loopback address: a sidecar, a test) instead of read from a file.
//!
//! The first fetch happens at start: queue-api does not start without a valid key
//! set, as with a bad file. After that the set is fetched again in the background
//! every `--identity-jwks-refresh-secs` (sooner when the answer's `Cache-Control:
//! max-age` says so), and at once when a token names a `kid` the set does not have
//! (the login rotated its keys), at most once per [`ON_DEMAND_EVERY`] so that tokens
//! with made-up `kid`s cannot make this service hammer the issuer. A fetch that fails
//! (the issuer down, a bad document) keeps the last good set and logs a warning.
//!
//! The client is hyper over rustls (ring), with the system's CA certificates
//! (`SSL_CERT_FILE` / `SSL_CERT_DIR` are honoured). A redirect is not followed; a
//! body over [`MAX_BODY`] is refused.

use crate::identity::Keys;
use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::header;
use std::net::IpAddr;
use std::sync::{Arc, RwLock, Weak};
use std::time::{Duration, Instant};

/// The largest JWKS document read.
pub const MAX_BODY: usize = 1024 * 1024;

/// A token naming an unknown `kid` makes at most one fetch per this long.
pub const ON_DEMAND_EVERY: Duration = Duration::from_secs(30);

/// A whole fetch (connect, TLS, answer, body) takes at most this long.
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);

/// `Cache-Control: max-age` shortens the refresh period, but never below this.
const MIN_MAX_AGE: Duration = Duration::from_secs(30);

/// After a failed background fetch, the next is tried after at most this long.
const RETRY_AFTER_FAILURE: Duration = Duration::from_secs(30);

/// `--identity-jwks-url`: checked when the flags are read (scheme, host, port); the
/// keys themselves are fetched when the service starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JwksUrl {
    /// As given (for messages).
    pub url: String,
    tls: bool,
    /// Without the brackets of an IPv6 address.
    host: String,
    port: u16,
    /// Path and query, starting with `/`.
    path: String,
}

fn is_loopback_host(host: &str) -> bool {
    host.eq_ignore_ascii_case("localhost") || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

impl JwksUrl {
    /// `https://HOST[:PORT]/PATH`, or `http://` to a loopback address (`localhost`,
    /// 127.0.0.0/8, `[::1]`).
    pub fn parse(s: &str) -> Result<JwksUrl, String> {
        let bad = |why: &str| format!("{s:?}: {why}");
        let (tls, rest) = if let Some(r) = s.strip_prefix("https://") {
            (true, r)
        } else if let Some(r) = s.strip_prefix("http://") {
            (false, r)
        } else {
            return Err(bad("an https:// URL expected (http:// only to a loopback address)"));
        };
        if s.bytes().any(|b| b <= b' ' || b == 0x7f || b >= 0x80) {
            return Err(bad("spaces, control and non-ASCII characters are not taken"));
        }
        let (authority, path) = match rest.find(['/', '?', '#']) {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        if path.contains('#') {
            return Err(bad("a fragment (#...) has no meaning here"));
        }
        let path = if path.starts_with('?') { format!("/{path}") } else { path.to_string() };
        if authority.contains('@') {
            return Err(bad("credentials in the URL are not taken"));
        }
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let (h, after) = v6.split_once(']').ok_or_else(|| bad("an unclosed [IPv6 address]"))?;
            if h.parse::<std::net::Ipv6Addr>().is_err() {
                return Err(bad("not an IPv6 address in brackets"));
            }
            let port = match after {
                "" => None,
                a => Some(a.strip_prefix(':').ok_or_else(|| bad("only :PORT may follow the ]"))?),
            };
            (h, port)
        } else {
            match authority.split_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (authority, None),
            }
        };
        if host.is_empty()
            || !host.bytes().all(|b| b.is_ascii_alphanumeric() || b"-._:".contains(&b))
            || (host.contains(':') && !authority.starts_with('['))
        {
            return Err(bad("no host, or not a host name"));
        }
        let port = match port {
            None => {
                if tls {
                    443
                } else {
                    80
                }
            }
            Some(p) => {
                p.parse::<u16>().ok().filter(|&p| p != 0).ok_or_else(|| bad("the port is not a number 1-65535"))?
            }
        };
        if !tls && !is_loopback_host(host) {
            return Err(bad("plain http:// only to a loopback address (localhost, 127.0.0.1, [::1]); use https://"));
        }
        Ok(JwksUrl { url: s.to_string(), tls, host: host.to_string(), port, path })
    }

    fn authority(&self) -> String {
        let host = if self.host.contains(':') { format!("[{}]", self.host) } else { self.host.clone() };
        let default = if self.tls { 443 } else { 80 };
        if self.port == default {
            host
        } else {
            format!("{host}:{}", self.port)
        }
    }
}

impl std::fmt::Display for JwksUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.url)
    }
}

/// The TLS settings of every fetch: the system's CA certificates, ring.
fn tls_config() -> Result<Arc<rustls::ClientConfig>, String> {
    let found = rustls_native_certs::load_native_certs();
    let mut roots = rustls::RootCertStore::empty();
    let (added, _) = roots.add_parsable_certificates(found.certs);
    if added == 0 {
        let why = found.errors.first().map(|e| format!(": {e}")).unwrap_or_default();
        return Err(format!("no CA certificates found to check the JWKS URL's server with{why}"));
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// One fetch: the keys, and the `Cache-Control: max-age` of the answer if any.
async fn fetch(url: &JwksUrl, tls: Option<&Arc<rustls::ClientConfig>>) -> Result<(Keys, Option<Duration>), String> {
    match tokio::time::timeout(FETCH_TIMEOUT, fetch_inner(url, tls)).await {
        Ok(r) => r.map_err(|e| format!("{url}: {e}")),
        Err(_) => Err(format!("{url}: no answer within {}s", FETCH_TIMEOUT.as_secs())),
    }
}

async fn fetch_inner(
    url: &JwksUrl,
    tls: Option<&Arc<rustls::ClientConfig>>,
) -> Result<(Keys, Option<Duration>), String> {
    let addrs: Vec<std::net::SocketAddr> = tokio::net::lookup_host((url.host.as_str(), url.port))
        .await
        .map_err(|e| format!("cannot resolve {}: {e}", url.host))?
        .collect();
    if !url.tls && !addrs.iter().all(|a| a.ip().is_loopback()) {
        return Err(format!("{} is not only loopback addresses: plain http:// is refused", url.host));
    }
    let mut last = format!("no address for {}", url.host);
    let mut stream = None;
    for a in addrs {
        match tokio::net::TcpStream::connect(a).await {
            Ok(s) => {
                stream = Some(s);
                break;
            }
            Err(e) => last = format!("cannot connect to {a}: {e}"),
        }
    }
    let stream = stream.ok_or(last)?;
    let _ = stream.set_nodelay(true);
    match tls {
        Some(config) => {
            let name = rustls::pki_types::ServerName::try_from(url.host.clone())
                .map_err(|e| format!("{}: not a TLS server name: {e}", url.host))?;
            let stream = tokio_rustls::TlsConnector::from(config.clone())
                .connect(name, stream)
                .await
                .map_err(|e| format!("TLS: {e}"))?;
            exchange(url, stream).await
        }
        None => exchange(url, stream).await,
    }
}

async fn exchange<S>(url: &JwksUrl, stream: S) -> Result<(Keys, Option<Duration>), String>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
        .await
        .map_err(|e| format!("HTTP: {e}"))?;
    let conn = tokio::spawn(conn);
    let result = async {
        let req = hyper::Request::get(url.path.as_str())
            .header(header::HOST, url.authority())
            .header(header::ACCEPT, "application/json, application/jwk-set+json")
            .header(header::USER_AGENT, concat!("queue-api/", env!("CARGO_PKG_VERSION")))
            .header(header::CONNECTION, "close")
            .body(Empty::<Bytes>::new())
            .map_err(|e| format!("HTTP: {e}"))?;
        let resp = sender.send_request(req).await.map_err(|e| format!("HTTP: {e}"))?;
        if resp.status() != hyper::StatusCode::OK {
            return Err(format!("answered {} (200 expected; redirects are not followed)", resp.status()));
        }
        let too_big = || format!("the JWKS document is over {MAX_BODY} bytes");
        let length = resp.headers().get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
        if length.is_some_and(|l| l > MAX_BODY as u64) {
            return Err(too_big());
        }
        let max_age = max_age(resp.headers());
        let mut body = resp.into_body();
        let mut text = Vec::new();
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| format!("reading the answer: {e}"))?;
            if let Some(data) = frame.data_ref() {
                if text.len() + data.len() > MAX_BODY {
                    return Err(too_big());
                }
                text.extend_from_slice(data);
            }
        }
        let text = String::from_utf8(text).map_err(|_| "the JWKS document is not UTF-8".to_string())?;
        Ok((Keys::from_jwks(&text)?, max_age))
    }
    .await;
    conn.abort();
    result
}

/// `Cache-Control: max-age=N` (or `s-maxage`), if the answer has one.
fn max_age(headers: &hyper::HeaderMap) -> Option<Duration> {
    let mut age = None;
    for v in headers.get_all(header::CACHE_CONTROL).iter().filter_map(|v| v.to_str().ok()) {
        for d in v.split(',').map(str::trim) {
            if let Some(n) = d.strip_prefix("max-age=").or_else(|| d.strip_prefix("s-maxage=")) {
                age = n.trim_matches('"').parse::<u64>().ok().map(Duration::from_secs).or(age);
            }
        }
    }
    age
}

/// How a fetch went, counted in `queue_api_identity_jwks_fetches_total`.
#[derive(Clone)]
pub struct FetchCounters {
    pub ok: service_kit::metrics::Counter,
    pub failed: service_kit::metrics::Counter,
}

/// The keys fetched from `--identity-jwks-url`, kept fresh.
pub struct Remote {
    url: JwksUrl,
    tls: Option<Arc<rustls::ClientConfig>>,
    /// The last good set and its generation (one more at each change).
    keys: RwLock<(Arc<Keys>, u64)>,
    /// When the last on-demand fetch started; held while it runs, so that
    /// requests that find the same unknown `kid` wait for one fetch.
    on_demand: tokio::sync::Mutex<Option<Instant>>,
    counters: Option<FetchCounters>,
}

impl std::fmt::Debug for Remote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Remote").field("url", &self.url.url).field("keys", &self.keys.read().unwrap().0).finish()
    }
}

impl Remote {
    /// Fetches the keys once (an error if that fails: the service must not start
    /// without keys), then refreshes them every `every` in the background for as long
    /// as the returned value lives.
    pub async fn start(url: JwksUrl, every: Duration, counters: Option<FetchCounters>) -> Result<Arc<Remote>, String> {
        let tls = if url.tls { Some(tls_config()?) } else { None };
        let (keys, max_age) = fetch(&url, tls.as_ref()).await.inspect_err(|_| {
            if let Some(c) = &counters {
                c.failed.increment(1);
            }
        })?;
        if let Some(c) = &counters {
            c.ok.increment(1);
        }
        tracing::info!(url = %url, keys = ?keys, "identity keys fetched");
        let remote = Arc::new(Remote {
            url,
            tls,
            keys: RwLock::new((Arc::new(keys), 0)),
            on_demand: tokio::sync::Mutex::new(None),
            counters,
        });
        let weak = Arc::downgrade(&remote);
        tokio::spawn(refresh_loop(weak, every, next_in(every, max_age)));
        Ok(remote)
    }

    /// The current key set.
    pub fn keys(&self) -> Arc<Keys> {
        self.keys.read().unwrap().0.clone()
    }

    /// The current key set's generation (changes with every good fetch).
    pub fn generation(&self) -> u64 {
        self.keys.read().unwrap().1
    }

    /// Fetches now; on success the set is replaced, on failure the last good one
    /// stays (and a warning is logged). The answer's max-age when it worked.
    async fn refresh(&self, why: &'static str) -> Result<Option<Duration>, ()> {
        match fetch(&self.url, self.tls.as_ref()).await {
            Ok((keys, max_age)) => {
                if let Some(c) = &self.counters {
                    c.ok.increment(1);
                }
                tracing::debug!(url = %self.url, why, keys = ?keys, "identity keys fetched");
                let mut slot = self.keys.write().unwrap();
                let generation = slot.1 + 1;
                *slot = (Arc::new(keys), generation);
                Ok(max_age)
            }
            Err(e) => {
                if let Some(c) = &self.counters {
                    c.failed.increment(1);
                }
                tracing::warn!(url = %self.url, why, error = %e, "fetching the identity keys failed: the last good keys stay");
                Err(())
            }
        }
    }

    /// A token named a `kid` the set (generation `seen`) does not have: fetches the
    /// set again unless one did in the last [`ON_DEMAND_EVERY`]. Whether the set
    /// changed since `seen` (worth checking the token again).
    pub async fn refresh_for_unknown_kid(&self, seen: u64) -> bool {
        let mut last = self.on_demand.lock().await;
        if self.generation() != seen {
            return true;
        }
        if last.is_some_and(|at| at.elapsed() < ON_DEMAND_EVERY) {
            return false;
        }
        *last = Some(Instant::now());
        self.refresh("unknown kid").await.is_ok() && self.generation() != seen
    }
}

/// The next background fetch: the refresh period, or a shorter max-age (not below
/// [`MIN_MAX_AGE`]).
fn next_in(every: Duration, max_age: Option<Duration>) -> Duration {
    match max_age {
        Some(age) => every.min(age.max(MIN_MAX_AGE)),
        None => every,
    }
}

async fn refresh_loop(remote: Weak<Remote>, every: Duration, mut wait: Duration) {
    loop {
        tokio::time::sleep(wait).await;
        let Some(r) = remote.upgrade() else { return };
        wait = match r.refresh("periodic").await {
            Ok(max_age) => next_in(every, max_age),
            Err(()) => every.min(RETRY_AFTER_FAILURE),
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let u = JwksUrl::parse("https://login.example/.well-known/jwks.json").unwrap();
        assert_eq!(
            (u.tls, u.host.as_str(), u.port, u.path.as_str()),
            (true, "login.example", 443, "/.well-known/jwks.json")
        );
        assert_eq!(u.authority(), "login.example");
        let u = JwksUrl::parse("https://login.example:8443").unwrap();
        assert_eq!((u.port, u.path.as_str(), u.authority().as_str()), (8443, "/", "login.example:8443"));
        let u = JwksUrl::parse("http://127.0.0.1:9000/keys?v=2").unwrap();
        assert_eq!((u.tls, u.port, u.path.as_str()), (false, 9000, "/keys?v=2"));
        let u = JwksUrl::parse("http://[::1]:9000/k").unwrap();
        assert_eq!((u.host.as_str(), u.authority().as_str()), ("::1", "[::1]:9000"));
        assert!(JwksUrl::parse("http://localhost/k").is_ok());
        assert_eq!(JwksUrl::parse("https://a.example?x").unwrap().path, "/?x");
        for bad in [
            "http://login.example/jwks.json",
            "http://10.0.0.1/jwks.json",
            "http://[::2]/k",
            "ftp://login.example/k",
            "login.example/k",
            "https://",
            "https://:443/k",
            "https://user:pw@login.example/k",
            "https://login.example:0/k",
            "https://login.example:99999/k",
            "https://login.example:x/k",
            "https://login example/k",
            "https://login.example/k#frag",
            "https://[::1/k",
            "https://[nope]/k",
            "https://a:b:c/k",
        ] {
            assert!(JwksUrl::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn max_age_shortens_the_period_within_bounds() {
        let mut h = hyper::HeaderMap::new();
        assert_eq!(max_age(&h), None);
        h.insert(header::CACHE_CONTROL, "public, max-age=120, must-revalidate".parse().unwrap());
        assert_eq!(max_age(&h), Some(Duration::from_secs(120)));
        let every = Duration::from_secs(300);
        assert_eq!(next_in(every, Some(Duration::from_secs(120))), Duration::from_secs(120));
        assert_eq!(next_in(every, Some(Duration::from_secs(3600))), every);
        assert_eq!(next_in(every, Some(Duration::ZERO)), MIN_MAX_AGE);
        assert_eq!(next_in(every, None), every);
    }
}
