//! Lanes and access codes over HTTP: codes added by the back office (JSON and CSV,
//! all or none, bad CSV lines named), never readable back, counted per lane; an entry
//! with a code (its lane; fifty racing for one single-use code put exactly one in
//! line); a code where the queue has no lanes; the lane from the identity's lane
//! claim, never from the body. Real valkey-server, real queue-api, both backends.

use reqwest::Method;
use ring::rand::SystemRandom;
use ring::signature::{Ed25519KeyPair, KeyPair};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};
use testkit::{Backend, ValkeyServer};

use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use base64::Engine;

mod common;
use common::Api;

const ADMIN: &str = "codes-admin";
const ISSUER: &str = "https://login.shop.example";
const AUDIENCE: &str = "shop";

impl Api {
    async fn call(&self, method: Method, path: &str, body: Option<Value>, bearer: Option<&str>) -> (u16, Value) {
        let mut req = self.http.request(method, self.url(path));
        if let Some(t) = bearer {
            req = req.bearer_auth(t);
        }
        if let Some(b) = body {
            req = req.json(&b);
        }
        let r = req.send().await.unwrap();
        (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
    }

    async fn enter(&self, queue: &str, extra: Value, token: Option<&str>) -> (u16, Value) {
        let mut body = json!({"nickname": "n", "queue": queue});
        for (k, v) in extra.as_object().unwrap() {
            body[k] = v.clone();
        }
        self.call(Method::POST, "/api/queue/entry", Some(body), token).await
    }

    async fn settings(&self, queue: &str, body: Value) -> (u16, Value) {
        self.call(Method::PUT, &format!("/api/admin/queues/{queue}"), Some(body), Some(ADMIN)).await
    }

    async fn add_codes(&self, queue: &str, body: Value) -> (u16, Value) {
        self.call(Method::POST, &format!("/api/admin/queues/{queue}/codes"), Some(body), Some(ADMIN)).await
    }

    async fn add_csv(&self, queue: &str, query: &str, csv: &str) -> (u16, Value) {
        let r = self
            .http
            .post(self.url(&format!("/api/admin/queues/{queue}/codes?{query}")))
            .bearer_auth(ADMIN)
            .header("content-type", "text/csv; charset=utf-8")
            .body(csv.to_string())
            .send()
            .await
            .unwrap();
        (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
    }

    /// Each lane's `[codes, used, left]`, in the queue's order.
    async fn counts(&self, queue: &str) -> Vec<(String, u64, u64, u64)> {
        let (st, body) = self.call(Method::GET, &format!("/api/admin/queues/{queue}/codes"), None, Some(ADMIN)).await;
        assert_eq!(st, 200, "{body}");
        body["lanes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| {
                let n = |f: &str| l[f].as_u64().unwrap();
                (l["lane"].as_str().unwrap().to_string(), n("codes"), n("used"), n("left"))
            })
            .collect()
    }
}

fn lane(name: &str, codes: u64, used: u64, left: u64) -> (String, u64, u64, u64) {
    (name.to_string(), codes, used, left)
}

/// Every key and the dataset's digest: what "nothing was written" compares.
fn keyspace(s: &ValkeyServer) -> (Vec<String>, String) {
    let mut c = s.conn();
    let mut keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut c).unwrap();
    keys.sort();
    (keys, testkit::digest(&mut c))
}

/// Everything the store holds, keys and values, as text (what a reader of Valkey sees).
fn store_text(s: &ValkeyServer) -> String {
    let mut c = s.conn();
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut c).unwrap();
    let mut out = String::new();
    for k in keys {
        let kind: String = redis::cmd("TYPE").arg(&k).query(&mut c).unwrap();
        let v: Vec<Vec<u8>> = match kind.as_str() {
            "hash" => redis::cmd("HGETALL").arg(&k).query(&mut c).unwrap(),
            "string" => vec![redis::cmd("GET").arg(&k).query(&mut c).unwrap()],
            "zset" => redis::cmd("ZRANGE").arg(&k).arg(0).arg(-1).arg("WITHSCORES").query(&mut c).unwrap(),
            "set" => redis::cmd("SMEMBERS").arg(&k).query(&mut c).unwrap(),
            "list" => redis::cmd("LRANGE").arg(&k).arg(0).arg(-1).query(&mut c).unwrap(),
            _ => Vec::new(),
        };
        out.push_str(&k);
        for x in v {
            out.push(' ');
            out.push_str(&String::from_utf8_lossy(&x));
        }
        out.push('\n');
    }
    out
}

