//! Straight through while there is room (QUEUE.PASS), on both backends: a visitor
//! without a token is let in on their first request when nobody waits and a slot is
//! free, in proxy mode and forward auth; one Valkey call for it, none after; a full
//! room sends the next visitor to the room; a client that never keeps the cookie takes
//! at most its address's passes; a flood from many addresses never passes the cap.
//! Also: sales reported by the app's `Queue-Sold`, and `--public-url`.

mod common;

use common::*;
use queue_gate::Config;
use std::time::Duration;
use testkit::{Backend, ValkeyServer};

testkit::backend_tests!(
    async
    idle_queue_lets_the_first_request_through_the_proxy,
    forward_auth_lets_the_first_request_through,
    full_room_crawler_and_flood,
    the_app_reports_sales,
    public_url_makes_the_room_link,
    a_straight_redirect_stays_on_this_site,
    requests_that_cannot_keep_the_cookie_take_no_slot,
);

/// Straight through on, `per_address` passes per address a minute, and every peer a
/// trusted proxy (the tests choose the client address by X-Forwarded-For).
fn straight(per_address: u32) -> impl FnOnce(&mut Config) {
    move |c: &mut Config| {
        c.rules.defaults.straight_through = true;
        c.straight_per_address = per_address;
        c.client_addrs = service_kit::ClientAddrs::new(&service_kit::ProxyFlags {
            trust_proxy: true,
            ..service_kit::ProxyFlags::default()
        });
    }
}

/// `GET path` as a browser at `addr` (X-Forwarded-For), with `cookie` if any.
async fn visit(gate: &Gate, path: &str, addr: &str, cookie: Option<&str>) -> reqwest::Response {
    let mut r = client().get(gate.url(path)).header("accept", HTML).header("x-forwarded-for", addr);
    if let Some(c) = cookie {
        r = r.header("cookie", c);
    }
    r.send().await.unwrap()
}

/// The calls of `command` Valkey served (INFO commandstats; the module's commands, as
/// the test client of the Lua backend turns queue commands into FCALL).
fn calls(valkey: &ValkeyServer, command: &str) -> u64 {
    let info = valkey.client().call("INFO", &["commandstats"]).unwrap();
    let text = match info {
        redis::Value::BulkString(b) => String::from_utf8_lossy(&b).into_owned(),
        redis::Value::VerbatimString { text, .. } => text,
        other => panic!("INFO: {other:?}"),
    };
    let prefix = format!("cmdstat_{command}:calls=");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .map_or(0, |rest| rest.split(',').next().unwrap().parse().unwrap())
}

/// The gate's metric line `name{labels}` (0 when absent).
async fn metric(gate: &Gate, series: &str) -> u64 {
    let text = client().get(gate.url("/gate/metrics")).send().await.unwrap().text().await.unwrap();
    text.lines().find_map(|l| l.strip_prefix(series)).map_or(0, |v| v.trim().parse::<f64>().unwrap() as u64)
}

const PASSED: &str = "gate_straight_through_total{outcome=\"passed\"}";

