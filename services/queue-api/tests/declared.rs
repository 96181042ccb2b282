//! Queues exist because an operator declared them: a queue's settings written
//! (QUEUE.CONFIG, the back office), its name in `queue-registry` (the back office's
//! create, the gate's routes, every queue an older queue-api served), or `default`.
//! A visitor naming any other queue gets 404 `unknown_queue` from every endpoint and
//! writes nothing; the back office creates, deletes (only empty queues) and lists
//! every queue (paged, searched, counted). Real valkey-server, real queue-api, both
//! backends.

use reqwest::Method;
use serde_json::{json, Value};

use testkit::{Backend, ValkeyServer};

mod common;
use common::Api;

const TOKEN: &str = "declared-admin";

impl Api {
    async fn on(s: &ValkeyServer) -> Api {
        Api::start_admin(queue_api::Config::local(&s.url()), TOKEN).await
    }

    /// Any request: status and JSON body (null when not JSON).
    async fn call(&self, method: Method, path: &str, body: Option<Value>, admin: bool) -> (u16, Value) {
        let mut req = self.http.request(method, self.url(path));
        if admin {
            req = req.bearer_auth(TOKEN);
        }
        if let Some(b) = body {
            req = req.json(&b);
        }
        let r = req.send().await.unwrap();
        (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
    }

    async fn enter(&self, queue: &str) -> (u16, Value) {
        self.call(Method::POST, "/api/queue/entry", Some(json!({"nickname": "n", "queue": queue})), false).await
    }

    async fn admin(&self, method: Method, path: &str, body: Option<Value>) -> (u16, Value) {
        self.call(method, path, body, true).await
    }
}

async fn client_for(s: &ValkeyServer) -> queue_client::QueueClient {
    queue_client::QueueClient::connect(&s.url()).await.unwrap()
}

/// Every key and the dataset's digest: what "nothing was written" compares.
fn keyspace(s: &ValkeyServer) -> (Vec<String>, String) {
    let mut c = s.conn();
    let mut keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut c).unwrap();
    keys.sort();
    (keys, testkit::digest(&mut c))
}

testkit::backend_tests!(
    async
    an_undeclared_queue_is_404_everywhere_and_nothing_is_written,
    declared_queues_work_however_they_were_declared,
    delete_refuses_a_queue_in_use_and_removes_an_empty_one,
    the_listing_counts_pages_and_searches_every_queue,
);

async fn an_undeclared_queue_is_404_everywhere_and_nothing_is_written(b: Backend) {
    let s = ValkeyServer::start(b);
    let api = Api::on(&s).await;
    // A queue someone uses, so that the keyspace holds something to compare.
    assert_eq!(api.enter("default").await.0, 200);
    let before = keyspace(&s);
    let user = "0b5e7c2e-4f57-4b7a-9d6e-7a3c1f2b9e10";
    for (method, path, body) in [
        (Method::POST, "/api/queue/entry".to_string(), Some(json!({"nickname": "eve", "queue": "junk-1"}))),
        (
            Method::POST,
            "/api/queue/entry".to_string(),
            Some(json!({"nickname": "eve", "queue": "junk-2", "userId": user})),
        ),
        (Method::GET, format!("/api/queue/status?userId={user}&queue=junk-1"), None),
        (Method::DELETE, format!("/api/queue/entry?userId={user}&queue=junk-1"), None),
        (Method::GET, format!("/api/queue/stream?userId={user}&queue=junk-1"), None),
        (Method::GET, "/api/queue/opening?queue=junk-1".to_string(), None),
        (Method::GET, "/api/queue/challenge?queue=junk-1".to_string(), None),
    ] {
        let (code, v) = api.call(method.clone(), &path, body.clone(), false).await;
        assert_eq!((code, v["error"].as_str()), (404, Some("unknown_queue")), "{method} {path} {body:?}: {v}");
        assert!(v["message"].as_str().unwrap().contains("junk-"), "the message names the queue: {v}");
    }
    // The back office's read of a queue nobody declared says so too.
    let (code, v) = api.admin(Method::GET, "/api/admin/queues/junk-1", None).await;
    assert_eq!((code, v["error"].as_str()), (404, Some("unknown_queue")), "{v}");
    // The waiting-room page: a 404 page that says what is wrong, in plain words.
    let r = api.http.get(api.url("/?queue=junk-1")).header("accept-language", "en").send().await.unwrap();
    assert_eq!(r.status(), 404);
    assert!(r.headers()["content-type"].to_str().unwrap().starts_with("text/html"));
    assert!(r.headers().contains_key("content-security-policy"));
    let page = r.text().await.unwrap();
    assert!(page.contains("junk-1") && page.contains("no waiting room"), "{page}");
    // Many junk names in a row: still nothing written, and the back office lists none.
    for i in 0..50 {
        assert_eq!(api.enter(&format!("junk-{i}")).await.0, 404);
    }
    assert_eq!(keyspace(&s), before, "an undeclared queue wrote nothing");
    let (_, v) = api.admin(Method::GET, "/api/admin/queues", None).await;
    let names: Vec<&str> = v["queues"].as_array().unwrap().iter().map(|q| q["queue"].as_str().unwrap()).collect();
    assert_eq!(names, ["default"], "{v}");
    // Declared afterwards (settings written with valkey-cli), the same name works.
    client_for(&s).await.config_set("junk-1", &[("soft_cap", 5)]).await.unwrap();
    assert_eq!(api.enter("junk-1").await.0, 200, "no negative answer is kept");
    api.stop().await;
}

