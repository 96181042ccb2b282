//! queue-api over real sockets against a real valkey-server, with the module and
//! with the Lua library.

use futures_util::StreamExt;
use serde_json::{json, Value};
use std::time::{Duration, Instant};
use testkit::{Backend, ValkeyServer};

mod common;
use common::Api;

async fn post_entry(api: &Api, body: Value) -> (u16, Value) {
    let r = reqwest::Client::new().post(api.url("/api/queue/entry")).json(&body).send().await.unwrap();
    (r.status().as_u16(), r.json().await.unwrap())
}

async fn get_json(url: &str) -> (u16, Value) {
    let r = reqwest::get(url).await.unwrap();
    (r.status().as_u16(), r.json().await.unwrap())
}

async fn client_for(s: &ValkeyServer) -> queue_client::QueueClient {
    queue_client::QueueClient::connect(&s.url()).await.unwrap()
}

testkit::backend_tests!(
    async
    seed_contract,
    sse_delivers_position_and_ticket,
    bad_input_is_refused_cleanly,
    leaving_gives_the_place_away,
    reentry_with_the_kept_user_id_moves_to_the_back,
    a_browsers_place_cookie_gets_its_place_back,
    proof_of_work_at_entry,
    a_full_line_answers_503_with_retry_after,
    concurrent_status_reads_each_see_the_line_after_they_arrive,
    push_streams_follow_the_change_log,
    published_changes_reach_streams_and_lost_ones_are_read,
    a_log_written_anew_asks_everyone_again,
    the_log_tells_the_promoted_their_tickets_and_who_left,
);

