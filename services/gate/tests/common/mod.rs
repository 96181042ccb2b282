//! The gate's test harness: a real valkey-server (testkit), the gate in-process on a
//! real socket, and a real upstream app (axum, on its own socket) that logs every
//! request it serves, echoes WebSocket messages and counts uploads as they stream.
#![allow(dead_code)]

use axum::body::Body;
use axum::extract::ws::{Message, WebSocketUpgrade};
use axum::extract::Request;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post};
use axum::Router;
use futures_util::StreamExt;
use queue_client::{QueueClient, Status};
use queue_gate::rules::parse_route;
use queue_gate::token::{der_to_pem, generate_ed25519_pkcs8, Keys};
use queue_gate::Config;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use testkit::ValkeyServer;

/// One request the upstream served.
#[derive(Debug, Clone)]
pub struct Seen {
    pub path: String,
    pub user: Option<String>,
    pub queue: Option<String>,
    pub forwarded_for: Option<String>,
    pub forwarded_proto: Option<String>,
    pub forwarded_host: Option<String>,
    pub connection: Option<String>,
    pub upgrade: Option<String>,
}

/// The app behind the gate.
pub struct Upstream {
    pub addr: SocketAddr,
    pub log: Arc<Mutex<Vec<Seen>>>,
    /// Set when the first bytes of an upload arrive.
    pub upload_started: Arc<AtomicBool>,
}

fn header(h: &HeaderMap, name: &str) -> Option<String> {
    h.get(name).and_then(|v| v.to_str().ok()).map(str::to_string)
}

impl Upstream {
    pub async fn start() -> Upstream {
        let log = Arc::new(Mutex::new(Vec::new()));
        let upload_started = Arc::new(AtomicBool::new(false));
        let (l, started) = (log.clone(), upload_started.clone());
        let record = move |req: &Request| {
            let h = req.headers();
            l.lock().unwrap().push(Seen {
                path: req.uri().path_and_query().map_or("/".into(), |p| p.to_string()),
                user: header(h, "x-queue-user"),
                queue: header(h, "x-queue-name"),
                forwarded_for: header(h, "x-forwarded-for"),
                forwarded_proto: header(h, "x-forwarded-proto"),
                forwarded_host: header(h, "x-forwarded-host"),
                connection: header(h, "connection"),
                upgrade: header(h, "upgrade"),
            });
        };
        let (r1, r2, r3, r4) = (record.clone(), record.clone(), record.clone(), record);
        let app = Router::new()
            .route(
                "/ws",
                get(move |ws: WebSocketUpgrade| async move {
                    ws.on_upgrade(|mut socket| async move {
                        while let Some(Ok(msg)) = socket.recv().await {
                            if let Message::Text(t) = msg {
                                if socket.send(Message::Text(format!("echo:{t}").into())).await.is_err() {
                                    break;
                                }
                            }
                        }
                    })
                })
                .layer(axum::middleware::from_fn(
                    move |req: Request, next: axum::middleware::Next| {
                        r1(&req);
                        next.run(req)
                    },
                )),
            )
            .route(
                "/upload",
                post(move |req: Request| {
                    r2(&req);
                    let started = started.clone();
                    async move {
                        let mut body = req.into_body().into_data_stream();
                        let (mut len, mut sum) = (0u64, 0u64);
                        while let Some(chunk) = body.next().await {
                            let Ok(chunk) = chunk else { return (StatusCode::BAD_REQUEST, "broken body".to_string()) };
                            started.store(true, Ordering::SeqCst);
                            len += chunk.len() as u64;
                            sum = chunk.iter().fold(sum, |s, b| s.wrapping_mul(31).wrapping_add(*b as u64));
                        }
                        (StatusCode::OK, format!("{len} {sum}"))
                    }
                }),
            )
            .route(
                "/checkout/done",
                any(move |req: Request| {
                    r3(&req);
                    async { ([("queue-session", "end")], "thanks").into_response() }
                }),
            )
            .fallback(move |req: Request| {
                r4(&req);
                async move {
                    let user = header(req.headers(), "x-queue-user").unwrap_or_default();
                    let mut resp = Response::new(Body::from(format!("app:{user}")));
                    // ?sold=V: the app reports a sale (Queue-Sold: V, each value of V).
                    for v in req.uri().query().unwrap_or("").split('&').filter_map(|p| p.strip_prefix("sold=")) {
                        let v = percent_encoding::percent_decode_str(v).decode_utf8_lossy().into_owned();
                        resp.headers_mut().append("queue-sold", v.parse().unwrap());
                    }
                    resp
                }
            });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Upstream { addr, log, upload_started }
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.log.lock().unwrap().clone()
    }

    /// Requests under a gated prefix that reached the app without an admission.
    pub fn unadmitted(&self, prefix: &str) -> Vec<Seen> {
        self.seen().into_iter().filter(|s| s.path.starts_with(prefix) && s.user.is_none()).collect()
    }
}

/// A fresh Ed25519 key file in `dir`.
pub fn key_file(dir: &Path, name: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, der_to_pem(&generate_ed25519_pkcs8())).unwrap();
    path
}

