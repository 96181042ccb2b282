//! The decision for an admitted person is cheap: the token is verified once and
//! cached, so a decision is a few map lookups and comparisons (issue 29 asks at most
//! 5 µs of CPU). An Ed25519 verification alone takes tens of microseconds, so a
//! cache that stopped working fails the bound below. No Valkey is needed: admitted
//! requests make no Valkey call.

use axum::http::{HeaderMap, HeaderValue};
use queue_gate::decide::{Decision, Incoming};
use queue_gate::rules::parse_route;
use queue_gate::token::{Claims, ISSUER};
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admitted_decision_costs_microseconds() {
    // Nothing listens on port 1: the gate runs with Valkey away, which an admitted
    // person does not notice.
    let mut config = queue_gate::Config::new("redis://127.0.0.1:1/");
    for r in ["/checkout=drop", "/tickets/=concert", "shop.test/=shop"] {
        config.rules.add_route(parse_route(r).unwrap());
    }
    let (gate, _ends) = queue_gate::Gate::new(config);
    let now = queue_gate::now_ms() / 1000;
    let claims = Claims {
        iss: ISSUER.into(),
        aud: "drop".into(),
        sub: "u-1".into(),
        sid: "s-1".into(),
        iat: now,
        exp: now + 600,
        auth_time: now,
    };
    let token = gate.config.keys.sign(&claims);
    let mut headers = HeaderMap::new();
    headers.insert(
        "cookie",
        HeaderValue::from_str(&format!("_ga=GA1.1.123; queue_admission={token}; theme=dark")).unwrap(),
    );
    headers.insert("accept", HeaderValue::from_static("text/html"));
    let req =
        Incoming { host: "127.0.0.1:8090", path: "/checkout/cart", headers: &headers, client: None, https: false };
    let first = Instant::now();
    assert!(matches!(gate.decide(&req, queue_gate::now_ms()), Decision::Admit { .. }));
    let uncached = first.elapsed();

    const N: u32 = 50_000;
    let mut best = Duration::MAX;
    for _ in 0..5 {
        let started = Instant::now();
        for _ in 0..N {
            let d = gate.decide(&req, queue_gate::now_ms());
            assert!(matches!(d, Decision::Admit { .. }));
        }
        best = best.min(started.elapsed() / N);
    }
    println!("admitted decision: {best:?} per decision (best of 5 rounds of {N}); first, verifying: {uncached:?}");
    assert!(best < Duration::from_micros(5), "{best:?} per admitted decision");
}