async fn idle_queue_lets_the_first_request_through_the_proxy(b: Backend) {
    let Proxied { valkey, qc, dir: _dir, app, gate } = Proxied::with(ValkeyServer::start(b), true, straight(6)).await;
    // The gate's own calls at start (declaring its queues) are done before counting.
    let _ = visit(&gate, "/about", "198.51.100.1", None).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    if b == Backend::Module {
        valkey.client().call("CONFIG", &["RESETSTAT"]).unwrap();
    }

    // Nobody waits, a slot is free: the first request reaches the app, admitted.
    let r = visit(&gate, "/checkout/cart", "198.51.100.1", None).await;
    assert_eq!(r.status(), 200, "straight through, no redirect");
    let token = admission(&r).expect("the admission cookie on the app's answer");
    let body = r.text().await.unwrap();
    let user = body.strip_prefix("app:").unwrap().to_string();
    assert!(user.starts_with("pass-"), "the app saw X-Queue-User: {body}");
    let seen = app.seen();
    let last = seen.last().unwrap();
    assert_eq!((last.user.as_deref(), last.queue.as_deref()), (Some(user.as_str()), Some("drop")));
    assert_eq!(qc.info("drop").await.unwrap().active, 1, "entered and claimed: one session");
    assert_eq!(metric(&gate, PASSED).await, 1);
    if b == Backend::Module {
        assert_eq!(calls(&valkey, "queue.pass"), 1, "one Valkey call for the first request");
    }

    // After it: the token decides, no Valkey call per request.
    let cookie = format!("queue_admission={token}");
    for _ in 0..5 {
        let r = visit(&gate, "/checkout", "198.51.100.1", Some(&cookie)).await;
        assert_eq!(r.text().await.unwrap(), format!("app:{user}"));
    }
    assert_eq!(metric(&gate, PASSED).await, 1);
    if b == Backend::Module {
        for c in ["queue.pass", "queue.enter", "ticket.claim"] {
            assert_eq!(calls(&valkey, c), u64::from(c == "queue.pass"), "{c} after the first request");
        }
    }
    // The session is renewed like a claimed one, and /gate/leave ends it.
    assert!(
        eventually(Duration::from_secs(10), async || {
            b != Backend::Module || calls(&valkey, "session.heartbeat") > 0
        })
        .await
    );
    let r = leave_here(&gate, "drop", &cookie).await;
    assert!(r.status().is_success() || r.status().is_redirection());
    assert!(eventually(Duration::from_secs(10), async || qc.info("drop").await.unwrap().active == 0).await);

    // Turned off (per queue in the rules file, or --straight-through false): the room.
    let off = Proxied::with(ValkeyServer::start(b), true, |c| {
        straight(6)(c);
        c.rules.defaults.straight_through = false;
    })
    .await;
    let r = visit(&off.gate, "/checkout", "198.51.100.1", None).await;
    assert_eq!(r.status(), 302);
    assert!(r.headers()["location"].to_str().unwrap().starts_with("/gate/room/?queue=drop"));
    assert_eq!(off.qc.info("drop").await.unwrap().active, 0);
}

async fn forward_auth_lets_the_first_request_through(b: Backend) {
    let Proxied { valkey: _v, qc, dir: _dir, gate, .. } =
        Proxied::with(ValkeyServer::start(b), false, straight(6)).await;
    // nginx: 200 with the person for the app and the cookie for the client.
    let r = client()
        .get(gate.url("/gate/auth"))
        .header("x-original-uri", "/checkout")
        .header("accept", HTML)
        .header("x-forwarded-for", "198.51.100.2")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-queue-decision"], "straight_through");
    assert_eq!(r.headers()["x-queue-name"], "drop");
    let user = r.headers()["x-queue-user"].to_str().unwrap().to_string();
    let token = admission(&r).expect("Set-Cookie on the auth answer");
    // The next request carries the cookie: admitted without Valkey.
    let r = auth_as_nginx(&gate, "/checkout", &format!("queue_admission={token}")).await;
    assert_eq!((r.status().as_u16(), r.headers()["x-queue-user"].to_str().unwrap()), (200, user.as_str()));
    assert_eq!(qc.info("drop").await.unwrap().active, 1);

    // A proxy that drops the 200's cookies (--renew-redirect, Caddy): a GET is sent once
    // to its own URL with the cookie on that redirect; a POST queues.
    let Proxied { valkey: _v2, qc, dir: _dir2, gate, .. } = Proxied::with(ValkeyServer::start(b), false, |c| {
        straight(6)(c);
        c.renew_redirect = true;
    })
    .await;
    let ask = |method: &str| {
        client()
            .get(gate.url("/gate/auth"))
            .header("x-forwarded-uri", "/checkout?item=1")
            .header("x-forwarded-method", method)
            .header("x-forwarded-for", "198.51.100.3")
            .header("accept", HTML)
            .send()
    };
    let r = ask("POST").await.unwrap();
    assert_eq!(r.status(), 302);
    assert!(r.headers()["location"].to_str().unwrap().starts_with("/gate/room/"), "a POST queues");
    assert!(admission(&r).is_none());
    let r = ask("GET").await.unwrap();
    assert_eq!((r.status().as_u16(), r.headers()["location"].to_str().unwrap()), (302, "/checkout?item=1"));
    assert_eq!(r.headers()["x-queue-decision"], "straight_through");
    let token = admission(&r).expect("the cookie on the redirect");
    let r = client()
        .get(gate.url("/gate/auth"))
        .header("x-forwarded-uri", "/checkout?item=1")
        .header("cookie", format!("queue_admission={token}"))
        .header("accept", HTML)
        .send()
        .await
        .unwrap();
    assert_eq!((r.status().as_u16(), r.headers()["x-queue-decision"].to_str().unwrap()), (200, "admitted"));
    assert_eq!(qc.info("drop").await.unwrap().active, 1);
}

