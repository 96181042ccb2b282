//! The gate against a real valkey-server (the module and the Lua library) and a real
//! upstream app over real sockets: claims, refusals, sessions, forward auth, open
//! redirects, WebSocket and streamed uploads through the proxy, Valkey away.

mod common;

use common::*;
use futures_util::{SinkExt, StreamExt};
use queue_client::Status;
use queue_gate::token::{Claims, Keys, ISSUER};
use std::time::Duration;
use testkit::{Backend, ValkeyServer};

testkit::backend_tests!(
    async
    claim_once_then_admitted_through_the_proxy,
    refused_tokens,
    lapsed_lease_ends_access_within_a_tick,
    sessions_ended_by_the_app_and_by_leaving,
    forward_auth_conventions,
    forward_auth_conventions_general_path,
    websocket_and_upload_through_the_proxy,
    valkey_away_admitted_pass_claims_503_then_fail_open,
    two_instances_share_only_valkey,
    idle_longest_session_and_renewal,
    token_dies_before_its_lease_can_lapse,
    websocket_closed_when_the_session_ends,
    session_end_kept_while_valkey_is_away,
    an_admitted_visitor_back_at_the_room_goes_back_to_the_app,
);

/// The status of `GET path` sent byte for byte (no client-side normalization).
async fn raw_get_status(addr: std::net::SocketAddr, path: &str) -> u16 {
    let req = format!("GET {path} HTTP/1.1\r\nHost: shop.test\r\nAccept: text/html\r\nConnection: close\r\n\r\n");
    raw_request_status(addr, &req).await
}

/// The status of the first answer to `request`, written as is.
async fn raw_request_status(addr: std::net::SocketAddr, request: &str) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(request.as_bytes()).await.unwrap();
    let mut out = vec![0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(10), s.read(&mut out)).await.unwrap().unwrap();
    let text = String::from_utf8_lossy(&out[..n]);
    text.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or_else(|| panic!("no status in {text:.200}"))
}

fn now_s() -> u64 {
    queue_gate::now_ms() / 1000
}

async fn claim_once_then_admitted_through_the_proxy(b: Backend) {
    let Proxied { valkey: _s, qc, dir: _dir, app, gate } = Proxied::start(ValkeyServer::start(b)).await;

    // Not admitted: to the waiting room with the queue and the way back.
    let r = browse(&gate, "/checkout/cart?x=1", None).await;
    assert_eq!(r.status(), 302);
    assert_eq!(r.headers()["location"], "/gate/room/?queue=drop&return=%2Fcheckout%2Fcart%3Fx%3D1");
    // Unmatched and bypassed paths pass without an admission.
    assert_eq!(browse(&gate, "/about", None).await.text().await.unwrap(), "app:");
    assert_eq!(browse(&gate, "/about/app.css", None).await.status(), 200);
    // Encodings, case, path parameters, extensions and dot segments do not hide a
    // gated path: each is sent to wait (302) or refused (400), and none reaches the app.
    let before = app.seen().len();
    for sneaky in [
        "/%63heckout",
        "//checkout",
        "/static/../checkout",
        "/static/%2e%2e/checkout",
        "/CHECKOUT",
        "/checkout;jsessionid=1",
        "/checkout.json",
        "/checkout.js",
        "/checkout/app.css",
        "/checkout/x.png",
    ] {
        assert_eq!(browse(&gate, sneaky, None).await.status(), 302, "{sneaky}");
    }
    // reqwest resolves dot segments itself: these go out as written over a raw socket.
    for refused in ["/checkout/..%2Fabout", "/checkout/%2e%2e/healthz", "/checkout/..;/about", "/checkout%2Fpay"] {
        assert_eq!(raw_get_status(gate.addr, refused).await, 400, "{refused}");
    }
    assert_eq!(app.seen().len(), before, "none of them reached the app");

    let t = ticket(&qc, "drop", "u-1").await;
    let cookie = claim(&gate, "drop", &t).await;
    let r = browse(&gate, "/checkout", Some(&cookie)).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.text().await.unwrap(), "app:u-1");
    // The ticket works once.
    let again = client().get(gate.url(&format!("/gate/claim?queue=drop&ticketId={t}"))).send().await.unwrap();
    assert_eq!(again.status(), 401);
    let body: serde_json::Value = again.json().await.unwrap();
    assert_eq!(body["error"], "invalid_ticket");
    // A spoofed identity header never reaches the app.
    let r = client()
        .get(gate.url("/about"))
        .header("x-queue-user", "admin")
        .header("x-forwarded-for", "6.6.6.6")
        .send()
        .await
        .unwrap();
    assert_eq!(r.text().await.unwrap(), "app:");
    let last = app.seen().pop().unwrap();
    assert_eq!(last.forwarded_for.as_deref(), Some("127.0.0.1"), "an untrusted X-Forwarded-For is replaced");
    assert_eq!(last.forwarded_proto.as_deref(), Some("http"));
    assert_eq!(last.forwarded_host.as_deref(), Some(gate.addr.to_string().as_str()));
    // Bearer works as the cookie does (mobile apps).
    let token = cookie.strip_prefix("queue_admission=").unwrap();
    let r = client().get(gate.url("/checkout")).bearer_auth(token).send().await.unwrap();
    assert_eq!(r.text().await.unwrap(), "app:u-1");
    // JSON clients get a JSON answer, not a redirect.
    let r = client().get(gate.url("/checkout")).header("accept", "application/json").send().await.unwrap();
    assert_eq!(r.status(), 401);
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!((body["queue"].as_str(), body["status"].as_str()), (Some("drop"), Some("waiting")));
    assert_eq!(body["api"]["entry"], "/gate/room/api/queue/entry");
    // The audit: no request under a gated prefix reached the app unadmitted.
    assert!(app.unadmitted("/checkout").iter().all(|s| s.path.ends_with(".css")), "{:?}", app.unadmitted("/checkout"));
    assert_eq!(app.seen().iter().filter(|s| s.user.as_deref() == Some("u-1")).count(), 2);
    // One queue's token is not another's.
    assert_eq!(browse(&gate, "/tickets/1", Some(&cookie)).await.status(), 302);
    gate.stop().await;
}

/// The waiting room same-origin: /gate/room/* is queue-api's /* (here the logging
/// app stands in for queue-api); the rest of /gate/ never reaches the app.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_room_served_under_gate_room() {
    let s = ValkeyServer::start(Backend::Module);
    let dir = tempfile::tempdir().unwrap();
    let app = Upstream::start().await;
    let api = Upstream::start().await;
    let mut c = config(&s, Some(app.addr), &key_file(dir.path(), "k.pem"));
    c.queue_api = Some(format!("http://{}", api.addr).parse().unwrap());
    let gate = Gate::start(c).await;
    // The page, its script, worker, styles, brand, messages and assets, the queue API.
    for (asked, served) in [
        ("/gate/room/?queue=drop&return=%2Fcheckout", "/?queue=drop&return=%2Fcheckout"),
        ("/gate/room/api/queue/status?queue=drop&userId=u", "/api/queue/status?queue=drop&userId=u"),
        ("/gate/room/app.js", "/app.js"),
        ("/gate/room/pow-worker.js", "/pow-worker.js"),
        ("/gate/room/brand.css?queue=drop", "/brand.css?queue=drop"),
        ("/gate/room/i18n/en.json", "/i18n/en.json"),
        ("/gate/room/assets/logo.svg", "/assets/logo.svg"),
        ("/gate/room/api/queue/stream?queue=drop&userId=u", "/api/queue/stream?queue=drop&userId=u"),
    ] {
        let r = client().get(gate.url(asked)).send().await.unwrap();
        assert_eq!(r.status(), 200, "{asked}");
        assert_eq!(api.seen().last().unwrap().path, served);
    }
    let r = client().get(gate.url("/gate/room?queue=drop")).send().await.unwrap();
    assert_eq!((r.status().as_u16(), r.headers()["location"].to_str().unwrap()), (301, "/gate/room/?queue=drop"));
    let r = client().post(gate.url("/gate/room/api/queue/entry")).body("{}").send().await.unwrap();
    assert_eq!((r.status().as_u16(), api.seen().last().unwrap().path.as_str()), (200, "/api/queue/entry"));
    // queue-api's back office and its other paths are not the public's: 404, and
    // nothing of them reaches queue-api, however the path is written.
    let before = api.seen().len();
    for refused in [
        "/gate/room/admin",
        "/gate/room/admin.js",
        "/gate/room/admin.css",
        "/gate/room/api/admin/queues",
        "/gate/room/api/admin/queues/drop",
        "/gate/room/api/openapi.json",
        "/gate/room/metrics",
        "/gate/room/healthz",
        "/gate/room/bench/noop",
        "/gate/room/%61dmin",
        "/gate/room//admin",
        "/gate/room/api/queue/../admin/queues",
        "/gate/room/api/queue/%2e%2e/admin/queues",
        "/gate/room/assets/..%2F..%2Fadmin",
        "/gate/room/api/queue/",
    ] {
        assert_eq!(raw_get_status(gate.addr, refused).await, 404, "{refused}");
    }
    for (method, path) in [
        (reqwest::Method::POST, "/gate/room/api/admin/queues/drop/pause"),
        (reqwest::Method::PUT, "/gate/room/api/admin/queues/drop/brand"),
    ] {
        let r = client().request(method, gate.url(path)).header("authorization", "Bearer x").send().await.unwrap();
        assert_eq!(r.status(), 404, "{path}");
    }
    assert_eq!(api.seen().len(), before, "nothing of the back office reached queue-api");
    assert_eq!(client().get(gate.url("/gate/other")).send().await.unwrap().status(), 404);
    assert!(app.seen().is_empty(), "nothing under /gate/ reached the app");
    gate.stop().await;
}

