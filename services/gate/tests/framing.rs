//! Proxy mode's answers however the app frames them, through a real gate in front of
//! a hand-written HTTP/1.1 app on a real socket (so that every framing, interim
//! answer and closed connection is the one written here, not a library's choice):
//! lengths, chunked bodies with trailers, bodies until the close, HEAD and 204, an
//! interim 103, pipelined requests, kept-alive connections to the app reused and one
//! the app closed meanwhile, the app down (502) or too slow (504).
//!
//! Every case runs on both of the gate's paths (`--fast-path on` and `off`): the
//! hand-written fast path and the general one (hyper and the router), which must
//! answer alike. Where they legitimately differ (the general path frames the body
//! again, hyper's way, where the fast path relays the app's framing), the case says
//! so and checks what each does.

mod common;

use common::*;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use testkit::{Backend, ValkeyServer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The app: answers by path, counts connections and requests.
struct RawApp {
    addr: std::net::SocketAddr,
    connections: Arc<AtomicUsize>,
    requests: Arc<AtomicUsize>,
    /// The paths of the requests served, in order.
    paths: Arc<Mutex<Vec<String>>>,
}

fn answer_for(method: &str, path: &str) -> (Vec<u8>, bool) {
    let text = |s: &str| s.as_bytes().to_vec();
    if method == "HEAD" {
        return (text("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n"), false);
    }
    match path {
        "/length" => (text("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-App: 1\r\n\r\nhello"), false),
        "/chunked" => (
            text("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6;x=y\r\n world\r\n0\r\nX-Trailer: 1\r\n\r\n"),
            false,
        ),
        "/until-close" => (text("HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nto the very end"), true),
        "/nothing" => (text("HTTP/1.1 204 No Content\r\n\r\n"), false),
        "/hint" => (text("HTTP/1.1 103 Early Hints\r\nLink: </a.css>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"), false),
        // Answers, then closes without saying so (as an app closes idle connections).
        "/then-close" => (text("HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nbye"), true),
        "/end-session" => (text("HTTP/1.1 200 OK\r\nQueue-Session: end\r\nContent-Length: 2\r\n\r\nok"), false),
        "/two-lengths" => (text("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nabc"), true),
        "/echo-head" => (Vec::new(), false),
        // Chunk sizes with more leading zeros than httparse counts (hyper takes them).
        "/zeros" => (
            text("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n00000000000000005\r\nhello\r\n00000000000000000\r\n\r\n"),
            false,
        ),
        // A protocol switch nobody asked for.
        "/switch" => (text("HTTP/1.1 101 Switching Protocols\r\nUpgrade: other\r\nConnection: upgrade\r\n\r\n"), true),
        _ => (text("HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"), false),
    }
}

impl RawApp {
    async fn start() -> RawApp {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (connections, requests) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let paths = Arc::new(Mutex::new(Vec::new()));
        let (c, r, p) = (connections.clone(), requests.clone(), paths.clone());
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                c.fetch_add(1, Ordering::SeqCst);
                let (r, p) = (r.clone(), p.clone());
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    loop {
                        let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
                            let mut more = [0u8; 4096];
                            match s.read(&mut more).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => buf.extend_from_slice(&more[..n]),
                            }
                            continue;
                        };
                        let head = String::from_utf8_lossy(&buf[..end + 4]).into_owned();
                        buf.drain(..end + 4);
                        // The body, as long as Content-Length says.
                        let length = head
                            .lines()
                            .find_map(|l| {
                                l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().to_string())
                            })
                            .and_then(|v| v.parse::<usize>().ok())
                            .unwrap_or(0);
                        while buf.len() < length {
                            let mut more = [0u8; 4096];
                            match s.read(&mut more).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => buf.extend_from_slice(&more[..n]),
                            }
                        }
                        buf.drain(..length);
                        r.fetch_add(1, Ordering::SeqCst);
                        let mut words = head.split(' ');
                        let (method, path) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
                        p.lock().unwrap().push(path.to_string());
                        if path == "/slow" {
                            tokio::time::sleep(Duration::from_secs(3)).await;
                        }
                        let (mut answer, close) = answer_for(method, path);
                        if path == "/echo-head" {
                            let body = head.to_ascii_lowercase();
                            answer =
                                format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}", body.len()).into_bytes();
                        }
                        if s.write_all(&answer).await.is_err() || close {
                            return;
                        }
                    }
                });
            }
        });
        RawApp { addr, connections, requests, paths }
    }
}