async fn start(s: &ValkeyServer) -> Api {
    Api::start_admin(queue_api::Config::local(&s.url()), ADMIN).await
}

testkit::backend_tests!(
    async
    codes_are_added_counted_and_never_readable_back,
    csv_with_bad_lines_names_them_and_adds_nothing,
    fifty_racing_for_one_single_use_code_put_one_in_line,
    a_code_where_the_queue_has_no_lanes,
    the_lane_comes_from_the_identity_claim_never_from_the_body,
    deleting_a_queue_deletes_its_codes,
    the_back_office_shows_each_lanes_waiting_and_admitted,
);

/// `info.lane_counts` of the back office's queue view: each lane's (lane, waiting,
/// admitted), in the queue's order.
async fn lane_counts(api: &Api, queue: &str) -> Vec<(String, u64, u64)> {
    let (st, q) = api.call(Method::GET, &format!("/api/admin/queues/{queue}"), None, Some(ADMIN)).await;
    assert_eq!(st, 200, "{q}");
    q["info"]["lane_counts"]
        .as_array()
        .unwrap_or_else(|| panic!("no info.lane_counts: {q}"))
        .iter()
        .map(|l| {
            (l["lane"].as_str().unwrap().to_string(), l["waiting"].as_u64().unwrap(), l["admitted"].as_u64().unwrap())
        })
        .collect()
}

async fn the_back_office_shows_each_lanes_waiting_and_admitted(b: Backend) {
    let s = ValkeyServer::start(b);
    let api = start(&s).await;
    // Without lanes: an empty list.
    assert_eq!(api.settings("shop", json!({"soft_cap": 0})).await.0, 200);
    assert_eq!(lane_counts(&api, "shop").await, []);
    assert_eq!(api.settings("shop", json!({"lanes": "presale,general"})).await.0, 200);
    assert_eq!(api.add_codes("shop", json!({"lane": "presale", "uses": 5, "codes": ["PRESALE-1"]})).await.0, 200);
    let count = |lane: &str, waiting: u64, admitted: u64| (lane.to_string(), waiting, admitted);
    assert_eq!(lane_counts(&api, "shop").await, [count("presale", 0, 0), count("general", 0, 0)]);
    // Three into general, then two into presale with the code (ahead of general).
    for _ in 0..3 {
        let (st, e) = api.enter("shop", json!({}), None).await;
        assert_eq!((st, e["lane"].as_str()), (200, Some("general")), "{e}");
    }
    for _ in 0..2 {
        let (st, e) = api.enter("shop", json!({"code": "PRESALE-1"}), None).await;
        assert_eq!((st, e["lane"].as_str()), (200, Some("presale")), "{e}");
    }
    assert_eq!(lane_counts(&api, "shop").await, [count("presale", 2, 0), count("general", 3, 0)]);
    // Room for three: presale's two, then general's first.
    let qc = queue_client::QueueClient::connect(&s.url()).await.unwrap();
    qc.config_set("shop", &[("soft_cap", 3)]).await.unwrap();
    assert_eq!(qc.promote("shop", None).await.unwrap().promoted, 3);
    assert_eq!(lane_counts(&api, "shop").await, [count("presale", 0, 2), count("general", 2, 1)]);
    // A lane the setting no longer has is no longer shown (lanes change once nobody waits).
    qc.config_set("shop", &[("soft_cap", 10)]).await.unwrap();
    assert_eq!(qc.promote("shop", None).await.unwrap().promoted, 2);
    assert_eq!(lane_counts(&api, "shop").await, [count("presale", 0, 2), count("general", 0, 3)]);
    assert_eq!(api.settings("shop", json!({"lanes": "vip,general"})).await.0, 200);
    assert_eq!(lane_counts(&api, "shop").await, [count("vip", 0, 0), count("general", 0, 3)]);
}

