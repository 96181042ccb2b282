//! A sale's end over real sockets against a real valkey-server, with the module and
//! with the Lua library: the operator's message, sold out and closed reach the open
//! push streams of TWO queue-api instances through the change log (their tick is a
//! minute, so nothing else could bring them), a stream opened later gets the state
//! first, entries are refused with `closed` / `sold_out`, bad bodies change nothing;
//! a branding change reaches open streams; the room's `__Host-` place cookie over
//! HTTPS, its `noindex`, and the cap on registered pollers.

use futures_util::StreamExt;
use serde_json::{json, Value};
use std::time::{Duration, Instant};
use testkit::{Backend, ValkeyServer};

mod common;
use common::Api;

const TOKEN: &str = "sale-admin";

testkit::backend_tests!(
    async
    a_sales_end_reaches_open_streams_on_two_instances,
    the_message_endpoints_bad_inputs_change_nothing,
    a_branding_change_reaches_open_streams,
    over_https_the_place_cookie_is_held_to_the_host,
    the_room_is_kept_out_of_search_indexes,
    pollers_past_the_cap_are_read_from_valkey,
);

/// How long an event may take here at most (generous: a busy machine); the change
/// log delivers it in milliseconds, the tick (a minute) never in time.
const EVENT_BOUND: Duration = Duration::from_secs(5);

/// One open push stream, read event by event.
struct Stream {
    body: std::pin::Pin<Box<dyn futures_util::Stream<Item = reqwest::Result<bytes::Bytes>> + Send>>,
    text: String,
}

impl Stream {
    async fn open(api: &Api, user: &str) -> Stream {
        let resp = reqwest::get(api.url(&format!("/api/queue/stream?userId={user}"))).await.unwrap();
        assert_eq!(resp.status(), 200);
        Stream { body: Box::pin(resp.bytes_stream()), text: String::new() }
    }

    /// The next event of any name: (name, data).
    async fn next(&mut self) -> (String, Value) {
        let deadline = Instant::now() + EVENT_BOUND;
        loop {
            if let Some(i) = self.text.find("\n\n") {
                let block: String = self.text.drain(..i + 2).collect();
                let name = block.lines().find_map(|l| l.strip_prefix("event: ")).unwrap_or("");
                let Some(data) = block.lines().find_map(|l| l.strip_prefix("data: ")) else { continue };
                return (name.to_string(), serde_json::from_str(data).unwrap());
            }
            let left = deadline.saturating_duration_since(Instant::now());
            let chunk =
                tokio::time::timeout(left, self.body.next()).await.expect("an event in time").expect("open").unwrap();
            self.text.push_str(&String::from_utf8_lossy(&chunk));
        }
    }

    /// The next event named `want`, skipping others (positions); how long it took.
    async fn until(&mut self, want: &str) -> (Value, Duration) {
        let started = Instant::now();
        loop {
            let (name, data) = self.next().await;
            if name == want {
                return (data, started.elapsed());
            }
        }
    }
}