/// Every status answer in a burst of concurrent requests (many people, some asked
/// about several times at once) matches the line as the rules make it, and a burst
/// sent after a change sees the change: reads are gathered into shared calls, never
/// served from an earlier answer. With Valkey gone the burst gets 503s, and then
/// answers again.
async fn concurrent_status_reads_each_see_the_line_after_they_arrive(b: Backend) {
    let mut s = ValkeyServer::start(b);
    let qc = client_for(&s).await;
    qc.config_set("default", &[("soft_cap", 0), ("abandon_after", 0)]).await.unwrap();
    let mut config = queue_api::Config::local(&s.url());
    config.rate_limit = 0.0;
    let api = Api::start(config).await;
    let http = reqwest::Client::new();
    // The model: people in entry order; the first `promoted` of them hold tickets.
    let people: Vec<String> = (0..60).map(|i| format!("person-{i}")).collect();
    for p in &people {
        qc.enter("default", p, "n").await.unwrap();
    }
    let burst = |asked: Vec<usize>| {
        let (http, api, people) = (http.clone(), api.url("/api/queue/status?userId="), people.clone());
        async move {
            let calls = asked.iter().map(|&i| {
                let (http, url) = (http.clone(), format!("{api}{}", people[i]));
                async move {
                    let r = http.get(url).send().await.unwrap();
                    (i, r.status().as_u16(), r.json::<Value>().await.unwrap())
                }
            });
            futures_util::future::join_all(calls).await
        }
    };
    // Everyone, each three times, shuffled by a fixed stride, all at once.
    let asked: Vec<usize> = (0..180).map(|k| (k * 37) % 60).collect();
    for promoted in [0usize, 7, 20] {
        if promoted > 0 {
            qc.config_set("default", &[("soft_cap", promoted as i64)]).await.unwrap();
            qc.promote("default", None).await.unwrap();
        }
        for (i, code, v) in burst(asked.clone()).await {
            assert_eq!(code, 200, "{v}");
            assert_eq!(v["userId"], json!(people[i]), "{v}");
            if i < promoted {
                assert_eq!((v["status"].clone(), v["rank"].clone()), (json!("PROMOTED"), json!(0)), "{i}: {v}");
                assert!(v["ticketId"].is_string(), "{v}");
            } else {
                let rank = i - promoted + 1;
                assert_eq!((v["status"].clone(), v["rank"].clone()), (json!("WAITING"), json!(rank)), "{i}: {v}");
            }
        }
    }
    // Someone nobody knows, among people who are known.
    let (code, v) = get_json(&api.url("/api/queue/status?userId=nobody")).await;
    assert_eq!((code, v["error"].clone()), (404, json!("not_found")), "{v}");
    if b == Backend::Module {
        // The 540 reads and the lone one went to Valkey in fewer calls.
        let info: String = redis::cmd("INFO").arg("commandstats").query(&mut s.conn()).unwrap();
        let calls: u64 = info
            .lines()
            .find_map(|l| l.strip_prefix("cmdstat_queue.ranks:calls="))
            .and_then(|l| l.split(',').next()?.parse().ok())
            .expect("QUEUE.RANKS was called");
        assert!(calls < 541, "{calls} calls for 541 reads");
    }
    s.kill();
    for (_, code, v) in burst((0..20).collect()).await {
        assert_eq!(code, 503, "{v}");
    }
    s.restart();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (code, v) = get_json(&api.url(&format!("/api/queue/status?userId={}", people[59]))).await;
        if code != 503 {
            // The restarted server kept nothing (no persistence in tests).
            assert_eq!((code, v["error"].clone()), (404, json!("not_found")), "{v}");
            break;
        }
        assert!(Instant::now() < deadline, "did not recover: {code} {v}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    api.stop().await;
}

/// `max_waiting`: a newcomer past it gets 503, error `line_full` and Retry-After;
/// someone already waiting still gets their standing; the refusals are counted.
async fn a_full_line_answers_503_with_retry_after(b: Backend) {
    let s = ValkeyServer::start(b);
    let qc = client_for(&s).await;
    qc.config_set("default", &[("soft_cap", 0), ("max_waiting", 2)]).await.unwrap();
    let api = Api::start(queue_api::Config::local(&s.url())).await;
    let (_, first) = post_entry(&api, json!({ "nickname": "a" })).await;
    post_entry(&api, json!({ "nickname": "b" })).await;
    let r = reqwest::Client::new()
        .post(api.url("/api/queue/entry"))
        .json(&json!({ "nickname": "c" }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 503);
    assert_eq!(r.headers()["retry-after"], "30");
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"], "line_full", "{body}");
    assert_eq!(qc.info("default").await.unwrap().waiting, 2, "nobody was added");
    let (code, again) = post_entry(&api, json!({ "nickname": "a", "userId": first["userId"] })).await;
    assert_eq!((code, again["rank"].as_i64()), (200, Some(2)), "{again}");
    let metrics = reqwest::get(api.url("/metrics")).await.unwrap().text().await.unwrap();
    assert!(metrics.lines().any(|l| l == "queue_api_line_full_total 1"), "{metrics}");
    api.stop().await;
}

/// Seed 002: entering again with the userId given before moves that person to the
/// back of the line (one entry, not two); an id this service did not give is refused.
async fn reentry_with_the_kept_user_id_moves_to_the_back(b: Backend) {
    let s = ValkeyServer::start(b);
    let qc = client_for(&s).await;
    qc.config_set("default", &[("soft_cap", 0)]).await.unwrap();
    let api = Api::start(queue_api::Config::local(&s.url())).await;
    let mut ids = Vec::new();
    for n in ["ann", "ben", "cat"] {
        let (code, e) = post_entry(&api, json!({ "nickname": n })).await;
        assert_eq!((code, e["rank"].clone()), (200, json!(ids.len() + 1)), "{e}");
        ids.push(e["userId"].as_str().unwrap().to_string());
    }
    let (code, again) = post_entry(&api, json!({ "nickname": "ann2", "userId": ids[0] })).await;
    assert_eq!(code, 200, "{again}");
    assert_eq!(
        (again["userId"].as_str(), again["rank"].clone(), again["nickname"].clone()),
        (Some(ids[0].as_str()), json!(3), json!("ann2"))
    );
    let (_, ben) = get_json(&api.url(&format!("/api/queue/status?userId={}", ids[1]))).await;
    assert_eq!(ben["rank"], 1, "ben moved up");
    assert_eq!(qc.info("default").await.unwrap().waiting, 3, "still three people");
    for bad in [json!("not-a-uuid"), json!(42)] {
        let (code, e) = post_entry(&api, json!({ "nickname": "x", "userId": bad })).await;
        assert_eq!(code, 400, "{e}");
    }
    api.stop().await;
}

/// An entry as a browser sends it, with `cookie` (the Cookie header) if any: the
/// status, the body and the place cookie the answer sets (the whole Set-Cookie).
async fn post_entry_as_browser(api: &Api, body: Value, cookie: Option<&str>) -> (u16, Value, Option<String>) {
    let mut r = reqwest::Client::new().post(api.url("/api/queue/entry")).json(&body);
    if let Some(c) = cookie {
        r = r.header("cookie", c);
    }
    let r = r.send().await.unwrap();
    let set = r.headers().get("set-cookie").map(|v| v.to_str().unwrap().to_string());
    (r.status().as_u16(), r.json().await.unwrap(), set)
}

/// One place per browser: an entry's answer sets the place cookie naming its person;
/// an entry carrying it while that person waits, holds a ticket or is inside gets the
/// same standing back (same userId, same rank, same ticket) and changes nothing: no
/// second person, no move to the back, no proof of work asked, whatever userId or
/// nickname the body names. A cookie naming someone gone, or another queue's, enters
/// anew. Clients without the cookie keep seed 002's re-entry (the test above).
async fn a_browsers_place_cookie_gets_its_place_back(b: Backend) {
    let s = ValkeyServer::start(b);
    let qc = client_for(&s).await;
    qc.config_set("default", &[("soft_cap", 1)]).await.unwrap();
    qc.config_set("other", &[("soft_cap", 0)]).await.unwrap();
    let api = Api::start(queue_api::Config::local(&s.url())).await;
    let (_, holder, _) = post_entry_as_browser(&api, json!({ "nickname": "holder" }), None).await;
    assert_eq!(holder["status"], "PROMOTED", "{holder}");
    let (code, ann, set) = post_entry_as_browser(&api, json!({ "nickname": "ann" }), None).await;
    assert_eq!((code, ann["status"].as_str(), ann["rank"].as_i64()), (200, Some("WAITING"), Some(1)), "{ann}");
    let ann_id = ann["userId"].as_str().unwrap().to_string();
    // What the browser sends back (checked against the answer's Set-Cookie below).
    let cookie = format!("queue_place_default={ann_id}");
    post_entry_as_browser(&api, json!({ "nickname": "ben" }), None).await;
    let counts = async || {
        let i = qc.info("default").await.unwrap();
        (i.waiting, i.joining, i.active, i.promoted)
    };
    let before = counts().await;
    assert_eq!(before, (2, 1, 0, 1));

    // Back, a reload with an empty form, a second tab: the same place, nothing changed.
    for body in [
        json!({ "nickname": "ann" }),
        json!({ "nickname": "someone else" }),
        json!({ "nickname": "ann", "userId": ann_id }),
        json!({ "nickname": "ann", "userId": uuid_like(7) }),
    ] {
        let (code, again, set) = post_entry_as_browser(&api, body.clone(), Some(&cookie)).await;
        assert_eq!(code, 200, "{again}");
        assert_eq!(
            (again["userId"].as_str(), again["rank"].as_i64(), again["status"].as_str(), again["nickname"].as_str()),
            (Some(ann_id.as_str()), Some(1), Some("WAITING"), Some("ann")),
            "{body} -> {again}"
        );
        assert_eq!(counts().await, before, "{body}: no second place, no move to the back");
        assert!(set.unwrap().starts_with(&cookie), "the cookie is set again");
    }
    // The cookie: no Path (the browser scopes it to the API's directory, under the
    // gate's /gate/room/ prefix too), script cannot read it, sent on same-site requests.
    assert_eq!(set.as_deref(), Some(format!("{cookie}; Max-Age=86400; HttpOnly; SameSite=Lax").as_str()));
    // No proof of work for a place already held (nothing is written for it).
    qc.config_set("default", &[("pow_difficulty", 20)]).await.unwrap();
    let (code, again, _) = post_entry_as_browser(&api, json!({ "nickname": "ann" }), Some(&cookie)).await;
    assert_eq!((code, again["userId"].as_str()), (200, Some(ann_id.as_str())), "{again}");
    qc.config_set("default", &[("pow_difficulty", 0)]).await.unwrap();

    // A promoted person's browser gets the same ticket back; inside, the same person.
    let holder_cookie = format!("queue_place_default={}", holder["userId"].as_str().unwrap());
    let (_, again, _) = post_entry_as_browser(&api, json!({ "nickname": "holder" }), Some(&holder_cookie)).await;
    assert_eq!((again["status"].as_str(), again["ticketId"].clone()), (Some("PROMOTED"), holder["ticketId"].clone()));
    assert_eq!(counts().await, before);
    qc.claim("default", holder["ticketId"].as_str().unwrap()).await.unwrap();
    let inside = counts().await;
    let (_, again, _) = post_entry_as_browser(&api, json!({ "nickname": "holder" }), Some(&holder_cookie)).await;
    assert_eq!((again["status"].as_str(), again["userId"].clone()), (Some("ACTIVE"), holder["userId"].clone()));
    assert_eq!(counts().await, inside, "the person inside is not put in line again");

    // Another queue's cookie, a cookie that is no UUID: a new place.
    let (_, other, _) =
        post_entry_as_browser(&api, json!({ "nickname": "ann", "queue": "other" }), Some(&cookie)).await;
    assert_ne!(other["userId"].as_str(), Some(ann_id.as_str()), "{other}");
    let (_, junk, _) = post_entry_as_browser(&api, json!({ "nickname": "x" }), Some("queue_place_default=x")).await;
    assert_eq!(junk["rank"], 3, "{junk}");
    // Ann left: her cookie names nobody any more, and she enters anew, at the back.
    assert_eq!(delete_entry(&api, &format!("?userId={ann_id}")).await.0, 200);
    let (_, anew, set) = post_entry_as_browser(&api, json!({ "nickname": "ann" }), Some(&cookie)).await;
    assert_eq!((anew["status"].as_str(), anew["rank"].as_i64()), (Some("WAITING"), Some(3)), "{anew}");
    assert_ne!(anew["userId"].as_str(), Some(ann_id.as_str()));
    assert!(set.unwrap().starts_with(&format!("queue_place_default={}", anew["userId"].as_str().unwrap())));
    api.stop().await;
}

/// A UUID-shaped id nobody was given.
fn uuid_like(n: u8) -> String {
    format!("00000000-0000-4000-8000-0000000000{n:02}")
}

async fn seed_contract(b: Backend) {
    let s = ValkeyServer::start(b);
    let qc = client_for(&s).await;
    qc.config_set("default", &[("soft_cap", 1)]).await.unwrap();
    let api = Api::start(queue_api::Config::local(&s.url())).await;
    // The first is let in at once, the second waits.
    let (code, first) = post_entry(&api, json!({ "nickname": "alice" })).await;
    assert_eq!(code, 200, "{first}");
    assert_eq!(first["status"], "PROMOTED");
    assert_eq!(first["rank"], 0);
    let (_, second) = post_entry(&api, json!({ "nickname": "bob" })).await;
    assert_eq!(second["status"], "WAITING");
    assert_eq!(second["rank"], 1);
    let user = second["userId"].as_str().unwrap().to_string();
    assert_eq!(user.len(), 36, "a UUID: {user}");
    let (code, st) = get_json(&api.url(&format!("/api/queue/status?userId={user}"))).await;
    assert_eq!(code, 200);
    assert_eq!(
        (st["status"].clone(), st["rank"].clone(), st["ticketId"].clone()),
        (json!("WAITING"), json!(1), Value::Null)
    );
    let (code, st) =
        get_json(&api.url(&format!("/api/queue/status?userId={}", first["userId"].as_str().unwrap()))).await;
    assert_eq!((code, st["status"].clone()), (200, json!("PROMOTED")));
    assert!(st["ticketId"].is_string());
    // Other queues by name, once an operator declared them (404 before).
    let (code, other) = post_entry(&api, json!({ "nickname": "carol", "queue": "launch-2" })).await;
    assert_eq!((code, other["error"].clone()), (404, json!("unknown_queue")), "{other}");
    qc.config_set("launch-2", &[("soft_cap", 1000)]).await.unwrap();
    let (_, other) = post_entry(&api, json!({ "nickname": "carol", "queue": "launch-2" })).await;
    assert_eq!(other["queue"], "launch-2");
    let (code, _) = get_json(&api.url("/api/queue/status?userId=nobody-here")).await;
    assert_eq!(code, 404);
    api.stop().await;
}

async fn sse_delivers_position_and_ticket(b: Backend) {
    // The change log, not the tick, carries changes.
    let (_server, qc, api) = closed_queue_slow_tick(b).await;
    let (_, a) = post_entry(&api, json!({ "nickname": "a" })).await;
    let (_, b2) = post_entry(&api, json!({ "nickname": "b" })).await;
    let user = b2["userId"].as_str().unwrap();
    let resp = reqwest::get(api.url(&format!("/api/queue/stream?userId={user}"))).await.unwrap();
    assert_eq!(resp.status(), 200);
    let mut body = resp.bytes_stream();
    let mut text = String::new();
    let mut next_event = async |want: &str| -> Value {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(i) = text.find("\n\n") {
                let block: String = text.drain(..i + 2).collect();
                let name = block.lines().find_map(|l| l.strip_prefix("event: ")).unwrap_or("");
                let data = block.lines().find_map(|l| l.strip_prefix("data: ")).unwrap_or("");
                if name == want {
                    return serde_json::from_str(data).unwrap();
                }
                continue;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            let chunk =
                tokio::time::timeout(left, body.next()).await.expect("event in time").expect("stream open").unwrap();
            text.push_str(&String::from_utf8_lossy(&chunk));
        }
    };
    let pos = next_event("position").await;
    assert_eq!(pos["rank"], 2);
    // The first leaves: with the 60 s tick, only the change log (read every 50 ms and
    // at once on an announcement) can refresh us.
    qc.leave("default", a["userId"].as_str().unwrap()).await.unwrap();
    let event = queue_client::events::QueueEvent {
        queue: "default".into(),
        promoted: 0,
        waiting: 1,
        at_ms: 0,
        branding: false,
    };
    assert!(qc.publish_event(&event).await.unwrap() >= 1, "the api subscribes to announcements");
    let pos = next_event("position").await;
    assert_eq!(pos["rank"], 1);
    // How many wait in all, as of the refresh before (1 or 2 here), never below the rank.
    let total = pos["totalWaiting"].as_u64().unwrap_or_else(|| panic!("{pos}"));
    assert!((1..=2).contains(&total), "{pos}");
    // Promotion: the ticket arrives at once, then the stream ends.
    qc.config_set("default", &[("soft_cap", 5)]).await.unwrap();
    let report = qc.promote("default", None).await.unwrap();
    assert_eq!(report.promoted, 1);
    qc.publish_event(&event).await.unwrap();
    let promoted = next_event("promoted").await;
    assert!(promoted["ticketId"].is_string(), "{promoted}");
    assert_eq!(promoted["status"], "PROMOTED");
    api.stop().await;
}

async fn delete_entry(api: &Api, query: &str) -> (u16, Value) {
    let r = reqwest::Client::new().delete(api.url(&format!("/api/queue/entry{query}"))).send().await.unwrap();
    (r.status().as_u16(), r.json().await.unwrap())
}

async fn leaving_gives_the_place_away(b: Backend) {
    // Only the leave's own wake-up can end the stream in time.
    let (_server, qc, api) = closed_queue_slow_tick(b).await;
    let mut users = Vec::new();
    for nick in ["ann", "ben", "cat"] {
        let (_, v) = post_entry(&api, json!({ "nickname": nick })).await;
        users.push(v["userId"].as_str().unwrap().to_string());
    }
    let resp = reqwest::get(api.url(&format!("/api/queue/stream?userId={}", users[0]))).await.unwrap();
    let mut body = resp.bytes_stream();
    let first = tokio::time::timeout(Duration::from_secs(10), body.next()).await.unwrap().unwrap().unwrap();
    assert!(String::from_utf8_lossy(&first).contains("event: position"));

    let (code, v) = delete_entry(&api, &format!("?userId={}", users[0])).await;
    assert_eq!((code, v["left"].clone(), v["queue"].clone()), (200, json!(true), json!("default")), "{v}");
    // The leaver's stream says so and ends.
    let mut rest = String::new();
    let read = async {
        while let Some(chunk) = body.next().await {
            rest.push_str(&String::from_utf8_lossy(&chunk.unwrap()));
        }
    };
    tokio::time::timeout(Duration::from_secs(5), read).await.expect("the stream ends at once");
    assert!(rest.contains("event: unknown"), "{rest}");
    // Everyone behind moves up; the leaver is gone, and leaving twice finds nothing.
    let (_, st) = get_json(&api.url(&format!("/api/queue/status?userId={}", users[1]))).await;
    assert_eq!(st["rank"], 1);
    let (code, _) = get_json(&api.url(&format!("/api/queue/status?userId={}", users[0]))).await;
    assert_eq!(code, 404);
    let (code, v) = delete_entry(&api, &format!("?userId={}", users[0])).await;
    assert_eq!((code, v["error"].clone()), (404, json!("not_found")), "{v}");
    // A promoted user may give the ticket back: it no longer opens the door, and the
    // place goes to the next in line at once (inside QUEUE.LEAVE).
    qc.config_set("default", &[("soft_cap", 1)]).await.unwrap();
    assert_eq!(qc.promote("default", None).await.unwrap().promoted, 1);
    let ticket = qc.status("default", &users[1]).await.unwrap().ticket_id.expect("ben is promoted");
    assert_eq!(delete_entry(&api, &format!("?userId={}", users[1])).await.0, 200);
    assert!(qc.claim("default", &ticket).await.is_err(), "a given-back ticket is refused");
    let (_, st) = get_json(&api.url(&format!("/api/queue/status?userId={}", users[2]))).await;
    assert_eq!(st["status"], "PROMOTED");
    // Bad input.
    assert_eq!(delete_entry(&api, "").await.0, 400);
    assert_eq!(delete_entry(&api, "?userId=x&queue=bad%20name").await.0, 400);
    let (code, v) = delete_entry(&api, "?userId=someone&queue=elsewhere").await;
    assert_eq!((code, v["error"].clone()), (404, json!("unknown_queue")), "{v}");
    api.stop().await;
}

async fn bad_input_is_refused_cleanly(b: Backend) {
    let s = ValkeyServer::start(b);
    let api = Api::start(queue_api::Config::local(&s.url())).await;
    let http = reqwest::Client::new();
    let cases: Vec<(&str, u16)> = vec![
        ("{not json", 400),
        ("[1,2]", 400),
        ("{}", 422),
        (r#"{"nickname": 5}"#, 422),
        (r#"{"nickname": ""}"#, 422),
        (r#"{"nickname": "   "}"#, 422),
        (r#"{"nickname": "abcdefghijklmnopqrstuvwxyz0123456789"}"#, 422),
        (r#"{"nickname": "a\u0001b"}"#, 422),
        (r#"{"nickname": "ok", "queue": "bad name!"}"#, 400),
        (r#"{"nickname": "ok", "queue": "a{b}"}"#, 400),
        (r#"{"nickname": "ok", "queue": 7}"#, 400),
    ];
    for (body, want) in cases {
        let r = http.post(api.url("/api/queue/entry")).body(body).send().await.unwrap();
        let code = r.status().as_u16();
        let v: Value = r.json().await.unwrap();
        assert_eq!(code, want, "{body}: {v}");
        assert!(v["error"].is_string() && v["message"].is_string(), "{v}");
    }
    let huge = format!(r#"{{"nickname": "{}"}}"#, "x".repeat(100_000));
    let r = http.post(api.url("/api/queue/entry")).body(huge).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 413);
    for (path, want) in [
        ("/api/queue/status", 400),
        ("/api/queue/status?userId=a%20b", 400),
        ("/api/queue/status?userId=u&queue=x%7By%7D", 400),
        ("/no/such/route", 404),
    ] {
        let (code, v) = get_json(&api.url(path)).await;
        assert_eq!(code, want, "{path}: {v}");
    }
    // Nothing was written by any of it.
    let keys: Vec<String> = redis::cmd("KEYS").arg("queue*").query(&mut s.conn()).unwrap();
    assert!(keys.is_empty(), "{keys:?}");
    api.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_needs_the_token() {
    let s = ValkeyServer::start(Backend::Module);
    let disabled = Api::start(queue_api::Config::local(&s.url())).await;
    let (code, _) = get_json(&disabled.url("/api/admin/queues/default")).await;
    assert_eq!(code, 403);
    disabled.stop().await;

    let mut config = queue_api::Config::local(&s.url());
    config.admin_token = Some("s3cret".into());
    let api = Api::start(config).await;
    let http = reqwest::Client::new();
    let url = api.url("/api/admin/queues/default");
    assert_eq!(http.get(&url).send().await.unwrap().status(), 401);
    assert_eq!(http.get(&url).bearer_auth("wrong").send().await.unwrap().status(), 401);
    let r = http.get(&url).bearer_auth("s3cret").send().await.unwrap();
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["info"]["soft_cap"], 1000, "{v}");
    let r = http.put(&url).bearer_auth("s3cret").json(&json!({ "soft_cap": 7, "rate": 3 })).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    assert_eq!((v["info"]["soft_cap"].clone(), v["info"]["rate"].clone()), (json!(7), json!(3)), "{v}");
    for (body, want) in [
        (json!({ "colour": 1 }), 400),
        (json!({ "soft_cap": -1 }), 400),
        (json!({ "soft_cap": "x" }), 422),
        (json!({}), 422),
    ] {
        let r = http.put(&url).bearer_auth("s3cret").json(&body).send().await.unwrap();
        assert_eq!(r.status().as_u16(), want, "{body}");
    }
    assert_eq!(
        client_for(&s).await.config_get("default").await.unwrap().soft_cap(),
        7,
        "refused changes changed nothing"
    );
    api.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limit_answers_429_with_retry_after() {
    let s = ValkeyServer::start(Backend::Module);
    let mut config = queue_api::Config::local(&s.url());
    // Slow refill, so that five entries in a row meet an empty bucket however slow the machine.
    config.rate_limit = 0.1;
    config.rate_burst = 3.0;
    let api = Api::start(config).await;
    let mut codes = Vec::new();
    for _ in 0..5 {
        let r = reqwest::Client::new()
            .post(api.url("/api/queue/entry"))
            .json(&json!({"nickname": "n"}))
            .send()
            .await
            .unwrap();
        codes.push(r.status().as_u16());
        if r.status() == 429 {
            assert!(r.headers().get("retry-after").is_some());
            let v: Value = r.json().await.unwrap();
            assert_eq!(v["error"], "rate_limited");
        }
    }
    assert_eq!(codes, vec![200, 200, 200, 429, 429]);
    api.stop().await;
}

/// The cross-origin policy: none by default; with --cors-origins, preflights of the
/// public API from a listed origin are answered and its answers carry the origin;
/// other origins, the back office and /metrics never get CORS headers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cors_policy_is_explicit() {
    let s = ValkeyServer::start(Backend::Module);
    let http = reqwest::Client::new();
    let preflight = |api: &Api, path: &str, origin: &str, method: &str| {
        http.request(reqwest::Method::OPTIONS, api.url(path))
            .header("origin", origin)
            .header("access-control-request-method", method)
            .header("access-control-request-headers", "content-type")
            .send()
    };
    let acao =
        |r: &reqwest::Response| r.headers().get("access-control-allow-origin").map(|v| v.to_str().unwrap().to_string());

    let closed = Api::start(queue_api::Config::local(&s.url())).await;
    let r = http
        .post(closed.url("/api/queue/entry"))
        .header("origin", "http://shop.example")
        .json(&json!({"nickname": "a"}))
        .send()
        .await
        .unwrap();
    assert_eq!((r.status().as_u16(), acao(&r)), (200, None), "no CORS by default");
    assert_eq!(acao(&preflight(&closed, "/api/queue/entry", "http://shop.example", "POST").await.unwrap()), None);
    closed.stop().await;

    let mut config = queue_api::Config::local(&s.url());
    config.cors_origins = queue_api::cors::Origins::parse("http://shop.example").unwrap();
    config.admin_token = Some("t".into());
    let api = Api::start(config).await;
    let r = preflight(&api, "/api/queue/entry", "http://shop.example", "POST").await.unwrap();
    assert_eq!((r.status().as_u16(), acao(&r).as_deref()), (204, Some("http://shop.example")));
    assert_eq!(r.headers()["access-control-allow-methods"], "GET, POST, DELETE");
    assert_eq!(r.headers()["access-control-allow-headers"], "content-type");
    let r = preflight(&api, "/api/queue/entry", "http://evil.example", "POST").await.unwrap();
    assert_eq!((r.status().as_u16(), acao(&r)), (403, None));
    let r = preflight(&api, "/api/queue/entry", "http://shop.example", "PUT").await.unwrap();
    assert_eq!((r.status().as_u16(), acao(&r)), (403, None), "a method the API does not take");
    let r = http
        .post(api.url("/api/queue/entry"))
        .header("origin", "http://shop.example")
        .json(&json!({"nickname": "a"}))
        .send()
        .await
        .unwrap();
    assert_eq!((r.status().as_u16(), acao(&r).as_deref()), (200, Some("http://shop.example")));
    let user = r.json::<Value>().await.unwrap()["userId"].as_str().unwrap().to_string();
    let r = http
        .get(api.url(&format!("/api/queue/status?userId={user}")))
        .header("origin", "http://evil.example")
        .send()
        .await
        .unwrap();
    assert_eq!((r.status().as_u16(), acao(&r)), (200, None), "answered, but a browser will not let the page read it");
    for path in ["/api/admin/queues/default", "/metrics", "/healthz"] {
        let r = preflight(&api, path, "http://shop.example", "GET").await.unwrap();
        assert_eq!(acao(&r), None, "{path}");
        let r = http.get(api.url(path)).header("origin", "http://shop.example").bearer_auth("t").send().await.unwrap();
        assert_eq!(acao(&r), None, "{path}");
    }
    api.stop().await;
}

/// Slow clients (slowloris): a head that does not arrive within --header-timeout
/// closes the connection, a body that does not within --request-timeout gets 408;
/// a push stream, once answered, is not cut by either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_clients_are_cut_off() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let s = ValkeyServer::start(Backend::Module);
    let mut config = queue_api::Config::local(&s.url());
    config.http.header_timeout = Duration::from_millis(400);
    config.http.request_timeout = Duration::from_millis(400);
    let api = Api::start(config).await;
    let addr = api.base.trim_start_matches("http://").to_string();
    async fn answer(c: &mut tokio::net::TcpStream) -> String {
        let mut all = Vec::new();
        tokio::time::timeout(Duration::from_secs(5), c.read_to_end(&mut all)).await.expect("closed in time").ok();
        String::from_utf8_lossy(&all).into_owned()
    }
    for head in ["POST /api/queue/entry HTTP/1.1\r\nHost: x\r\n", "GET /api/queue/stream?userId=x HTTP/1.1\r\n", ""] {
        let mut c = tokio::net::TcpStream::connect(&addr).await.unwrap();
        c.write_all(head.as_bytes()).await.unwrap();
        assert_eq!(answer(&mut c).await, "", "{head:?}: closed without an answer");
    }
    let mut c = tokio::net::TcpStream::connect(&addr).await.unwrap();
    c.write_all(b"POST /api/queue/entry HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 40\r\n\r\n{\"nick").await.unwrap();
    let got = answer(&mut c).await;
    assert!(got.starts_with("HTTP/1.1 408") && got.contains("request_timeout"), "{got}");
    // A push stream lives on past both limits.
    client_for(&s).await.config_set("default", &[("soft_cap", 0)]).await.unwrap();
    let (_, entered) = post_entry(&api, json!({ "nickname": "a" })).await;
    let mut stream =
        reqwest::get(api.url(&format!("/api/queue/stream?userId={}", entered["userId"].as_str().unwrap())))
            .await
            .unwrap()
            .bytes_stream();
    assert!(stream.next().await.is_some());
    tokio::time::sleep(Duration::from_millis(900)).await;
    let qc = client_for(&s).await;
    qc.config_set("default", &[("soft_cap", 1)]).await.unwrap();
    qc.promote("default", None).await.unwrap();
    let mut seen = String::new();
    while !seen.contains("promoted") {
        let chunk = tokio::time::timeout(Duration::from_secs(5), stream.next()).await.expect("an event");
        seen.push_str(&String::from_utf8_lossy(&chunk.expect("the stream is still open").unwrap()));
    }
    drop(stream);
    api.stop().await;
}

/// Connections that never send a request (a browser's preconnect, the loser of an
/// HTTP client pool's connect race) must not hold shutdown up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_does_not_wait_for_silent_connections() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let s = ValkeyServer::start(Backend::Module);
    let api = Api::start(queue_api::Config::local(&s.url())).await;
    let addr = api.base.trim_start_matches("http://").to_string();
    let mut silent = Vec::new();
    for _ in 0..3 {
        silent.push(tokio::net::TcpStream::connect(&addr).await.unwrap());
    }
    // Half a push stream's request head (read before hyper): the rest never comes.
    let mut partial = tokio::net::TcpStream::connect(&addr).await.unwrap();
    partial.write_all(b"GET /api/queue/stream?queue=default&user").await.unwrap();
    let started = Instant::now();
    api.stop().await;
    assert!(started.elapsed() < Duration::from_secs(5), "shutdown took {:?}", started.elapsed());
    for mut c in silent.into_iter().chain([partial]) {
        let mut buf = [0u8; 64];
        let n = tokio::time::timeout(Duration::from_secs(2), c.read(&mut buf)).await.expect("closed").unwrap_or(0);
        assert_eq!(n, 0, "the connection is closed without an answer");
    }
}

/// A stream with nothing to tell gets a comment line every `--stream-keep-alive`
/// (one tick for the whole process), so proxies in front do not cut it as idle.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_streams_get_keep_alive_comments() {
    let s = ValkeyServer::start(Backend::Module);
    let mut config = queue_api::Config::local(&s.url());
    config.stream_keep_alive = Duration::from_secs(1);
    let api = Api::start(config).await;
    client_for(&s).await.config_set("default", &[("soft_cap", 0)]).await.unwrap();
    let (_, entered) = post_entry(&api, json!({ "nickname": "idle" })).await;
    let url = format!("/api/queue/stream?userId={}", entered["userId"].as_str().unwrap());
    let mut stream = reqwest::get(api.url(&url)).await.unwrap().bytes_stream();
    let mut seen = String::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while seen.lines().filter(|l| l.starts_with(':')).count() < 2 {
        let left = deadline.saturating_duration_since(Instant::now());
        let chunk =
            tokio::time::timeout(left, stream.next()).await.unwrap_or_else(|_| panic!("two comments: {seen:?}"));
        seen.push_str(&String::from_utf8_lossy(&chunk.expect("still open").unwrap()));
    }
    assert_eq!(seen.matches("event: position").count(), 1, "nothing but comments after the first event: {seen:?}");
    drop(stream);
    api.stop().await;
}

/// Shutdown ends every open push stream at once, in every queue (each learns it from
/// its queue's news), rather than holding shutdown up for the drain limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_streams_end_at_shutdown() {
    let s = ValkeyServer::start(Backend::Module);
    let api = Api::start(queue_api::Config::local(&s.url())).await;
    let qc = client_for(&s).await;
    let mut streams = Vec::new();
    for queue in ["default", "second"] {
        qc.config_set(queue, &[("soft_cap", 0)]).await.unwrap();
        let (code, entered) = post_entry(&api, json!({ "nickname": "a", "queue": queue })).await;
        assert_eq!(code, 200, "{entered}");
        let url = format!("/api/queue/stream?userId={}&queue={queue}", entered["userId"].as_str().unwrap());
        let mut stream = reqwest::get(api.url(&url)).await.unwrap().bytes_stream();
        let first = tokio::time::timeout(Duration::from_secs(5), stream.next()).await.expect("a first event");
        assert!(String::from_utf8_lossy(&first.unwrap().unwrap()).contains("position"));
        streams.push(stream);
    }
    let started = Instant::now();
    api.stop().await;
    assert!(started.elapsed() < Duration::from_secs(5), "shutdown took {:?}", started.elapsed());
    for mut stream in streams {
        let end = tokio::time::timeout(Duration::from_secs(2), stream.next()).await.expect("the stream ended");
        assert!(end.is_none_or(|r| r.is_err()), "no event after shutdown");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn valkey_down_gives_503_then_recovers() {
    let mut s = ValkeyServer::start(Backend::Module);
    let api = Api::start(queue_api::Config::local(&s.url())).await;
    let (code, _) = post_entry(&api, json!({ "nickname": "before" })).await;
    assert_eq!(code, 200);
    s.kill();
    let start = Instant::now();
    let (code, v) = post_entry(&api, json!({ "nickname": "during" })).await;
    assert_eq!(code, 503, "{v}");
    assert!(start.elapsed() < Duration::from_secs(6), "503 comes within the response timeout");
    let (_, h) = get_json(&api.url("/healthz")).await;
    assert_eq!(h["valkey"], "down");
    s.restart();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (code, _) = post_entry(&api, json!({ "nickname": "after" })).await;
        if code == 200 {
            break;
        }
        assert!(Instant::now() < deadline, "did not recover");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    api.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn page_openapi_metrics() {
    let s = ValkeyServer::start(Backend::Module);
    let mut config = queue_api::Config::local(&s.url());
    config.chat_url = "http://chat.example.test/room".into();
    let api = Api::start(config).await;
    let page = reqwest::get(api.url("/")).await.unwrap().text().await.unwrap();
    assert!(
        page.contains("data-admit-url=\"http://chat.example.test/room\"") && page.contains("src=\"app.js\""),
        "{page}"
    );
    let script = reqwest::get(api.url("/app.js")).await.unwrap().text().await.unwrap();
    assert!(script.contains("EventSource"));
    let (code, doc) = get_json(&api.url("/api/openapi.json")).await;
    assert_eq!(code, 200);
    assert!(doc["paths"]["/api/queue/entry"]["post"].is_object());
    post_entry(&api, json!({ "nickname": "m" })).await;
    let metrics = reqwest::get(api.url("/metrics")).await.unwrap().text().await.unwrap();
    for line in [
        "queue_entry_requests_total 1",
        "queue_status_requests_total 0",
        "http_server_requests_seconds_count{method=\"POST\",uri=\"/api/queue/entry\",status=\"200\"} 1",
    ] {
        assert!(metrics.contains(line), "{line} missing:\n{metrics}");
    }
    api.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instances_side_by_side_share_everything() {
    let s = ValkeyServer::start(Backend::Module);
    let qc = client_for(&s).await;
    qc.config_set("default", &[("soft_cap", 0)]).await.unwrap();
    let (a, b) =
        (Api::start(queue_api::Config::local(&s.url())).await, Api::start(queue_api::Config::local(&s.url())).await);
    // Entered through one instance, seen through the other.
    let (_, x) = post_entry(&a, json!({ "nickname": "x" })).await;
    let (_, y) = post_entry(&b, json!({ "nickname": "y" })).await;
    assert_eq!((x["rank"].clone(), y["rank"].clone()), (json!(1), json!(2)));
    let (code, st) = get_json(&b.url(&format!("/api/queue/status?userId={}", x["userId"].as_str().unwrap()))).await;
    assert_eq!((code, st["rank"].clone()), (200, json!(1)));
    // Both subscribe to announcements (each instance once).
    let event = queue_client::events::QueueEvent {
        queue: "default".into(),
        promoted: 0,
        waiting: 2,
        at_ms: 0,
        branding: false,
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while qc.publish_event(&event).await.unwrap() < 2 {
        assert!(Instant::now() < deadline, "both instances subscribe");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    a.stop().await;
    b.stop().await;
}

/// A queue asking a proof of work: an entry without one gets 428 and a challenge;
/// the solution lets it in once; a reused, forged, unsolved, another address's or
/// expired-difficulty solution is refused; switching it off lets everyone in.
async fn proof_of_work_at_entry(b: Backend) {
    let s = ValkeyServer::start(b);
    let qc = client_for(&s).await;
    qc.config_set("default", &[("soft_cap", 0), ("pow_difficulty", 10)]).await.unwrap();
    let mut config = queue_api::Config::local(&s.url());
    config.proxy.trust_proxy = true;
    let api = Api::start(config).await;
    let http = reqwest::Client::new();
    let enter = |from: &'static str, body: Value| {
        let r = http.post(api.url("/api/queue/entry")).header("x-forwarded-for", from).json(&body);
        async move {
            let r = r.send().await.unwrap();
            (r.status().as_u16(), r.json::<Value>().await.unwrap())
        }
    };
    let (code, refused) = enter("10.1.0.1", json!({ "nickname": "ann" })).await;
    assert_eq!((code, refused["error"].clone()), (428, json!("proof_required")), "{refused}");
    let given = &refused["challenge"];
    assert_eq!(given["difficulty"], 10);
    let challenge = given["challenge"].as_str().unwrap().to_string();
    let nonce = queue_core::pow::solve(&challenge, 10);
    let proof = json!({ "challenge": challenge, "nonce": nonce });
    // Another address cannot use it; an unsolved nonce is refused.
    let (code, e) = enter("10.1.0.2", json!({ "nickname": "eve", "pow": proof })).await;
    assert_eq!((code, e["error"].clone()), (400, json!("bad_request")), "{e}");
    let wrong = (0u64..).map(|n| n.to_string()).find(|n| !queue_core::pow::solves(&challenge, n, 10)).unwrap();
    let (code, _) =
        enter("10.1.0.1", json!({ "nickname": "ann", "pow": { "challenge": challenge, "nonce": wrong } })).await;
    assert_eq!(code, 400);
    let (code, _) = enter("10.1.0.1", json!({ "nickname": "ann", "pow": "nope" })).await;
    assert_eq!(code, 400);
    assert_eq!(qc.info("default").await.unwrap().waiting, 0, "nobody got in without a proof");
    // Solved: in, once.
    let (code, ann) = enter("10.1.0.1", json!({ "nickname": "ann", "pow": proof })).await;
    assert_eq!((code, ann["status"].clone()), (200, json!("WAITING")), "{ann}");
    let (code, e) = enter("10.1.0.1", json!({ "nickname": "ann", "pow": proof })).await;
    assert_eq!((code, e["error"].clone()), (409, json!("proof_used")), "{e}");
    // GET /api/queue/challenge hands one out too; a raised difficulty retires it.
    let r = http.get(api.url("/api/queue/challenge")).header("x-forwarded-for", "10.1.0.3").send().await.unwrap();
    let c: Value = r.json().await.unwrap();
    assert_eq!(c["difficulty"], 10, "{c}");
    assert!(c["expiresAt"].as_i64().unwrap() > 0);
    let easy = c["challenge"].as_str().unwrap().to_string();
    let nonce = queue_core::pow::solve(&easy, 10);
    qc.config_set("default", &[("pow_difficulty", 12)]).await.unwrap();
    tokio::time::sleep(Duration::from_millis(2100)).await; // past the difficulty cache
    let (code, e) = enter("10.1.0.3", json!({ "nickname": "bo", "pow": { "challenge": easy, "nonce": nonce } })).await;
    assert_eq!((code, e["challenge"]["difficulty"].clone()), (428, json!(12)), "too easy now: {e}");
    // Off: no proof needed.
    qc.config_set("default", &[("pow_difficulty", 0)]).await.unwrap();
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let (code, _) = enter("10.1.0.4", json!({ "nickname": "cy" })).await;
    assert_eq!(code, 200);
    assert_eq!(qc.info("default").await.unwrap().waiting, 2);
    let metrics = reqwest::get(api.url("/metrics")).await.unwrap().text().await.unwrap();
    assert!(metrics.contains("queue_api_pow_refused_total{reason=\"used\"} 1"), "{metrics}");
    api.stop().await;
}

/// Opens a push stream for `user` as client address `addr` (X-Forwarded-For, the api
/// trusting it): the open response, or the refusal's status, Retry-After and body.
async fn open_stream(api: &Api, user: &str, addr: &str) -> Result<reqwest::Response, (u16, Option<String>, Value)> {
    let r = reqwest::Client::new()
        .get(api.url(&format!("/api/queue/stream?userId={user}")))
        .header("x-forwarded-for", addr)
        .send()
        .await
        .unwrap();
    if r.status() == 200 {
        return Ok(r);
    }
    let status = r.status().as_u16();
    let retry = r.headers().get("retry-after").map(|v| v.to_str().unwrap().to_string());
    Err((status, retry, r.json().await.unwrap()))
}

/// --max-streams-per-addr refuses with 429, --max-streams with 503, both with
/// Retry-After; a closed stream gives its place back; status polls still work.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_limits_refuse_with_429_and_503() {
    let s = ValkeyServer::start(Backend::Module);
    let qc = client_for(&s).await;
    qc.config_set("default", &[("soft_cap", 0)]).await.unwrap();
    let mut config = queue_api::Config::local(&s.url());
    config.proxy.trust_proxy = true;
    config.max_streams = 3;
    config.max_streams_per_addr = 2;
    let api = Api::start(config).await;
    let (_, e) = post_entry(&api, json!({ "nickname": "w" })).await;
    let user = e["userId"].as_str().unwrap().to_string();
    let a1 = open_stream(&api, &user, "10.0.0.1").await.expect("first from A");
    let _a2 = open_stream(&api, &user, "10.0.0.1").await.expect("second from A");
    let (code, retry, body) = open_stream(&api, &user, "10.0.0.1").await.expect_err("third from A refused");
    assert_eq!((code, retry.as_deref(), body["error"].as_str()), (429, Some("5"), Some("too_many_streams")), "{body}");
    let _b1 = open_stream(&api, &user, "10.0.0.2").await.expect("B has its own share");
    let (code, retry, body) = open_stream(&api, &user, "10.0.0.3").await.expect_err("the instance is full");
    assert_eq!((code, retry.as_deref(), body["error"].as_str()), (503, Some("5"), Some("too_many_streams")), "{body}");
    let (code, _) = get_json(&api.url(&format!("/api/queue/status?userId={user}"))).await;
    assert_eq!(code, 200, "polling is not limited by the stream limits");
    let metrics = reqwest::get(api.url("/metrics")).await.unwrap().text().await.unwrap();
    assert!(metrics.contains("queue_api_streams_refused_total 2"), "{metrics}");
    // Closing A's first stream frees a place (once the server sees the connection end).
    drop(a1);
    let deadline = Instant::now() + Duration::from_secs(10);
    let _c1 = loop {
        match open_stream(&api, &user, "10.0.0.3").await {
            Ok(r) => break r,
            Err((503, ..)) if Instant::now() < deadline => tokio::time::sleep(Duration::from_millis(50)).await,
            Err(e) => panic!("a closed stream should give its place back: {e:?}"),
        }
    };
    api.stop().await;
}

/// Every event of each push stream, as (event name, data), in arrival order.
type Seen = std::sync::Arc<std::sync::Mutex<std::collections::HashMap<String, Vec<(String, Value)>>>>;

/// Opens the push streams of `streamed` and waits until each shows its place in line.
async fn follow_streams(
    api: &Api,
    qc: &queue_client::QueueClient,
    streamed: &[String],
) -> (Seen, Vec<tokio::task::JoinHandle<()>>) {
    let seen: Seen = Default::default();
    let tasks = streamed
        .iter()
        .map(|u| follow_stream(api.url(&format!("/api/queue/stream?userId={u}")), u.clone(), seen.clone()))
        .collect();
    streams_settle(qc, &seen, streamed, "opened").await;
    (seen, tasks)
}

/// Follows `user`'s push stream at `url` until it ends or the task is aborted.
fn follow_stream(url: String, user: String, seen: Seen) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let resp = reqwest::get(url).await.unwrap();
        assert_eq!(resp.status(), 200, "stream of {user}");
        let mut body = resp.bytes_stream();
        let mut text = String::new();
        while let Some(Ok(chunk)) = body.next().await {
            text.push_str(&String::from_utf8_lossy(&chunk));
            while let Some(i) = text.find("\n\n") {
                let block: String = text.drain(..i + 2).collect();
                let name = block.lines().find_map(|l| l.strip_prefix("event: ")).unwrap_or("").to_string();
                let Some(data) = block.lines().find_map(|l| l.strip_prefix("data: ")) else { continue };
                let v: Value = serde_json::from_str(data).unwrap();
                seen.lock().unwrap().entry(user.clone()).or_default().push((name, v));
            }
        }
    })
}

/// The waiting people in line order (QUEUE.LINE: nobody counts as heard from).
async fn line_now(qc: &queue_client::QueueClient) -> Vec<String> {
    let mut out = Vec::new();
    let mut cursor = 0;
    loop {
        let page = qc.line("default", cursor, 1000).await.unwrap();
        out.extend(page.users);
        if page.cursor == 0 {
            return out;
        }
        cursor = page.cursor;
    }
}

/// Waits until every open stream's last event matches the line: `position` with the
/// person's rank while they wait, a final event otherwise.
async fn streams_settle(qc: &queue_client::QueueClient, seen: &Seen, streamed: &[String], step: &str) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let line = line_now(qc).await;
        let wrong: Vec<String> = {
            let seen = seen.lock().unwrap();
            streamed
                .iter()
                .filter_map(|u| {
                    let last = seen.get(u).and_then(|e| e.last());
                    let want = line.iter().position(|x| x == u).map(|i| i as u64 + 1);
                    let ok = match (last, want) {
                        (Some((name, v)), Some(rank)) => name == "position" && v["rank"] == rank,
                        (Some((name, _)), None) => name != "position",
                        (None, _) => false,
                    };
                    (!ok).then(|| format!("{u}: last {:?}, rank in line {want:?}", last))
                })
                .collect()
        };
        if wrong.is_empty() {
            return;
        }
        assert!(Instant::now() < deadline, "{step}: streams disagree with the line: {wrong:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Push streams on two instances follow the change log: after every change (someone
/// ahead leaving, a streamed person leaving or re-entering, promotions, newcomers,
/// people dropped as silent) each stream shows the rank the line gives, every
/// position event carries the total, and a rank never goes up unless its person
/// re-entered. Nobody polls: the people with a stream are kept by the instances'
/// leases, the others are dropped abandon_after after their entry, and a person whose
/// stream closed is dropped abandon_after after it closed.
async fn push_streams_follow_the_change_log(b: Backend) {
    let s = ValkeyServer::start(b);
    let qc = client_for(&s).await;
    qc.config_set("default", &[("soft_cap", 0), ("abandon_after", 3000)]).await.unwrap();
    let mut apis = Vec::new();
    for _ in 0..2 {
        let mut config = queue_api::Config::local(&s.url());
        config.push_tick = Duration::from_millis(200);
        apis.push(Api::start(config).await);
    }
    let users: Vec<String> = (0..30).map(|i| format!("p{i:02}")).collect();
    for u in &users {
        qc.enter("default", u, u).await.unwrap();
    }
    let streamed: Vec<String> = users.iter().step_by(2).cloned().collect();
    let seen: Seen = Default::default();
    let mut tasks = std::collections::HashMap::new();
    for (i, u) in streamed.iter().enumerate() {
        let url = apis[i % 2].url(&format!("/api/queue/stream?userId={u}"));
        tasks.insert(u.clone(), follow_stream(url, u.clone(), seen.clone()));
    }
    streams_settle(&qc, &seen, &streamed, "opened").await;
    qc.leave("default", "p03").await.unwrap();
    streams_settle(&qc, &seen, &streamed, "someone ahead left").await;
    qc.leave("default", "p04").await.unwrap();
    streams_settle(&qc, &seen, &streamed, "a streamed person left").await;
    qc.enter("default", "p06", "p06").await.unwrap();
    streams_settle(&qc, &seen, &streamed, "a streamed person re-entered").await;
    qc.config_set("default", &[("soft_cap", 3)]).await.unwrap();
    qc.promote("default", None).await.unwrap();
    qc.config_set("default", &[("soft_cap", 0)]).await.unwrap();
    streams_settle(&qc, &seen, &streamed, "three promoted").await;
    for i in 0..5 {
        qc.enter("default", &format!("new{i}"), "n").await.unwrap();
    }
    streams_settle(&qc, &seen, &streamed, "newcomers").await;
    // Past abandon_after with housekeeping on the way: only the streamed stay.
    let until = Instant::now() + Duration::from_millis(3600);
    while Instant::now() < until {
        qc.promote("default", Some(0)).await.unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    qc.promote("default", Some(0)).await.unwrap();
    let line = line_now(&qc).await;
    let mut kept: Vec<String> = streamed.iter().filter(|u| line.contains(u)).cloned().collect();
    assert_eq!(line.len(), kept.len(), "only the streamed stay in line: {line:?}");
    assert!(kept.len() >= 8, "the streamed people waiting are kept: {line:?}");
    streams_settle(&qc, &seen, &streamed, "the silent dropped").await;
    // A closed stream: its person is heard from at the close, and dropped abandon_after later.
    let closed = kept.remove(kept.len() / 2);
    tasks.remove(&closed).unwrap().abort();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    qc.promote("default", Some(0)).await.unwrap();
    assert!(line_now(&qc).await.contains(&closed), "still within abandon_after of the close");
    // abandon_after counts from when the server saw the stream close, which a busy
    // machine may delay: until then, and a little after.
    let until = Instant::now() + Duration::from_secs(8);
    let line = loop {
        tokio::time::sleep(Duration::from_millis(300)).await;
        qc.promote("default", Some(0)).await.unwrap();
        let line = line_now(&qc).await;
        if !line.contains(&closed) {
            break line;
        }
        assert!(Instant::now() < until, "dropped abandon_after after its stream closed");
    };
    let (mut sorted, mut want) = (line.clone(), kept.clone());
    sorted.sort();
    want.sort();
    assert_eq!(sorted, want, "the others stay");
    // Every position event has the total; ranks only go down, but for the re-entry.
    let seen = seen.lock().unwrap().clone();
    for (u, events) in seen.iter() {
        let ranks: Vec<u64> =
            events.iter().filter(|(n, _)| n == "position").map(|(_, v)| v["rank"].as_u64().unwrap()).collect();
        for (_, v) in events.iter().filter(|(n, _)| n == "position") {
            assert!(v["totalWaiting"].as_u64().is_some_and(|t| t >= v["rank"].as_u64().unwrap()), "{u}: {v}");
        }
        let ups = ranks.windows(2).filter(|w| w[1] > w[0]).count();
        assert_eq!(ups, usize::from(u == "p06"), "{u}: ranks {ranks:?}");
    }
    for t in tasks.into_values() {
        t.abort();
    }
    for api in apis {
        api.stop().await;
    }
}

/// A counter's value on `/metrics` (0 when absent).
async fn counter(api: &Api, name: &str) -> f64 {
    let text = reqwest::get(api.url("/metrics")).await.unwrap().text().await.unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(name).and_then(|rest| rest.strip_prefix(' ')))
        .map_or(0.0, |v| v.trim().parse().unwrap())
}

/// Waits until Valkey has at least `n` pub/sub connections (each queue-api holds
/// two: promotions and changes).
async fn wait_subscribed(s: &ValkeyServer, n: usize, step: &str) {
    let mut admin = s.conn();
    let deadline = Instant::now() + Duration::from_secs(10);
    while redis::cmd("CLIENT")
        .arg("LIST")
        .arg("TYPE")
        .arg("pubsub")
        .query::<String>(&mut admin)
        .unwrap()
        .lines()
        .count()
        < n
    {
        assert!(Instant::now() < deadline, "{step}: queue-api did not subscribe");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// With no tick after the first (a push tick of a minute), changes reach the streams
/// through the entries their commands publish, and the log is never read. An entry
/// lost (the subscriptions killed just before it was written) is read from the log
/// when the next one shows the gap; a last entry lost, with nothing after it, is read
/// at the next tick (another instance, ticking every 300 ms), when the lease's
/// renewal shows the log ahead.
async fn published_changes_reach_streams_and_lost_ones_are_read(b: Backend) {
    let s = ValkeyServer::start(b);
    let qc = client_for(&s).await;
    qc.config_set("default", &[("soft_cap", 0)]).await.unwrap();
    let mut apis = Vec::new();
    for tick in [60_000, 300] {
        let mut config = queue_api::Config::local(&s.url());
        config.push_tick = Duration::from_millis(tick);
        apis.push(Api::start(config).await);
    }
    let users: Vec<String> = (0..20).map(|i| format!("p{i:02}")).collect();
    for u in &users {
        qc.enter("default", u, u).await.unwrap();
    }
    let (slow, fast): (Vec<String>, Vec<String>) = (users[10..15].to_vec(), users[15..].to_vec());
    let seen: Seen = Default::default();
    let mut tasks = Vec::new();
    for (api, people) in [(&apis[0], &slow), (&apis[1], &fast)] {
        for u in people {
            tasks.push(follow_stream(api.url(&format!("/api/queue/stream?userId={u}")), u.clone(), seen.clone()));
        }
    }
    streams_settle(&qc, &seen, &slow, "opened").await;
    wait_subscribed(&s, 4, "started").await;
    for u in ["p00", "p01", "p02"] {
        qc.leave("default", u).await.unwrap();
        streams_settle(&qc, &seen, &slow, &format!("{u} left: published")).await;
    }
    assert_eq!(counter(&apis[0], "queue_api_log_reads_total").await, 0.0, "published entries need no read");
    // One entry lost, then one published: the gap is read.
    let mut admin = s.conn();
    let _: i64 = redis::cmd("CLIENT").arg("KILL").arg("TYPE").arg("pubsub").query(&mut admin).unwrap();
    qc.leave("default", "p03").await.unwrap();
    wait_subscribed(&s, 4, "subscribed again").await;
    qc.leave("default", "p04").await.unwrap();
    streams_settle(&qc, &seen, &slow, "an entry lost, the next published").await;
    assert!(counter(&apis[0], "queue_api_log_reads_total").await >= 1.0, "the gap was read from the log");
    // The last entry lost: the instance that ticks reads it.
    streams_settle(&qc, &seen, &fast, "before").await;
    let reads = counter(&apis[1], "queue_api_log_reads_total").await;
    let _: i64 = redis::cmd("CLIENT").arg("KILL").arg("TYPE").arg("pubsub").query(&mut admin).unwrap();
    qc.leave("default", "p05").await.unwrap();
    streams_settle(&qc, &seen, &fast, "the last entry lost").await;
    assert!(counter(&apis[1], "queue_api_log_reads_total").await > reads, "read at the tick");
    for t in tasks {
        t.abort();
    }
    for api in apis {
        api.stop().await;
    }
}

/// A restore that lost the newest changes (the queue's keys put back as they were
/// before two people left) and then a new change: its entry's number is one already
/// applied but its id is newer, so the instance knows the log was written anew and
/// asks everyone again, at once (no tick comes: a push tick of a minute), and every
/// stream shows the line as restored.
async fn a_log_written_anew_asks_everyone_again(b: Backend) {
    let (s, qc, api) = closed_queue_slow_tick(b).await;
    let users: Vec<String> = (0..12).map(|i| format!("p{i:02}")).collect();
    for u in &users {
        qc.enter("default", u, u).await.unwrap();
    }
    let streamed = users[6..].to_vec();
    let (seen, tasks) = follow_streams(&api, &qc, &streamed).await;
    wait_subscribed(&s, 2, "started").await;
    let mut admin = s.conn();
    let keys: Vec<String> = redis::cmd("KEYS").arg("queue:{default}:*").query(&mut admin).unwrap();
    let snapshot: Vec<(String, Vec<u8>)> =
        keys.iter().map(|k| (k.clone(), redis::cmd("DUMP").arg(k).query(&mut admin).unwrap())).collect();
    for u in ["p00", "p01"] {
        qc.leave("default", u).await.unwrap();
    }
    streams_settle(&qc, &seen, &streamed, "two left").await;
    let now: Vec<String> = redis::cmd("KEYS").arg("queue:{default}:*").query(&mut admin).unwrap();
    for k in now.iter().filter(|k| !keys.contains(k)) {
        let _: i64 = redis::cmd("DEL").arg(k).query(&mut admin).unwrap();
    }
    for (k, v) in &snapshot {
        let _: () = redis::cmd("RESTORE").arg(k).arg(0).arg(v).arg("REPLACE").query(&mut admin).unwrap();
    }
    assert!(line_now(&qc).await.contains(&"p00".to_string()), "restored");
    // A log written anew within the millisecond of the entries applied could repeat
    // their ids with their numbers: nothing would tell it from them.
    tokio::time::sleep(Duration::from_millis(5)).await;
    qc.leave("default", "p02").await.unwrap();
    streams_settle(&qc, &seen, &streamed, "restored, then one left").await;
    assert!(counter(&api, "queue_api_log_resets_total").await >= 1.0, "everyone asked again");
    for t in tasks {
        t.abort();
    }
    api.stop().await;
}

/// The last event of `user`'s stream, once it is named `name` (within 5 s).
async fn last_event(seen: &Seen, user: &str, name: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let last = seen.lock().unwrap().get(user).and_then(|e| e.last().cloned());
        if let Some((n, v)) = last.filter(|(n, _)| n == name) {
            assert_eq!(n, name);
            return v;
        }
        assert!(Instant::now() < deadline, "{user}: no {name} event, last {:?}", seen.lock().unwrap().get(user));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A change log entry tells the streams of people promoted their tickets (which then
/// claim) and of people who left that they are gone, with no QUEUE.WATCH call (no
/// tick comes: a push tick of a minute); someone who entered again as they were is
/// placed from the entry too (`moved`), someone who entered again under another
/// nickname is asked; both streams show the new place.
async fn the_log_tells_the_promoted_their_tickets_and_who_left(b: Backend) {
    let (s, qc, api) = closed_queue_slow_tick(b).await;
    let users: Vec<String> = (0..10).map(|i| format!("p{i:02}")).collect();
    for u in &users {
        qc.enter("default", u, &format!("nick-{u}")).await.unwrap();
    }
    let streamed = users[3..].to_vec();
    let (seen, tasks) = follow_streams(&api, &qc, &streamed).await;
    wait_subscribed(&s, 2, "started").await;
    let calls = counter(&api, "queue_api_watch_calls_total").await;

    // p05 leaves for good: its stream says so from the entry.
    qc.leave("default", "p05").await.unwrap();
    let gone = last_event(&seen, "p05", "unknown").await;
    assert_eq!(gone["status"], "UNKNOWN");
    streams_settle(&qc, &seen, &streamed, "p05 left").await;

    // Four promoted (p00-p03): p03's stream gets its ticket from the entry.
    qc.config_set("default", &[("soft_cap", 4)]).await.unwrap();
    assert_eq!(qc.promote("default", None).await.unwrap().promoted, 4);
    let promoted = last_event(&seen, "p03", "promoted").await;
    let status = qc.status("default", "p03").await.unwrap();
    assert_eq!(promoted["ticketId"].as_str(), status.ticket_id.as_deref(), "the ticket STATUS tells");
    assert_eq!(promoted["nickname"], "nick-p03");
    assert_eq!((promoted["status"].as_str(), promoted["rank"].as_u64()), (Some("PROMOTED"), Some(0)));
    streams_settle(&qc, &seen, &streamed, "four promoted").await;
    assert_eq!(counter(&api, "queue_api_watch_calls_total").await, calls, "nobody was asked");
    let claim = qc.claim("default", promoted["ticketId"].as_str().unwrap()).await.unwrap();
    assert_eq!(claim.user_id, "p03", "the streamed ticket claims");

    // p07 enters again as they were: shown at the back from the entry alone.
    qc.enter("default", "p07", "nick-p07").await.unwrap();
    streams_settle(&qc, &seen, &streamed, "p07 entered again").await;
    assert_eq!(last_event(&seen, "p07", "position").await["rank"], 5);
    assert_eq!(counter(&api, "queue_api_watch_calls_total").await, calls, "nobody was asked");
    // p08 enters again under another nickname: asked, and shown at the back so named.
    qc.enter("default", "p08", "renamed").await.unwrap();
    streams_settle(&qc, &seen, &streamed, "p08 entered again renamed").await;
    let p08 = last_event(&seen, "p08", "position").await;
    assert_eq!((p08["rank"].as_u64(), p08["nickname"].as_str()), (Some(5), Some("renamed")));
    assert!(counter(&api, "queue_api_watch_calls_total").await > calls, "the one renamed was asked");
    for t in tasks {
        t.abort();
    }
    api.stop().await;
}

/// A closed queue (soft cap 0) and one instance whose push tick is a minute: in a
/// test's time only the change log, never the tick, brings a change to its streams.
async fn closed_queue_slow_tick(b: Backend) -> (ValkeyServer, queue_client::QueueClient, Api) {
    let s = ValkeyServer::start(b);
    let qc = client_for(&s).await;
    qc.config_set("default", &[("soft_cap", 0)]).await.unwrap();
    let mut config = queue_api::Config::local(&s.url());
    config.push_tick = Duration::from_secs(60);
    let api = Api::start(config).await;
    (s, qc, api)
}