/// The test routes: /checkout, /ws, /upload to `drop`; /tickets/ to `concert`.
/// Straight through is off: these tests send a visitor without a token to the room
/// on an idle queue (tests/straight.rs turns it on).
pub fn config(valkey: &ValkeyServer, upstream: Option<SocketAddr>, key: &Path) -> Config {
    let mut c = Config::new(&valkey.url());
    c.rules.defaults.straight_through = false;
    c.upstream = upstream.map(|a| format!("http://{a}").parse().unwrap());
    for r in ["/checkout=drop", "/ws=drop", "/upload=drop", "/tickets/=concert"] {
        c.rules.add_route(parse_route(r).unwrap());
    }
    c.keys = Arc::new(Keys::from_files(&[key]).unwrap());
    c.tick = Duration::from_millis(200);
    c
}

/// What most tests start with: a real valkey-server, a queue client, the logging app,
/// and the gate (the test routes, a key in `dir`), in proxy mode in front of the app
/// ([`Proxied::start`]) or in forward-auth mode ([`Proxied::with`]).
pub struct Proxied {
    pub valkey: ValkeyServer,
    pub qc: QueueClient,
    pub dir: tempfile::TempDir,
    pub app: Upstream,
    pub gate: Gate,
}

impl Proxied {
    pub async fn start(valkey: ValkeyServer) -> Proxied {
        Proxied::with(valkey, true, |_| {}).await
    }

    /// The gate in proxy mode (`proxy`) or forward-auth mode, its configuration
    /// changed by `edit` first.
    pub async fn with(valkey: ValkeyServer, proxy: bool, edit: impl FnOnce(&mut Config)) -> Proxied {
        let qc = queue_client(&valkey).await;
        let dir = tempfile::tempdir().unwrap();
        let app = Upstream::start().await;
        let mut c = config(&valkey, proxy.then_some(app.addr), &key_file(dir.path(), "k.pem"));
        edit(&mut c);
        let gate = Gate::start(c).await;
        Proxied { valkey, qc, dir, app, gate }
    }
}

/// The gate running in this process on a real socket.
pub struct Gate {
    pub addr: SocketAddr,
    pub base: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
}

impl Gate {
    pub async fn start(config: Config) -> Gate {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(queue_gate::serve(listener, config, async {
            let _ = stopped.await;
        }));
        let gate = Gate { addr, base: format!("http://{addr}"), stop: Some(stop), task: Some(task) };
        // Ready once it answers and has reached Valkey once.
        let http = client();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(r) = http.get(gate.url("/gate/healthz")).send().await {
                if r.status() == 200 {
                    break;
                }
            }
            assert!(Instant::now() < deadline, "gate not ready");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        gate
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub async fn stop(mut self) {
        let _ = self.stop.take().unwrap().send(());
        let task = self.task.take().unwrap();
        tokio::time::timeout(Duration::from_secs(15), task).await.expect("prompt shutdown").unwrap().unwrap();
    }
}

/// A client that follows no redirects and keeps no cookies.
pub fn client() -> reqwest::Client {
    reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap()
}

pub const HTML: &str = "text/html,application/xhtml+xml,*/*;q=0.8";

pub async fn queue_client(s: &ValkeyServer) -> QueueClient {
    QueueClient::connect(&s.url()).await.unwrap()
}

/// `user` enters `queue` and is promoted at once (there is room): the ticket.
pub async fn ticket(qc: &QueueClient, queue: &str, user: &str) -> String {
    let s = qc.enter(queue, user, user).await.unwrap();
    assert_eq!(s.status, Status::Promoted, "{user} not promoted at once");
    s.ticket_id.unwrap()
}

/// The admission cookie's value in a response's Set-Cookie (None when cleared).
pub fn admission(resp: &reqwest::Response) -> Option<String> {
    resp.headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .filter_map(|v| v.split(';').next()?.strip_prefix("queue_admission=").map(str::to_string))
        .next_back()
        .filter(|v| !v.is_empty())
}

/// Claims `ticket` at the gate as a browser: the cookie to send back.
pub async fn claim(gate: &Gate, queue: &str, ticket: &str) -> String {
    let r = client()
        .get(gate.url(&format!("/gate/claim?queue={queue}&ticketId={ticket}&return=/checkout")))
        .header("accept", HTML)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 303, "claim");
    assert_eq!(r.headers()["location"], "/checkout");
    let value = admission(&r).expect("admission cookie");
    format!("queue_admission={value}")
}

/// GET `path` through the gate with `cookie`, as a browser.
pub async fn browse(gate: &Gate, path: &str, cookie: Option<&str>) -> reqwest::Response {
    let mut req = client().get(gate.url(path)).header("accept", HTML);
    if let Some(c) = cookie {
        req = req.header("cookie", c);
    }
    req.send().await.unwrap()
}

/// `/gate/auth` asked as nginx asks it (`X-Original-URI`) about `uri` with `cookie`.
pub async fn auth_as_nginx(gate: &Gate, uri: &str, cookie: &str) -> reqwest::Response {
    let r = client().get(gate.url("/gate/auth")).header("x-original-uri", uri).header("cookie", cookie);
    r.send().await.unwrap()
}

/// Leaves `queue` with `cookie` by the page's button (a POST from this origin), as JSON.
pub async fn leave_here(gate: &Gate, queue: &str, cookie: &str) -> reqwest::Response {
    let r = client().post(gate.url(&format!("/gate/leave?queue={queue}"))).header("cookie", cookie);
    r.header("sec-fetch-site", "same-origin").send().await.unwrap()
}

/// Polls `f` until true or `deadline`.
pub async fn eventually(deadline: Duration, mut f: impl AsyncFnMut() -> bool) -> bool {
    let end = Instant::now() + deadline;
    loop {
        if f().await {
            return true;
        }
        if Instant::now() >= end {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}
