//! Who the client is, through a real nginx that appends to X-Forwarded-For
//! (`$proxy_add_x_forwarded_for`, as docs/gate-proxies.md and every ingress do):
//! a client that sends a different made-up X-Forwarded-For on every request stays in
//! its own bucket, and another client has a bucket of its own, for
//!
//! - queue-api's entry rate limit (straight, and through the gate's room, two proxies
//!   deep: nginx, then the gate),
//! - queue-api's per-address stream limit,
//! - the proof-of-work challenge's binding to an address,
//! - chat-server's per-address limit of failed tickets,
//! - the gate's `--bypass-network`.
//!
//! Clients are told apart by their loopback source address (127.0.0.x); nginx
//! connects to the services from 127.0.0.3, the address they are told is their
//! proxy's (`--trusted-proxies`). Needs the release build and nginx
//! (scripts/install-deps.sh).

#[allow(dead_code)]
#[path = "gate/harness.rs"]
mod harness;

use e2e::{Service, ADMIN_TOKEN};
use harness::{Proc, Scratch};
use serde_json::{json, Value};
use std::net::IpAddr;
use std::path::Path;
use std::time::Duration;
use testkit::{Backend, ValkeyServer};

/// The address nginx connects to the services from.
const NGINX_BIND: &str = "127.0.0.3";

/// An HTTP client whose connections come from `source` (a loopback address).
fn client_from(source: &str) -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(source.parse::<IpAddr>().unwrap())
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

/// A made-up X-Forwarded-For, different for every `i`.
fn fake(i: usize) -> String {
    format!("198.51.100.{}", i % 250 + 1)
}

struct System {
    valkey: ValkeyServer,
    _api: Service,
    _chat: Service,
    _app: Proc,
    _gate: Proc,
    nginx: Proc,
    _dir: Scratch,
}

impl System {
    async fn start() -> System {
        let dir = Scratch::new("client-address");
        let valkey = ValkeyServer::start(Backend::Module);
        let mut c = valkey.client();
        // Nobody is let in: every entry waits (and keeps its place for the streams).
        c.call("QUEUE.CONFIG", &["default", "SET", "soft_cap", "0"]).unwrap();
        c.call("QUEUE.CONFIG", &["powq", "SET", "soft_cap", "0", "pow_difficulty", "8"]).unwrap();
        let s = |v: &str| v.to_string();
        let url = valkey.url();
        let chat = Service::start(
            "chat-server",
            &[
                s("--valkey-url"),
                url.clone(),
                s("--trusted-proxies"),
                s(NGINX_BIND),
                s("--ticket-failures-per-minute"),
                s("0.1"),
                s("--ticket-failure-burst"),
                s("3"),
            ],
            |h| h["valkey"] == "up" && h["room"] == "up",
        )
        .await;
        let api = Service::start(
            "queue-api",
            &[
                s("--valkey-url"),
                url.clone(),
                s("--chat-url"),
                chat.url(),
                s("--admin-token"),
                s(ADMIN_TOKEN),
                // nginx, and the gate (which connects from 127.0.0.1) in front of the room.
                s("--trusted-proxies"),
                format!("{NGINX_BIND},127.0.0.1"),
                s("--rate-limit"),
                s("0.05"),
                s("--rate-burst"),
                s("5"),
                s("--max-streams-per-addr"),
                s("2"),
            ],
            |h| h["valkey"] == "up",
        )
        .await;
        let app = harness::upstream(&dir).await;
        let key = harness::write_key(&dir);
        let gate_args = vec![
            s("--valkey-url"),
            url.clone(),
            s("--upstream"),
            app.url(),
            s("--queue-api"),
            api.url(),
            s("--key"),
            key.display().to_string(),
            s("--route"),
            s("/checkout=default"),
            s("--bypass-network"),
            s("127.0.0.11/32"),
            s("--trusted-proxies"),
            s(NGINX_BIND),
            // Every unadmitted visitor goes to the room (not straight in on the idle queue).
            s("--straight-through"),
            s("false"),
        ];
        let gate = harness::start(
            "gate",
            &dir,
            &testkit::release_binary("queue-gate"),
            |port| [gate_args.clone(), vec![s("--listen"), format!("127.0.0.1:{port}")]].concat(),
            "/gate/healthz",
        )
        .await;
        let d = dir.0.display().to_string();
        let (api_at, chat_at, gate_at) =
            (format!("127.0.0.1:{}", api.port), format!("127.0.0.1:{}", chat.port), gate.addr());
        let nginx = harness::start(
            "nginx",
            &dir,
            Path::new(&harness::which("nginx")),
            |port| {
                let template = testkit::workspace_root().join("tests/gate/nginx-spoof.conf");
                let conf = std::fs::read_to_string(template)
                    .unwrap()
                    .replace("{{DIR}}", &d)
                    .replace("{{LISTEN}}", &format!("127.0.0.1:{port}"))
                    .replace("{{BIND}}", NGINX_BIND)
                    .replace("{{API}}", &api_at)
                    .replace("{{CHAT}}", &chat_at)
                    .replace("{{GATE}}", &gate_at);
                let path = format!("{d}/nginx-spoof.conf");
                std::fs::write(&path, conf).unwrap();
                vec!["-c".into(), path, "-p".into(), d.clone()]
            },
            "/gate/healthz",
        )
        .await;
        System { valkey, _api: api, _chat: chat, _app: app, _gate: gate, nginx, _dir: dir }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.nginx.url())
    }

    fn waiting(&self, queue: &str) -> i64 {
        let v = self.valkey.client().call("QUEUE.INFO", &[queue]).unwrap();
        testkit::fields(&v).get("waiting").and_then(testkit::as_int).unwrap()
    }
}

