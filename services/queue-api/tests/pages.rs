//! The pages and the back office's API over real sockets against a real valkey-server,
//! with the module and with the Lua library: the waiting room's language, branding,
//! template and admit URL, its Content-Security-Policy; the queue listing, branding,
//! pause and resume, errors named by field, the audit counter and audit log line; the
//! total and the pause in every push event from the first.

use futures_util::StreamExt;
use serde_json::{json, Value};
use std::io::BufRead;
use std::time::{Duration, Instant};
use testkit::{Backend, ValkeyServer};

mod common;
use common::Api;

const TOKEN: &str = "pages-admin";

impl Api {
    async fn with_admin(config: queue_api::Config) -> Api {
        Api::start_admin(config, TOKEN).await
    }

    async fn admin(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> (u16, Value) {
        let mut req = self.http.request(method, self.url(path)).bearer_auth(TOKEN);
        if let Some(b) = body {
            req = req.json(&b);
        }
        let r = req.send().await.unwrap();
        (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
    }

    async fn metrics(&self) -> String {
        self.http.get(self.url("/metrics")).send().await.unwrap().text().await.unwrap()
    }

    async fn page(&self, path: &str, accept_language: Option<&str>) -> reqwest::Response {
        let mut req = self.http.get(self.url(path));
        if let Some(l) = accept_language {
            req = req.header("accept-language", l);
        }
        req.send().await.unwrap()
    }
}

async fn client_for(s: &ValkeyServer) -> queue_client::QueueClient {
    queue_client::QueueClient::connect(&s.url()).await.unwrap()
}

testkit::backend_tests!(
    async
    back_office_lists_pauses_resumes_and_names_bad_fields,
    the_page_in_its_language_brand_and_admit_url,
    every_position_event_has_the_total_and_the_pause,
);

use reqwest::Method;

/// The counter of back-office changes by action, from /metrics (0 when absent).
fn changes(metrics: &str, action: &str) -> u64 {
    let prefix = format!("queue_api_admin_changes_total{{action=\"{action}\"}} ");
    metrics.lines().find_map(|l| l.strip_prefix(&prefix)).map_or(0, |n| n.parse().unwrap())
}

async fn back_office_lists_pauses_resumes_and_names_bad_fields(b: Backend) {
    let s = ValkeyServer::start(b);
    let qc = client_for(&s).await;
    let api = Api::with_admin(queue_api::Config::local(&s.url())).await;
    // Nobody entered and nothing was changed: only the default queue is known.
    let (code, v) = api.admin(Method::GET, "/api/admin/queues", None).await;
    let names: Vec<&str> = v["queues"].as_array().unwrap().iter().map(|q| q["queue"].as_str().unwrap()).collect();
    assert_eq!((code, names, v["total"].clone()), (200, vec!["default"], json!(1)), "{v}");
    // A wrong token is refused on every admin route.
    for (method, path) in [
        (Method::GET, "/api/admin/queues"),
        (Method::POST, "/api/admin/queues/default/pause"),
        (Method::PUT, "/api/admin/queues/default/brand"),
    ] {
        let r = api.http.request(method, api.url(path)).bearer_auth("wrong").json(&json!({"title": "x"})).send().await;
        assert_eq!(r.unwrap().status(), 401, "{path}");
    }

    // An entry into a queue nobody made registers nothing; one made in the back
    // office is listed, and so is one whose settings were changed there.
    let r = api.http.post(api.url("/api/queue/entry")).json(&json!({"nickname": "a", "queue": "shop"})).send().await;
    assert_eq!(r.unwrap().status(), 404);
    let (code, _) = api.admin(Method::POST, "/api/admin/queues", Some(json!({"queue": "shop"}))).await;
    assert_eq!(code, 201);
    let r = api.http.post(api.url("/api/queue/entry")).json(&json!({"nickname": "a", "queue": "shop"})).send().await;
    assert_eq!(r.unwrap().status(), 200);
    let (code, _) = api.admin(Method::PUT, "/api/admin/queues/launch", Some(json!({"soft_cap": 2}))).await;
    assert_eq!(code, 200);
    qc.config_set("shop", &[("soft_cap", 0)]).await.unwrap();
    for i in 0..3 {
        qc.enter("shop", &format!("u{i}"), "n").await.unwrap();
    }
    let (_, v) = api.admin(Method::GET, "/api/admin/queues", None).await;
    let names: Vec<&str> = v["queues"].as_array().unwrap().iter().map(|q| q["queue"].as_str().unwrap()).collect();
    assert_eq!(names, ["default", "launch", "shop"], "{v}");
    let shop = &v["queues"][2];
    assert_eq!(
        (shop["waiting"].clone(), shop["ticketsOut"].clone(), shop["inside"].clone(), shop["softCap"].clone()),
        (json!(3), json!(1), json!(0), json!(0)),
        "the first entered while the cap was 1000 and holds a ticket: {shop}"
    );

    // Pause remembers the soft cap, resume restores it; resuming twice is a conflict.
    let before = api.metrics().await;
    let (code, v) = api.admin(Method::POST, "/api/admin/queues/launch/pause", None).await;
    assert_eq!(code, 200, "{v}");
    assert_eq!((v["info"]["soft_cap"].clone(), v["counts"]["pausedSoftCap"].clone()), (json!(0), json!(2)), "{v}");
    let (code, v) = api.admin(Method::POST, "/api/admin/queues/launch/pause", None).await;
    assert_eq!((code, v["counts"]["pausedSoftCap"].clone()), (200, json!(2)), "pausing twice keeps the cap: {v}");
    assert_eq!(qc.config_get("launch").await.unwrap().soft_cap(), 0);
    let (code, v) = api.admin(Method::POST, "/api/admin/queues/launch/resume", None).await;
    assert_eq!(
        (code, v["info"]["soft_cap"].clone(), v["counts"]["pausedSoftCap"].clone()),
        (200, json!(2), Value::Null)
    );
    let (code, v) = api.admin(Method::POST, "/api/admin/queues/launch/resume", None).await;
    assert_eq!((code, v["error"].clone()), (409, json!("conflict")), "{v}");
    // A soft cap set while paused ends the pause: resume would otherwise undo it.
    api.admin(Method::POST, "/api/admin/queues/launch/pause", None).await;
    let (code, _) = api.admin(Method::PUT, "/api/admin/queues/launch", Some(json!({"SOFT_CAP": 9}))).await;
    assert_eq!(code, 200, "any case, as QUEUE.CONFIG takes it");
    let (code, _) = api.admin(Method::POST, "/api/admin/queues/launch/resume", None).await;
    assert_eq!((code, qc.config_get("launch").await.unwrap().soft_cap()), (409, 9));

    // Errors name their field; nothing is changed by a refused request.
    for (body, code, field) in [
        (json!({"soft_cap": 5, "rate": -1}), 400, "rate"),
        (json!({"ticket_ttl": "soon"}), 422, "ticket_ttl"),
        (json!({"colour": 1}), 400, "colour"),
        (json!({"pow_difficulty": 99}), 400, "pow_difficulty"),
    ] {
        let (got, v) = api.admin(Method::PUT, "/api/admin/queues/launch", Some(body.clone())).await;
        assert_eq!((got, v["field"].as_str()), (code, Some(field)), "{body}: {v}");
        assert!(v["message"].as_str().unwrap().contains(field), "{v}");
    }
    assert_eq!(qc.config_get("launch").await.unwrap().soft_cap(), 9, "refused changes changed nothing");

    // Branding: checked per field, stored, cleared by an empty value.
    for (body, field) in [
        (json!({"accent": "red"}), "accent"),
        (json!({"logo_url": "https://cdn.example/logo.png"}), "logo_url"),
        (json!({"title": 5}), "title"),
        (json!({"font": "x"}), "font"),
        (json!({"title": "t".repeat(81)}), "title"),
    ] {
        let (code, v) = api.admin(Method::PUT, "/api/admin/queues/launch/brand", Some(body.clone())).await;
        assert_eq!((code, v["field"].as_str()), (422, Some(field)), "{body}: {v}");
    }
    let (code, v) = api
        .admin(Method::PUT, "/api/admin/queues/launch/brand", Some(json!({"title": " Launch ", "accent": "#0a7"})))
        .await;
    assert_eq!((code, v["brand"].clone()), (200, json!({"title": "Launch", "accent": "#0a7"})), "{v}");
    let stored = qc.brand("launch").await.unwrap();
    assert_eq!(stored.get("title").map(String::as_str), Some("Launch"));
    let (_, v) = api.admin(Method::PUT, "/api/admin/queues/launch/brand", Some(json!({"title": ""}))).await;
    assert_eq!(v["brand"], json!({"accent": "#0a7"}), "{v}");

    // Each accepted change counted once by action, refused ones not at all.
    let after = api.metrics().await;
    for (action, n) in [("pause", 2), ("resume", 1), ("settings", 1), ("brand", 2)] {
        assert_eq!(changes(&after, action) - changes(&before, action), n, "{action}:\n{after}");
    }
    api.stop().await;
}

async fn the_page_in_its_language_brand_and_admit_url(b: Backend) {
    let s = ValkeyServer::start(b);
    let qc = client_for(&s).await;
    let mut config = queue_api::Config::local(&s.url());
    config.chat_url = "http://chat.example.test/".into();
    config.admit_url = vec![queue_api::pages::AdmitUrl::parse("launch=/gate/claim?from=room").unwrap()];
    let api = Api::with_admin(config).await;
    qc.config_set("launch", &[("soft_cap", 10)]).await.unwrap();
    let r = api.page("/?queue=launch", Some("ko-KR,ko;q=0.9,en;q=0.5")).await;
    let csp = r.headers()["content-security-policy"].to_str().unwrap().to_string();
    assert!(csp.starts_with("default-src 'self'"), "{csp}");
    assert_eq!(r.headers()["content-language"], "ko");
    let page = r.text().await.unwrap();
    assert!(page.contains("<html lang=\"ko\">") && page.contains("<h1 id=\"title\">대기실</h1>"), "{page}");
    assert!(page.contains("data-admit-url=\"/gate/claim?from=room\""), "{page}");
    assert!(!page.contains("<script>") && !page.contains("style="), "nothing inline: {page}");
    let page = api.page("/?queue=launch&lang=en", Some("ko")).await.text().await.unwrap();
    assert!(page.contains("<html lang=\"en\">") && page.contains(">Waiting room</h1>"), "?lang= wins");
    let r = api.page("/?queue=other", None).await;
    assert_eq!(r.status(), 404, "nobody made the queue other");
    assert!(r.text().await.unwrap().contains("There is no waiting room named “other”."));
    qc.config_set("other", &[("soft_cap", 10)]).await.unwrap();
    let page = api.page("/?queue=other", None).await.text().await.unwrap();
    assert!(page.contains("data-admit-url=\"http://chat.example.test/\""), "other queues go to --chat-url");
    assert_eq!(api.page("/?queue=bad%20name", None).await.status(), 400);

    // Branding, stored by hand as an operator with valkey-cli might: escaped, and a
    // colour that is not one never reaches the stylesheet.
    qc.set_brand("launch", &[("title", "Tickets <script>alert(1)</script>"), ("accent", "#123456")], &[])
        .await
        .unwrap();
    qc.set_brand("launch", &[("background", "red;}body{display:none")], &[]).await.unwrap();
    let page = api.page("/?queue=launch", None).await.text().await.unwrap();
    assert!(page.contains("<h1 id=\"title\">Tickets &lt;script&gt;alert(1)&lt;/script&gt;</h1>"), "{page}");
    let css = api.page("/brand.css?queue=launch", None).await.text().await.unwrap();
    assert_eq!(css, ":root {\n  --accent: #123456;\n}\n");

    // Every file the page loads, each with the policy; the messages of both languages.
    for (path, kind) in [
        ("/app.js", "text/javascript"),
        ("/app.css", "text/css"),
        ("/pow-worker.js", "text/javascript"),
        ("/i18n/ko.json", "application/json"),
        ("/i18n/en.json", "application/json"),
        ("/admin", "text/html"),
        ("/admin.js", "text/javascript"),
        ("/admin.css", "text/css"),
    ] {
        let r = api.page(path, None).await;
        assert_eq!(r.status(), 200, "{path}");
        assert!(r.headers()["content-type"].to_str().unwrap().starts_with(kind), "{path}");
        assert!(r.headers().contains_key("content-security-policy"), "{path}");
    }
    let ko: Value = api.page("/i18n/ko.json", None).await.json().await.unwrap();
    assert_eq!(ko["join"], "줄 서기");
    assert_eq!(api.page("/i18n/xx.json", None).await.status(), 404);
    assert_eq!(api.page("/assets/x.css", None).await.status(), 404, "no template directory, no assets");
    api.stop().await;
}

/// The SSE events of one stream, by name and data.
struct Events {
    body: futures_util::stream::BoxStream<'static, reqwest::Result<axum::body::Bytes>>,
    text: String,
}

impl Events {
    async fn open(api: &Api, user: &str, queue: &str) -> Events {
        let r = api.http.get(api.url(&format!("/api/queue/stream?userId={user}&queue={queue}"))).send().await.unwrap();
        assert_eq!(r.status(), 200);
        Events { body: r.bytes_stream().boxed(), text: String::new() }
    }

    /// The next event within `within`, or None.
    async fn next(&mut self, within: Duration) -> Option<(String, Value)> {
        let deadline = Instant::now() + within;
        loop {
            if let Some(i) = self.text.find("\n\n") {
                let block: String = self.text.drain(..i + 2).collect();
                let name = block.lines().find_map(|l| l.strip_prefix("event: ")).unwrap_or("").to_string();
                let Some(data) = block.lines().find_map(|l| l.strip_prefix("data: ")) else { continue };
                return Some((name, serde_json::from_str(data).unwrap()));
            }
            let left = deadline.checked_duration_since(Instant::now())?;
            let chunk = tokio::time::timeout(left, self.body.next()).await.ok()??.unwrap();
            self.text.push_str(&String::from_utf8_lossy(&chunk));
        }
    }
}

async fn every_position_event_has_the_total_and_the_pause(b: Backend) {
    let s = ValkeyServer::start(b);
    let qc = client_for(&s).await;
    qc.config_set("q", &[("soft_cap", 0)]).await.unwrap();
    let mut config = queue_api::Config::local(&s.url());
    config.push_tick = Duration::from_millis(200);
    let api = Api::with_admin(config).await;
    for u in ["a", "b", "c"] {
        qc.enter("q", u, "n").await.unwrap();
    }
    // The first event of the queue's first stream already has the total.
    let mut ev = Events::open(&api, "b", "q").await;
    let (name, first) = ev.next(Duration::from_secs(5)).await.expect("a first event");
    assert_eq!((name.as_str(), first["rank"].clone()), ("position", json!(2)), "{first}");
    assert_eq!((first["totalWaiting"].clone(), first["admissionPaused"].clone()), (json!(3), json!(true)), "{first}");
    // Someone joins behind: b's rank stays, the total moves, and b is told.
    qc.enter("q", "d", "n").await.unwrap();
    let (_, v) = ev.next(Duration::from_secs(5)).await.expect("an event for the new total");
    assert_eq!((v["rank"].clone(), v["totalWaiting"].clone()), (json!(2), json!(4)), "{v}");
    // Admission resumes with one place: a is let in, b moves up, no longer paused.
    qc.config_set("q", &[("soft_cap", 1)]).await.unwrap();
    qc.promote("q", None).await.unwrap();
    // (An event read between the refresh's count and its ranks may show the old
    // total or pause once; the next one has both.)
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut last = loop {
        let (_, v) = ev.next(deadline.saturating_duration_since(Instant::now())).await.expect("b moves up");
        assert!(v["totalWaiting"].is_u64() && v["admissionPaused"].is_boolean(), "in every position event: {v}");
        if (v["rank"].clone(), v["totalWaiting"].clone(), v["admissionPaused"].clone())
            == (json!(1), json!(3), json!(false))
        {
            break v;
        }
    };
    // Nothing changes: the stream does not repeat itself. (Once the admission rate has
    // a long enough window, about 2 s after the promotion, an event may bring the first
    // wait estimate: that is news, with the rest unchanged.)
    let quiet = Instant::now() + Duration::from_millis(800);
    while let Some((_, v)) = ev.next(quiet.saturating_duration_since(Instant::now())).await {
        assert_ne!(v, last, "an event repeated");
        assert_eq!(
            (&v["rank"], &v["totalWaiting"], &v["admissionPaused"]),
            (&json!(1), &json!(3), &json!(false)),
            "{v}"
        );
        last = v;
    }
    api.stop().await;
}

/// A template directory replaces the page (its variables escaped, its assets served);
/// a template naming an unknown variable, or a missing one, stops the service at start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_template_directory_replaces_the_page() {
    let dir = std::env::temp_dir().join(format!("queue-api-templates-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("index.html"),
        "<!doctype html><html lang=\"{{lang}}\"><link rel=\"stylesheet\" href=\"assets/shop.css\">\
         <h1>{{ title }}</h1><p>{{msg.join}}</p><i>{{queue}}</i><b>{{admit_url}}</b></html>",
    )
    .unwrap();
    std::fs::write(dir.join("shop.css"), "h1 { color: teal }").unwrap();
    let s = ValkeyServer::start(Backend::Module);
    let qc = client_for(&s).await;
    qc.set_brand("default", &[("title", "Shop & \"Co\"")], &[]).await.unwrap();
    let mut config = queue_api::Config::local(&s.url());
    config.templates = Some(queue_api::templates::Pages::from_flag(dir.to_str().unwrap()).unwrap());
    let api = Api::with_admin(config).await;
    let page = api.page("/", Some("ko")).await.text().await.unwrap();
    assert_eq!(
        page,
        "<!doctype html><html lang=\"ko\"><link rel=\"stylesheet\" href=\"assets/shop.css\">\
         <h1>Shop &amp; &quot;Co&quot;</h1><p>줄 서기</p><i>default</i><b>http://127.0.0.1:8081/</b></html>"
    );
    let css = api.page("/assets/shop.css", None).await;
    assert_eq!(css.headers()["content-type"], "text/css; charset=utf-8");
    assert_eq!(css.text().await.unwrap(), "h1 { color: teal }");
    assert_eq!(api.page("/assets/index.html", None).await.status(), 404);
    api.stop().await;

    // Errors at start, from the binary itself: exit status 2 and the reason.
    std::fs::write(dir.join("index.html"), "<h1>{{title}}</h1>\n<p>{{price}}</p>").unwrap();
    let missing = dir.join("nowhere");
    for (templates, reason) in [
        (dir.display().to_string(), "index.html:2: unknown variable {{price}}".to_string()),
        (missing.display().to_string(), format!("template {}", missing.join("index.html").display())),
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_queue-api"))
            .args(["--templates", &templates, "--valkey-url", &s.url()])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains(&reason), "{stderr}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Each back-office change is an audit line in the JSON logs: the queue, the action
/// and what changed from what to what.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_are_audit_lines_in_the_json_logs() {
    let s = ValkeyServer::start(Backend::Lua);
    let port = testkit::free_port();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_queue-api"))
        .args(["--valkey-url", &s.url(), "--listen", &format!("127.0.0.1:{port}"), "--admin-token", TOKEN])
        .args(["--log-format", "json"])
        .env("RUST_LOG", "info")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    for out in [
        Box::new(child.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>,
        Box::new(child.stderr.take().unwrap()),
    ] {
        let tx = tx.clone();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
    }
    let base = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let up = http.get(format!("{base}/healthz")).send().await.ok();
        if let Some(r) = up {
            if r.json::<Value>().await.unwrap()["valkey"] == "up" {
                break;
            }
        }
        assert!(Instant::now() < deadline, "queue-api did not come up");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let r = http
        .put(format!("{base}/api/admin/queues/launch"))
        .bearer_auth(TOKEN)
        .json(&json!({"soft_cap": 42}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let line = loop {
        let line = rx.recv_timeout(Duration::from_secs(10)).expect("an audit line");
        let Ok(v) = serde_json::from_str::<Value>(&line) else { continue };
        if v["target"] == "audit" {
            break v;
        }
    };
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(
        (line["fields"]["queue"].clone(), line["fields"]["action"].clone()),
        (json!("launch"), json!("settings"))
    );
    let changes: Value = serde_json::from_str(line["fields"]["changes"].as_str().unwrap()).unwrap();
    assert_eq!(changes, json!({"soft_cap": {"from": 1000, "to": 42}}), "{line}");
}
