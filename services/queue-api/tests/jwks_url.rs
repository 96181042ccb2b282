//! The identity keys fetched from a URL (`--identity-jwks-url`): a small issuer on a
//! loopback port serves the JWKS and counts its fetches. queue-api takes the keys at
//! start (and does not start without them), takes a rotated key on the first token
//! that names it, drops a key the issuer no longer serves, keeps the last good keys
//! when the issuer goes away, and tokens with made-up `kid`s make at most one fetch
//! per 30 s. Real valkey-server, real queue-api, real sockets.

use axum::body::Body;
use axum::response::Response;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use base64::Engine;
use ring::rand::SystemRandom;
use ring::signature::{Ed25519KeyPair, KeyPair};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use testkit::{Backend, ValkeyServer};
use tokio::net::TcpListener;

mod common;
use common::Api;

const ADMIN: &str = "jwks-admin";
const ISSUER: &str = "https://login.shop.example";
const AUDIENCE: &str = "shop";

fn enc(v: &Value) -> String {
    B64.encode(serde_json::to_vec(v).unwrap())
}

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs()
}

/// One of the login's signing keys (Ed25519).
struct Key {
    pair: Ed25519KeyPair,
    kid: &'static str,
}

impl Key {
    fn new(kid: &'static str) -> Key {
        let der = Ed25519KeyPair::generate_pkcs8(&SystemRandom::new()).unwrap();
        Key { pair: Ed25519KeyPair::from_pkcs8(der.as_ref()).unwrap(), kid }
    }

    fn jwk(&self) -> Value {
        json!({"kty": "OKP", "crv": "Ed25519", "kid": self.kid, "use": "sig", "alg": "EdDSA",
               "x": B64.encode(self.pair.public_key().as_ref())})
    }

    /// A good token for `sub`, its header naming `kid`.
    fn token_named(&self, kid: &str, sub: &str) -> String {
        let header = json!({"alg": "EdDSA", "kid": kid, "typ": "JWT"});
        let claims = json!({"iss": ISSUER, "aud": AUDIENCE, "sub": sub, "iat": now(), "exp": now() + 600});
        let input = format!("{}.{}", enc(&header), enc(&claims));
        format!("{input}.{}", B64.encode(self.pair.sign(input.as_bytes()).as_ref()))
    }

    fn token(&self, sub: &str) -> String {
        self.token_named(self.kid, sub)
    }
}

/// What the issuer answers.
#[derive(Clone)]
struct Answer {
    status: u16,
    body: String,
    /// Sent in chunks without a Content-Length.
    chunked: bool,
}