async fn refused_tokens(b: Backend) {
    let s = ValkeyServer::start(b);
    let dir = tempfile::tempdir().unwrap();
    let key = key_file(dir.path(), "k.pem");
    let ours = Keys::from_files(&[&key]).unwrap();
    let theirs = Keys::from_files(&[key_file(dir.path(), "other.pem")]).unwrap();
    let app = Upstream::start().await;
    let gate = Gate::start(config(&s, Some(app.addr), &key)).await;
    let claims = |aud: &str, exp: u64| Claims {
        iss: ISSUER.into(),
        aud: aud.into(),
        sub: "u-x".into(),
        sid: format!("sid-{aud}-{exp}"),
        iat: now_s(),
        exp,
        auth_time: now_s(),
    };
    // Control: a token of ours for this queue passes (no lease needed within a tick).
    let good = ours.sign(&claims("drop", now_s() + 600));
    let forged = {
        let parts: Vec<&str> = good.split('.').collect();
        let mut c = claims("drop", now_s() + 600);
        c.sub = "u-admin".into();
        use base64::Engine;
        let payload = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(serde_json::to_vec(&c).unwrap());
        format!("{}.{payload}.{}", parts[0], parts[2])
    };
    let cases = [
        ("forged", forged, "invalid"),
        ("another key", theirs.sign(&claims("drop", now_s() + 600)), "invalid"),
        ("expired", ours.sign(&claims("drop", now_s() - 1)), "expired"),
        ("another queue", ours.sign(&claims("concert", now_s() + 600)), "other_queue"),
        ("garbage", "not.a.token".to_string(), "invalid"),
    ];
    for (what, token, outcome) in cases {
        let r = client()
            .get(gate.url("/gate/auth"))
            .header("x-forwarded-uri", "/checkout")
            .header("cookie", format!("queue_admission={token}"))
            .header("accept", HTML)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 302, "{what}");
        assert_eq!(r.headers()["x-queue-decision"], outcome, "{what}");
        let r = browse(&gate, "/checkout", Some(&format!("queue_admission={token}"))).await;
        assert_eq!(r.status(), 302, "{what} through the proxy");
    }
    assert!(app.unadmitted("/checkout").is_empty());
    assert!(app.seen().is_empty(), "nothing reached the app");
    let r = browse(&gate, "/checkout", Some(&format!("queue_admission={good}"))).await;
    assert_eq!(r.text().await.unwrap(), "app:u-x", "the control passes");
    gate.stop().await;
}

