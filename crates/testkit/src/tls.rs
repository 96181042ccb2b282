//! A private certificate authority made at test time with the `openssl` command, for
//! TLS-only servers: a CA, a server certificate for 127.0.0.1 and localhost, and a
//! client certificate (mutual TLS), all signed by the CA, as PEM files in a temporary
//! directory.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The files of a private CA and what it signed.
pub struct Pki {
    dir: tempfile::TempDir,
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .current_dir(dir)
        .args(args)
        .output()
        .expect("run openssl (is it installed? see scripts/install-deps.sh)");
    assert!(out.status.success(), "openssl {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
}

impl Pki {
    /// Makes a fresh CA and signs a server and a client certificate with it.
    pub fn new() -> Pki {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        std::fs::write(
            d.join("server.ext"),
            "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n",
        )
        .unwrap();
        std::fs::write(d.join("client.ext"), "extendedKeyUsage=clientAuth\n").unwrap();
        openssl(d, &["genrsa", "-out", "ca.key", "2048"]);
        openssl(
            d,
            &[
                "req",
                "-x509",
                "-new",
                "-key",
                "ca.key",
                "-sha256",
                "-days",
                "2",
                "-subj",
                "/CN=test CA",
                "-out",
                "ca.crt",
            ],
        );
        for who in ["server", "client"] {
            let key = format!("{who}.key");
            let csr = format!("{who}.csr");
            let crt = format!("{who}.crt");
            let ext = format!("{who}.ext");
            openssl(d, &["genrsa", "-out", &key, "2048"]);
            openssl(d, &["req", "-new", "-key", &key, "-subj", &format!("/CN={who}"), "-out", &csr]);
            openssl(
                d,
                &[
                    "x509",
                    "-req",
                    "-in",
                    &csr,
                    "-CA",
                    "ca.crt",
                    "-CAkey",
                    "ca.key",
                    "-CAcreateserial",
                    "-days",
                    "2",
                    "-sha256",
                    "-extfile",
                    &ext,
                    "-out",
                    &crt,
                ],
            );
        }
        Pki { dir }
    }

    fn file(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The CA's certificate (what clients trust).
    pub fn ca(&self) -> PathBuf {
        self.file("ca.crt")
    }
    /// The server's certificate and key.
    pub fn server_cert(&self) -> PathBuf {
        self.file("server.crt")
    }
    pub fn server_key(&self) -> PathBuf {
        self.file("server.key")
    }
    /// The client's certificate and key (mutual TLS).
    pub fn client_cert(&self) -> PathBuf {
        self.file("client.crt")
    }
    pub fn client_key(&self) -> PathBuf {
        self.file("client.key")
    }

    /// A second, unrelated CA (its certificate only), for refusals.
    pub fn other_ca(&self) -> PathBuf {
        let d = self.dir.path();
        if !d.join("other.crt").exists() {
            openssl(d, &["genrsa", "-out", "other.key", "2048"]);
            openssl(
                d,
                &["req", "-x509", "-new", "-key", "other.key", "-days", "2", "-subj", "/CN=other", "-out", "other.crt"],
            );
        }
        self.file("other.crt")
    }

    /// Server arguments for TLS only on `port` (no plain TCP port), asking clients
    /// for a certificate when `mutual`.
    pub fn server_args(&self, port: u16, mutual: bool) -> Vec<String> {
        let p = |f: PathBuf| f.to_str().unwrap().to_string();
        vec![
            "--port".into(),
            "0".into(),
            "--tls-port".into(),
            port.to_string(),
            "--tls-cert-file".into(),
            p(self.server_cert()),
            "--tls-key-file".into(),
            p(self.server_key()),
            "--tls-ca-cert-file".into(),
            p(self.ca()),
            "--tls-auth-clients".into(),
            if mutual { "yes" } else { "no" }.into(),
        ]
    }
}

impl Default for Pki {
    fn default() -> Self {
        Pki::new()
    }
}