/// The login's JWKS endpoint on a loopback port, counting the fetches.
struct Issuer {
    url: String,
    answer: Arc<Mutex<Answer>>,
    fetches: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Issuer {
    async fn start(keys: &[&Key]) -> Issuer {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/.well-known/jwks.json", listener.local_addr().unwrap());
        let answer = Arc::new(Mutex::new(Answer { status: 200, body: String::new(), chunked: false }));
        let fetches = Arc::new(AtomicUsize::new(0));
        let (a, f) = (answer.clone(), fetches.clone());
        let app = axum::Router::new().route(
            "/.well-known/jwks.json",
            axum::routing::get(move || {
                let (a, f) = (a.clone(), f.clone());
                async move {
                    f.fetch_add(1, Ordering::SeqCst);
                    let answer = a.lock().unwrap().clone();
                    let body = if answer.chunked {
                        let chunks: Vec<Result<String, std::io::Error>> = answer
                            .body
                            .as_bytes()
                            .chunks(64 * 1024)
                            .map(|c| Ok(String::from_utf8(c.to_vec()).unwrap()))
                            .collect();
                        Body::from_stream(futures_util::stream::iter(chunks))
                    } else {
                        Body::from(answer.body)
                    };
                    Response::builder()
                        .status(answer.status)
                        .header("content-type", "application/json")
                        .body(body)
                        .unwrap()
                }
            }),
        );
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        let issuer = Issuer { url, answer, fetches, task };
        issuer.serve(keys);
        issuer
    }

    /// Serves these keys from now on.
    fn serve(&self, keys: &[&Key]) {
        let keys: Vec<Value> = keys.iter().map(|k| k.jwk()).collect();
        self.answer(200, json!({ "keys": keys }).to_string(), false);
    }

    fn answer(&self, status: u16, body: String, chunked: bool) {
        *self.answer.lock().unwrap() = Answer { status, body, chunked };
    }

    fn fetches(&self) -> usize {
        self.fetches.load(Ordering::SeqCst)
    }

    /// Goes away: the port refuses connections from now on.
    async fn stop(self) {
        self.task.abort();
        let _ = self.task.await;
    }
}

fn config(s: Option<&ValkeyServer>, url: &str, refresh_secs: u64) -> queue_api::Config {
    let mut c = queue_api::Config::local(&s.map_or("redis://127.0.0.1:1".to_string(), |s| s.url()));
    c.identity.jwks_url = Some(queue_api::jwks::JwksUrl::parse(url).unwrap());
    c.identity.jwks_refresh_secs = refresh_secs;
    c.identity.issuer = Some(ISSUER.into());
    c.identity.audience = Some(AUDIENCE.into());
    c
}

/// queue-api with the keys of `issuer`, the `shop` queue declared.
async fn start(s: &ValkeyServer, issuer: &Issuer, refresh_secs: u64) -> Api {
    let api = Api::start_admin(config(Some(s), &issuer.url, refresh_secs), ADMIN).await;
    let r = api
        .http
        .put(api.url("/api/admin/queues/shop"))
        .bearer_auth(ADMIN)
        .json(&json!({"soft_cap": 0}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    api
}

impl Api {
    /// Enters the shop with `token`: 200 (taken), or 401 and the reason.
    async fn enter_with(&self, token: &str) -> (u16, Option<String>) {
        let r = self
            .http
            .post(self.url("/api/queue/entry"))
            .bearer_auth(token)
            .json(&json!({"nickname": "n", "queue": "shop"}))
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        let body: Value = r.json().await.unwrap_or(Value::Null);
        if status == 200 {
            assert!(body["userId"].as_str().unwrap().starts_with("id:"), "{body}");
        }
        (status, body["reason"].as_str().map(String::from))
    }

    /// The fetch counter of /metrics for `result` (ok, failed).
    async fn fetch_metric(&self, result: &str) -> u64 {
        let text = self.http.get(self.url("/metrics")).send().await.unwrap().text().await.unwrap();
        let name = format!("queue_api_identity_jwks_fetches_total{{result=\"{result}\"}} ");
        text.lines().find_map(|l| l.strip_prefix(&name)).map_or(0, |v| v.trim().parse::<f64>().unwrap() as u64)
    }
}

fn taken() -> (u16, Option<String>) {
    (200, None)
}

fn refused(reason: &str) -> (u16, Option<String>) {
    (401, Some(reason.into()))
}

/// Waits (at most `secs`) until `cond` holds.
async fn until<F: std::future::Future<Output = bool>>(secs: u64, what: &str, mut cond: impl FnMut() -> F) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !cond().await {
        assert!(Instant::now() < deadline, "{what}: not within {secs}s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_key_is_fetched_when_a_token_names_it() {
    let s = ValkeyServer::start(Backend::Lua);
    let (a, b) = (Key::new("a"), Key::new("b"));
    let issuer = Issuer::start(&[&a]).await;
    let api = start(&s, &issuer, 3600).await;
    assert_eq!(issuer.fetches(), 1, "once at start");
    assert_eq!(api.enter_with(&a.token("ann")).await, taken());
    // The login rotates to key b: the first token naming b makes queue-api fetch the
    // keys again, and it is taken at once.
    issuer.serve(&[&b]);
    assert_eq!(api.enter_with(&b.token("bob")).await, taken());
    assert_eq!(issuer.fetches(), 2);
    assert_eq!(api.enter_with(&b.token("cid")).await, taken());
    // Key a is gone with that fetch; asking again for it within 30 s fetches nothing.
    assert_eq!(api.enter_with(&a.token("ann")).await, refused("unknown_key"));
    assert_eq!(issuer.fetches(), 2);
    assert_eq!((api.fetch_metric("ok").await, api.fetch_metric("failed").await), (2, 0));
    api.stop().await;
    issuer.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_kids_make_at_most_one_fetch_per_30s() {
    let s = ValkeyServer::start(Backend::Lua);
    let a = Key::new("a");
    let issuer = Issuer::start(&[&a]).await;
    let api = Arc::new(start(&s, &issuer, 3600).await);
    assert_eq!(issuer.fetches(), 1);
    // 100 tokens naming made-up keys: 50 at once, then 50 one after the other.
    let mut at_once = Vec::new();
    for i in 0..50 {
        let (api, token) = (api.clone(), a.token_named(&format!("forged-{i}"), "eve"));
        at_once.push(tokio::spawn(async move { api.enter_with(&token).await }));
    }
    for t in at_once {
        assert_eq!(t.await.unwrap(), refused("unknown_key"));
    }
    for i in 50..100 {
        assert_eq!(api.enter_with(&a.token_named(&format!("forged-{i}"), "eve")).await, refused("unknown_key"));
    }
    assert_eq!(issuer.fetches(), 2, "one fetch for all of them");
    assert_eq!(api.enter_with(&a.token("ann")).await, taken(), "the real key still works");
    // 30 s later one more fetch is allowed, and again only one.
    tokio::time::sleep(Duration::from_secs(31)).await;
    for i in 0..20 {
        assert_eq!(api.enter_with(&a.token_named(&format!("late-{i}"), "eve")).await, refused("unknown_key"));
    }
    assert_eq!(issuer.fetches(), 3);
    Arc::into_inner(api).unwrap().stop().await;
    issuer.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_are_refreshed_in_the_background_and_kept_when_the_issuer_goes_away() {
    let s = ValkeyServer::start(Backend::Lua);
    let (a, b) = (Key::new("a"), Key::new("b"));
    let issuer = Issuer::start(&[&a]).await;
    let api = start(&s, &issuer, 1).await;
    assert_eq!(api.enter_with(&a.token("ann")).await, taken());
    // The issuer now serves key b only: within a few refreshes (every second), key a
    // is gone and key b is known, without any token asking for it.
    issuer.serve(&[&b]);
    let seen = issuer.fetches();
    until(20, "two background fetches", || async { issuer.fetches() >= seen + 2 }).await;
    assert_eq!(api.enter_with(&b.token("bob")).await, taken());
    assert_eq!(api.enter_with(&a.token("ann")).await, refused("unknown_key"));
    // A bad answer (an error, then a document that is not a JWKS) keeps the keys.
    issuer.answer(500, "oops".into(), false);
    let failed = api.fetch_metric("failed").await;
    until(20, "a failed fetch counted", || async { api.fetch_metric("failed").await > failed }).await;
    assert_eq!(api.enter_with(&b.token("bob")).await, taken());
    issuer.answer(200, "{}".into(), false);
    let failed = api.fetch_metric("failed").await;
    until(20, "a failed fetch counted", || async { api.fetch_metric("failed").await > failed }).await;
    assert_eq!(api.enter_with(&b.token("bob")).await, taken());
    // The issuer goes away: the fetches fail, the last good keys stay.
    issuer.stop().await;
    let failed = api.fetch_metric("failed").await;
    until(20, "a failed fetch counted", || async { api.fetch_metric("failed").await >= failed + 2 }).await;
    assert_eq!(api.enter_with(&b.token("bob")).await, taken());
    assert_eq!(api.enter_with(&b.token_named("c", "eve")).await, refused("unknown_key"));
    assert_eq!(api.enter_with(&b.token("cid")).await, taken());
    assert!(api.fetch_metric("ok").await >= 3);
    api.stop().await;
}

/// Starts queue-api with `config`: the error it stops with (it must not start).
async fn refused_start(config: queue_api::Config) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let r = tokio::time::timeout(Duration::from_secs(30), queue_api::serve(listener, config, std::future::pending()))
        .await
        .expect("it stops at once");
    r.unwrap_err().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_start_without_a_good_first_fetch() {
    // Nothing listens there.
    let port = TcpListener::bind("127.0.0.1:0").await.unwrap().local_addr().unwrap().port();
    let url = format!("http://127.0.0.1:{port}/jwks.json");
    let e = refused_start(config(None, &url, 300)).await;
    assert!(e.contains("--identity-jwks-url") && e.contains(&url) && e.contains("connect"), "{e}");
    let a = Key::new("a");
    let issuer = Issuer::start(&[&a]).await;
    for (status, body, chunked, expected) in [
        (404, "not here".to_string(), false, "404"),
        (200, "{}".to_string(), false, "not a JWKS document"),
        (200, r#"{"keys": [{"kty": "oct", "k": "c2VjcmV0"}]}"#.to_string(), false, "oct"),
        (200, r#"{"keys": []}"#.to_string(), false, "no signing keys"),
        // Over 1 MiB, with a Content-Length and without one.
        (200, format!(r#"{{"keys": [], "pad": "{}"}}"#, "x".repeat(1024 * 1024)), false, "over 1048576 bytes"),
        (200, format!(r#"{{"keys": [], "pad": "{}"}}"#, "x".repeat(1024 * 1024)), true, "over 1048576 bytes"),
    ] {
        issuer.answer(status, body, chunked);
        let e = refused_start(config(None, &issuer.url, 300)).await;
        assert!(e.contains(&issuer.url) && e.contains(expected), "{expected}: {e}");
    }
    // Just under the limit is read.
    let jwks = json!({"keys": [a.jwk()]}).to_string();
    let pad = 1024 * 1024 - jwks.len() - r#", "pad": """#.len();
    let body = format!(r#"{}, "pad": "{}"}}"#, &jwks[..jwks.len() - 1], "x".repeat(pad));
    assert_eq!(body.len(), 1024 * 1024);
    issuer.answer(200, body, true);
    let s = ValkeyServer::start(Backend::Lua);
    let api = start(&s, &issuer, 300).await;
    assert_eq!(api.enter_with(&a.token("ann")).await, taken());
    api.stop().await;
    issuer.stop().await;
}