async fn lapsed_lease_ends_access_within_a_tick(b: Backend) {
    let s = ValkeyServer::builder(b).test_clock().start();
    let mut admin = s.conn();
    let clock = |admin: &mut redis::Connection, ms: u64| {
        redis::cmd("SET").arg(testkit::clock_key("drop")).arg(ms).query::<()>(admin).unwrap();
    };
    let start = queue_gate::now_ms();
    clock(&mut admin, start);
    let qc = queue_client(&s).await;
    let dir = tempfile::tempdir().unwrap();
    let app = Upstream::start().await;
    let gate = Gate::start(config(&s, Some(app.addr), &key_file(dir.path(), "k.pem"))).await;
    let cookie = claim(&gate, "drop", &ticket(&qc, "drop", "u-1").await).await;
    // Seen, so renewed each tick: still admitted after several ticks.
    for _ in 0..4 {
        assert_eq!(browse(&gate, "/checkout", Some(&cookie)).await.status(), 200);
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    // The lease runs out in Valkey (its clock jumps past session_lease).
    clock(&mut admin, start + 10 * 60_000);
    let refused =
        eventually(Duration::from_secs(5), async || browse(&gate, "/checkout", Some(&cookie)).await.status() == 302)
            .await;
    assert!(refused, "a lapsed lease ends access within a tick or so");
    let r = auth_as_nginx(&gate, "/checkout", &cookie).await;
    assert_eq!((r.status().as_u16(), r.headers()["x-queue-decision"].to_str().unwrap()), (401, "lapsed"));
    gate.stop().await;
}

async fn sessions_ended_by_the_app_and_by_leaving(b: Backend) {
    let Proxied { valkey: _s, qc, dir: _dir, app: _app, gate } = Proxied::start(ValkeyServer::start(b)).await;
    qc.config_set("drop", &[("soft_cap", 1)]).await.unwrap();

    let a = claim(&gate, "drop", &ticket(&qc, "drop", "u-a").await).await;
    assert_eq!(qc.enter("drop", "u-b", "b").await.unwrap().status, Status::Waiting);
    assert_eq!(browse(&gate, "/checkout", Some(&a)).await.status(), 200);
    // The app ends the session: the cookie is cleared, the next person promoted.
    let r = browse(&gate, "/checkout/done", Some(&a)).await;
    assert_eq!(r.status(), 200);
    assert!(r.headers().get("queue-session").is_none(), "the app's header stays with the gate");
    assert_eq!(admission(&r), None);
    assert_eq!(browse(&gate, "/checkout", Some(&a)).await.status(), 302);
    let promoted =
        eventually(Duration::from_secs(3), async || qc.status("drop", "u-b").await.unwrap().status == Status::Promoted)
            .await;
    assert!(promoted, "SESSION.END promoted the next person");

    let b_ticket = qc.status("drop", "u-b").await.unwrap().ticket_id.unwrap();
    let bc = claim(&gate, "drop", &b_ticket).await;
    assert_eq!(qc.enter("drop", "u-c", "c").await.unwrap().status, Status::Waiting);
    assert_eq!(browse(&gate, "/checkout", Some(&bc)).await.status(), 200);
    let r = client()
        .post(gate.url("/gate/leave?queue=drop&return=/bye"))
        .header("cookie", &bc)
        .header("accept", HTML)
        .send()
        .await
        .unwrap();
    assert_eq!((r.status().as_u16(), r.headers()["location"].to_str().unwrap()), (303, "/bye"));
    assert_eq!(admission(&r), None);
    assert_eq!(browse(&gate, "/checkout", Some(&bc)).await.status(), 302);
    assert_eq!(qc.status("drop", "u-c").await.unwrap().status, Status::Promoted, "promoted by the same command");
    gate.stop().await;
}

/// Forward auth on the fast path (the default): its own head parsing and writing.
async fn forward_auth_conventions(b: Backend) {
    forward_auth_conventions_on(b, true).await;
}

/// The same calls answered by hyper and the router (`--fast-path off`): both paths
/// must give the same answers.
async fn forward_auth_conventions_general_path(b: Backend) {
    forward_auth_conventions_on(b, false).await;
}

async fn forward_auth_conventions_on(b: Backend, fast: bool) {
    let Proxied { valkey: s, qc, dir, gate, .. } =
        Proxied::with(ValkeyServer::start(b), false, |c| c.fast_path = fast).await;
    let auth = |headers: &[(&str, &str)], path: &str| {
        let mut r = client().get(gate.url(path));
        for (k, v) in headers {
            r = r.header(*k, *v);
        }
        r.send()
    };
    // nginx: 401 with Location.
    let r = auth(&[("x-original-uri", "/checkout?a=1"), ("accept", HTML)], "/gate/auth").await.unwrap();
    assert_eq!(r.status(), 401);
    assert_eq!(r.headers()["location"], "/gate/room/?queue=drop&return=%2Fcheckout%3Fa%3D1");
    // Traefik, Caddy: 302.
    let r =
        auth(&[("x-forwarded-uri", "/checkout"), ("x-forwarded-host", "shop.test"), ("accept", HTML)], "/gate/auth")
            .await
            .unwrap();
    assert_eq!(r.status(), 302);
    // Envoy: the original path after the prefix.
    let r = auth(&[("accept", HTML)], "/gate/auth/checkout/pay?x=1").await.unwrap();
    assert_eq!(r.status(), 302);
    assert_eq!(r.headers()["location"], "/gate/room/?queue=drop&return=%2Fcheckout%2Fpay%3Fx%3D1");
    // Unmatched passes; no original URI is a clear 400.
    let r = auth(&[("x-forwarded-uri", "/about")], "/gate/auth").await.unwrap();
    assert_eq!((r.status().as_u16(), r.headers()["x-queue-decision"].to_str().unwrap()), (200, "unmatched"));
    assert_eq!(auth(&[], "/gate/auth").await.unwrap().status(), 400);
    // A proxy passing the client's Content-Length on a bodiless auth call (nginx's
    // auth_request without `proxy_set_header Content-Length ""`): answered at once,
    // as the router answers it, not after waiting out --request-timeout for a body.
    let asked = std::time::Instant::now();
    let call = "GET /gate/auth HTTP/1.1\r\nHost: shop.test\r\nX-Original-URI: /checkout\r\nContent-Length: 5\r\n\r\n";
    assert_eq!(raw_request_status(gate.addr, call).await, 401, "a call saying it has a body");
    assert!(asked.elapsed() < Duration::from_secs(5), "answered at once: {:?}", asked.elapsed());
    // Two conventions at once: a client chose one of them (Caddy and Traefik pass its
    // headers on), so neither is believed.
    for (spoofed, path) in [
        (("x-original-uri", "/about"), "/gate/auth"),
        (("x-forwarded-uri", "/about"), "/gate/auth/checkout"),
        (("x-original-uri", "/about"), "/gate/auth/checkout"),
    ] {
        let r = auth(&[spoofed, ("x-forwarded-uri", "/checkout"), ("accept", HTML)], path).await.unwrap();
        assert_eq!(r.status(), 403, "{spoofed:?} {path}");
    }
    // Admitted: 200 with the person and the queue.
    let cookie = claim(&gate, "drop", &ticket(&qc, "drop", "u-1").await).await;
    for h in [("x-original-uri", "/checkout"), ("x-forwarded-uri", "/checkout")] {
        let r = auth(&[h, ("cookie", &cookie)], "/gate/auth").await.unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(
            (r.headers()["x-queue-user"].to_str().unwrap(), r.headers()["x-queue-name"].to_str().unwrap()),
            ("u-1", "drop")
        );
    }
    // Bypass: the secret header and a listed network.
    let mut c = config(&s, None, &key_file(dir.path(), "k2.pem"));
    c.fast_path = fast;
    c.bypass_secret = Some("staff-secret-0123456789".into());
    c.rules.bypass_networks.push("10.9.0.0/16".parse().unwrap());
    let g2 = Gate::start(c).await;
    let r = client().get(g2.url("/gate/auth")).header("x-forwarded-uri", "/checkout");
    let r = r.header("x-queue-bypass", "staff-secret-0123456789").send().await.unwrap();
    assert_eq!((r.status().as_u16(), r.headers()["x-queue-decision"].to_str().unwrap()), (200, "bypass"));
    let r = client().get(g2.url("/gate/auth")).header("x-forwarded-uri", "/checkout");
    let r = r.header("x-queue-bypass", "staff-secret-0123456780").header("accept", HTML).send().await.unwrap();
    assert_eq!(r.status(), 302, "a wrong secret does not pass");
    // The network: only the last X-Forwarded-For entry (the one the proxy appended)
    // counts; earlier entries and X-Real-IP are the client's to choose.
    let net = |xff: Option<&'static str>, real_ip: Option<&'static str>| {
        let mut r = client().get(g2.url("/gate/auth")).header("x-forwarded-uri", "/checkout").header("accept", HTML);
        if let Some(x) = xff {
            r = r.header("x-forwarded-for", x);
        }
        if let Some(x) = real_ip {
            r = r.header("x-real-ip", x);
        }
        r.send()
    };
    assert_eq!(net(Some("1.2.3.4, 10.9.1.2"), None).await.unwrap().status(), 200, "the proxy saw 10.9.1.2");
    assert_eq!(net(Some("10.9.1.2, 1.2.3.4"), None).await.unwrap().status(), 302, "a client's own entry");
    assert_eq!(net(Some("1.2.3.4"), Some("10.9.1.2")).await.unwrap().status(), 302, "X-Real-IP not trusted");
    g2.stop().await;
    // A bypass network holding the proxy itself (here 127.0.0.1) lets no one through
    // on the proxy's address: without X-Forwarded-For the client is unknown.
    let mut c = config(&s, None, &key_file(dir.path(), "k4.pem"));
    c.fast_path = fast;
    c.rules.bypass_networks.push("127.0.0.0/8".parse().unwrap());
    let g4 = Gate::start(c).await;
    let r = client().get(g4.url("/gate/auth")).header("x-forwarded-uri", "/checkout").header("accept", HTML);
    assert_eq!(r.send().await.unwrap().status(), 302, "the peer is the proxy, not the client");
    g4.stop().await;
    // X-Real-IP only when named by --client-ip-header (then X-Forwarded-For is not read).
    let mut c = config(&s, None, &key_file(dir.path(), "k5.pem"));
    c.fast_path = fast;
    c.rules.bypass_networks.push("10.9.0.0/16".parse().unwrap());
    c.client_addrs = service_kit::ClientAddrs::new(&service_kit::ProxyFlags {
        client_ip_header: Some(axum::http::HeaderName::from_static("x-real-ip")),
        ..Default::default()
    });
    let g5 = Gate::start(c).await;
    let ask = |xff: &'static str, real_ip: &'static str| {
        client()
            .get(g5.url("/gate/auth"))
            .header("x-forwarded-uri", "/checkout")
            .header("accept", HTML)
            .header("x-forwarded-for", xff)
            .header("x-real-ip", real_ip)
            .send()
    };
    assert_eq!(ask("1.2.3.4", "10.9.1.2").await.unwrap().status(), 200);
    assert_eq!(ask("10.9.1.2", "1.2.3.4").await.unwrap().status(), 302);
    g5.stop().await;
    // A set convention reads only its own header.
    let mut c = config(&s, None, &key_file(dir.path(), "k3.pem"));
    c.fast_path = fast;
    c.auth_convention = queue_gate::config::AuthConvention::Forwarded;
    let g3 = Gate::start(c).await;
    let r =
        client().get(g3.url("/gate/auth")).header("x-original-uri", "/about").header("x-forwarded-uri", "/checkout");
    let r = r.header("accept", HTML).send().await.unwrap();
    assert_eq!((r.status().as_u16(), r.headers()["x-queue-decision"].to_str().unwrap()), (302, "waiting"));
    let r = client().get(g3.url("/gate/auth")).header("x-original-uri", "/checkout").send().await.unwrap();
    assert_eq!(r.status(), 400, "X-Original-URI is not read under --auth-convention forwarded");
    g3.stop().await;
    gate.stop().await;
}

async fn websocket_and_upload_through_the_proxy(b: Backend) {
    let Proxied { valkey: _s, qc, dir: _dir, app, gate } = Proxied::start(ValkeyServer::start(b)).await;
    let cookie = claim(&gate, "drop", &ticket(&qc, "drop", "u-1").await).await;

    // WebSocket: refused without an admission, echoed with one.
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    let ws_url = format!("ws://{}/ws", gate.addr);
    let refused = tokio_tungstenite::connect_async(ws_url.as_str()).await;
    assert!(refused.is_err(), "no upgrade without an admission");
    let mut req = ws_url.as_str().into_client_request().unwrap();
    req.headers_mut().insert("cookie", cookie.parse().unwrap());
    let (mut ws, resp) = tokio_tungstenite::connect_async(req).await.unwrap();
    assert_eq!(resp.status(), 101);
    for i in 0..20 {
        ws.send(tokio_tungstenite::tungstenite::Message::text(format!("m{i}"))).await.unwrap();
        let back = tokio::time::timeout(Duration::from_secs(5), ws.next()).await.unwrap().unwrap().unwrap();
        assert_eq!(back.into_text().unwrap().as_str(), format!("echo:m{i}"));
    }
    ws.close(None).await.unwrap();
    let seen = app.seen().into_iter().find(|s| s.path == "/ws").unwrap();
    assert_eq!(seen.user.as_deref(), Some("u-1"));

    // Upload: 64 MiB in 1 MiB chunks; the last chunk is held until the app has begun
    // receiving, which only a gate that streams (does not buffer) allows.
    const CHUNKS: usize = 64;
    const CHUNK: usize = 1 << 20;
    let started = app.upload_started.clone();
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<bytes::Bytes, std::io::Error>>(2);
    let producer = tokio::spawn(async move {
        let mut sum = 0u64;
        let mut streamed_before_end = false;
        for i in 0..CHUNKS {
            let chunk: Vec<u8> = (0..CHUNK).map(|j| ((i * 7 + j) % 251) as u8).collect();
            sum = chunk.iter().fold(sum, |s, b| s.wrapping_mul(31).wrapping_add(*b as u64));
            if i == CHUNKS - 1 {
                let deadline = std::time::Instant::now() + Duration::from_secs(10);
                while !started.load(std::sync::atomic::Ordering::SeqCst) && std::time::Instant::now() < deadline {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                streamed_before_end = started.load(std::sync::atomic::Ordering::SeqCst);
            }
            tx.send(Ok(bytes::Bytes::from(chunk))).await.unwrap();
        }
        (sum, streamed_before_end)
    });
    let body = reqwest::Body::wrap_stream(tokio_stream_from(rx));
    let r = client().post(gate.url("/upload")).header("cookie", &cookie).body(body).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let answer = r.text().await.unwrap();
    let (sum, streamed_before_end) = producer.await.unwrap();
    assert!(streamed_before_end, "the app got the first bytes before the client finished sending");
    assert_eq!(answer, format!("{} {sum}", CHUNKS * CHUNK), "every byte arrived, in order");
    // An unadmitted upload never reaches the app.
    let r = client().post(gate.url("/upload")).body("x").send().await.unwrap();
    assert_eq!(r.status(), 401);
    assert_eq!(app.seen().iter().filter(|s| s.path == "/upload").count(), 1);
    // Only WebSocket is tunnelled: an h2c upgrade on an ungated path (h2c smuggling
    // would open a raw channel past every later decision) reaches the app as a plain
    // request, its Upgrade and HTTP2-Settings dropped.
    let status = raw_request_status(
        gate.addr,
        "GET /about HTTP/1.1\r\nHost: shop.test\r\nUpgrade: h2c\r\nConnection: Upgrade, HTTP2-Settings\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n",
    )
    .await;
    assert_eq!(status, 200);
    let last = app.seen().pop().unwrap();
    assert_eq!((last.path.as_str(), last.upgrade.as_deref()), ("/about", None), "{last:?}");
    gate.stop().await;
}

fn tokio_stream_from<T: Send + 'static>(
    mut rx: tokio::sync::mpsc::Receiver<T>,
) -> impl futures_util::Stream<Item = T> + Send + 'static {
    futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

async fn valkey_away_admitted_pass_claims_503_then_fail_open(b: Backend) {
    let mut s = ValkeyServer::start(b);
    let qc = queue_client(&s).await;
    let dir = tempfile::tempdir().unwrap();
    let app = Upstream::start().await;
    let mut c = config(&s, Some(app.addr), &key_file(dir.path(), "k.pem"));
    c.fail_open = Some(Duration::from_secs(2));
    let gate = Gate::start(c).await;
    let cookie = claim(&gate, "drop", &ticket(&qc, "drop", "u-1").await).await;
    let spare = ticket(&qc, "drop", "u-2").await;
    assert_eq!(browse(&gate, "/checkout", None).await.status(), 302);

    s.kill();
    let down = eventually(Duration::from_secs(10), async || {
        client().get(gate.url("/gate/healthz")).send().await.unwrap().status() == 503
    })
    .await;
    assert!(down, "the gate notices Valkey is away");
    // Admitted people keep access; claims are refused with Retry-After.
    assert_eq!(browse(&gate, "/checkout", Some(&cookie)).await.text().await.unwrap(), "app:u-1");
    let r = client().get(gate.url(&format!("/gate/claim?queue=drop&ticketId={spare}"))).send().await.unwrap();
    assert_eq!(r.status(), 503);
    assert_eq!(r.headers()["retry-after"], "2");
    // After the fail-open time, unadmitted requests pass too (and are counted).
    let open =
        eventually(Duration::from_secs(10), async || browse(&gate, "/checkout", None).await.status() == 200).await;
    assert!(open, "fail-open after the set time");
    let metrics = client().get(gate.url("/gate/metrics")).send().await.unwrap().text().await.unwrap();
    assert!(metrics.contains("gate_decisions_total{outcome=\"fail_open\"}"), "{metrics}");
    assert!(metrics.contains("gate_claims_total{outcome=\"unavailable\"} 1"), "{metrics}");
    gate.stop().await;
}

/// Open redirects: every refused return path sends the person to `/`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_redirect_attempts_go_home() {
    let Proxied { valkey: _s, qc, gate, .. } = Proxied::with(ValkeyServer::start(Backend::Module), false, |_| {}).await;
    let attempts = [
        "//evil.example",
        "https://evil.example",
        "/\\evil.example",
        "%2F%2Fevil.example",
        "/%2Fevil.example",
        "/%252F%252Fevil.example",
        "/%5Cevil.example",
        "/%09/evil.example",
        "javascript:alert(1)",
    ];
    for (i, attempt) in attempts.iter().enumerate() {
        let encoded = percent_encode(attempt);
        let r = client()
            .get(gate.url(&format!("/gate/leave?return={encoded}")))
            .header("accept", HTML)
            .header("sec-fetch-site", "same-origin")
            .send()
            .await
            .unwrap();
        assert_eq!((r.status().as_u16(), r.headers()["location"].to_str().unwrap()), (303, "/"), "leave {attempt}");
        let t = ticket(&qc, "drop", &format!("u-{i}")).await;
        let r = client()
            .get(gate.url(&format!("/gate/claim?queue=drop&ticketId={t}&return={encoded}")))
            .header("accept", HTML)
            .send()
            .await
            .unwrap();
        assert_eq!((r.status().as_u16(), r.headers()["location"].to_str().unwrap()), (303, "/"), "claim {attempt}");
    }
    let r = client()
        .get(gate.url("/gate/leave?return=%2Fcheckout%3Fa%3D1"))
        .header("accept", HTML)
        .header("sec-fetch-site", "same-origin")
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["location"], "/checkout?a=1", "a same-site path is kept");
    gate.stop().await;
}

