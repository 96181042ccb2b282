//! The client against a TLS-only server (a private CA made at test time, mutual TLS),
//! with the module and with the Lua library, and the refusals: an unknown CA, no
//! client certificate, a plain URL to a TLS port.

mod common;

use common::round_trip;
use queue_client::{ConnectOptions, QueueClient, Target, TlsFiles};
use std::time::Duration;
use testkit::tls::Pki;
use testkit::ValkeyServer;

fn quick() -> ConnectOptions {
    ConnectOptions {
        response_timeout: Duration::from_secs(2),
        connection_timeout: Duration::from_secs(1),
        reconnect_retries: 0,
        reconnect_max_delay: Duration::from_millis(100),
    }
}

async fn over_tls(backend: testkit::Backend) {
    let pki = Pki::new();
    let server = ValkeyServer::builder(backend).tls(&pki, true).start();
    let files =
        TlsFiles { ca_file: Some(pki.ca()), client_cert: Some(pki.client_cert()), client_key: Some(pki.client_key()) };
    let target = Target::parse(&server.url(), false, files.clone()).unwrap();
    let client = QueueClient::connect_target(&target, quick()).await.unwrap();
    round_trip(&client, "tls").await;

    // The server's certificate from another CA: refused.
    let other = TlsFiles { ca_file: Some(pki.other_ca()), ..files.clone() };
    let t = Target::parse(&server.url(), false, other).unwrap();
    assert!(QueueClient::connect_target(&t, quick()).await.is_err(), "an unknown CA must be refused");
    // No client certificate: the server refuses.
    let no_cert = TlsFiles { ca_file: Some(pki.ca()), ..Default::default() };
    let t = Target::parse(&server.url(), false, no_cert).unwrap();
    assert!(QueueClient::connect_target(&t, quick()).await.is_err(), "mutual TLS needs a client certificate");
    // Plain text to the TLS port.
    let plain = Target::single(server.url().replace("rediss://", "redis://"));
    assert!(QueueClient::connect_target(&plain, quick()).await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn module_over_tls() {
    over_tls(testkit::Backend::Module).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lua_over_tls() {
    over_tls(testkit::Backend::Lua).await;
}
