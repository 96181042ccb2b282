//! The CPU cost of the decision for an admitted person, in process (no HTTP, no
//! Valkey): the token is verified once and cached, so a decision is a few map lookups
//! and comparisons (issue 29 asks at most 5 µs). An Ed25519 verification alone takes
//! tens of microseconds, so a cache that stopped working shows at once. A measurement
//! for bench/gate-bench.sh, never a test: it prints one line per round,
//! `round <i> <ns per decision>`, then the first (verifying) decision's time.
//!
//!   cargo run --release -p queue-gate --example decision-cost -- [ROUNDS] [DECISIONS]

use axum::http::{HeaderMap, HeaderValue};
use queue_gate::decide::{Decision, Incoming};
use queue_gate::rules::parse_route;
use queue_gate::token::{Claims, ISSUER};
use std::time::Instant;

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let mut args = std::env::args().skip(1);
    let rounds: u32 = args.next().map_or(5, |a| a.parse().expect("ROUNDS: a number"));
    let n: u32 = args.next().map_or(200_000, |a| a.parse().expect("DECISIONS: a number"));
    // Nothing listens on port 1: the gate runs with Valkey away, which an admitted
    // person does not notice.
    let mut config = queue_gate::Config::new("redis://127.0.0.1:1/");
    for r in ["/checkout=drop", "/tickets/=concert", "shop.test/=shop"] {
        config.rules.add_route(parse_route(r).expect("a route"));
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
    let cookie = format!("_ga=GA1.1.123; queue_admission={token}; theme=dark");
    headers.insert("cookie", HeaderValue::from_str(&cookie).expect("a cookie header"));
    headers.insert("accept", HeaderValue::from_static("text/html"));
    let req = Incoming {
        host: "127.0.0.1:8090",
        path: "/checkout/cart",
        headers: &headers,
        client: None,
        https: false,
        renew: true,
    };
    let first = Instant::now();
    assert!(matches!(gate.decide(&req, queue_gate::now_ms()), Decision::Admit { .. }), "the token admits");
    let verifying = first.elapsed();
    for round in 1..=rounds {
        let started = Instant::now();
        for _ in 0..n {
            let d = gate.decide(&req, queue_gate::now_ms());
            assert!(matches!(d, Decision::Admit { .. }));
        }
        println!("round {round} {:.1}", started.elapsed().as_nanos() as f64 / f64::from(n));
    }
    println!("first {}", verifying.as_nanos());
}