fn percent_encode(s: &str) -> String {
    s.bytes().map(|b| if b.is_ascii_alphanumeric() { (b as char).to_string() } else { format!("%{b:02X}") }).collect()
}

/// The JWKS verified by an independent library: PyJWT (with cryptography) accepts a
/// token the gate issued against the published keys, EdDSA and ES256, and refuses a
/// tampered one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jwks_verified_by_pyjwt() {
    let s = ValkeyServer::start(Backend::Module);
    let qc = queue_client(&s).await;
    let dir = tempfile::tempdir().unwrap();
    let p256 = dir.path().join("p256.pem");
    let made = std::process::Command::new("openssl")
        .args(["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out"])
        .arg(&p256)
        .status()
        .expect("openssl");
    assert!(made.success());
    for (i, first) in [key_file(dir.path(), "ed.pem"), p256.clone()].into_iter().enumerate() {
        let mut c = config(&s, None, &first);
        c.keys = std::sync::Arc::new(
            Keys::from_files(&[first.clone(), if i == 0 { p256.clone() } else { key_file(dir.path(), "ed2.pem") }])
                .unwrap(),
        );
        let alg = c.keys.signing_alg().name();
        let gate = Gate::start(c).await;
        let jwks = client().get(gate.url("/.well-known/jwks.json")).send().await.unwrap().text().await.unwrap();
        let cookie = claim(&gate, "drop", &ticket(&qc, "drop", &format!("py-{i}")).await).await;
        let token = cookie.strip_prefix("queue_admission=").unwrap().to_string();
        let mut tampered: Vec<u8> = token.clone().into_bytes();
        let mid = token.find('.').unwrap() + 5;
        tampered[mid] = if tampered[mid] == b'A' { b'B' } else { b'A' };
        let tampered = String::from_utf8(tampered).unwrap();
        let out = std::process::Command::new("python3")
            .arg("-c")
            .arg(PY_VERIFY)
            .arg(&jwks)
            .arg(&token)
            .arg(&tampered)
            .output()
            .expect("python3");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{alg}: {stdout} {}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(stdout.trim(), format!("ok {alg} py-{i} drop\nrefused"), "{alg}");
        gate.stop().await;
    }
}