async fn codes_are_added_counted_and_never_readable_back(b: Backend) {
    let s = ValkeyServer::start(b);
    let api = start(&s).await;
    let (st, body) = api.settings("shop", json!({"soft_cap": 0, "lanes": "presale,general"})).await;
    assert_eq!((st, body["lanes"].clone()), (200, json!(["presale", "general"])), "{body}");
    // The back office's token is needed.
    let (st, _) = api.call(Method::GET, "/api/admin/queues/shop/codes", None, None).await;
    assert_eq!(st, 401);
    let (st, _) = api
        .call(Method::POST, "/api/admin/queues/shop/codes", Some(json!({"lane": "presale", "codes": ["X"]})), None)
        .await;
    assert_eq!(st, 401);
    assert_eq!(api.counts("shop").await, [lane("presale", 0, 0, 0), lane("general", 0, 0, 0)]);

    let codes = ["SECRET-ALPHA-1", "SECRET-ALPHA-2", "SECRET-ALPHA-3"];
    let (st, body) = api.add_codes("shop", json!({"lane": "presale", "uses": 2, "codes": codes})).await;
    assert_eq!((st, body["added"].as_u64(), body["given"].as_u64()), (200, Some(3), Some(3)), "{body}");
    assert_eq!(api.counts("shop").await, [lane("presale", 3, 0, 6), lane("general", 0, 0, 0)]);
    // Added again: nothing new.
    let (st, body) = api.add_codes("shop", json!({"lane": "presale", "uses": 2, "codes": codes})).await;
    assert_eq!((st, body["added"].as_u64()), (200, Some(0)), "{body}");

    // Bad uploads: refused, nothing added.
    let before = keyspace(&s);
    let refused = [
        (json!({"lane": "vip", "codes": ["A"]}), 400, "lane"),
        (json!({"lane": "presale", "uses": 0, "codes": ["A"]}), 422, "uses"),
        (json!({"lane": "presale", "codes": ["A", ""]}), 422, "codes"),
        (json!({"lane": "presale", "codes": ["A", "A"]}), 422, "codes"),
        (json!({"lane": "presale", "codes": "A"}), 422, "codes"),
        (json!({"codes": ["A"]}), 422, "lane"),
    ];
    for (body, status, field) in refused {
        let (st, e) = api.add_codes("shop", body.clone()).await;
        assert_eq!((st, e["field"].as_str()), (status, Some(field)), "{body} -> {e}");
    }
    let many: Vec<String> = (0..10_001).map(|i| format!("C{i}")).collect();
    let (st, e) = api.add_codes("shop", json!({"lane": "presale", "codes": many})).await;
    assert_eq!((st, e["error"].as_str()), (413, Some("too_large")), "{e}");
    assert_eq!(keyspace(&s), before, "refused uploads change nothing");

    // Ten thousand in one upload: added in chunks, all counted.
    let many: Vec<String> = (0..10_000).map(|i| format!("G{i}")).collect();
    let (st, body) = api.add_codes("shop", json!({"lane": "general", "codes": many})).await;
    assert_eq!((st, body["added"].as_u64()), (200, Some(10_000)), "{body}");
    assert_eq!(api.counts("shop").await, [lane("presale", 3, 0, 6), lane("general", 10_000, 0, 10_000)]);

    // A code enters its lane and uses one of its uses.
    let (st, e) = api.enter("shop", json!({"code": " SECRET-ALPHA-1 "}), None).await;
    assert_eq!((st, e["lane"].as_str()), (200, Some("presale")), "{e}");
    assert_eq!(api.counts("shop").await[0], lane("presale", 3, 1, 5));

    // Never readable back: not from the back office, not from the store.
    let (_, listing) = api.call(Method::GET, "/api/admin/queues/shop/codes", None, Some(ADMIN)).await;
    let (_, queue) = api.call(Method::GET, "/api/admin/queues/shop", None, Some(ADMIN)).await;
    let stored = store_text(&s);
    for c in codes {
        assert!(!listing.to_string().contains(c) && !queue.to_string().contains(c), "{c} answered back");
        assert!(!stored.contains(c), "{c} stored as itself");
        assert!(stored.contains(&queue_client::code_hash(c)), "{c}'s hash stored");
    }
}