async fn declared_queues_work_however_they_were_declared(b: Backend) {
    let s = ValkeyServer::start(b);
    let qc = client_for(&s).await;
    // Settings written straight to Valkey (QUEUE.CONFIG, as valkey-cli would).
    qc.config_set("by-config", &[("soft_cap", 0)]).await.unwrap();
    // A queue an older queue-api registered when someone entered it (the registry
    // alone, no settings): every queue a deployment served before is declared.
    let _: () = redis::cmd("SADD").arg("queue-registry").arg("legacy").query(&mut s.conn()).unwrap();
    let api = Api::on(&s).await;
    // default: nothing needed (seed 000's contract).
    let (code, v) = api.call(Method::POST, "/api/queue/entry", Some(json!({"nickname": "a"})), false).await;
    assert_eq!((code, v["queue"].as_str()), (200, Some("default")), "{v}");
    for q in ["by-config", "legacy"] {
        let (code, v) = api.enter(q).await;
        assert_eq!(code, 200, "{q}: {v}");
        let user = v["userId"].as_str().unwrap();
        let (code, st) =
            api.call(Method::GET, &format!("/api/queue/status?userId={user}&queue={q}"), None, false).await;
        assert_eq!(code, 200, "{q}: {st}");
        let page = api.http.get(api.url(&format!("/?queue={q}"))).send().await.unwrap();
        assert_eq!(page.status(), 200, "{q}");
        let (code, _) = api.call(Method::GET, &format!("/api/queue/opening?queue={q}"), None, false).await;
        assert_eq!(code, 200, "{q}");
    }
    // Created in the back office (no setting needed): 201, then 200 when it exists.
    let (code, v) = api.admin(Method::POST, "/api/admin/queues", Some(json!({"queue": "made"}))).await;
    assert_eq!((code, v["queue"].as_str()), (201, Some("made")), "{v}");
    let (code, _) = api.admin(Method::POST, "/api/admin/queues", Some(json!({"queue": "made"}))).await;
    assert_eq!(code, 200, "creating twice changes nothing");
    for (body, want) in [(json!({"queue": "bad name"}), 400), (json!({}), 400), (json!({"queue": 5}), 400)] {
        assert_eq!(api.admin(Method::POST, "/api/admin/queues", Some(body.clone())).await.0, want, "{body}");
    }
    assert_eq!(api.enter("made").await.0, 200);
    // A settings change in the back office declares the queue as well.
    assert_eq!(api.enter("set-here").await.0, 404);
    let (code, _) = api.admin(Method::PUT, "/api/admin/queues/set-here", Some(json!({"soft_cap": 3}))).await;
    assert_eq!(code, 200);
    assert_eq!(api.enter("set-here").await.0, 200, "a refusal is not remembered");
    // The registry holds what was declared, nothing a visitor named.
    let mut registry: Vec<String> = redis::cmd("SMEMBERS").arg("queue-registry").query(&mut s.conn()).unwrap();
    registry.sort();
    assert_eq!(registry, ["by-config", "legacy", "made", "set-here"]);
    // Every declared queue is listed, default included.
    let (_, v) = api.admin(Method::GET, "/api/admin/queues", None).await;
    let names: Vec<&str> = v["queues"].as_array().unwrap().iter().map(|q| q["queue"].as_str().unwrap()).collect();
    assert_eq!(names, ["by-config", "default", "legacy", "made", "set-here"], "{v}");
    api.stop().await;
}