const PY_VERIFY: &str = r#"
import json, sys, jwt
jwks, token, tampered = sys.argv[1], sys.argv[2], sys.argv[3]
keys = jwt.PyJWKSet.from_json(jwks)
def verify(t):
    kid = jwt.get_unverified_header(t)["kid"]
    key = keys[kid]
    return jwt.decode(t, key.key, algorithms=[key.algorithm_name], audience="drop", issuer="valkey-queue-gate")
claims = verify(token)
print("ok", jwt.get_unverified_header(token)["alg"], claims["sub"], claims["aud"])
try:
    verify(tampered)
    print("accepted")
except jwt.InvalidTokenError:
    print("refused")
"#;

/// Two gate instances share nothing but Valkey: a person admitted at one is admitted
/// at the other (same keys), and leaving at one ends access at the other within a tick.
async fn two_instances_share_only_valkey(b: Backend) {
    let s = ValkeyServer::start(b);
    let qc = queue_client(&s).await;
    let dir = tempfile::tempdir().unwrap();
    let key = key_file(dir.path(), "k.pem");
    let app = Upstream::start().await;
    let one = Gate::start(config(&s, Some(app.addr), &key)).await;
    let two = Gate::start(config(&s, Some(app.addr), &key)).await;
    let cookie = claim(&one, "drop", &ticket(&qc, "drop", "u-1").await).await;
    assert_eq!(browse(&two, "/checkout", Some(&cookie)).await.text().await.unwrap(), "app:u-1");
    // Seen at both for a few ticks: both renew, neither ends it.
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(browse(&two, "/checkout", Some(&cookie)).await.status(), 200);
        assert_eq!(browse(&one, "/checkout", Some(&cookie)).await.status(), 200);
    }
    let r = client().get(one.url("/gate/leave?queue=drop")).header("cookie", &cookie).send().await.unwrap();
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(body["left"], true);
    let ended =
        eventually(Duration::from_secs(5), async || browse(&two, "/checkout", Some(&cookie)).await.status() == 302)
            .await;
    assert!(ended, "the other instance ends access within a tick or so");
    one.stop().await;
    two.stop().await;
}

/// Admitted requests make no Valkey call: over many requests from many people the
/// server processes only the heartbeats (one per queue per tick).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admitted_requests_make_no_valkey_calls() {
    let Proxied { valkey: s, qc, dir: _dir, app: _app, gate } =
        Proxied::start(ValkeyServer::start(Backend::Module)).await;
    let mut cookies = Vec::new();
    for i in 0..20 {
        cookies.push(claim(&gate, "drop", &ticket(&qc, "drop", &format!("u-{i}")).await).await);
    }
    let mut admin = s.conn();
    let processed = |admin: &mut redis::Connection| -> u64 {
        let info: String = redis::cmd("INFO").arg("stats").query(admin).unwrap();
        info.lines().find_map(|l| l.strip_prefix("total_commands_processed:")?.trim().parse().ok()).unwrap()
    };
    let heartbeats = async || -> u64 {
        let text = client().get(gate.url("/gate/metrics")).send().await.unwrap().text().await.unwrap();
        text.lines().find_map(|l| l.strip_prefix("gate_heartbeat_calls_total ")?.trim().parse().ok()).unwrap_or(0)
    };
    // The gate declares its routes' queues once, as its connection comes up: done
    // before the measured requests.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !redis::cmd("SISMEMBER").arg("queue-registry").arg("drop").query::<bool>(&mut admin).unwrap() {
        assert!(std::time::Instant::now() < deadline, "the gate declares its queue");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // So does it describe itself for the back office (then not again for 10 s).
    while redis::cmd("HLEN").arg("gate:instances").query::<u64>(&mut admin).unwrap() == 0 {
        assert!(std::time::Instant::now() < deadline, "the gate describes itself");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (calls_before, beats_before) = (processed(&mut admin), heartbeats().await);
    let started = std::time::Instant::now();
    let mut served = 0;
    while started.elapsed() < Duration::from_millis(1200) {
        for c in &cookies {
            assert_eq!(browse(&gate, "/checkout", Some(c)).await.status(), 200);
            served += 1;
        }
    }
    let beats = heartbeats().await - beats_before;
    // The INFO call that reads the counter counts itself.
    let calls = processed(&mut admin) - calls_before - 1;
    let ticks = started.elapsed().as_millis() as u64 / 200 + 2;
    println!("{served} admitted requests, {calls} Valkey commands, {beats} heartbeats");
    assert!(served > 100);
    // (One heartbeat may be counted by the gate and not yet by the server, or the other way.)
    assert!(calls <= beats + 1 && beats <= calls + 1, "nothing but heartbeats reached Valkey");
    assert!(beats <= ticks, "one heartbeat per queue per tick for all 20 people: {beats} in {ticks} ticks");
    gate.stop().await;
}

