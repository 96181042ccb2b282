//! Where the store is and how to reach it: one server or a cluster's seed nodes,
//! plain or TLS (`rediss://`), with an ACL user from the URL (`user:password@`). Every
//! service and `queue-cli` take the same options (`--valkey-url`, `--cluster`,
//! `--valkey-ca-file`, `--valkey-client-cert`, `--valkey-client-key`) and turn them
//! into a [`Target`].

use redis::{ClientTlsConfig, IntoConnectionInfo, TlsCertificates};
use std::path::PathBuf;

/// Certificates for TLS connections, as PEM files.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsFiles {
    /// The CA that signed the servers' certificates (a private CA); the system's
    /// trust store when `None`.
    pub ca_file: Option<PathBuf>,
    /// This client's certificate, for servers that ask for one (mutual TLS).
    pub client_cert: Option<PathBuf>,
    /// The key of `client_cert`.
    pub client_key: Option<PathBuf>,
}

impl TlsFiles {
    fn is_empty(&self) -> bool {
        self.ca_file.is_none() && self.client_cert.is_none() && self.client_key.is_none()
    }
}

/// The store to connect to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The server's URL, or the cluster's seed nodes' (at least one).
    pub urls: Vec<String>,
    /// Whether the URLs name cluster nodes.
    pub cluster: bool,
    /// Certificates for `rediss://` URLs.
    pub tls: TlsFiles,
}

impl Target {
    /// One server at `url`, no certificates beyond the system's.
    pub fn single(url: impl Into<String>) -> Target {
        Target { urls: vec![url.into()], cluster: false, tls: TlsFiles::default() }
    }

    /// A cluster found from any of `urls`.
    pub fn cluster(urls: impl IntoIterator<Item = impl Into<String>>) -> Target {
        Target { urls: urls.into_iter().map(Into::into).collect(), cluster: true, tls: TlsFiles::default() }
    }

    /// Reads `--valkey-url`'s comma-separated list with `--cluster` and the TLS files,
    /// checking them together: every URL parses, several need `cluster`, all are TLS
    /// or none, certificates go with `rediss://` only, a client certificate with its
    /// key, and the files exist.
    pub fn parse(list: &str, cluster: bool, tls: TlsFiles) -> Result<Target, String> {
        let urls: Vec<String> = list.split(',').map(|u| u.trim().to_string()).filter(|u| !u.is_empty()).collect();
        if urls.is_empty() {
            return Err("--valkey-url: no URL given".into());
        }
        if urls.len() > 1 && !cluster {
            return Err("--valkey-url: several URLs need --cluster".into());
        }
        let mut secure = Vec::new();
        for u in &urls {
            let info = u.as_str().into_connection_info().map_err(|e| format!("--valkey-url {}: {e}", redact(u)))?;
            secure.push(matches!(info.addr, redis::ConnectionAddr::TcpTls { .. }));
        }
        if secure.iter().any(|s| *s) && !secure.iter().all(|s| *s) {
            return Err("--valkey-url: mixes rediss:// (TLS) and plain URLs".into());
        }
        if !tls.is_empty() && !secure[0] {
            return Err("--valkey-ca-file, --valkey-client-cert and --valkey-client-key need rediss:// URLs".into());
        }
        if tls.client_cert.is_some() != tls.client_key.is_some() {
            return Err("--valkey-client-cert and --valkey-client-key go together".into());
        }
        for (flag, path) in [
            ("--valkey-ca-file", &tls.ca_file),
            ("--valkey-client-cert", &tls.client_cert),
            ("--valkey-client-key", &tls.client_key),
        ] {
            if let Some(p) = path {
                if !p.is_file() {
                    return Err(format!("{flag}: no such file {}", p.display()));
                }
            }
        }
        Ok(Target { urls, cluster, tls })
    }

    /// Whether the connections are TLS.
    pub fn is_tls(&self) -> bool {
        self.urls.first().is_some_and(|u| u.starts_with("rediss://"))
    }

    /// The URLs with passwords masked, for logs.
    pub fn display(&self) -> String {
        self.urls.iter().map(|u| redact(u)).collect::<Vec<_>>().join(",")
    }