async fn delete_refuses_a_queue_in_use_and_removes_an_empty_one(b: Backend) {
    let s = ValkeyServer::start(b);
    let qc = client_for(&s).await;
    let api = Api::on(&s).await;
    let (code, _) = api.admin(Method::POST, "/api/admin/queues", Some(json!({"queue": "gone"}))).await;
    assert_eq!(code, 201);
    let (code, _) = api.admin(Method::PUT, "/api/admin/queues/gone", Some(json!({"soft_cap": 1}))).await;
    assert_eq!(code, 200);
    let (code, _) = api.admin(Method::PUT, "/api/admin/queues/gone/brand", Some(json!({"title": "Gone"}))).await;
    assert_eq!(code, 200);
    // One inside (claimed), one holding a ticket, one waiting: each keeps it in use.
    let mut people = Vec::new();
    for _ in 0..3 {
        let (code, v) = api.enter("gone").await;
        assert_eq!(code, 200, "{v}");
        people.push(v["userId"].as_str().unwrap().to_string());
    }
    let ticket = qc.status("gone", &people[0]).await.unwrap().ticket_id.expect("the first is promoted");
    qc.claim("gone", &ticket).await.unwrap();
    qc.config_set("gone", &[("soft_cap", 2)]).await.unwrap();
    qc.promote("gone", None).await.unwrap();
    let refused = |why: &'static str| {
        let api = &api;
        async move {
            let (code, v) = api.admin(Method::DELETE, "/api/admin/queues/gone", None).await;
            assert_eq!((code, v["error"].as_str()), (409, Some("queue_in_use")), "{why}: {v}");
            assert!(v["message"].as_str().unwrap().contains("gone"), "{v}");
        }
    };
    refused("one inside, one with a ticket, one waiting").await;
    qc.leave("gone", &people[2]).await.unwrap();
    refused("one inside, one with a ticket").await;
    qc.leave("gone", &people[1]).await.unwrap();
    refused("one inside").await;
    qc.end_session("gone", &people[0]).await.unwrap();
    // Someone in the pre-queue of a scheduled opening keeps it in use too.
    let in_an_hour =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64 + 3_600_000;
    qc.config_set("gone", &[("opens_at", in_an_hour)]).await.unwrap();
    let (code, early) = api.enter("gone").await;
    assert_eq!(code, 200, "{early}");
    refused("one in the pre-queue").await;
    qc.leave("gone", early["userId"].as_str().unwrap()).await.unwrap();
    let (code, v) = api.admin(Method::DELETE, "/api/admin/queues/gone", None).await;
    assert_eq!((code, v["deleted"].as_bool()), (200, Some(true)), "{v}");
    let left: Vec<String> = redis::cmd("KEYS").arg("queue:{gone}:*").query(&mut s.conn()).unwrap();
    assert!(left.is_empty(), "every key of the queue is gone: {left:?}");
    let registered: bool = redis::cmd("SISMEMBER").arg("queue-registry").arg("gone").query(&mut s.conn()).unwrap();
    assert!(!registered);
    // No longer a queue: 404 for visitors and for the back office, not listed.
    let (code, v) = api.enter("gone").await;
    assert_eq!((code, v["error"].as_str()), (404, Some("unknown_queue")), "{v}");
    assert_eq!(api.admin(Method::DELETE, "/api/admin/queues/gone", None).await.0, 404);
    // Nothing below the queue's path brings it back (the API fuzzer found branding
    // and pausing a deleted queue re-declared it): 404, and it stays gone.
    for (method, path, body) in [
        (Method::PUT, "/api/admin/queues/gone/brand", Some(json!({"title": "Back"}))),
        (Method::POST, "/api/admin/queues/gone/pause", None),
        (Method::POST, "/api/admin/queues/gone/resume", None),
        (Method::GET, "/api/admin/queues/gone/codes", None),
        (Method::POST, "/api/admin/queues/gone/codes", Some(json!({"lane": "a", "uses": 1, "codes": ["c-1"]}))),
    ] {
        let (code, v) = api.admin(method.clone(), path, body).await;
        assert_eq!((code, v["error"].as_str()), (404, Some("unknown_queue")), "{method} {path}: {v}");
    }
    let (code, v) = api.admin(Method::GET, "/api/admin/queues/gone", None).await;
    assert_eq!((code, v["error"].as_str()), (404, Some("unknown_queue")), "{v}");
    let left: Vec<String> = redis::cmd("KEYS").arg("queue:{gone}:*").query(&mut s.conn()).unwrap();
    assert!(left.is_empty(), "nothing written for the deleted queue: {left:?}");
    let (_, v) = api.admin(Method::GET, "/api/admin/queues", None).await;
    assert!(!v["queues"].as_array().unwrap().iter().any(|q| q["queue"] == "gone"), "{v}");
    // default always exists: it cannot be deleted.
    let (code, v) = api.admin(Method::DELETE, "/api/admin/queues/default", None).await;
    assert_eq!(code, 409, "{v}");
    // The token is needed.
    let (code, _) = api.call(Method::DELETE, "/api/admin/queues/made", None, false).await;
    assert_eq!(code, 401);
    api.stop().await;
}