/// Idle people are not renewed (their lease lapses, access ends); the longest session
/// ends a session that is still active (and promotes the next person); a token near
/// its expiry is renewed as a new cookie.
async fn idle_longest_session_and_renewal(b: Backend) {
    use queue_gate::rules::QueueSettings;
    let s = ValkeyServer::start(b);
    let qc = queue_client(&s).await;
    // A lease of 1.5 s: a heartbeat tick (200 ms) may come a second late on a busy
    // machine, and the idle person's lease still lapses (2 s idle + 1.5 s) before 4.5 s.
    qc.config_set("drop", &[("session_lease", 1500), ("soft_cap", 2)]).await.unwrap();
    qc.config_set("concert", &[("session_lease", 60_000), ("soft_cap", 1)]).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let app = Upstream::start().await;
    let mut c = config(&s, Some(app.addr), &key_file(dir.path(), "k.pem"));
    // Idle 2 s: tokens live at most that long (never past the lease), renewed once a second old.
    c.rules.queues.insert(
        "drop".into(),
        QueueSettings { idle: Duration::from_secs(2), max_session: None, straight_through: false },
    );
    c.rules.queues.insert(
        "concert".into(),
        QueueSettings {
            idle: Duration::from_secs(60),
            max_session: Some(Duration::from_secs(2)),
            straight_through: false,
        },
    );
    c.token_ttl = Duration::from_secs(3);
    let gate = Gate::start(c).await;

    // Idle: seen once, then silent past the idle time plus the lease.
    let idle = claim(&gate, "drop", &ticket(&qc, "drop", "u-idle").await).await;
    assert_eq!(browse(&gate, "/checkout", Some(&idle)).await.status(), 200);
    // Renewal: someone active keeps getting fresh tokens.
    let mut active = claim(&gate, "drop", &ticket(&qc, "drop", "u-active").await).await;
    let mut renewed = 0;
    let started = std::time::Instant::now();
    while started.elapsed() < Duration::from_millis(4500) {
        let r = browse(&gate, "/checkout", Some(&active)).await;
        assert_eq!(r.status(), 200, "an active person stays in, on renewed tokens");
        if let Some(fresh) = admission(&r) {
            active = format!("queue_admission={fresh}");
            renewed += 1;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(renewed >= 2, "renewed {renewed} times in 4.5 s with a 2 s token");
    assert_eq!(qc.heartbeat("drop", &["u-idle"]).await.unwrap(), [false], "the idle person's lease lapsed");
    assert_eq!(qc.heartbeat("drop", &["u-active"]).await.unwrap(), [true]);

    // Longest session: still active, but out after 2 s; the next person is promoted.
    let long = claim(&gate, "concert", &ticket(&qc, "concert", "u-long").await).await;
    assert_eq!(qc.enter("concert", "u-next", "n").await.unwrap().status, Status::Waiting);
    let r = browse(&gate, "/tickets/1", Some(&long)).await;
    assert_eq!(r.status(), 200);
    assert!(admission(&r).is_none(), "a token capped by the longest session is not renewed (it could not move)");
    // Near its end still no renewal (with --renew-redirect that would be a loop).
    let end_ms = claims_of(&long).exp * 1000;
    tokio::time::sleep(Duration::from_millis(end_ms.saturating_sub(300).saturating_sub(queue_gate::now_ms()))).await;
    let r = browse(&gate, "/tickets/1", Some(&long)).await;
    assert!(r.status() != 200 || admission(&r).is_none(), "renewed a token the longest session caps");
    let out =
        eventually(Duration::from_secs(5), async || browse(&gate, "/tickets/1", Some(&long)).await.status() == 302)
            .await;
    assert!(out, "out after the longest session");
    let r = client()
        .get(gate.url("/gate/auth"))
        .header("x-forwarded-uri", "/tickets/1")
        .header("cookie", &long)
        .send()
        .await
        .unwrap();
    assert!(["max_session", "expired"].contains(&r.headers()["x-queue-decision"].to_str().unwrap()));
    let promoted = eventually(Duration::from_secs(3), async || {
        qc.status("concert", "u-next").await.unwrap().status == Status::Promoted
    })
    .await;
    assert!(promoted, "the longest session's end promoted the next person");
    gate.stop().await;
}

/// The claims of a token, unverified (the test's own look at what the gate issued).
fn claims_of(cookie: &str) -> Claims {
    use base64::Engine;
    let token = cookie.strip_prefix("queue_admission=").unwrap_or(cookie);
    let payload = token.split('.').nth(1).unwrap();
    serde_json::from_slice(&base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(payload).unwrap()).unwrap()
}

/// A token never outlives its lease: it lives at most the queue's idle time, so
/// someone who went idle and whose lease lapsed in Valkey is refused on their first
/// request back, at the instance that saw them and at one that never did (neither
/// has a heartbeat reply saying so: no one renewed the lease since).
async fn token_dies_before_its_lease_can_lapse(b: Backend) {
    use queue_gate::rules::QueueSettings;
    let s = ValkeyServer::start(b);
    let qc = queue_client(&s).await;
    // A lease longer than a tick plus a second: a token's expiry is rounded up to the
    // second, so it may outlive the idle time by under a second (docs/gate.md).
    qc.config_set("drop", &[("session_lease", 1500)]).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let key = key_file(dir.path(), "k.pem");
    let app = Upstream::start().await;
    let settings = |c: &mut queue_gate::Config| {
        c.rules.queues.insert(
            "drop".into(),
            QueueSettings { idle: Duration::from_secs(2), max_session: None, straight_through: false },
        );
        c.token_ttl = Duration::from_secs(600);
    };
    let mut c = config(&s, Some(app.addr), &key);
    settings(&mut c);
    let gate = Gate::start(c).await;
    let cookie = claim(&gate, "drop", &ticket(&qc, "drop", "u-1").await).await;
    let issued = claims_of(&cookie);
    assert!(issued.exp - issued.iat <= 3, "the token lives the idle time, rounded up to the second: {issued:?}");
    assert_eq!(browse(&gate, "/checkout", Some(&cookie)).await.status(), 200);
    // Silent past the idle time (no more renewals) and the lease (1.5 s).
    tokio::time::sleep(Duration::from_millis(3800)).await;
    let r = browse(&gate, "/checkout", Some(&cookie)).await;
    assert_eq!(r.status(), 302, "refused on the first request back");
    let mut c = config(&s, Some(app.addr), &key);
    settings(&mut c);
    let other = Gate::start(c).await;
    let r = auth_as_nginx(&other, "/checkout", &cookie).await;
    assert_eq!((r.status().as_u16(), r.headers()["x-queue-decision"].to_str().unwrap()), (401, "expired"));
    assert_eq!(browse(&other, "/checkout", Some(&cookie)).await.status(), 302, "nor at another instance");
    assert_eq!(qc.heartbeat("drop", &["u-1"]).await.unwrap(), [false], "the lease had lapsed");
    assert_eq!(app.seen().iter().filter(|s| s.path == "/checkout").count(), 1, "one request reached the app");
    other.stop().await;
    gate.stop().await;
}

/// Opens a WebSocket to /ws through `gate` with `cookie`; echoes once.
async fn open_ws(
    gate: &Gate,
    cookie: &str,
) -> tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>> {
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    let mut req = format!("ws://{}/ws", gate.addr).into_client_request().unwrap();
    req.headers_mut().insert("cookie", cookie.parse().unwrap());
    let (mut ws, resp) = tokio_tungstenite::connect_async(req).await.unwrap();
    assert_eq!(resp.status(), 101);
    echoes(&mut ws, "hello").await;
    ws
}

async fn echoes(
    ws: &mut tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>,
    text: &str,
) {
    ws.send(tokio_tungstenite::tungstenite::Message::text(text)).await.unwrap();
    let back = tokio::time::timeout(Duration::from_secs(5), ws.next()).await.unwrap().unwrap().unwrap();
    assert_eq!(back.into_text().unwrap().as_str(), format!("echo:{text}"));
}

/// Whether the tunnel is closed within `within`: the next read ends (a close, an
/// error or the end of the stream) rather than waiting.
async fn closed_within(
    ws: &mut tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>,
    within: Duration,
) -> bool {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline, ws.next()).await {
            Err(_) => return false,
            Ok(None) | Ok(Some(Err(_))) => return true,
            Ok(Some(Ok(m))) if m.is_close() => return true,
            Ok(Some(Ok(_))) => continue,
        }
    }
}

/// An open WebSocket tunnel lives as long as its session: it stays open (and its
/// person renewed) while the session lives, and is closed within a tick (200 ms
/// here) once the session ends: the person leaves, the app answers
/// `Queue-Session: end` to another request, the lease lapses in Valkey, the longest
/// session is reached.
async fn websocket_closed_when_the_session_ends(b: Backend) {
    use queue_gate::rules::QueueSettings;
    let s = ValkeyServer::builder(b).test_clock().start();
    let mut admin = s.conn();
    let start = queue_gate::now_ms();
    redis::cmd("SET").arg(testkit::clock_key("drop")).arg(start).query::<()>(&mut admin).unwrap();
    let qc = queue_client(&s).await;
    let dir = tempfile::tempdir().unwrap();
    let key = key_file(dir.path(), "k.pem");
    let app = Upstream::start().await;
    let gate = Gate::start(config(&s, Some(app.addr), &key)).await;
    // A tick or so; the bound only catches "never" on a busy machine.
    let within = Duration::from_secs(5);

    // Open across several ticks while the session lives.
    let cookie = claim(&gate, "drop", &ticket(&qc, "drop", "u-leave").await).await;
    let mut ws = open_ws(&gate, &cookie).await;
    tokio::time::sleep(Duration::from_millis(700)).await;
    echoes(&mut ws, "still here").await;
    let r = leave_here(&gate, "drop", &cookie).await;
    assert_eq!(r.status(), 200);
    assert!(closed_within(&mut ws, within).await, "closed after /gate/leave");

    let cookie = claim(&gate, "drop", &ticket(&qc, "drop", "u-app").await).await;
    let mut ws = open_ws(&gate, &cookie).await;
    assert_eq!(browse(&gate, "/checkout/done", Some(&cookie)).await.status(), 200);
    assert!(closed_within(&mut ws, within).await, "closed after the app ended the session");

    let cookie = claim(&gate, "drop", &ticket(&qc, "drop", "u-lapse").await).await;
    let mut ws = open_ws(&gate, &cookie).await;
    redis::cmd("SET").arg(testkit::clock_key("drop")).arg(start + 10 * 60_000).query::<()>(&mut admin).unwrap();
    assert!(closed_within(&mut ws, within).await, "closed once the lease lapsed in Valkey");
    gate.stop().await;

    // The longest session (2 s), reached with the tunnel open and nothing else sent.
    redis::cmd("SET").arg(testkit::clock_key("drop")).arg(queue_gate::now_ms()).query::<()>(&mut admin).unwrap();
    let mut c = config(&s, Some(app.addr), &key);
    c.rules.queues.insert(
        "drop".into(),
        QueueSettings {
            idle: Duration::from_secs(300),
            max_session: Some(Duration::from_secs(2)),
            straight_through: false,
        },
    );
    let gate = Gate::start(c).await;
    let cookie = claim(&gate, "drop", &ticket(&qc, "drop", "u-long").await).await;
    let mut ws = open_ws(&gate, &cookie).await;
    assert!(!closed_within(&mut ws, Duration::from_millis(500)).await, "open before the longest session");
    assert!(closed_within(&mut ws, Duration::from_secs(5)).await, "closed at the longest session");
    gate.stop().await;
}