async fn full_room_crawler_and_flood(b: Backend) {
    const CAP: u64 = 6;
    let Proxied { valkey: _v, qc, dir: _dir, app, gate } =
        Proxied::with(ValkeyServer::start(b), true, straight(2)).await;
    qc.config_set("drop", &[("soft_cap", CAP as i64)]).await.unwrap();

    // A crawler that never sends the cookie back: its address's two passes, then the
    // room; the rest of the room stays free.
    let mut passed = 0;
    for _ in 0..10 {
        let r = visit(&gate, "/checkout", "198.51.100.9", None).await;
        match r.status().as_u16() {
            200 => passed += 1,
            302 => assert!(r.headers()["location"].to_str().unwrap().starts_with("/gate/room/")),
            s => panic!("the crawler got {s}"),
        }
    }
    assert_eq!(passed, 2, "a cookieless client takes at most its address's passes");
    assert_eq!(qc.info("drop").await.unwrap().active, 2);

    // A flood of first requests from many addresses at once: never more than the cap.
    let flood = (0..40).map(|i| {
        let gate = &gate;
        async move { visit(gate, "/checkout", &format!("203.0.113.{i}"), None).await.status().as_u16() }
    });
    let answers = futures_util::future::join_all(flood).await;
    let through = answers.iter().filter(|s| **s == 200).count() as u64;
    assert!(answers.iter().all(|s| *s == 200 || *s == 302), "{answers:?}");
    let info = qc.info("drop").await.unwrap();
    assert!(info.active <= CAP, "the flood passed the cap: {info:?}");
    assert_eq!(info.active, 2 + through, "every 200 is a session: {info:?}");
    assert_eq!(app.unadmitted("/checkout").len(), 0, "nothing unadmitted reached the app");

    // Full: the slots left taken by people claiming their tickets, then the next
    // visitor goes to the room.
    for i in info.active..CAP {
        let t = ticket(&qc, "drop", &format!("filler-{i}")).await;
        qc.claim("drop", &t).await.unwrap();
    }
    assert_eq!(qc.info("drop").await.unwrap().active, CAP);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let r = visit(&gate, "/checkout", "192.0.2.200", None).await;
    assert_eq!(r.status(), 302, "the room is full");
    // Someone waits: a slot that frees is theirs (promoted in the same command), and
    // the next visitor still goes to the room.
    let w = qc.enter("drop", "waiter", "waiter").await.unwrap();
    assert_eq!(w.status, queue_client::Status::Waiting);
    let someone = app.seen().iter().rev().find_map(|s| s.user.clone()).expect("someone admitted");
    assert!(qc.end_session("drop", &someone).await.unwrap());
    tokio::time::sleep(Duration::from_millis(300)).await;
    let r = visit(&gate, "/checkout", "192.0.2.201", None).await;
    assert_eq!(r.status(), 302, "the freed slot went to the line");
    let info = qc.info("drop").await.unwrap();
    assert_eq!((info.active, info.joining, info.waiting), (CAP - 1, 1, 0), "{info:?}");
}

async fn the_app_reports_sales(b: Backend) {
    let Proxied { valkey: _v, qc, dir: _dir, gate, .. } =
        Proxied::with(ValkeyServer::start(b), true, straight(6)).await;
    qc.config_set("drop", &[("inventory", 100)]).await.unwrap();
    let r = visit(&gate, "/checkout", "198.51.100.4", None).await;
    assert_eq!(r.status(), 200);
    let cookie = format!("queue_admission={}", admission(&r).unwrap());

    // An admitted person's answer: the header stays with the gate, the sale goes to Valkey.
    let r = visit(&gate, "/checkout/pay?sold=3", "198.51.100.4", Some(&cookie)).await;
    assert_eq!(r.status(), 200);
    assert!(r.headers().get("queue-sold").is_none(), "Queue-Sold never reaches the client");
    assert!(eventually(Duration::from_secs(10), async || qc.info("drop").await.unwrap().inventory == Some(97)).await);

    // Bad values are dropped: the client never sees them and nothing changes.
    for bad in ["0", "-1", "abc", "1.5", "2&sold=2", "99999999999999999999", "1000000000001"] {
        let r = visit(&gate, &format!("/checkout/pay?sold={bad}"), "198.51.100.4", Some(&cookie)).await;
        assert_eq!(r.status(), 200);
        assert!(r.headers().get("queue-sold").is_none(), "{bad} reached the client");
    }
    // Unadmitted (a path no route gates): stripped, no sale.
    let r = visit(&gate, "/about?sold=5", "198.51.100.4", None).await;
    assert!(r.headers().get("queue-sold").is_none());
    // A good one after them shows the bad ones were not counted.
    let _ = visit(&gate, "/checkout/pay?sold=1", "198.51.100.4", Some(&cookie)).await;
    assert!(eventually(Duration::from_secs(10), async || qc.info("drop").await.unwrap().inventory == Some(96)).await);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(qc.info("drop").await.unwrap().inventory, Some(96));
    assert_eq!(metric(&gate, "gate_sales_total{outcome=\"bad_value\"}").await, 7);
    assert_eq!(metric(&gate, "gate_sales_total{outcome=\"reported\"}").await, 2);
}