    /// The certificates to use, or `None` for the system's trust store alone.
    pub(crate) fn certificates(&self) -> redis::RedisResult<Option<TlsCertificates>> {
        if self.tls.is_empty() {
            return Ok(None);
        }
        let read = |p: &PathBuf| {
            std::fs::read(p).map_err(|e| {
                redis::RedisError::from((
                    redis::ErrorKind::InvalidClientConfig,
                    "cannot read a TLS file",
                    format!("{}: {e}", p.display()),
                ))
            })
        };
        let root_cert = self.tls.ca_file.as_ref().map(read).transpose()?;
        let client_tls = match (&self.tls.client_cert, &self.tls.client_key) {
            (Some(c), Some(k)) => Some(ClientTlsConfig { client_cert: read(c)?, client_key: read(k)? }),
            _ => None,
        };
        Ok(Some(TlsCertificates { client_tls, root_cert }))
    }

    /// A client for one of the URLs (a single server, or one node for pub/sub).
    pub(crate) fn client_for(&self, url: &str) -> redis::RedisResult<redis::Client> {
        install_crypto();
        match self.certificates()? {
            Some(certs) if url.starts_with("rediss://") => redis::Client::build_with_tls(url, certs),
            _ => redis::Client::open(url),
        }
    }

    /// A client for the first URL.
    pub(crate) fn client(&self) -> redis::RedisResult<redis::Client> {
        self.client_for(&self.urls[0])
    }
}

/// rustls needs a process-wide crypto provider; ring is the one built in.
pub(crate) fn install_crypto() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// `url` with its password replaced by `***`.
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else { return url.to_string() };
    let (authority, path) = rest.split_once('/').map_or((rest, ""), |(a, p)| (a, p));
    let Some((userinfo, host)) = authority.rsplit_once('@') else { return url.to_string() };
    let user = userinfo.split_once(':').map_or(userinfo, |(u, _)| u);
    let slash = if rest.contains('/') { "/" } else { "" };
    format!("{scheme}://{user}:***@{host}{slash}{path}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_and_modes() {
        let t = Target::parse("redis://a:1, redis://b:2/", true, TlsFiles::default()).unwrap();
        assert_eq!(t.urls, ["redis://a:1", "redis://b:2/"]);
        assert!(t.cluster && !t.is_tls());
        assert!(Target::parse("redis://a:1,redis://b:2", false, TlsFiles::default())
            .unwrap_err()
            .contains("--cluster"));
        assert!(Target::parse(" , ", false, TlsFiles::default()).unwrap_err().contains("no URL"));
        assert!(Target::parse("http://x", false, TlsFiles::default()).is_err());
        assert!(Target::parse("rediss://a:1,redis://b:2", true, TlsFiles::default()).unwrap_err().contains("mixes"));
    }

    #[test]
    fn tls_files_are_checked() {
        let ca = TlsFiles { ca_file: Some("/nonexistent/ca.pem".into()), ..Default::default() };
        assert!(Target::parse("redis://a:1", false, ca.clone()).unwrap_err().contains("rediss://"));
        assert!(Target::parse("rediss://a:1", false, ca).unwrap_err().contains("no such file"));
        let half = TlsFiles { client_cert: Some("/x".into()), ..Default::default() };
        assert!(Target::parse("rediss://a:1", false, half).unwrap_err().contains("go together"));
        assert!(Target::parse("rediss://a:1", false, TlsFiles::default()).unwrap().is_tls());
    }

    #[test]
    fn passwords_never_show() {
        assert_eq!(redact("redis://svc:s3cret@h:1/"), "redis://svc:***@h:1/");
        assert_eq!(redact("rediss://:pw@h:1"), "rediss://:***@h:1");
        assert_eq!(redact("redis://h:1/"), "redis://h:1/");
        let t = Target::parse("redis://u:p@a:1,redis://u:p@b:2", true, TlsFiles::default()).unwrap();
        assert!(!t.display().contains('p') || !t.display().contains(":p@"));
    }
}