/// SESSION.END is not lost while Valkey is away: a person who leaves then has their
/// END kept and sent once Valkey is back, and the next person is promoted long
/// before the lease (60 s) would have lapsed by itself.
async fn session_end_kept_while_valkey_is_away(b: Backend) {
    // AOF written at every command: a kill -9 loses nothing.
    let valkey = ValkeyServer::builder(b).arg("--appendonly").arg("yes").arg("--appendfsync").arg("always").start();
    let Proxied { valkey: mut s, qc, dir: _dir, app: _app, gate } = Proxied::start(valkey).await;
    qc.config_set("drop", &[("soft_cap", 1), ("session_lease", 60_000)]).await.unwrap();
    let a = claim(&gate, "drop", &ticket(&qc, "drop", "u-a").await).await;
    assert_eq!(qc.enter("drop", "u-b", "b").await.unwrap().status, Status::Waiting);
    assert_eq!(browse(&gate, "/checkout", Some(&a)).await.status(), 200);

    s.kill();
    let down = eventually(Duration::from_secs(10), async || {
        client().get(gate.url("/gate/healthz")).send().await.unwrap().status() == 503
    })
    .await;
    assert!(down, "the gate notices Valkey is away");
    let r = leave_here(&gate, "drop", &a).await;
    assert_eq!(r.status(), 200);
    assert_eq!(browse(&gate, "/checkout", Some(&a)).await.status(), 302, "access ends at once");
    let pending = async || {
        let text = client().get(gate.url("/gate/metrics")).send().await.unwrap().text().await.unwrap();
        text.lines().find_map(|l| l.strip_prefix("gate_ends_pending ")?.trim().parse::<f64>().ok()).unwrap_or(0.0)
    };
    assert!(eventually(Duration::from_secs(5), async || pending().await == 1.0).await, "the END is kept");
    tokio::time::sleep(Duration::from_millis(500)).await;

    s.restart();
    let qc = queue_client(&s).await;
    let promoted = eventually(Duration::from_secs(10), async || {
        qc.status("drop", "u-b").await.unwrap().status == Status::Promoted
    })
    .await;
    assert!(promoted, "the kept SESSION.END reached Valkey and promoted the next person");
    assert_eq!(qc.heartbeat("drop", &["u-a"]).await.unwrap(), [false], "u-a's lease is gone");
    assert!(eventually(Duration::from_secs(3), async || pending().await == 0.0).await);
    gate.stop().await;
}

/// A page of another site cannot end someone's session nor claim a ticket in their
/// browser; this site's pages, the person and non-browser clients can.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leave_and_claim_refuse_other_sites() {
    let Proxied { valkey: _s, qc, dir: _dir, app: _app, gate } =
        Proxied::start(ValkeyServer::start(Backend::Module)).await;
    let cookie = claim(&gate, "drop", &ticket(&qc, "drop", "u-1").await).await;
    let leave = |method: reqwest::Method, headers: &[(&'static str, &'static str)]| {
        let mut r = client().request(method, gate.url("/gate/leave?queue=drop&return=/bye")).header("cookie", &cookie);
        for (k, v) in headers {
            r = r.header(*k, *v);
        }
        r.send()
    };
    use reqwest::Method;
    // A link or redirect from another site (a top-level GET, which carries the Lax
    // cookie), a sibling host, or an old browser's unmarked navigation: a page with a
    // button, nothing ended.
    for headers in [
        &[("accept", HTML), ("sec-fetch-site", "cross-site")][..],
        &[("accept", HTML), ("sec-fetch-site", "same-site")][..],
        &[("accept", HTML)][..],
    ] {
        let r = leave(Method::GET, headers).await.unwrap();
        assert_eq!(r.status(), 200, "{headers:?}");
        assert!(r.headers().get("set-cookie").is_none(), "{headers:?}");
        let page = r.text().await.unwrap();
        assert!(page.contains("<form method=\"post\" action=\"leave?queue=drop&amp;return=/bye\">"), "{page}");
        assert_eq!(browse(&gate, "/checkout", Some(&cookie)).await.status(), 200, "{headers:?}: still inside");
    }
    // Scripted or posted from elsewhere: 403.
    for (method, headers) in [
        (Method::POST, &[("sec-fetch-site", "cross-site")][..]),
        (Method::POST, &[("origin", "http://evil.test")][..]),
        (Method::POST, &[("origin", "null")][..]),
        (Method::GET, &[("accept", "application/json"), ("sec-fetch-site", "cross-site")][..]),
        (Method::GET, &[("origin", "http://evil.test")][..]),
    ] {
        let r = leave(method.clone(), headers).await.unwrap();
        assert_eq!(r.status(), 403, "{method} {headers:?}");
        assert_eq!(browse(&gate, "/checkout", Some(&cookie)).await.status(), 200, "{headers:?}: still inside");
    }
    assert_eq!(qc.heartbeat("drop", &["u-1"]).await.unwrap(), [true], "the lease is whole");
    // The page's own button (a POST from this origin) ends it.
    let host = gate.addr.to_string();
    let origin = format!("http://{host}");
    let r = client()
        .post(gate.url("/gate/leave?queue=drop&return=/bye"))
        .header("cookie", &cookie)
        .header("accept", HTML)
        .header("origin", &origin)
        .send()
        .await
        .unwrap();
    assert_eq!((r.status().as_u16(), r.headers()["location"].to_str().unwrap()), (303, "/bye"));
    assert_eq!(admission(&r), None);
    assert_eq!(browse(&gate, "/checkout", Some(&cookie)).await.status(), 302);
    // A same-origin link works as a GET; so does a client without browser headers.
    for (i, headers) in [&[("accept", HTML), ("sec-fetch-site", "same-origin")][..], &[][..]].into_iter().enumerate() {
        let c = claim(&gate, "drop", &ticket(&qc, "drop", &format!("u-{}", i + 2)).await).await;
        let mut r = client().get(gate.url("/gate/leave?queue=drop")).header("cookie", &c);
        for (k, v) in headers {
            r = r.header(*k, *v);
        }
        assert!(r.send().await.unwrap().status().as_u16() < 400);
        assert_eq!(browse(&gate, "/checkout", Some(&c)).await.status(), 302, "{headers:?}: left");
    }

    // A claim sent from another site is refused (the ticket is kept); from the
    // sibling host's waiting room (same-site) or this site it works.
    let t = ticket(&qc, "drop", "u-claim").await;
    let url = gate.url(&format!("/gate/claim?queue=drop&ticketId={t}&return=/checkout"));
    let r = client().get(&url).header("accept", HTML).header("sec-fetch-site", "cross-site").send().await.unwrap();
    assert_eq!(r.status(), 403);
    assert!(r.headers().get("set-cookie").is_none());
    let r = client().get(&url).header("accept", HTML).header("sec-fetch-site", "same-site").send().await.unwrap();
    assert_eq!(r.status(), 303, "the ticket was kept and claims from the same site");
    assert!(admission(&r).is_some());
    gate.stop().await;
}

