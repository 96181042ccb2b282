//! Identity from the app's own login: a JWT checked against the login's keys (made
//! here, Ed25519 and P-256), one place per account (a second tab or device finds the
//! same place; an explicit re-entry goes to the back), a userId derived from an
//! identity never readable without its token, the `identified` and `invite` entry
//! modes, and every bad token refused with its reason and nothing written. Real
//! valkey-server, real queue-api, both backends.

use futures_util::StreamExt;
use reqwest::Method;
use ring::rand::SystemRandom;
use ring::signature::{EcdsaKeyPair, Ed25519KeyPair, KeyPair};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use testkit::{Backend, ValkeyServer};

use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use base64::Engine;

mod common;
use common::Api;

const ADMIN: &str = "identity-admin";
const ISSUER: &str = "https://login.shop.example";
const AUDIENCE: &str = "shop";
const COOKIE: &str = "shop_session";

fn enc(v: &Value) -> String {
    B64.encode(serde_json::to_vec(v).unwrap())
}

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs()
}

/// The app's login: an Ed25519 key that signs access tokens.
struct Login {
    pair: Ed25519KeyPair,
    kid: &'static str,
}

impl Login {
    fn new(kid: &'static str) -> Login {
        let der = Ed25519KeyPair::generate_pkcs8(&SystemRandom::new()).unwrap();
        Login { pair: Ed25519KeyPair::from_pkcs8(der.as_ref()).unwrap(), kid }
    }

    fn jwk(&self) -> Value {
        json!({"kty": "OKP", "crv": "Ed25519", "kid": self.kid, "use": "sig", "alg": "EdDSA",
               "x": B64.encode(self.pair.public_key().as_ref())})
    }

    fn sign_raw(&self, header: &Value, claims: &Value) -> String {
        let input = format!("{}.{}", enc(header), enc(claims));
        format!("{input}.{}", B64.encode(self.pair.sign(input.as_bytes()).as_ref()))
    }

    fn sign(&self, claims: &Value) -> String {
        self.sign_raw(&json!({"alg": "EdDSA", "kid": self.kid, "typ": "JWT"}), claims)
    }

    /// A good token for `sub`.
    fn token(&self, sub: &str) -> String {
        self.sign(&claims(sub))
    }
}

fn claims(sub: &str) -> Value {
    json!({"iss": ISSUER, "aud": AUDIENCE, "sub": sub, "iat": now(), "exp": now() + 600})
}

/// queue-api with identity on: `keys` verify, the `vip` queue wants its own audience.
async fn start(s: &ValkeyServer, keys: Vec<Value>) -> Api {
    let mut c = queue_api::Config::local(&s.url());
    let jwks = queue_api::identity::Keys::from_jwks(&json!({ "keys": keys }).to_string()).unwrap();
    c.identity.jwks = Some(queue_api::identity::JwksFile(Arc::new(jwks)));
    c.identity.issuer = Some(ISSUER.into());
    c.identity.audience = Some(AUDIENCE.into());
    c.identity.cookie = Some(COOKIE.into());
    c.identity.queue_audience = vec![queue_api::identity::QueueAudience::parse("vip=vip-app").unwrap()];
    Api::start_admin(c, ADMIN).await
}