async fn the_listing_counts_pages_and_searches_every_queue(b: Backend) {
    let s = ValkeyServer::start(b);
    let api = Api::on(&s).await;
    // From the start: default, and the count.
    let (code, v) = api.admin(Method::GET, "/api/admin/queues", None).await;
    assert_eq!((code, v["total"].as_u64(), v["truncated"].as_bool()), (200, Some(1), Some(false)), "{v}");
    assert_eq!(v["queues"][0]["queue"], "default", "{v}");
    // 600 queues declared before `shop` (by name), as the flood of junk once did.
    let mut c = s.conn();
    let mut sadd = redis::cmd("SADD");
    sadd.arg("queue-registry");
    for i in 0..600 {
        sadd.arg(format!("a-{i:03}"));
    }
    let _: () = sadd.query(&mut c).unwrap();
    let (code, _) = api.admin(Method::POST, "/api/admin/queues", Some(json!({"queue": "shop"}))).await;
    assert_eq!(code, 201);
    // The first page: cut, and it says so; the count of all.
    let (_, v) = api.admin(Method::GET, "/api/admin/queues", None).await;
    let listed = v["queues"].as_array().unwrap();
    assert_eq!((v["total"].as_u64(), v["truncated"].as_bool()), (Some(602), Some(true)), "{}", v["total"]);
    assert!(!listed.is_empty() && listed.len() < 602, "{}", listed.len());
    assert_eq!((v["offset"].as_u64(), v["limit"].as_u64()), (Some(0), Some(listed.len() as u64)));
    // Paging through finds every queue once, shop and default included.
    let mut seen = Vec::new();
    let mut offset = 0;
    loop {
        let (code, v) = api.admin(Method::GET, &format!("/api/admin/queues?offset={offset}&limit=100"), None).await;
        assert_eq!(code, 200, "{v}");
        let page: Vec<String> =
            v["queues"].as_array().unwrap().iter().map(|q| q["queue"].as_str().unwrap().to_string()).collect();
        assert_eq!(v["total"].as_u64(), Some(602));
        if page.is_empty() {
            break;
        }
        assert!(page.len() <= 100);
        offset += page.len();
        seen.extend(page);
    }
    assert_eq!(seen.len(), 602);
    let mut sorted = seen.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted, seen, "in name order, each once");
    assert!(seen.iter().any(|q| q == "shop") && seen.iter().any(|q| q == "default"));
    // Search: by part of the name, any case.
    let (_, v) = api.admin(Method::GET, "/api/admin/queues?search=SHO", None).await;
    assert_eq!((v["total"].as_u64(), v["truncated"].as_bool()), (Some(1), Some(false)), "{v}");
    assert_eq!(v["queues"][0]["queue"], "shop");
    assert_eq!(v["queues"][0]["waiting"], 0, "with its counts: {v}");
    let (_, v) = api.admin(Method::GET, "/api/admin/queues?search=a-59&limit=5", None).await;
    assert_eq!((v["total"].as_u64(), v["truncated"].as_bool()), (Some(10), Some(true)), "{v}");
    assert_eq!(v["queues"].as_array().unwrap().len(), 5);
    // Bounds: limit 1 to 500; a bad value is a 400.
    for bad in ["limit=0", "limit=501", "offset=-1", "offset=1000000001", "limit=x", "search="] {
        let (code, v) = api.admin(Method::GET, &format!("/api/admin/queues?{bad}"), None).await;
        if bad == "search=" {
            assert_eq!(code, 200, "an empty search is no search: {v}");
        } else {
            assert_eq!(code, 400, "{bad}: {v}");
        }
    }
    let (code, _) = api.admin(Method::GET, &format!("/api/admin/queues?search={}", "x".repeat(65)), None).await;
    assert_eq!(code, 400);
    api.stop().await;
}