/// --renew-redirect: a browser's GET whose token is due for renewal is sent through
/// /gate/renew (in the proxy's convention), which sets the fresh cookie and comes
/// back; other requests get the cookie on the 200 as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewal_by_redirect_in_forward_auth() {
    use queue_gate::rules::QueueSettings;
    let Proxied { valkey: _s, qc, gate, .. } = Proxied::with(ValkeyServer::start(Backend::Module), false, |c| {
        c.rules.queues.insert(
            "drop".into(),
            QueueSettings { idle: Duration::from_secs(3), max_session: None, straight_through: false },
        );
        c.renew_redirect = true;
    })
    .await;
    let cookie = claim(&gate, "drop", &ticket(&qc, "drop", "u-1").await).await;
    let auth = |cookie: &str, headers: &[(&'static str, &'static str)]| {
        let mut r =
            client().get(gate.url("/gate/auth")).header("cookie", cookie).header("x-forwarded-uri", "/checkout?a=1");
        for (k, v) in headers {
            r = r.header(*k, *v);
        }
        r.send()
    };
    let r = auth(&cookie, &[("accept", HTML)]).await.unwrap();
    assert_eq!((r.status().as_u16(), r.headers().get("set-cookie").is_none()), (200, true), "not yet due");
    // Due once a second of the 3 s is gone (here: a second left).
    let exp = claims_of(&cookie).exp;
    let due_at = Duration::from_millis((exp * 1000).saturating_sub(1000).saturating_sub(queue_gate::now_ms()));
    tokio::time::sleep(due_at + Duration::from_millis(50)).await;
    let r = auth(&cookie, &[("accept", "application/json")]).await.unwrap();
    assert_eq!(r.status(), 200);
    assert!(admission(&r).is_some(), "a non-navigation gets the cookie on the 200");
    let r = auth(&cookie, &[("accept", HTML), ("x-forwarded-method", "POST")]).await.unwrap();
    assert_eq!(r.status(), 200, "a POST is never redirected");
    let r = auth(&cookie, &[("accept", HTML)]).await.unwrap();
    assert_eq!(r.status(), 302);
    assert_eq!(r.headers()["x-queue-decision"], "renew");
    let to = r.headers()["location"].to_str().unwrap().to_string();
    assert_eq!(to, "/gate/renew?queue=drop&return=%2Fcheckout%3Fa%3D1");
    assert!(r.headers().get("set-cookie").is_none());
    let r = client().get(gate.url(&to)).header("cookie", &cookie).header("accept", HTML).send().await.unwrap();
    assert_eq!((r.status().as_u16(), r.headers()["location"].to_str().unwrap()), (303, "/checkout?a=1"));
    let fresh = format!("queue_admission={}", admission(&r).expect("a fresh cookie"));
    assert_eq!(claims_of(&fresh).sid, claims_of(&cookie).sid, "the same session");
    assert!(claims_of(&fresh).exp > exp);
    let r = auth(&fresh, &[("accept", HTML)]).await.unwrap();
    assert_eq!((r.status().as_u16(), r.headers()["x-queue-user"].to_str().unwrap()), (200, "u-1"));
    // /gate/renew with nothing to renew, or an open redirect: back (home), no cookie.
    let r = client().get(gate.url("/gate/renew?queue=drop&return=%2F%2Fevil.test")).send().await.unwrap();
    assert_eq!((r.status().as_u16(), r.headers()["location"].to_str().unwrap()), (303, "/"));
    assert!(r.headers().get("set-cookie").is_none());
    gate.stop().await;
}

/// One person per admitted visitor: someone admitted who reaches the waiting room again
/// (Back after admission, a bookmark, a second tab) is sent straight back to the app on
/// the admission they hold, in proxy and in forward-auth mode, with the same
/// X-Queue-User; nothing of it reaches queue-api (here the logging app stands in for
/// it) and no second place is taken. Another queue's room, no admission, an admission
/// given up: the room is served as before.
async fn an_admitted_visitor_back_at_the_room_goes_back_to_the_app(b: Backend) {
    for proxy in [true, false] {
        let api = Upstream::start().await;
        let api_url = format!("http://{}", api.addr);
        let Proxied { valkey: _s, qc, dir: _dir, app: _app, gate } =
            Proxied::with(ValkeyServer::start(b), proxy, |c| c.queue_api = Some(api_url.parse().unwrap())).await;
        qc.config_set("drop", &[("soft_cap", 5)]).await.unwrap();
        qc.config_set("concert", &[("soft_cap", 5)]).await.unwrap();
        let t = ticket(&qc, "drop", "u-1").await;
        let cookie = claim(&gate, "drop", &t).await;
        let counts = async || {
            let i = qc.info("drop").await.unwrap();
            (i.waiting, i.joining, i.active)
        };
        let before = counts().await;
        assert_eq!(before, (0, 0, 1), "u-1 inside");

        // Back after admission: the room's page, with the way back the gate gave.
        let r = browse(&gate, "/gate/room/?queue=drop&return=%2Fcheckout%2Fcart%3Fx%3D1", Some(&cookie)).await;
        assert_eq!(r.status(), 303, "proxy {proxy}: an admitted visitor is not offered a place again");
        let back = r.headers()["location"].to_str().unwrap().to_string();
        assert_eq!(back, "/checkout/cart?x=1");
        assert_eq!(r.headers()["cache-control"], "no-store");
        // ... where the same person is admitted.
        if proxy {
            assert_eq!(browse(&gate, &back, Some(&cookie)).await.text().await.unwrap(), "app:u-1");
        } else {
            let r = auth_as_nginx(&gate, &back, &cookie).await;
            assert_eq!((r.status().as_u16(), r.headers()["x-queue-user"].to_str().unwrap()), (200, "u-1"));
        }
        // The bare /gate/room goes to /gate/room/ first; a bookmark without a way back
        // goes to /; a return to another site goes to / too; a Bearer token counts.
        let r = browse(&gate, "/gate/room?queue=drop", Some(&cookie)).await;
        assert_eq!(r.headers()["location"], "/gate/room/?queue=drop");
        let r = browse(&gate, "/gate/room/?queue=drop", Some(&cookie)).await;
        assert_eq!((r.status().as_u16(), r.headers()["location"].to_str().unwrap()), (303, "/"));
        let r = browse(&gate, "/gate/room/?queue=drop&return=%2F%2Fevil.example", Some(&cookie)).await;
        assert_eq!((r.status().as_u16(), r.headers()["location"].to_str().unwrap()), (303, "/"));
        let token = cookie.strip_prefix("queue_admission=").unwrap();
        let r = client().get(gate.url("/gate/room/?queue=drop&return=%2Fcheckout")).bearer_auth(token).send().await;
        assert_eq!(r.unwrap().status(), 303);
        // The used ticket again from this browser (a second tab promoted with the first,
        // a page kept by Back): back to the app too; without the admission, refused.
        let used = format!("/gate/claim?queue=drop&ticketId={t}&return=%2Fcheckout");
        let r = browse(&gate, &used, Some(&cookie)).await;
        assert_eq!((r.status().as_u16(), r.headers()["location"].to_str().unwrap()), (303, "/checkout"));
        assert_eq!(admission(&r), None, "the admission is kept as it is");
        assert_eq!(browse(&gate, &used, None).await.status(), 401);
        assert!(api.seen().is_empty(), "nothing reached queue-api: {:?}", api.seen());
        assert_eq!(counts().await, before, "no second place taken");

        // Another queue's room, and the room without an admission: served.
        let r = browse(&gate, "/gate/room/?queue=concert&return=%2Ftickets%2F", Some(&cookie)).await;
        assert_eq!((r.status().as_u16(), api.seen().len()), (200, 1), "another queue's room");
        assert_eq!(browse(&gate, "/gate/room/?queue=drop&return=%2Fcheckout", None).await.status(), 200);
        // Its script and API are served to the admitted too (only the page is the way in).
        assert_eq!(browse(&gate, "/gate/room/app.js", Some(&cookie)).await.status(), 200);
        // Once the admission is given up, the room is the room again.
        assert_eq!(leave_here(&gate, "drop", &cookie).await.status(), 200);
        assert_eq!(browse(&gate, "/gate/room/?queue=drop&return=%2Fcheckout", Some(&cookie)).await.status(), 200);
        assert_eq!(api.seen().len(), 4);
        gate.stop().await;
    }
}