/// How a request carries the token.
#[derive(Clone, Copy)]
enum By<'a> {
    Nothing,
    Bearer(&'a str),
    Cookie(&'a str),
}

impl Api {
    async fn call(&self, method: Method, path: &str, body: Option<Value>, by: By<'_>) -> (u16, Value) {
        let mut req = self.http.request(method, self.url(path));
        match by {
            By::Nothing => {}
            By::Bearer(t) => req = req.bearer_auth(t),
            By::Cookie(t) => req = req.header("cookie", format!("other=1; {COOKIE}={t}")),
        }
        if let Some(b) = body {
            req = req.json(&b);
        }
        let r = req.send().await.unwrap();
        (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
    }

    async fn enter(&self, queue: &str, by: By<'_>, extra: Value) -> (u16, Value) {
        let mut body = json!({"nickname": "n", "queue": queue});
        for (k, v) in extra.as_object().unwrap() {
            body[k] = v.clone();
        }
        self.call(Method::POST, "/api/queue/entry", Some(body), by).await
    }

    async fn status(&self, query: &str, by: By<'_>) -> (u16, Value) {
        self.call(Method::GET, &format!("/api/queue/status?{query}"), None, by).await
    }

    async fn settings(&self, queue: &str, body: Value) -> (u16, Value) {
        let r = self
            .http
            .put(self.url(&format!("/api/admin/queues/{queue}")))
            .bearer_auth(ADMIN)
            .json(&body)
            .send()
            .await
            .unwrap();
        (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
    }
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
    one_place_per_account_from_any_device,
    a_user_id_from_an_identity_is_never_enough_alone,
    bad_tokens_are_refused_with_their_reason_and_change_nothing,
    identified_and_invite_queues_need_the_login,
    open_queues_work_as_before_without_a_token,
    an_instance_without_identity_never_takes_an_identity_id_alone,
    a_cross_site_entry_with_the_login_cookie_is_refused,
);

async fn one_place_per_account_from_any_device(b: Backend) {
    let s = ValkeyServer::start(b);
    let login = Login::new("k1");
    let api = start(&s, vec![login.jwk()]).await;
    // Nobody is admitted: everyone waits.
    assert_eq!(api.settings("shop", json!({"soft_cap": 0})).await.0, 200);
    let ann = login.token("ann");
    let (st, first) = api.enter("shop", By::Bearer(&ann), json!({})).await;
    assert_eq!(st, 200, "{first}");
    let id = first["userId"].as_str().unwrap().to_string();
    assert!(id.starts_with("id:"), "{id}");
    assert_eq!((first["status"].as_str(), first["rank"].as_u64()), (Some("WAITING"), Some(1)));
    // Someone anonymous behind her.
    let (_, bob) = api.enter("shop", By::Nothing, json!({})).await;
    assert_eq!(bob["rank"], 2);
    // A second device (the cookie, another token of the same account): the same place,
    // not a second one, not the back of the line.
    let again = login.token("ann");
    let (st, second) = api.enter("shop", By::Cookie(&again), json!({})).await;
    assert_eq!((st, second["userId"].as_str(), second["rank"].as_u64()), (200, Some(id.as_str()), Some(1)));
    // The page resumes by asking first: status without a userId.
    let (st, status) = api.status("queue=shop", By::Cookie(&ann)).await;
    assert_eq!((st, status["userId"].as_str(), status["rank"].as_u64()), (200, Some(id.as_str()), Some(1)));
    // Naming her own userId with the token is fine; naming another's is not.
    assert_eq!(api.status(&format!("queue=shop&userId={id}"), By::Bearer(&ann)).await.0, 200);
    let (st, e) = api.status(&format!("queue=shop&userId={}", bob["userId"].as_str().unwrap()), By::Bearer(&ann)).await;
    assert_eq!((st, e["error"].as_str()), (400, Some("bad_request")));
    // Another account is another person.
    let (_, cid) = api.enter("shop", By::Bearer(&login.token("cid")), json!({})).await;
    assert_eq!(cid["rank"], 3);
    assert_ne!(cid["userId"], first["userId"]);
    // The push stream, with the cookie (an EventSource sends no header of its own).
    let resp = api
        .http
        .get(api.url("/api/queue/stream?queue=shop"))
        .header("cookie", format!("{COOKIE}={ann}"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let mut body = resp.bytes_stream();
    let mut text = String::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !text.contains("\n\n") {
        let left = deadline.saturating_duration_since(Instant::now());
        let chunk = tokio::time::timeout(left, body.next()).await.expect("an event in time").expect("open").unwrap();
        text.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert!(text.contains("event: position") && text.contains(&id), "{text}");
    drop(body);
    // An explicit re-entry (the app naming her userId on purpose): to the back.
    let (st, back) = api.enter("shop", By::Bearer(&ann), json!({"userId": id})).await;
    assert_eq!((st, back["userId"].as_str(), back["rank"].as_u64()), (200, Some(id.as_str()), Some(3)));
    // A userId that is not hers, with her token: refused, nothing changes.
    let (st, _) = api.enter("shop", By::Bearer(&ann), json!({"userId": bob["userId"]})).await;
    assert_eq!(st, 400);
    // Leave with the token, no userId.
    let (st, left) = api.call(Method::DELETE, "/api/queue/entry?queue=shop", None, By::Bearer(&ann)).await;
    assert_eq!((st, left["userId"].as_str(), left["left"].as_bool()), (200, Some(id.as_str()), Some(true)));
    let (st, e) = api.status("queue=shop", By::Bearer(&ann)).await;
    assert_eq!((st, e["error"].as_str()), (404, Some("not_found")));
    // Entering afresh now is a new place at the back.
    let (_, fresh) = api.enter("shop", By::Bearer(&ann), json!({})).await;
    assert_eq!((fresh["userId"].as_str(), fresh["rank"].as_u64()), (Some(id.as_str()), Some(3)));
    api.stop().await;
}

async fn a_user_id_from_an_identity_is_never_enough_alone(b: Backend) {
    let s = ValkeyServer::start(b);
    let login = Login::new("k1");
    let api = start(&s, vec![login.jwk()]).await;
    assert_eq!(api.settings("shop", json!({"soft_cap": 0})).await.0, 200);
    let (_, ann) = api.enter("shop", By::Bearer(&login.token("ann")), json!({})).await;
    let id = ann["userId"].as_str().unwrap();
    // Even in an open queue: the id is derived from the account, so guessable.
    let q = format!("queue=shop&userId={id}");
    for (method, path) in [
        (Method::GET, format!("/api/queue/status?{q}")),
        (Method::GET, format!("/api/queue/stream?{q}")),
        (Method::DELETE, format!("/api/queue/entry?{q}")),
    ] {
        let (st, e) = api.call(method.clone(), &path, None, By::Nothing).await;
        assert_eq!((st, e["error"].as_str()), (401, Some("identity_required")), "{method} {path}");
    }
    // Nor can an anonymous entry claim it.
    let (st, e) = api.enter("shop", By::Nothing, json!({"userId": id})).await;
    assert_eq!((st, e["error"].as_str()), (401, Some("identity_required")), "{e}");
    let (st, still) = api.status("queue=shop", By::Bearer(&login.token("ann"))).await;
    assert_eq!((st, still["rank"].as_u64()), (200, Some(1)));
    api.stop().await;
}

async fn bad_tokens_are_refused_with_their_reason_and_change_nothing(b: Backend) {
    let s = ValkeyServer::start(b);
    let login = Login::new("k1");
    let forger = Login::new("k1");
    // A second key the login publishes: P-256 (ES256).
    let rng = SystemRandom::new();
    let p256 = &ring::signature::ECDSA_P256_SHA256_FIXED_SIGNING;
    let der = EcdsaKeyPair::generate_pkcs8(p256, &rng).unwrap();
    let ec = EcdsaKeyPair::from_pkcs8(p256, der.as_ref(), &rng).unwrap();
    let point = ec.public_key().as_ref();
    let ec_jwk = json!({"kty": "EC", "crv": "P-256", "kid": "k2", "x": B64.encode(&point[1..33]), "y": B64.encode(&point[33..65])});
    let api = start(&s, vec![login.jwk(), ec_jwk]).await;
    assert_eq!(api.settings("shop", json!({"soft_cap": 0})).await.0, 200);
    assert_eq!(api.settings("vip", json!({"soft_cap": 0})).await.0, 200);
    // A good ES256 token works.
    let es_input = format!("{}.{}", enc(&json!({"alg": "ES256", "kid": "k2"})), enc(&claims("es")));
    let es = format!("{es_input}.{}", B64.encode(ec.sign(&rng, es_input.as_bytes()).unwrap().as_ref()));
    assert_eq!(api.enter("shop", By::Bearer(&es), json!({})).await.0, 200);
    let before = keyspace(&s);

    let with = |f: &dyn Fn(&mut Value)| {
        let mut c = claims("ann");
        f(&mut c);
        login.sign(&c)
    };
    let unsigned = format!("{}.{}.", enc(&json!({"alg": "none", "kid": "k1"})), enc(&claims("ann")));
    let hs_input = format!("{}.{}", enc(&json!({"alg": "HS256", "kid": "k1"})), enc(&claims("ann")));
    let hs_key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, login.pair.public_key().as_ref());
    let hs = format!("{hs_input}.{}", B64.encode(ring::hmac::sign(&hs_key, hs_input.as_bytes()).as_ref()));
    let mut tampered: Vec<String> = login.token("ann").split('.').map(String::from).collect();
    tampered[1] = enc(&claims("bob"));
    let cases: Vec<(&str, String, &str)> = vec![
        ("forged (another key, same kid)", forger.token("ann"), "bad_signature"),
        ("payload changed", tampered.join("."), "bad_signature"),
        ("expired", with(&|c| c["exp"] = json!(now() - 3600)), "expired"),
        ("no expiry", with(&|c| drop(c.as_object_mut().unwrap().remove("exp"))), "expired"),
        ("not yet valid", with(&|c| c["nbf"] = json!(now() + 3600)), "not_yet_valid"),
        ("wrong issuer", with(&|c| c["iss"] = json!("https://evil.example")), "wrong_issuer"),
        ("wrong audience", with(&|c| c["aud"] = json!("another-app")), "wrong_audience"),
        ("no subject", with(&|c| c["sub"] = json!("")), "no_subject"),
        ("unknown key", login.sign_raw(&json!({"alg": "EdDSA", "kid": "k9"}), &claims("ann")), "unknown_key"),
        ("alg none", unsigned, "alg_refused"),
        ("HS256 with the public key", hs, "alg_refused"),
        ("the key's alg differs", login.sign_raw(&json!({"alg": "ES256", "kid": "k1"}), &claims("ann")), "alg_refused"),
        ("not a JWT", "not-a-token".into(), "malformed"),
        ("oversized", format!("{}.{}", login.token("ann"), "A".repeat(9000)), "too_large"),
    ];
    for (what, token, reason) in &cases {
        for by in [By::Bearer(token), By::Cookie(token)] {
            let (st, e) = api.enter("shop", by, json!({})).await;
            assert_eq!(
                (st, e["error"].as_str(), e["reason"].as_str()),
                (401, Some("identity_invalid"), Some(*reason)),
                "{what}: {e}"
            );
            assert!(e["message"].as_str().is_some_and(|m| !m.is_empty()));
            let (st, e) = api.status("queue=shop", by).await;
            assert_eq!((st, e["reason"].as_str()), (401, Some(*reason)), "{what}, status");
            let (st, e) = api.call(Method::DELETE, "/api/queue/entry?queue=shop", None, by).await;
            assert_eq!((st, e["reason"].as_str()), (401, Some(*reason)), "{what}, leave");
        }
    }
    // A token for the shop is not one for the vip queue (its own audience), and the
    // other way round.
    let (st, e) = api.enter("vip", By::Bearer(&login.token("ann")), json!({})).await;
    assert_eq!((st, e["reason"].as_str()), (401, Some("wrong_audience")));
    let vip = with(&|c| c["aud"] = json!("vip-app"));
    let (st, e) = api.enter("shop", By::Bearer(&vip), json!({})).await;
    assert_eq!((st, e["reason"].as_str()), (401, Some("wrong_audience")));
    // An oversized cookie, from a header too large to be a token.
    let (st, e) = api.enter("shop", By::Cookie(&"a".repeat(9000)), json!({})).await;
    assert_eq!((st, e["reason"].as_str()), (401, Some("too_large")));
    assert_eq!(keyspace(&s), before, "nothing was written by a refused token");
    // The vip queue's own token works there.
    assert_eq!(api.enter("vip", By::Bearer(&vip), json!({})).await.0, 200);
    // Refusals are counted by reason.
    let metrics = api.http.get(api.url("/metrics")).send().await.unwrap().text().await.unwrap();
    assert!(metrics.contains("queue_api_identity_refused_total{reason=\"expired\"}"), "{metrics}");
    api.stop().await;
}

async fn identified_and_invite_queues_need_the_login(b: Backend) {
    let s = ValkeyServer::start(b);
    let login = Login::new("k1");
    let api = start(&s, vec![login.jwk()]).await;
    let (st, body) = api.settings("members", json!({"soft_cap": 0, "entry": "identified"})).await;
    assert_eq!((st, body["entry"].as_str()), (200, Some("identified")), "{body}");
    // The back office refuses a word it does not know, at the field.
    let (st, e) = api.settings("members", json!({"entry": "closed"})).await;
    assert_eq!((st, e["field"].as_str()), (422, Some("entry")));
    let before = keyspace(&s);
    // No token: 401 everywhere, nothing written.
    let (st, e) = api.enter("members", By::Nothing, json!({})).await;
    assert_eq!((st, e["error"].as_str()), (401, Some("identity_required")));
    let uuid = "0f8fad5b-d9cb-469f-a165-70867728950e";
    let (st, e) = api.enter("members", By::Nothing, json!({"userId": uuid})).await;
    assert_eq!((st, e["error"].as_str()), (401, Some("identity_required")));
    for path in [
        format!("/api/queue/status?queue=members&userId={uuid}"),
        "/api/queue/status?queue=members".to_string(),
        format!("/api/queue/stream?queue=members&userId={uuid}"),
    ] {
        let (st, e) = api.call(Method::GET, &path, None, By::Nothing).await;
        assert_eq!((st, e["error"].as_str()), (401, Some("identity_required")), "{path}");
    }
    let (st, _) =
        api.call(Method::DELETE, &format!("/api/queue/entry?queue=members&userId={uuid}"), None, By::Nothing).await;
    assert_eq!(st, 401);
    assert_eq!(keyspace(&s), before);
    // With the login: in, and found again.
    let ann = login.token("ann");
    let (st, a) = api.enter("members", By::Bearer(&ann), json!({})).await;
    assert_eq!((st, a["rank"].as_u64()), (200, Some(1)));
    let (st, again) = api.status("queue=members", By::Cookie(&ann)).await;
    assert_eq!((st, again["userId"].clone()), (200, a["userId"].clone()));
    // A userId alone no longer reads the place, even the right one.
    let (st, _) = api.status(&format!("queue=members&userId={}", a["userId"].as_str().unwrap()), By::Nothing).await;
    assert_eq!(st, 401);

    // invite: the login is needed, and the queue itself refuses an entry without an
    // invitation.
    let (st, body) = api.settings("presale", json!({"entry": "invite"})).await;
    assert_eq!((st, body["entry"].as_str()), (200, Some("invite")), "{body}");
    let before = keyspace(&s);
    let (st, e) = api.enter("presale", By::Nothing, json!({})).await;
    assert_eq!((st, e["error"].as_str()), (401, Some("identity_required")));
    let (st, e) = api.enter("presale", By::Bearer(&ann), json!({})).await;
    assert_eq!((st, e["error"].as_str()), (403, Some("invite_only")), "{e}");
    assert_eq!(keyspace(&s), before);
    // An instance without the login's keys does not open the queue to a userId alone.
    let plain = Api::start_admin(queue_api::Config::local(&s.url()), ADMIN).await;
    let q = format!("queue=members&userId={}", a["userId"].as_str().unwrap());
    for (method, path) in [
        (Method::GET, format!("/api/queue/status?{q}")),
        (Method::GET, format!("/api/queue/status?queue=members&userId={uuid}")),
        (Method::DELETE, format!("/api/queue/entry?queue=members&userId={uuid}")),
    ] {
        let (st, e) = plain.call(method, &path, None, By::Nothing).await;
        assert_eq!((st, e["error"].as_str()), (401, Some("identity_required")), "{path}");
    }
    let (st, e) = plain.enter("members", By::Nothing, json!({})).await;
    assert_eq!((st, e["error"].as_str()), (401, Some("identity_required")));
    plain.stop().await;
    // Back to open: anyone again.
    assert_eq!(api.settings("members", json!({"entry": "open"})).await.0, 200);
    let (st, _) = api.enter("members", By::Nothing, json!({})).await;
    assert_eq!(st, 200);
    api.stop().await;
}

async fn open_queues_work_as_before_without_a_token(b: Backend) {
    let s = ValkeyServer::start(b);
    let login = Login::new("k1");
    let api = start(&s, vec![login.jwk()]).await;
    assert_eq!(api.settings("default", json!({"soft_cap": 0})).await.0, 200);
    // Seed 000's contract: entry without a queue, status and leave by userId.
    let (st, a) = api.call(Method::POST, "/api/queue/entry", Some(json!({"nickname": "a"})), By::Nothing).await;
    assert_eq!((st, a["status"].as_str(), a["rank"].as_u64()), (200, Some("WAITING"), Some(1)));
    let user = a["userId"].as_str().unwrap();
    assert!(uuid_like(user), "{user}");
    let (st, s1) = api.status(&format!("userId={user}"), By::Nothing).await;
    assert_eq!((st, s1["rank"].as_u64()), (200, Some(1)));
    let (st, e) = api.status("queue=default", By::Nothing).await;
    assert_eq!((st, e["error"].as_str()), (400, Some("bad_request")), "no userId, no token");
    let (st, _) = api.call(Method::DELETE, &format!("/api/queue/entry?userId={user}"), None, By::Nothing).await;
    assert_eq!(st, 200);
    // The page knows the login reaches it in a cookie (it then asks status first).
    let page = api.http.get(api.url("/?queue=default")).send().await.unwrap().text().await.unwrap();
    assert!(page.contains(r#"data-identity="cookie""#), "{page}");
    api.stop().await;
    let plain = Api::start(queue_api::Config::local(&s.url())).await;
    let page = plain.http.get(plain.url("/?queue=default")).send().await.unwrap().text().await.unwrap();
    assert!(page.contains(r#"data-identity="""#), "{page}");
    plain.stop().await;
}

async fn an_instance_without_identity_never_takes_an_identity_id_alone(b: Backend) {
    let s = ValkeyServer::start(b);
    let login = Login::new("k1");
    let with = start(&s, vec![login.jwk()]).await;
    // A second queue-api on the same store, with identity off.
    let without = Api::start(queue_api::Config::local(&s.url())).await;
    assert_eq!(with.settings("shop", json!({"soft_cap": 0})).await.0, 200);
    let (st, ann) = with.enter("shop", By::Bearer(&login.token("ann")), json!({})).await;
    assert_eq!(st, 200);
    let id = ann["userId"].as_str().unwrap();
    let before = keyspace(&s);
    let q = format!("queue=shop&userId={id}");
    for (method, path) in [
        (Method::GET, format!("/api/queue/status?{q}")),
        (Method::GET, format!("/api/queue/stream?{q}")),
        (Method::DELETE, format!("/api/queue/entry?{q}")),
    ] {
        let (st, e) = without.call(method.clone(), &path, None, By::Nothing).await;
        assert_eq!((st, e["error"].as_str()), (401, Some("identity_required")), "{method} {path}: {e}");
        assert!(e.get("ticketId").is_none(), "{e}");
    }
    // Nor can an entry there name it.
    let (st, e) = without.enter("shop", By::Nothing, json!({"userId": id})).await;
    assert_eq!((st, e["error"].as_str()), (401, Some("identity_required")), "{e}");
    assert_eq!(keyspace(&s), before, "nothing changed");
    let (st, still) = with.status("queue=shop", By::Bearer(&login.token("ann"))).await;
    assert_eq!((st, still["rank"].as_u64()), (200, Some(1)));
    without.stop().await;
    with.stop().await;
}

async fn a_cross_site_entry_with_the_login_cookie_is_refused(b: Backend) {
    let s = ValkeyServer::start(b);
    let login = Login::new("k1");
    let api = start(&s, vec![login.jwk()]).await;
    assert_eq!(api.settings("shop", json!({"soft_cap": 0})).await.0, 200);
    let ann = login.token("ann");
    // The page's own entry with the cookie (JSON, as app.js sends it) is taken.
    let (st, a) = api.enter("shop", By::Cookie(&ann), json!({})).await;
    assert_eq!((st, a["rank"].as_u64()), (200, Some(1)), "{a}");
    let id = a["userId"].as_str().unwrap().to_string();
    for sub in ["bob", "cid"] {
        assert_eq!(api.enter("shop", By::Bearer(&login.token(sub)), json!({})).await.0, 200);
    }
    let before = keyspace(&s);
    // Another site's page: a "simple" request (no preflight) that carries the cookie,
    // naming ann's id (back of the line) or nothing (entered into another queue).
    for (content_type, body) in [
        (Some("text/plain;charset=UTF-8"), json!({"nickname": "x", "queue": "shop", "userId": id})),
        (Some("application/x-www-form-urlencoded"), json!({"nickname": "x", "queue": "shop", "userId": id})),
        (None, json!({"nickname": "x", "queue": "shop", "userId": id})),
        (Some("text/plain"), json!({"nickname": "x", "queue": "other"})),
    ] {
        let mut req = api
            .http
            .post(api.url("/api/queue/entry"))
            .header("cookie", format!("{COOKIE}={ann}"))
            .header("origin", "https://evil.example")
            .header("sec-fetch-site", "cross-site")
            .body(body.to_string());
        if let Some(t) = content_type {
            req = req.header("content-type", t);
        }
        let r = req.send().await.unwrap();
        let st = r.status().as_u16();
        let e: Value = r.json().await.unwrap_or(Value::Null);
        assert_eq!((st, e["error"].as_str()), (415, Some("json_required")), "{content_type:?}: {e}");
    }
    assert_eq!(keyspace(&s), before, "nothing changed");
    let (st, still) = api.status("queue=shop", By::Cookie(&ann)).await;
    assert_eq!((st, still["rank"].as_u64()), (200, Some(1)), "{still}");
    // A Bearer token is never sent by a browser on its own: no such check.
    let bob = login.token("bob");
    let r = api
        .http
        .post(api.url("/api/queue/entry"))
        .bearer_auth(&bob)
        .header("content-type", "text/plain")
        .body(json!({"nickname": "b", "queue": "shop"}).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    api.stop().await;
}

fn uuid_like(s: &str) -> bool {
    s.len() == 36 && s.chars().filter(|&c| c == '-').count() == 4
}