async fn public_url_makes_the_room_link(b: Backend) {
    let Proxied { valkey: _v, dir: _dir, gate, .. } = Proxied::with(ValkeyServer::start(b), true, |c| {
        c.public_url = Some("https://shop.example".into());
        c.rules.add_route(queue_gate::rules::parse_route("tickets.example/t=concert").unwrap());
    })
    .await;
    let r = browse(&gate, "/checkout?x=1", None).await;
    assert_eq!(r.status(), 302);
    assert_eq!(r.headers()["location"], "https://shop.example/gate/room/?queue=drop&return=%2Fcheckout%3Fx%3D1");
    // A route with a host name keeps the link on that host.
    let r = client().get(gate.url("/t")).header("host", "tickets.example").header("accept", HTML).send().await.unwrap();
    assert_eq!(r.status(), 302);
    assert_eq!(r.headers()["location"], "/gate/room/?queue=concert&return=%2Ft");
}

/// Through a proxy that drops the 200's cookies, a straight pass is a redirect back to
/// the page asked for: a same-site path only. An original URI of `//host/...` (which
/// the gate's path rules read as `/host/...`) must not send the browser to `host`.
async fn a_straight_redirect_stays_on_this_site(b: Backend) {
    let Proxied { valkey: _v, qc, dir: _dir, gate, .. } = Proxied::with(ValkeyServer::start(b), false, |c| {
        straight(6)(c);
        c.renew_redirect = true;
    })
    .await;
    let r = client()
        .get(gate.url("/gate/auth"))
        .header("x-forwarded-uri", "//checkout.evil.example/")
        .header("x-forwarded-method", "GET")
        .header("x-forwarded-for", "198.51.100.9")
        .header("accept", HTML)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 302);
    assert_eq!(r.headers()["x-queue-decision"], "straight_through", "the path is gated: it passes");
    let to = r.headers()["location"].to_str().unwrap();
    assert!(to.starts_with('/') && !to.starts_with("//") && !to.contains("evil"), "redirected off the site: {to}");
    assert_eq!(qc.info("drop").await.unwrap().active, 1);
}

/// A CORS preflight and another site's image or fetch of a gated path cannot keep the
/// cookie: they go to the room without a Valkey call, and take no slot.
async fn requests_that_cannot_keep_the_cookie_take_no_slot(b: Backend) {
    let Proxied { valkey, qc, dir: _dir, gate, .. } = Proxied::with(ValkeyServer::start(b), true, straight(0)).await;
    let before = (b == Backend::Module).then(|| calls(&valkey, "queue.pass"));
    for (i, extra) in [
        [("sec-fetch-site", "cross-site"), ("sec-fetch-mode", "no-cors")],
        [("sec-fetch-site", "cross-site"), ("sec-fetch-mode", "cors")],
        [("access-control-request-method", "POST"), ("sec-fetch-mode", "cors")],
    ]
    .iter()
    .enumerate()
    {
        let mut r = client().get(gate.url("/checkout")).header("x-forwarded-for", format!("198.51.100.{}", 20 + i));
        for (k, v) in extra {
            r = r.header(*k, *v);
        }
        let r = r.send().await.unwrap();
        assert_ne!(r.status(), 200, "{extra:?} let in");
        assert!(admission(&r).is_none());
    }
    assert_eq!(qc.info("drop").await.unwrap().active, 0);
    assert_eq!(metric(&gate, "gate_straight_through_total{outcome=\"cross_site\"}").await, 3);
    if let Some(before) = before {
        assert_eq!(calls(&valkey, "queue.pass"), before, "no Valkey call for them");
    }
    // A link from another site is a page load: it passes.
    let r = client()
        .get(gate.url("/checkout"))
        .header("x-forwarded-for", "198.51.100.30")
        .header("sec-fetch-site", "cross-site")
        .header("sec-fetch-mode", "navigate")
        .header("accept", HTML)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(qc.info("drop").await.unwrap().active, 1);
}