async fn csv_with_bad_lines_names_them_and_adds_nothing(b: Backend) {
    let s = ValkeyServer::start(b);
    let api = start(&s).await;
    assert_eq!(api.settings("shop", json!({"lanes": "presale,general"})).await.0, 200);
    let before = keyspace(&s);
    let csv = "code,lane,uses\nGOOD-1\nGOOD-2,presale,3\n,presale\nBAD-USES,general,0\nBAD-LANE,vip\nA,b,c,d\n";
    let (st, e) = api.add_csv("shop", "lane=general", csv).await;
    assert_eq!((st, e["error"].as_str()), (400, Some("bad_lines")), "{e}");
    assert_eq!(e["badLines"], 3, "{e}");
    let lines: Vec<u64> = e["lines"].as_array().unwrap().iter().map(|l| l["line"].as_u64().unwrap()).collect();
    assert_eq!(lines, [4, 5, 7], "{e}");
    assert!(e["message"].as_str().unwrap().contains("line 4, 5, 7"), "{e}");
    assert_eq!(keyspace(&s), before, "nothing added");
    // The unknown lane is found once the lines read well: named by its line too.
    let (st, e) = api.add_csv("shop", "lane=general", "GOOD-1\nBAD-LANE,vip\n").await;
    assert_eq!((st, e["lines"][0]["line"].as_u64()), (400, Some(2)), "{e}");
    // A code twice: the second line named.
    let (st, e) = api.add_csv("shop", "lane=general", "GOOD-1\nGOOD-1,presale\n").await;
    assert_eq!((st, e["lines"][0]["line"].as_u64()), (400, Some(2)), "{e}");
    // No lane anywhere.
    let (st, e) = api.add_csv("shop", "", "GOOD-1\n").await;
    assert_eq!((st, e["error"].as_str()), (400, Some("bad_lines")), "{e}");
    assert_eq!(keyspace(&s), before, "nothing added");

    let (st, body) = api.add_csv("shop", "lane=general", "code,lane,uses\r\nGOOD-1\r\nGOOD-2,presale,3\r\n\r\n").await;
    assert_eq!((st, body["added"].as_u64()), (200, Some(2)), "{body}");
    assert_eq!(api.counts("shop").await, [lane("presale", 1, 0, 3), lane("general", 1, 0, 1)]);
}

async fn fifty_racing_for_one_single_use_code_put_one_in_line(b: Backend) {
    let s = ValkeyServer::start(b);
    let api = Arc::new(start(&s).await);
    assert_eq!(api.settings("drop", json!({"soft_cap": 0, "lanes": "presale,general"})).await.0, 200);
    assert_eq!(api.add_codes("drop", json!({"lane": "presale", "codes": ["ONLY-ONE"]})).await.0, 200);
    let racers: Vec<_> = (0..50)
        .map(|_| {
            let api = api.clone();
            tokio::spawn(async move { api.enter("drop", json!({"code": "ONLY-ONE"}), None).await })
        })
        .collect();
    let mut ok = Vec::new();
    let mut refused = 0;
    for r in racers {
        let (st, body) = r.await.unwrap();
        match st {
            200 => ok.push(body),
            403 => {
                assert_eq!(body["error"], "code_invalid", "{body}");
                refused += 1;
            }
            other => panic!("{other}: {body}"),
        }
    }
    assert_eq!((ok.len(), refused), (1, 49));
    assert_eq!((ok[0]["lane"].as_str(), ok[0]["rank"].as_u64()), (Some("presale"), Some(1)), "{}", ok[0]);
    let (_, q) = api.call(Method::GET, "/api/admin/queues/drop", None, Some(ADMIN)).await;
    assert_eq!(q["counts"]["waiting"], 1, "{q}");
    assert_eq!(api.counts("drop").await[0], lane("presale", 1, 1, 0));
    // Used up and unknown read alike.
    let (st, used) = api.enter("drop", json!({"code": "ONLY-ONE"}), None).await;
    let (st2, unknown) = api.enter("drop", json!({"code": "NEVER-ADDED"}), None).await;
    assert_eq!((st, st2), (403, 403));
    assert_eq!(used, unknown);
}