/// Everything the gate sends on one connection after `request`, until it closes.
async fn raw(gate: &Gate, request: &str) -> String {
    let mut s = TcpStream::connect(gate.addr).await.unwrap();
    s.write_all(request.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out)).await.expect("closed in time").unwrap();
    String::from_utf8_lossy(&out).into_owned()
}

/// Which of the gate's two paths serves plain requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Path {
    /// `--fast-path on` (the default).
    Fast,
    /// `--fast-path off`: hyper and the router for every request.
    General,
}

/// Each case, once on each path.
macro_rules! on_both_paths {
    ($($case:ident),* $(,)?) => {
        mod fast_path {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    super::$case(super::Path::Fast).await
                }
            )*
        }
        mod general_path {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    super::$case(super::Path::General).await
                }
            )*
        }
    };
}

on_both_paths!(every_framing_reaches_the_client_whole, nothing_slips_past_the_decision, the_app_down_is_a_502_page);

async fn start(upstream_timeout: Duration, path: Path) -> (ValkeyServer, tempfile::TempDir, RawApp, Gate) {
    let valkey = ValkeyServer::start(Backend::Module);
    let dir = tempfile::tempdir().unwrap();
    let app = RawApp::start().await;
    let mut c = config(&valkey, Some(app.addr), &key_file(dir.path(), "k.pem"));
    c.upstream_timeout = upstream_timeout;
    c.fast_path = path == Path::Fast;
    let gate = Gate::start(c).await;
    (valkey, dir, app, gate)
}

/// A chunked body's data, its chunks joined (extensions and trailers left out).
fn unchunk(mut body: &str) -> String {
    let mut data = String::new();
    loop {
        let (line, rest) = body.split_once("\r\n").expect("a size line");
        let size = usize::from_str_radix(line.split(';').next().unwrap(), 16).expect("a size");
        if size == 0 {
            return data;
        }
        data.push_str(&rest[..size]);
        body = &rest[size + 2..];
    }
}

