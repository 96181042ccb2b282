//! The formless room over real sockets against a real valkey-server, with the module
//! and with the Lua library: a queue's `nickname` setting (`ask` by default, `none`
//! set in the back office or by default for a queue with an `--admit-url`); an entry
//! without a nickname refused where one is asked, taken where none is, once per
//! browser (the place cookie), its place bound to that cookie (a copied userId alone
//! reads, follows, leaves and moves nothing); the page told which, and its intro
//! claiming no crowd before there is one.

use serde_json::{json, Value};
use testkit::{Backend, ValkeyServer};

mod common;
use common::Api;

const TOKEN: &str = "formless-admin";

testkit::backend_tests!(
    async
    a_queue_that_asks_no_nickname_takes_a_formless_entry_once_per_browser,
    a_place_entered_without_a_form_is_bound_to_its_browser,
    a_queue_with_an_admit_url_asks_no_nickname_unless_set_to,
    the_intro_claims_no_crowd_before_there_is_one,
);

struct Answer {
    code: u16,
    body: Value,
    set_cookie: Option<String>,
}

async fn send(api: &Api, method: reqwest::Method, path: &str, body: Option<Value>, cookie: Option<&str>) -> Answer {
    let mut r = api.http.request(method, api.url(path));
    if let Some(b) = body {
        r = r.json(&b);
    }
    if let Some(c) = cookie {
        r = r.header("cookie", c);
    }
    let r = r.send().await.unwrap();
    let set_cookie = r.headers().get("set-cookie").map(|v| v.to_str().unwrap().to_string());
    let code = r.status().as_u16();
    let text = r.text().await.unwrap();
    Answer { code, body: serde_json::from_str(&text).unwrap_or(Value::String(text)), set_cookie }
}

async fn enter(api: &Api, body: Value, cookie: Option<&str>) -> Answer {
    send(api, reqwest::Method::POST, "/api/queue/entry", Some(body), cookie).await
}

async fn set_nickname(api: &Api, queue: &str, value: Value) -> Answer {
    let r = api
        .http
        .put(api.url(&format!("/api/admin/queues/{queue}/brand")))
        .bearer_auth(TOKEN)
        .json(&json!({ "nickname": value }))
        .send()
        .await
        .unwrap();
    let code = r.status().as_u16();
    Answer { code, body: r.json().await.unwrap_or(Value::Null), set_cookie: None }
}

/// The `data-nickname` the waiting-room page of `queue` is rendered with.
async fn page_nickname(api: &Api, queue: &str) -> String {
    let html = api.http.get(api.url(&format!("/?queue={queue}"))).send().await.unwrap().text().await.unwrap();
    let at = html.find("data-nickname=\"").expect("the page says whether it asks a nickname") + 15;
    html[at..].split('"').next().unwrap().to_string()
}

/// Waiting, joining, active, promoted.
async fn counts(qc: &queue_client::QueueClient, queue: &str) -> (u64, u64, u64, u64) {
    let i = qc.info(queue).await.unwrap();
    (i.waiting, i.joining, i.active, i.promoted)
}

async fn start(s: &ValkeyServer, admit: &[&str]) -> (queue_client::QueueClient, Api) {
    let qc = queue_client::QueueClient::connect(&s.url()).await.unwrap();
    let mut config = queue_api::Config::local(&s.url());
    config.admit_url = admit.iter().map(|a| queue_api::pages::AdmitUrl::parse(a).unwrap()).collect();
    (qc, Api::start_admin(config, TOKEN).await)
}