async fn admin(api: &Api, method: reqwest::Method, path: &str, body: Option<&str>) -> (u16, Value) {
    let mut r = api.http.request(method, api.url(&format!("/api/admin/queues/{path}"))).bearer_auth(TOKEN);
    if let Some(b) = body {
        r = r.header("content-type", "application/json").body(b.to_string());
    }
    let r = r.send().await.unwrap();
    (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
}

async fn enter(api: &Api, nickname: &str) -> (u16, Value) {
    let r = api.http.post(api.url("/api/queue/entry")).json(&json!({ "nickname": nickname })).send().await.unwrap();
    (r.status().as_u16(), r.json().await.unwrap())
}

/// A server, a client, and two instances whose tick is a minute (only the change log
/// can tell their streams in time).
async fn two_instances(b: Backend) -> (ValkeyServer, queue_client::QueueClient, Api, Api) {
    let s = ValkeyServer::start(b);
    let qc = queue_client::QueueClient::connect(&s.url()).await.unwrap();
    qc.config_set("default", &[("soft_cap", 0)]).await.unwrap();
    let config = || {
        let mut c = queue_api::Config::local(&s.url());
        c.push_tick = Duration::from_secs(60);
        c
    };
    let a = Api::start_admin(config(), TOKEN).await;
    let b = Api::start_admin(config(), TOKEN).await;
    (s, qc, a, b)
}

async fn a_sales_end_reaches_open_streams_on_two_instances(b: Backend) {
    let (_s, qc, api_a, api_b) = two_instances(b).await;
    let (_, ann) = enter(&api_a, "ann").await;
    let (_, ben) = enter(&api_b, "ben").await;
    let mut on_a = Stream::open(&api_a, ann["userId"].as_str().unwrap()).await;
    let mut on_b = Stream::open(&api_b, ben["userId"].as_str().unwrap()).await;
    on_a.until("position").await;
    on_b.until("position").await;

    // The message: one write, both instances' streams.
    let (code, v) =
        admin(&api_a, reqwest::Method::PUT, "default/message", Some(r#"{"text": "Doors at 8 — 残りわずか"}"#)).await;
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["counts"]["message"], "Doors at 8 — 残りわずか", "{v}");
    for s in [&mut on_a, &mut on_b] {
        let (m, took) = s.until("message").await;
        assert_eq!(m["text"], "Doors at 8 — 残りわずか", "{m}");
        println!("message reached a stream in {took:?}");
    }

    // Sold out: the inventory set by hand, then the app reports the last unit sold.
    let (code, v) = admin(&api_b, reqwest::Method::PUT, "default", Some(r#"{"inventory": 1}"#)).await;
    assert_eq!((code, v["counts"]["inventory"].clone()), (200, json!(1)), "{v}");
    let (code, v) = admin(&api_b, reqwest::Method::POST, "default/inventory", Some(r#"{"sold": 1}"#)).await;
    assert_eq!(code, 200, "{v}");
    assert_eq!((v["counts"]["inventory"].clone(), v["counts"]["soldOut"].clone()), (json!(0), json!(true)), "{v}");
    for s in [&mut on_a, &mut on_b] {
        let (e, took) = s.until("soldOut").await;
        assert_eq!(e["soldOut"], true, "{e}");
        println!("soldOut reached a stream in {took:?}");
    }
    let (code, refused) = enter(&api_a, "cat").await;
    assert_eq!((code, refused["error"].clone()), (409, json!("sold_out")), "{refused}");
    // More stock: no longer sold out, told too.
    let (code, _) = admin(&api_a, reqwest::Method::PUT, "default", Some(r#"{"inventory": null}"#)).await;
    assert_eq!(code, 200);
    for s in [&mut on_a, &mut on_b] {
        assert_eq!(s.until("soldOut").await.0["soldOut"], false);
    }

    // Closed: a closing time in the past.
    let past = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64 - 1000;
    let (code, v) =
        admin(&api_a, reqwest::Method::PUT, "default", Some(&json!({ "closes_at": past }).to_string())).await;
    assert_eq!((code, v["counts"]["closed"].clone()), (200, json!(true)), "{v}");
    for s in [&mut on_a, &mut on_b] {
        let (e, took) = s.until("closed").await;
        assert_eq!(e["closed"], true, "{e}");
        println!("closed reached a stream in {took:?}");
    }
    let (code, refused) = enter(&api_b, "dan").await;
    assert_eq!((code, refused["error"].clone()), (410, json!("closed")), "{refused}");
    assert_eq!(qc.info("default").await.unwrap().waiting, 2, "nobody new got in");

    // A stream opened later gets the state first: closed, then the message.
    let mut later = Stream::open(&api_b, ann["userId"].as_str().unwrap()).await;
    assert_eq!(later.next().await, ("closed".to_string(), json!({ "queue": "default", "closed": true })));
    let (name, m) = later.next().await;
    assert_eq!((name.as_str(), m["text"].clone()), ("message", json!("Doors at 8 — 残りわずか")));
    assert_eq!(later.next().await.0, "position");

    // Cleared: an empty text; reopened: closes_at null.
    let (code, _) = admin(&api_b, reqwest::Method::PUT, "default/message", Some(r#"{"text": ""}"#)).await;
    assert_eq!(code, 200);
    for s in [&mut on_a, &mut on_b, &mut later] {
        assert_eq!(s.until("message").await.0["text"], "");
    }
    let (code, v) = admin(&api_a, reqwest::Method::PUT, "default", Some(r#"{"closes_at": null}"#)).await;
    assert_eq!(
        (code, v["counts"]["closed"].clone(), v["counts"]["closesAt"].clone()),
        (200, json!(false), Value::Null)
    );
    for s in [&mut on_a, &mut on_b] {
        assert_eq!(s.until("closed").await.0["closed"], false);
    }
    let (code, _) = enter(&api_b, "dan").await;
    assert_eq!(code, 200, "open again");
    api_a.stop().await;
    api_b.stop().await;
}

async fn the_message_endpoints_bad_inputs_change_nothing(b: Backend) {
    let (_s, qc, api, other) = two_instances(b).await;
    other.stop().await;
    let (code, _) = admin(&api, reqwest::Method::PUT, "default/message", Some(r#"{"text": "kept"}"#)).await;
    assert_eq!(code, 200);
    let long = "x".repeat(501);
    let cases: Vec<(String, u16, &str)> = vec![
        (json!({ "text": long }).to_string(), 422, "text"),
        // 167 three-byte characters: 501 bytes, though fewer characters.
        (json!({ "text": "あ".repeat(167) }).to_string(), 422, "text"),
        (r#"{"text": "line one\nline two"}"#.into(), 422, "text"),
        (r#"{"text": 5}"#.into(), 422, "text"),
        (r#"{"text": ["a"]}"#.into(), 422, "text"),
        (r#"{}"#.into(), 422, "text"),
        (r#"{"text": "a", "txet": "b"}"#.into(), 400, "txet"),
        (r#"{"text": "#.into(), 400, ""),
        (r#"["text"]"#.into(), 400, ""),
        ("not json".into(), 400, ""),
    ];
    for (body, want, field) in &cases {
        let (code, v) = admin(&api, reqwest::Method::PUT, "default/message", Some(body)).await;
        assert_eq!(code, *want, "{body}: {v}");
        assert!(v["error"].is_string() && v["message"].as_str().is_some_and(|m| !m.is_empty()), "{body}: {v}");
        if !field.is_empty() {
            assert_eq!(v["field"], *field, "{body}: {v}");
        }
        assert_eq!(qc.info("default").await.unwrap().message, "kept", "{body} changed nothing");
    }
    // Exactly 500 bytes is taken.
    let (code, _) =
        admin(&api, reqwest::Method::PUT, "default/message", Some(&json!({ "text": "y".repeat(500) }).to_string()))
            .await;
    assert_eq!(code, 200);
    // The inventory report's bad inputs, the settings' too: nothing changes.
    admin(&api, reqwest::Method::PUT, "default", Some(r#"{"inventory": 10}"#)).await;
    for (body, want) in [
        (r#"{"sold": -1}"#, 400),
        (r#"{"sold": "3"}"#, 422),
        (r#"{"sold": 1.5}"#, 422),
        (r#"{}"#, 422),
        (r#"{"sold": 1, "userId": 7}"#, 422),
        (r#"{"sold": 1, "extra": 1}"#, 400),
        (r#"{"sold": 1000000000001}"#, 400),
    ] {
        let (code, v) = admin(&api, reqwest::Method::POST, "default/inventory", Some(body)).await;
        assert_eq!(code, want, "{body}: {v}");
        assert_eq!(qc.info("default").await.unwrap().inventory, Some(10), "{body} changed nothing");
    }
    for (body, want) in [
        (r#"{"inventory": "ten"}"#, 422),
        (r#"{"inventory": -2}"#, 400),
        (r#"{"inventory": 5, "soft_cap": -1}"#, 400),
        (r#"{"closes_at": "tomorrow"}"#, 422),
    ] {
        let (code, v) = admin(&api, reqwest::Method::PUT, "default", Some(body)).await;
        assert_eq!(code, want, "{body}: {v}");
        let info = qc.info("default").await.unwrap();
        assert_eq!((info.inventory, info.config.closes_at()), (Some(10), 0), "{body} changed nothing");
    }
    // An unknown queue: 404, nothing made.
    let (code, v) = admin(&api, reqwest::Method::PUT, "nosuch/message", Some(r#"{"text": "hi"}"#)).await;
    assert_eq!((code, v["error"].clone()), (404, json!("unknown_queue")), "{v}");
    // Without the token: 401.
    let r = api.http.put(api.url("/api/admin/queues/default/message")).json(&json!({ "text": "x" })).send().await;
    assert_eq!(r.unwrap().status().as_u16(), 401);
    assert_eq!(qc.info("default").await.unwrap().message, "y".repeat(500));
    api.stop().await;
}

async fn a_branding_change_reaches_open_streams(b: Backend) {
    let (_s, _qc, api_a, api_b) = two_instances(b).await;
    let (_, ann) = enter(&api_a, "ann").await;
    let mut on_a = Stream::open(&api_a, ann["userId"].as_str().unwrap()).await;
    let mut on_b = Stream::open(&api_b, ann["userId"].as_str().unwrap()).await;
    on_a.until("position").await;
    on_b.until("position").await;
    let (code, v) =
        admin(&api_a, reqwest::Method::PUT, "default/brand", Some(r##"{"title": "Launch", "accent": "#123456"}"##))
            .await;
    assert_eq!(code, 200, "{v}");
    for s in [&mut on_a, &mut on_b] {
        let (e, took) = s.until("brand").await;
        assert_eq!(e["brand"], json!({ "title": "Launch", "accent": "#123456" }), "{e}");
        println!("brand reached a stream in {took:?}");
    }
    api_a.stop().await;
    api_b.stop().await;
}

async fn over_https_the_place_cookie_is_held_to_the_host(b: Backend) {
    let s = ValkeyServer::start(b);
    let qc = queue_client::QueueClient::connect(&s.url()).await.unwrap();
    qc.config_set("default", &[("soft_cap", 0)]).await.unwrap();
    let mut config = queue_api::Config::local(&s.url());
    config.proxy.trust_proxy = true;
    config.rate_limit = 0.0;
    let api = Api::start(config).await;
    let post = |proto: &'static str, cookie: Option<String>| {
        let mut r = api
            .http
            .post(api.url("/api/queue/entry"))
            .header("x-forwarded-proto", proto)
            .json(&json!({ "nickname": "ann" }));
        if let Some(c) = cookie {
            r = r.header("cookie", c);
        }
        async move {
            let r = r.send().await.unwrap();
            let set = r.headers().get("set-cookie").map(|v| v.to_str().unwrap().to_string());
            (set, r.json::<Value>().await.unwrap())
        }
    };
    let (set, ann) = post("https", None).await;
    let set = set.expect("a place cookie");
    assert!(set.starts_with("__Host-queue_place_default="), "{set}");
    assert!(set.contains("; Path=/") && set.contains("; Secure") && !set.to_lowercase().contains("domain"), "{set}");
    let id = ann["userId"].as_str().unwrap();
    // The __Host- cookie gets the place back; it wins over an old-name cookie (what a
    // sibling subdomain could have planted) naming someone else.
    let (_, planted) = post("http", None).await;
    let planted = planted["userId"].as_str().unwrap();
    let both = format!("queue_place_default={planted}; __Host-queue_place_default={id}");
    let (_, again) = post("https", Some(both)).await;
    assert_eq!(again["userId"], id, "{again}");
    // Over HTTPS an old-name cookie alone (what a sibling subdomain could plant for
    // a new visitor) names nobody: the entry is a new person, and the planted place
    // is not carried into a __Host- cookie.
    let (set, fresh) = post("https", Some(format!("queue_place_default={planted}"))).await;
    assert_ne!(fresh["userId"], planted, "{fresh}");
    assert!(!set.expect("a place cookie").contains(planted));
    // Over plain HTTP, the old cookie as before.
    let (set, _) = post("http", None).await;
    assert!(set.unwrap().starts_with("queue_place_default="));
    api.stop().await;
}

async fn the_room_is_kept_out_of_search_indexes(b: Backend) {
    let s = ValkeyServer::start(b);
    let api = Api::start(queue_api::Config::local(&s.url())).await;
    let r = api.http.get(api.url("/")).send().await.unwrap();
    assert_eq!(r.headers().get("x-robots-tag").and_then(|v| v.to_str().ok()), Some("noindex"));
    let html = r.text().await.unwrap();
    assert!(html.contains(r#"<meta name="robots" content="noindex">"#), "{html}");
    api.stop().await;
}

async fn pollers_past_the_cap_are_read_from_valkey(b: Backend) {
    let s = ValkeyServer::start(b);
    let qc = queue_client::QueueClient::connect(&s.url()).await.unwrap();
    qc.config_set("default", &[("soft_cap", 0)]).await.unwrap();
    let mut config = queue_api::Config::local(&s.url());
    config.status_from_follower = true;
    config.max_pollers = 2;
    config.rate_limit = 0.0;
    let api = Api::start(config).await;
    let mut users = Vec::new();
    for i in 0..5 {
        let (_, v) = enter(&api, &format!("p{i}")).await;
        users.push(v["userId"].as_str().unwrap().to_string());
    }
    // Every poll is answered, registered or not, with the right rank.
    for round in 0..3 {
        for (i, u) in users.iter().enumerate() {
            let r = api.http.get(api.url(&format!("/api/queue/status?userId={u}"))).send().await.unwrap();
            let st: Value = r.json().await.unwrap();
            assert_eq!(st["rank"], i as u64 + 1, "round {round}: {st}");
        }
    }
    let metrics = api.http.get(api.url("/metrics")).send().await.unwrap().text().await.unwrap();
    let refused: f64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("queue_api_pollers_refused_total "))
        .map(|v| v.trim().parse().unwrap())
        .unwrap_or(0.0);
    // Three of five are past the cap: refused when they entered (an entry through the
    // instance registers its person) and at each of their polls (three rounds).
    assert_eq!(refused, 12.0, "{metrics}");
    api.stop().await;
}