async fn a_code_where_the_queue_has_no_lanes(b: Backend) {
    let s = ValkeyServer::start(b);
    let api = start(&s).await;
    assert_eq!(api.settings("plain", json!({"soft_cap": 0})).await.0, 200);
    let before = keyspace(&s);
    let (st, e) = api.enter("plain", json!({"code": "ANY"}), None).await;
    assert_eq!((st, e["error"].as_str()), (400, Some("no_lanes")), "{e}");
    let (st, e) = api.add_codes("plain", json!({"lane": "presale", "codes": ["ANY"]})).await;
    assert_eq!((st, e["error"].as_str()), (400, Some("no_lanes")), "{e}");
    assert_eq!(keyspace(&s), before, "nothing written");
    assert_eq!(api.counts("plain").await, []);
    // Without lanes the standing is as it always was: no lane field.
    let (st, e) = api.enter("plain", json!({"lane": "presale"}), None).await;
    assert_eq!(st, 200, "{e}");
    assert!(e.get("lane").is_none(), "{e}");
    let (st, e) = api
        .call(
            Method::GET,
            &format!("/api/queue/status?queue=plain&userId={}", e["userId"].as_str().unwrap()),
            None,
            None,
        )
        .await;
    assert!(st == 200 && e.get("lane").is_none(), "{e}");
}

async fn deleting_a_queue_deletes_its_codes(b: Backend) {
    let s = ValkeyServer::start(b);
    let api = start(&s).await;
    assert_eq!(api.settings("shop", json!({"soft_cap": 0, "lanes": "a,b"})).await.0, 200);
    let (st, body) = api.add_codes("shop", json!({"lane": "a", "uses": 5, "codes": ["X"]})).await;
    assert_eq!((st, body["added"].as_u64()), (200, Some(1)), "{body}");
    let (st, body) = api.call(Method::DELETE, "/api/admin/queues/shop", None, Some(ADMIN)).await;
    assert_eq!(st, 200, "{body}");
    let mut c = s.conn();
    let left: Vec<String> = redis::cmd("KEYS").arg("queue:{shop}:*").query(&mut c).unwrap();
    assert_eq!(left, Vec::<String>::new(), "every key of the queue is gone");
    // A queue of the same name with the same lanes: the old code is unknown there.
    assert_eq!(api.settings("shop", json!({"soft_cap": 0, "lanes": "a,b"})).await.0, 200);
    assert_eq!(api.counts("shop").await, [lane("a", 0, 0, 0), lane("b", 0, 0, 0)]);
    let (st, e) = api.enter("shop", json!({"code": "X"}), None).await;
    assert_eq!((st, e["error"].as_str()), (403, Some("code_invalid")), "{e}");
}

/// The app's login: an Ed25519 key that signs access tokens.
struct Login(Ed25519KeyPair);

impl Login {
    fn new() -> Login {
        let der = Ed25519KeyPair::generate_pkcs8(&SystemRandom::new()).unwrap();
        Login(Ed25519KeyPair::from_pkcs8(der.as_ref()).unwrap())
    }

    fn jwk(&self) -> Value {
        json!({"kty": "OKP", "crv": "Ed25519", "kid": "k1", "alg": "EdDSA", "x": B64.encode(self.0.public_key().as_ref())})
    }

    fn token(&self, sub: &str, groups: Option<Value>) -> String {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs();
        let mut claims = json!({"iss": ISSUER, "aud": AUDIENCE, "sub": sub, "exp": now + 600});
        if let Some(g) = groups {
            claims["groups"] = g;
        }
        let enc = |v: &Value| B64.encode(serde_json::to_vec(v).unwrap());
        let input = format!("{}.{}", enc(&json!({"alg": "EdDSA", "kid": "k1"})), enc(&claims));
        format!("{input}.{}", B64.encode(self.0.sign(input.as_bytes()).as_ref()))
    }
}