/// POSTs entries from `source` through nginx at `path`, a new made-up
/// X-Forwarded-For each time, until one is refused with 429 (or `tries` run out):
/// the statuses seen.
async fn enter_until_refused(sys: &System, source: &str, path: &str, tries: usize) -> Vec<u16> {
    let http = client_from(source);
    let mut seen = Vec::new();
    for i in 0..tries {
        let r = http.post(sys.url(path)).header("x-forwarded-for", fake(i)).json(&json!({ "nickname": "n" }));
        let code = r.send().await.unwrap().status().as_u16();
        seen.push(code);
        if code == 429 {
            break;
        }
    }
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_made_up_forwarded_for_picks_no_bucket() {
    let sys = System::start().await;

    // 1. queue-api's entry limit (burst 5, refilling one every 20 s): the sixth entry
    // or so of one client is refused, whatever it claims to be; another client is not.
    let a = enter_until_refused(&sys, "127.0.0.2", "/api/queue/entry", 12).await;
    assert_eq!(a.last(), Some(&429), "a client sending its own X-Forwarded-For was never limited: {a:?}");
    assert!(a.len() >= 5, "the burst of 5 is the client's own: {a:?}");
    let b = enter_until_refused(&sys, "127.0.0.4", "/api/queue/entry", 1).await;
    assert_eq!(b, [200], "another client has a bucket of its own");

    // 2. The same through the gate's room: nginx, then the gate, then queue-api.
    let c = enter_until_refused(&sys, "127.0.0.5", "/gate/room/api/queue/entry", 12).await;
    assert_eq!(c.last(), Some(&429), "through the gate: {c:?}");
    assert!(c.len() >= 5, "{c:?}");
    let d = enter_until_refused(&sys, "127.0.0.6", "/gate/room/api/queue/entry", 1).await;
    assert_eq!(d, [200], "another client through the gate");

    // 3. Streams: two per address; a third from the same client is refused with 429
    // whatever X-Forwarded-For it sends, while another client opens its own.
    let http = client_from("127.0.0.7");
    let r = http.post(sys.url("/api/queue/entry")).json(&json!({ "nickname": "s" })).send().await.unwrap();
    let user = r.json::<Value>().await.unwrap()["userId"].as_str().unwrap().to_string();
    let stream = |source: &'static str, i: usize| {
        let r = client_from(source)
            .get(sys.url(&format!("/api/queue/stream?userId={user}")))
            .header("x-forwarded-for", fake(i))
            .header("accept", "text/event-stream");
        async move { r.send().await.unwrap() }
    };
    let s1 = stream("127.0.0.7", 1).await;
    let s2 = stream("127.0.0.7", 2).await;
    assert_eq!((s1.status().as_u16(), s2.status().as_u16()), (200, 200));
    let s3 = stream("127.0.0.7", 3).await;
    assert_eq!(s3.status().as_u16(), 429, "a third stream under a made-up address");
    let other = stream("127.0.0.8", 4).await;
    assert_eq!(other.status().as_u16(), 200, "another client's stream");
    drop((s1, s2, s3, other));

    // 4. A proof of work is bound to the client who asked for it: the same client may
    // use it whatever X-Forwarded-For it sends; another client may not.
    let http = client_from("127.0.0.9");
    let r = http.get(sys.url("/api/queue/challenge?queue=powq")).header("x-forwarded-for", "192.0.2.1");
    let given: Value = r.send().await.unwrap().json().await.unwrap();
    let challenge = given["challenge"].as_str().expect("a challenge").to_string();
    let proof = json!({ "challenge": challenge, "nonce": queue_core::pow::solve(&challenge, 8) });
    let body = json!({ "nickname": "p", "queue": "powq", "pow": proof });
    let r = client_from("127.0.0.10").post(sys.url("/api/queue/entry")).header("x-forwarded-for", "127.0.0.9");
    let theirs = r.json(&body).send().await.unwrap();
    assert_eq!(theirs.status().as_u16(), 400, "another client, naming the solver's address, cannot use it");
    let r = http.post(sys.url("/api/queue/entry")).header("x-forwarded-for", "192.0.2.2").json(&body);
    let mine = r.send().await.unwrap();
    let status = mine.status().as_u16();
    assert_eq!(status, 200, "the solver's own entry: {}", mine.text().await.unwrap());
    assert_eq!(sys.waiting("powq"), 1);

    // 5. chat-server: three failed tickets per address at once; the fourth attempt
    // is refused with 429 whatever X-Forwarded-For it sends; another client is not.
    let handshake = |source: &'static str, i: usize| {
        let r = client_from(source)
            .get(sys.url(&format!("/gameserver?ticketId=made-up-{i}")))
            .header("x-forwarded-for", fake(i))
            .header("connection", "Upgrade")
            .header("upgrade", "websocket")
            .header("sec-websocket-version", "13")
            .header("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ==");
        async move { r.send().await.unwrap().status().as_u16() }
    };
    let mut g = Vec::new();
    for i in 0..8 {
        let code = handshake("127.0.0.12", i).await;
        g.push(code);
        if code == 429 {
            break;
        }
    }
    assert_eq!(g.last(), Some(&429), "failed tickets under made-up addresses were never limited: {g:?}");
    assert_eq!(handshake("127.0.0.13", 9).await, 401, "another client's first made-up ticket is its own failure");

    // 6. The gate's --bypass-network (127.0.0.11/32): that client goes straight to
    // the app; another client naming that address in X-Forwarded-For is sent to the room.
    let r = client_from("127.0.0.11").get(sys.url("/checkout")).header("accept", "text/html");
    assert_eq!(r.send().await.unwrap().status().as_u16(), 200, "the bypass network's own client");
    let r = client_from("127.0.0.14")
        .get(sys.url("/checkout"))
        .header("accept", "text/html")
        .header("x-forwarded-for", "127.0.0.11");
    let code = r.send().await.unwrap().status().as_u16();
    assert!((300..400).contains(&code), "a made-up address in the bypass network is sent to the room, got {code}");
}
