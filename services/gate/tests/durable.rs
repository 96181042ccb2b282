//! Durable claims (`--durable-replicas`) at /gate/claim with a real primary and
//! replica, on both backends: a claim the replica does not confirm in time is
//! "try again" (503, Retry-After, a page that retries) with a holder cookie; the
//! browser's retry with that cookie is admitted once the replica is back; someone
//! else with the same link is not.

mod common;

use common::{admission, client, Proxied, HTML};
use std::time::Duration;
use testkit::{Backend, ValkeyServer};

/// Freezes `server` for `d` (`DEBUG SLEEP`); the thread ends when it thaws.
fn freeze(server: &ValkeyServer, d: Duration) -> std::thread::JoinHandle<()> {
    let mut con = server.conn();
    let handle = std::thread::spawn(move || {
        let _: redis::Value = redis::cmd("DEBUG").arg("SLEEP").arg(d.as_secs_f64()).query(&mut con).unwrap();
    });
    std::thread::sleep(Duration::from_millis(200));
    handle
}

/// The holder cookie a response sets, as `name=value`.
fn holder_cookie(resp: &reqwest::Response) -> Option<String> {
    resp.headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .filter_map(|v| v.split(';').next())
        .find(|c| c.starts_with("queue_admission_holder="))
        .map(str::to_string)
}

async fn claim_with(p: &Proxied, ticket: &str, cookie: Option<&str>) -> reqwest::Response {
    let mut req = client()
        .get(p.gate.url(&format!("/gate/claim?queue=drop&ticketId={ticket}&return=/checkout")))
        .header("accept", HTML);
    if let Some(c) = cookie {
        req = req.header("cookie", c);
    }
    req.send().await.unwrap()
}

async fn retry_by_the_same_browser(b: Backend) {
    let primary = ValkeyServer::start(b);
    let replica = ValkeyServer::builder(b).arg("--enable-debug-command").arg("local").start_replica_of(&primary);
    let p = Proxied::with(primary, true, |c| {
        c.durability = queue_client::Durability { replicas: 1, timeout: Duration::from_millis(300), aof: false };
    })
    .await;

    // A live replica: admitted at once.
    let t = common::ticket(&p.qc, "drop", "u-1").await;
    let r = claim_with(&p, &t, None).await;
    assert_eq!(r.status(), 303);
    assert!(admission(&r).is_some());

    // A frozen replica: try again, with the holder kept in a cookie.
    let t = common::ticket(&p.qc, "drop", "u-2").await;
    let thaw = freeze(&replica, Duration::from_secs(3));
    let r = claim_with(&p, &t, None).await;
    assert_eq!(r.status(), 503);
    assert_eq!(r.headers()["retry-after"], "1");
    assert!(r.headers().contains_key("refresh"), "the page retries by itself");
    assert!(admission(&r).is_none());
    let holder = holder_cookie(&r).expect("holder cookie");
    let set = r.headers().get_all("set-cookie").iter().map(|v| v.to_str().unwrap().to_string()).collect::<Vec<_>>();
    assert!(set.iter().any(|c| c.contains("HttpOnly") && c.contains("Path=/gate/")), "{set:?}");
    // Someone else with the link (no cookie, or another holder) is refused.
    assert_eq!(claim_with(&p, &t, None).await.status(), 401);
    assert_eq!(claim_with(&p, &t, Some("queue_admission_holder=someone-else")).await.status(), 401);
    thaw.join().unwrap();

    // The browser's retry, with its cookie: admitted.
    let r = claim_with(&p, &t, Some(&holder)).await;
    assert_eq!(r.status(), 303, "{:?}", r.text().await);
    assert!(admission(&r).is_some());

    // As JSON: 503 not_durable.
    let t = common::ticket(&p.qc, "drop", "u-3").await;
    let thaw = freeze(&replica, Duration::from_secs(2));
    let r = client()
        .get(p.gate.url(&format!("/gate/claim?queue=drop&ticketId={t}")))
        .header("accept", "application/json")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 503);
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(body["error"], "not_durable");
    thaw.join().unwrap();

    let m = client().get(p.gate.url("/gate/metrics")).send().await.unwrap().text().await.unwrap();
    assert!(m.contains("gate_claims_total{outcome=\"not_durable\"} 2"), "{m}");
    drop(replica);
    p.gate.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn module_retry_by_the_same_browser() {
    retry_by_the_same_browser(Backend::Module).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lua_retry_by_the_same_browser() {
    retry_by_the_same_browser(Backend::Bare).await;
}

/// Durable claims off (the default), no replica: a claim as before, no holder cookie.
#[tokio::test]
async fn off_by_default_sets_no_holder() {
    let p = Proxied::start(ValkeyServer::start(Backend::Module)).await;
    let t = common::ticket(&p.qc, "drop", "u-1").await;
    let r = claim_with(&p, &t, None).await;
    assert_eq!(r.status(), 303);
    assert!(holder_cookie(&r).is_none());
    assert_eq!(claim_with(&p, &t, None).await.status(), 401);
    p.gate.stop().await;
}