async fn the_lane_comes_from_the_identity_claim_never_from_the_body(b: Backend) {
    let s = ValkeyServer::start(b);
    let login = Login::new();
    let mut c = queue_api::Config::local(&s.url());
    let jwks = queue_api::identity::Keys::from_jwks(&json!({ "keys": [login.jwk()] }).to_string()).unwrap();
    c.identity.jwks = Some(queue_api::identity::JwksFile(Arc::new(jwks)));
    c.identity.issuer = Some(ISSUER.into());
    c.identity.audience = Some(AUDIENCE.into());
    c.identity.lane_claim = Some("groups".into());
    let api = Api::start_admin(c, ADMIN).await;
    assert_eq!(api.settings("shop", json!({"soft_cap": 0, "lanes": "presale,members,general"})).await.0, 200);

    // A body naming a lane is not read: an anonymous newcomer is in the last lane.
    let (st, anon) = api.enter("shop", json!({"lane": "presale"}), None).await;
    assert_eq!((st, anon["lane"].as_str(), anon["rank"].as_u64()), (200, Some("general"), Some(1)), "{anon}");
    let anon_id = anon["userId"].as_str().unwrap().to_string();
    // Nor with a login whose claim names no lane of the queue.
    let (st, e) = api.enter("shop", json!({"lane": "presale"}), Some(&login.token("bo", Some(json!("staff"))))).await;
    assert_eq!((st, e["lane"].as_str()), (200, Some("general")), "{e}");
    // The claim names lanes (a list, as groups): the first of the queue's lanes it names.
    let (st, ann) =
        api.enter("shop", json!({}), Some(&login.token("ann", Some(json!(["staff", "general", "members"]))))).await;
    assert_eq!((st, ann["lane"].as_str(), ann["rank"].as_u64()), (200, Some("members"), Some(1)), "{ann}");
    // A single string names one.
    let (st, cy) =
        api.enter("shop", json!({"lane": "general"}), Some(&login.token("cy", Some(json!("presale"))))).await;
    assert_eq!((st, cy["lane"].as_str(), cy["rank"].as_u64()), (200, Some("presale"), Some(1)), "{cy}");
    // The anonymous newcomer now has two people ahead, from earlier lanes.
    let (st, now) = api.call(Method::GET, &format!("/api/queue/status?queue=shop&userId={anon_id}"), None, None).await;
    assert_eq!((st, now["lane"].as_str(), now["rank"].as_u64()), (200, Some("general"), Some(3)), "{now}");

    // invite: a code, or a login whose claim names a lane; nothing else.
    assert_eq!(
        api.settings("club", json!({"soft_cap": 0, "lanes": "presale,general", "entry": "invite"})).await.0,
        200
    );
    assert_eq!(api.add_codes("club", json!({"lane": "general", "codes": ["CLUB-1"]})).await.0, 200);
    let before = keyspace(&s);
    let (st, e) = api.enter("club", json!({"lane": "presale"}), None).await;
    assert_eq!((st, e["error"].as_str()), (401, Some("identity_required")), "{e}");
    let (st, e) = api.enter("club", json!({"lane": "presale"}), Some(&login.token("dee", None))).await;
    assert_eq!((st, e["error"].as_str()), (403, Some("invite_only")), "{e}");
    let (st, e) = api.enter("club", json!({"code": "CLUB-2"}), None).await;
    assert_eq!((st, e["error"].as_str()), (403, Some("code_invalid")), "{e}");
    assert_eq!(keyspace(&s), before, "refused entries write nothing");
    let (st, e) = api.enter("club", json!({"code": "CLUB-1"}), None).await;
    assert_eq!((st, e["lane"].as_str()), (200, Some("general")), "{e}");
    // Entered with a code and no login: the place is followed with its userId.
    let id = e["userId"].as_str().unwrap();
    let (st, e) = api.call(Method::GET, &format!("/api/queue/status?queue=club&userId={id}"), None, None).await;
    assert_eq!((st, e["lane"].as_str()), (200, Some("general")), "{e}");
    let (st, e) = api.enter("club", json!({}), Some(&login.token("eve", Some(json!(["presale"]))))).await;
    assert_eq!((st, e["lane"].as_str(), e["rank"].as_u64()), (200, Some("presale"), Some(1)), "{e}");
}