/// `ask` (the default, seed 000's contract): an entry without a nickname is refused
/// and changes nothing. `none`: taken, as a neutral guest, with the place cookie; the
/// same browser entering again (a reload, a second tab) gets the same place back.
async fn a_queue_that_asks_no_nickname_takes_a_formless_entry_once_per_browser(b: Backend) {
    let s = ValkeyServer::start(b);
    let (qc, api) = start(&s, &[]).await;
    qc.config_set("default", &[("soft_cap", 0)]).await.unwrap();
    assert_eq!(page_nickname(&api, "default").await, "ask");
    let refused = enter(&api, json!({}), None).await;
    assert_eq!((refused.code, refused.body["error"].as_str()), (422, Some("invalid")), "{}", refused.body);
    assert_eq!(refused.body["message"], "nickname is required");
    assert_eq!(counts(&qc, "default").await, (0, 0, 0, 0), "a refused entry changes nothing");

    // A value that is neither word: refused at its field, nothing changed.
    let bad = set_nickname(&api, "default", json!("off")).await;
    assert_eq!(bad.code, 422, "{}", bad.body);
    assert_eq!(page_nickname(&api, "default").await, "ask");
    let set = set_nickname(&api, "default", json!("none")).await;
    assert_eq!((set.code, set.body["brand"]["nickname"].as_str()), (200, Some("none")), "{}", set.body);
    assert_eq!(page_nickname(&api, "default").await, "none");

    let first = enter(&api, json!({}), None).await;
    assert_eq!(
        (first.code, first.body["status"].as_str(), first.body["rank"].as_i64()),
        (200, Some("WAITING"), Some(1))
    );
    assert_eq!(first.body["nickname"], "guest", "{}", first.body);
    let user = first.body["userId"].as_str().unwrap().to_string();
    // The cookie holds the place's secret, not the id (which the page shows and keeps).
    let set = first.set_cookie.clone().expect("the place cookie");
    let cookie = set.split(';').next().unwrap().to_string();
    let secret = cookie.strip_prefix("queue_place_default=").expect("the queue's place cookie");
    assert!(secret.len() == 32 && secret.bytes().all(|b| b.is_ascii_hexdigit()), "{set}");
    assert!(!set.contains(&user), "the cookie does not give the id: {set}");
    assert!(set.ends_with("; Max-Age=86400; HttpOnly; SameSite=Lax"), "{set}");
    // Other bad input is still refused: an empty or a non-string nickname.
    for body in
        [json!({ "nickname": "" }), json!({ "nickname": "   " }), json!({ "nickname": null }), json!({ "nickname": 7 })]
    {
        let r = enter(&api, body.clone(), Some(&cookie)).await;
        assert_eq!(r.code, 422, "{body} -> {}", r.body);
    }
    // A reload, a second tab: the same place, nothing written.
    for body in [json!({}), json!({ "userId": user }), json!({ "nickname": "ann" })] {
        let again = enter(&api, body.clone(), Some(&cookie)).await;
        assert_eq!(
            (again.code, again.body["userId"].as_str(), again.body["rank"].as_i64()),
            (200, Some(user.as_str()), Some(1))
        );
        assert_eq!(counts(&qc, "default").await, (1, 0, 0, 0), "{body}: one place per browser");
    }
    // A named nickname still works as before, for anyone.
    let named = enter(&api, json!({ "nickname": "ben" }), None).await;
    assert_eq!((named.code, named.body["nickname"].as_str(), named.body["rank"].as_i64()), (200, Some("ben"), Some(2)));
    // Asked again: refused again.
    assert_eq!(set_nickname(&api, "default", json!("ask")).await.code, 200);
    assert_eq!(enter(&api, json!({}), None).await.code, 422);
    assert_eq!(counts(&qc, "default").await, (2, 0, 0, 0));
    // Removing the setting is the default again.
    assert_eq!(set_nickname(&api, "default", json!("none")).await.code, 200);
    assert_eq!(set_nickname(&api, "default", Value::Null).await.code, 200);
    assert_eq!(page_nickname(&api, "default").await, "ask");
    api.stop().await;
}