async fn every_framing_reaches_the_client_whole(path: Path) {
    let (_v, _d, app, gate) = start(Duration::from_secs(1), path).await;
    let get = |path: &str| format!("GET {path} HTTP/1.1\r\nHost: shop.test\r\n\r\n");

    // Pipelined on one connection, in order, each answer framed as the app framed it
    // (the fast path) or as hyper frames it (the general path).
    let all = [
        get("/length"),
        get("/chunked"),
        get("/hint"),
        get("/nothing"),
        "HEAD /length HTTP/1.1\r\nHost: shop.test\r\n\r\n".into(),
        get("/zeros"),
        get("/until-close"),
        "GET /length HTTP/1.1\r\nHost: shop.test\r\nConnection: close\r\n\r\n".into(),
    ]
    .concat();
    let out = raw(&gate, &all).await;
    let answers: Vec<&str> = out.split("HTTP/1.1 ").skip(1).collect();
    assert!(
        answers[0].starts_with("200") && answers[0].ends_with("\r\n\r\nhello") && answers[0].contains("x-app: 1"),
        "{out}"
    );
    assert!(answers[1].contains("transfer-encoding: chunked\r\n"), "{out}");
    assert!(!answers[1].contains("content-length"), "{out}");
    let body = |answer: &str| answer.split_once("\r\n\r\n").map_or(String::new(), |(_, b)| unchunk(b));
    assert_eq!(body(answers[1]), "hello world", "{out}");
    assert!(answers[2].starts_with("200") && answers[2].ends_with("\r\n\r\nok"), "the 103 is not passed on: {out}");
    assert!(answers[3].starts_with("204") && answers[3].ends_with("\r\n\r\n"), "{out}");
    assert!(
        answers[4].starts_with("200") && answers[4].contains("content-length: 5") && answers[4].ends_with("\r\n\r\n"),
        "HEAD: no body {out}"
    );
    // Sizes with leading zeros past httparse's 16 digits: relayed on both paths.
    assert!(answers[5].starts_with("200") && answers[5].contains("transfer-encoding: chunked\r\n"), "{out}");
    assert_eq!(body(answers[5]), "hello", "{out}");
    match path {
        Path::Fast => {
            // The app's own chunks, extensions and trailers passed on.
            assert!(
                answers[1].ends_with("\r\n\r\n5\r\nhello\r\n6;x=y\r\n world\r\n0\r\nX-Trailer: 1\r\n\r\n"),
                "{out}"
            );
            assert!(answers[5].ends_with("\r\n\r\n00000000000000005\r\nhello\r\n00000000000000000\r\n\r\n"), "{out}");
            // A body until the app closes: the client's connection closes after it, and
            // the request pipelined behind it is not served.
            assert_eq!(answers.len(), 7, "{out}");
            assert!(answers[6].contains("connection: close\r\n") && answers[6].ends_with("to the very end"), "{out}");
        }
        Path::General => {
            // hyper decodes the app's body and frames it again: chunked, its own
            // chunk sizes, no extensions, no trailers (the client asked for none with
            // `TE: trailers`); a body until the close is chunked too, and the
            // connection goes on with the next request.
            assert!(!answers[1].contains("x=y") && !answers[1].contains("X-Trailer"), "{out}");
            assert_eq!(answers.len(), 8, "{out}");
            assert!(answers[6].contains("transfer-encoding: chunked\r\n"), "{out}");
            assert_eq!(body(answers[6]), "to the very end", "{out}");
            assert!(answers[7].starts_with("200") && answers[7].ends_with("\r\n\r\nhello"), "{out}");
        }
    }

    // The app gets the gate's headers, and no hop-by-hop header of the client's.
    let out = raw(&gate, "GET /echo-head HTTP/1.1\r\nHost: shop.test\r\nConnection: close, x-private\r\nX-Private: 1\r\nKeep-Alive: 5\r\nX-Queue-User: forged\r\n\r\n").await;
    assert!(out.contains("x-forwarded-for: 127.0.0.1") && out.contains("x-forwarded-host: shop.test"), "{out}");
    for gone in ["x-private", "keep-alive", "x-queue-user", "connection: close, x-private"] {
        assert!(!out.split("\r\n\r\n").nth(1).unwrap_or("").contains(gone), "{gone} forwarded: {out}");
    }

    // Kept-alive connections to the app are reused; one the app closed after its
    // answer is replaced, and the request on it still answered.
    let http = client();
    let before = app.connections.load(Ordering::SeqCst);
    for _ in 0..20 {
        assert_eq!(http.get(gate.url("/length")).send().await.unwrap().text().await.unwrap(), "hello");
    }
    assert!(app.connections.load(Ordering::SeqCst) - before <= 2, "reused, not one connection per request");
    for _ in 0..5 {
        let r = http.get(gate.url("/then-close")).send().await.unwrap();
        assert_eq!(r.text().await.unwrap(), "bye");
        let r = http.get(gate.url("/length")).send().await.unwrap();
        assert_eq!((r.status().as_u16(), r.text().await.unwrap()), (200, "hello".to_string()));
    }

    // An answer the gate cannot frame is a 502, not passed on.
    let out = raw(
        &gate,
        "GET /two-lengths HTTP/1.1\r\nHost: shop.test\r\nAccept: application/json\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(out.starts_with("HTTP/1.1 502") && out.contains("upstream_answer"), "{out}");
    // A protocol switch nobody asked for is a 502 on both paths, named differently: the
    // fast path finds it while reading the answer's head (an answer it cannot pass on,
    // `upstream_answer`), the general path once hyper has taken it as an upgrade
    // (`upstream_upgrade`).
    let out =
        raw(&gate, "GET /switch HTTP/1.1\r\nHost: shop.test\r\nAccept: application/json\r\nConnection: close\r\n\r\n")
            .await;
    let code = match path {
        Path::Fast => "upstream_answer",
        Path::General => "upstream_upgrade",
    };
    assert!(out.starts_with("HTTP/1.1 502") && out.contains(code), "{out}");

    // A POST (which cannot be sent twice) on a pooled connection the app had closed
    // after its answer: that connection is seen closed when taken, the POST goes on a
    // new one.
    for _ in 0..5 {
        assert_eq!(http.get(gate.url("/then-close")).send().await.unwrap().text().await.unwrap(), "bye");
        // The app closes right after answering; on a busy machine its close may come
        // a little later, and a POST taken before then is the keep-alive race no proxy
        // can avoid. A moment lets the close land, so that what is tested is that a
        // closed connection is seen as closed when taken.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let r = http.post(gate.url("/length")).body("x").send().await.unwrap();
        assert_eq!((r.status().as_u16(), r.text().await.unwrap()), (200, "hello".to_string()));
    }

    // Too slow: 504 within the upstream timeout; the connection to the client lives on.
    let requests = app.requests.load(Ordering::SeqCst);
    let out = raw(
        &gate,
        &[get("/slow"), "GET /length HTTP/1.1\r\nHost: shop.test\r\nConnection: close\r\n\r\n".into()].concat(),
    )
    .await;
    assert!(out.starts_with("HTTP/1.1 504") && out.contains("upstream_timeout") && out.ends_with("hello"), "{out}");
    assert_eq!(app.requests.load(Ordering::SeqCst), requests + 2, "the slow request was not sent twice");
    gate.stop().await;
}

/// Requests that would get past the decision if the gate and the app read them apart.
async fn nothing_slips_past_the_decision(path: Path) {
    let (_v, _d, app, gate) = start(Duration::from_secs(1), path).await;
    // A body that is a request for a gated path, its length named hop-by-hop: the app
    // still gets the body's length, and one request.
    let inner = "GET /checkout HTTP/1.1\r\nHost: shop.test\r\nX-Queue-User: evil\r\n\r\n";
    let smuggle = format!(
        "POST /echo-head HTTP/1.1\r\nHost: shop.test\r\nConnection: content-length\r\nContent-Length: {}\r\n\r\n{inner}",
        inner.len()
    );
    let requests = app.requests.load(Ordering::SeqCst);
    let out = raw(
        &gate,
        &[smuggle.as_str(), "GET /length HTTP/1.1\r\nHost: shop.test\r\nConnection: close\r\n\r\n"].concat(),
    )
    .await;
    assert!(out.contains(&format!("content-length: {}", inner.len())), "the app got the length: {out}");
    assert!(out.ends_with("hello"), "{out}");
    // A fragment in the target: decided on the path before it (the waiting room).
    let out =
        raw(&gate, "GET /checkout#.css HTTP/1.1\r\nHost: shop.test\r\nAccept: text/html\r\nConnection: close\r\n\r\n")
            .await;
    assert!(out.starts_with("HTTP/1.1 302"), "{out}");
    // HEAD refused: the answer has no body, so the next answer on the connection is
    // read where it begins.
    let out = raw(
        &gate,
        "HEAD /checkout HTTP/1.1\r\nHost: shop.test\r\nAccept: text/html\r\n\r\nGET /length HTTP/1.1\r\nHost: shop.test\r\nConnection: close\r\n\r\n",
    )
    .await;
    let (first, second) = out.split_once("\r\n\r\n").unwrap();
    assert!(first.starts_with("HTTP/1.1 302") && first.contains("content-length: "), "{out}");
    assert!(second.starts_with("HTTP/1.1 200") && second.ends_with("hello"), "no body after the HEAD's head: {out}");
    // The app served the POST and the two GETs, nothing else.
    assert_eq!(app.requests.load(Ordering::SeqCst), requests + 3, "{:?}", app.paths.lock().unwrap());
    assert!(!app.paths.lock().unwrap().iter().any(|p| p.starts_with("/checkout")), "{:?}", app.paths.lock().unwrap());
    gate.stop().await;
}

async fn the_app_down_is_a_502_page(path: Path) {
    let valkey = ValkeyServer::start(Backend::Module);
    let dir = tempfile::tempdir().unwrap();
    // A port nothing listens on.
    let free = TcpListener::bind("127.0.0.1:0").await.unwrap().local_addr().unwrap();
    let mut c = config(&valkey, Some(free), &key_file(dir.path(), "k.pem"));
    c.fast_path = path == Path::Fast;
    let gate = Gate::start(c).await;
    let r = client().get(gate.url("/about")).header("accept", HTML).send().await.unwrap();
    assert_eq!(r.status(), 502);
    assert!(r.text().await.unwrap().contains("could not be reached"));
    let r = client().get(gate.url("/about")).header("accept", "application/json").send().await.unwrap();
    assert_eq!(r.status(), 502);
    assert_eq!(r.json::<serde_json::Value>().await.unwrap()["error"], "upstream_unreachable");
    gate.stop().await;
}
