//! The three services over TLS only: a valkey-server with no plain TCP port, its
//! certificate signed by a private CA made at test time, asking clients for a
//! certificate (mutual TLS); every service connects with `rediss://`,
//! `--valkey-ca-file`, `--valkey-client-cert` and `--valkey-client-key`, on both
//! backends, and a swarm goes through them.

use e2e::stores::{assert_clean, n, swarm, Services};
use e2e::{e2e_tests, StackOptions};
use testkit::tls::Pki;
use testkit::{Backend, ValkeyServer};

e2e_tests!(swarm_over_tls);

async fn swarm_over_tls(backend: Backend) {
    let pki = Pki::new();
    let valkey = ValkeyServer::builder(backend).tls(&pki, true).start();
    assert!(valkey.url().starts_with("rediss://"));
    let opts = StackOptions { soft_cap: 5, ..Default::default() };
    let cap = opts.soft_cap.to_string();
    valkey.client().call("QUEUE.CONFIG", &["default", "SET", "soft_cap", &cap]).unwrap();
    let path = |p: std::path::PathBuf| p.to_str().unwrap().to_string();
    let flags = vec![
        "--valkey-url".to_string(),
        valkey.url(),
        "--valkey-ca-file".into(),
        path(pki.ca()),
        "--valkey-client-cert".into(),
        path(pki.client_cert()),
        "--valkey-client-key".into(),
        path(pki.client_key()),
    ];
    let services = Services::start(&flags, &["default".to_string()], &opts).await;
    let args = ["--users", "40", "--rate", "40", "--stay-secs", "0.2", "--messages", "1", "--timeout-secs", "120"];
    let (code, r, stderr) = swarm(&services, "default", &args).await;
    assert_clean(code, &r, &stderr);
    assert_eq!(n(&r, "admitted"), 40, "{r:#}");
    assert!(n(&r, "messages_echoed") > 0, "chat rooms over TLS pub/sub: {r:#}");
    // Nothing reached the server in clear: it has no plain TCP port.
    let port: Vec<String> = redis::cmd("CONFIG").arg("GET").arg("port").query(&mut valkey.conn()).unwrap();
    assert_eq!(port[1], "0");
}