/// The userId of a formless entry is bound to the browser's place cookie: with it,
/// status, stream and leave work; the id alone (copied to another browser) is a 404
/// like an id nobody holds, and naming it in an entry moves nobody. A plain userId
/// (seed 000's) works alone as before.
async fn a_place_entered_without_a_form_is_bound_to_its_browser(b: Backend) {
    let s = ValkeyServer::start(b);
    let (qc, api) = start(&s, &[]).await;
    qc.config_set("default", &[("soft_cap", 0)]).await.unwrap();
    assert_eq!(set_nickname(&api, "default", json!("none")).await.code, 200);
    let first = enter(&api, json!({}), None).await;
    let user = first.body["userId"].as_str().unwrap().to_string();
    let cookie = first.set_cookie.as_deref().unwrap().split(';').next().unwrap().to_string();
    let forged = format!("queue_place_default={user}");
    let get = reqwest::Method::GET;

    let status = format!("/api/queue/status?userId={user}&queue=default");
    let mine = send(&api, get.clone(), &status, None, Some(&cookie)).await;
    assert_eq!((mine.code, mine.body["rank"].as_i64()), (200, Some(1)), "{}", mine.body);
    // The id alone, a cookie forged from the copied id, another person's id, another
    // queue's cookie: none of them is the place's secret.
    for cookie in [
        None,
        Some(forged.as_str()),
        Some("queue_place_default=0f8fad5b-d9cb-469f-a165-70867728950e"),
        Some("queue_place_other=x"),
    ] {
        let copied = send(&api, get.clone(), &status, None, cookie).await;
        assert_eq!(
            (copied.code, copied.body["error"].as_str()),
            (404, Some("not_found")),
            "{cookie:?}: {}",
            copied.body
        );
        let stream =
            send(&api, get.clone(), &format!("/api/queue/stream?userId={user}&queue=default"), None, cookie).await;
        assert_eq!(stream.code, 404, "{cookie:?}: the stream of a copied id");
        let leave =
            send(&api, reqwest::Method::DELETE, &format!("/api/queue/entry?userId={user}&queue=default"), None, cookie)
                .await;
        assert_eq!(leave.code, 404, "{cookie:?}: a copied id leaves nobody");
    }
    // An entry naming the copied id: a new person behind, the first one unmoved.
    let other = enter(&api, json!({ "userId": user }), None).await;
    assert_eq!(other.code, 200, "{}", other.body);
    assert_ne!(other.body["userId"].as_str(), Some(user.as_str()));
    assert_eq!(other.body["rank"], 2);
    let mine = send(&api, get.clone(), &status, None, Some(&cookie)).await;
    assert_eq!(mine.body["rank"], 1, "the copied id moved nobody");
    let stream = tokio::time::timeout(std::time::Duration::from_secs(10), async {
        let mut r =
            api.http.get(api.url(&format!("/api/queue/stream?userId={user}&queue=default"))).header("cookie", &cookie);
        r = r.header("accept", "text/event-stream");
        r.send().await.unwrap().status().as_u16()
    })
    .await
    .unwrap();
    assert_eq!(stream, 200, "the stream with the cookie");
    // Seed 000's ids: named alone, as before.
    let plain = enter(&api, json!({ "nickname": "ann" }), None).await;
    let plain_id = plain.body["userId"].as_str().unwrap();
    let read = send(&api, get.clone(), &format!("/api/queue/status?userId={plain_id}&queue=default"), None, None).await;
    assert_eq!((read.code, read.body["rank"].as_i64()), (200, Some(3)));
    // Leaving with the cookie works.
    let left = send(
        &api,
        reqwest::Method::DELETE,
        &format!("/api/queue/entry?userId={user}&queue=default"),
        None,
        Some(&cookie),
    )
    .await;
    assert_eq!(left.code, 200, "{}", left.body);
    assert_eq!(counts(&qc, "default").await.0, 2);
    api.stop().await;
}

/// A queue whose people go on to an app (`--admit-url`, the gate's queues) asks no
/// nickname by default; its operator may ask one. Other queues ask as before.
async fn a_queue_with_an_admit_url_asks_no_nickname_unless_set_to(b: Backend) {
    let s = ValkeyServer::start(b);
    let (qc, api) = start(&s, &["gated=/gate/claim"]).await;
    qc.config_set("gated", &[("soft_cap", 0)]).await.unwrap();
    qc.config_set("default", &[("soft_cap", 0)]).await.unwrap();
    assert_eq!(page_nickname(&api, "gated").await, "none");
    assert_eq!(page_nickname(&api, "default").await, "ask");
    let r = enter(&api, json!({ "queue": "gated" }), None).await;
    assert_eq!((r.code, r.body["status"].as_str()), (200, Some("WAITING")), "{}", r.body);
    assert_eq!(enter(&api, json!({ "queue": "default" }), None).await.code, 422);
    assert_eq!(set_nickname(&api, "gated", json!("ask")).await.code, 200);
    assert_eq!(page_nickname(&api, "gated").await, "ask");
    assert_eq!(enter(&api, json!({ "queue": "gated" }), None).await.code, 422);
    assert_eq!(counts(&qc, "gated").await.0, 1);
    api.stop().await;
}

/// The first visitor to an empty room is not told there is a crowd; a long line is.
async fn the_intro_claims_no_crowd_before_there_is_one(b: Backend) {
    let s = ValkeyServer::start(b);
    let (qc, api) = start(&s, &[]).await;
    qc.config_set("default", &[("soft_cap", 0)]).await.unwrap();
    let intro = async |lang: &str| {
        let html = api.http.get(api.url(&format!("/?lang={lang}"))).send().await.unwrap().text().await.unwrap();
        let at = html.find("<p id=\"intro\" class=\"muted\">").unwrap() + 28;
        html[at..].split("</p>").next().unwrap().to_string()
    };
    let messages = |lang: &str| -> Value {
        let path = format!("{}/static/i18n/{lang}.json", env!("CARGO_MANIFEST_DIR"));
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
    };
    for lang in ["en", "ko"] {
        assert_eq!(intro(lang).await, messages(lang)["intro_quiet"], "{lang}: an empty room");
    }
    assert!(!intro("en").await.contains("Too many"));
    for i in 0..queue_api::pages::CROWD {
        qc.enter("default", &format!("p{i}"), "p").await.unwrap();
    }
    for lang in ["en", "ko"] {
        assert_eq!(intro(lang).await, messages(lang)["intro"], "{lang}: a crowd");
    }
    api.stop().await;
}
