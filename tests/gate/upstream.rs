//! The app behind the gate in the gate's tests and benchmark: answers every request
//! with whom it was told it serves, and logs every request it serves, one JSON line
//! each, with the admission it carried, so that a test can audit the log against the
//! gate's keys and the swarm's journal.
//!
//!   gate-upstream --listen 127.0.0.1:3000 [--log FILE] [--cookie-name queue_admission]
//!
//! (`--listen` defaults to $LISTEN, then 127.0.0.1:3000: docker/compose.yaml runs it as
//! the example app behind the gate.)
//!
//! Answer: 200 `{"user", "queue", "tokenSub", "path", "bytes"}`, where `user` and
//! `queue` are the `X-Queue-User`/`X-Queue-Name` headers the proxy passed and
//! `tokenSub` the subject of the admission token the request carried (read, not
//! verified: verifying is the audit's job); `bytes` counts the request body. A query
//! with `end=1` answers `Queue-Session: end` (the app ends the session); `sold=N`
//! answers `Queue-Sold: N` (the app reports a sale).
//!
//! Log line: `{"us", "method", "uri", "user", "queue", "tokens", "via"}`: `us` is the
//! arrival time in microseconds since the epoch, `tokens` the admission tokens
//! (the Bearer token, else the cookie's, which may hold several joined by `~`),
//! `via` `bearer`, `cookie` or null.

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::Router;
use base64::Engine;
use std::io::Write;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

struct App {
    cookie_name: String,
    log: Option<mpsc::Sender<String>>,
}

fn epoch_us() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_micros() as u64)
}

fn text<'a>(h: &'a HeaderMap, name: &str) -> Option<&'a str> {
    h.get(name).and_then(|v| v.to_str().ok())
}

/// The admission tokens the request carries and how.
fn tokens(h: &HeaderMap, cookie_name: &str) -> (Vec<String>, Option<&'static str>) {
    if let Some(t) = text(h, "authorization").and_then(|v| v.strip_prefix("Bearer ")) {
        return (vec![t.trim().to_string()], Some("bearer"));
    }
    let cookie = h
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|p| p.trim().split_once('='))
        .find(|(n, _)| *n == cookie_name)
        .map(|(_, v)| v);
    match cookie {
        Some(v) if !v.is_empty() => (v.split('~').map(String::from).collect(), Some("cookie")),
        _ => (Vec::new(), None),
    }
}

/// The `sub` of a JWT's claims, unverified.
fn subject(token: &str) -> Option<String> {
    let claims = token.split('.').nth(1)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(claims).ok()?;
    let v: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    v["sub"].as_str().map(String::from)
}

async fn serve(State(app): State<Arc<App>>, req: Request) -> Response {
    let us = epoch_us();
    let (parts, body) = req.into_parts();
    let h = &parts.headers;
    let (user, queue) = (text(h, "x-queue-user"), text(h, "x-queue-name"));
    let (tokens, via) = tokens(h, &app.cookie_name);
    if let Some(log) = &app.log {
        let line = serde_json::json!({
            "us": us, "method": parts.method.as_str(), "uri": parts.uri.to_string(),
            "user": user, "queue": queue, "tokens": tokens, "via": via,
        });
        let _ = log.send(line.to_string());
    }
    let bytes = match axum::body::to_bytes(body, usize::MAX).await {
        Ok(b) => b.len(),
        Err(e) => return (axum::http::StatusCode::BAD_REQUEST, e.to_string()).into_response(),
    };
    let token_sub = tokens.iter().filter_map(|t| subject(t)).find(|s| Some(s.as_str()) == user).or_else(|| {
        // Without X-Queue-User: the token's subject when it carries one token.
        (tokens.len() == 1).then(|| subject(&tokens[0])).flatten()
    });
    let answer = serde_json::json!({
        "user": user, "queue": queue, "tokenSub": token_sub, "path": parts.uri.path(), "bytes": bytes,
    });
    let mut resp =
        ([(header::CONTENT_TYPE, HeaderValue::from_static("application/json"))], Body::from(answer.to_string()))
            .into_response();
    if parts.uri.query().is_some_and(|q| q.split('&').any(|p| p == "end=1")) {
        resp.headers_mut().insert("queue-session", HeaderValue::from_static("end"));
    }
    // The app reports a sale: `sold=N` answers `Queue-Sold: N` (the gate takes it off).
    for n in parts.uri.query().unwrap_or("").split('&').filter_map(|p| p.strip_prefix("sold=")) {
        if let Ok(v) = HeaderValue::from_str(n) {
            resp.headers_mut().append("queue-sold", v);
        }
    }
    resp
}

/// Writes the log's lines, flushing whenever no more are waiting.
fn writer(path: std::path::PathBuf, lines: mpsc::Receiver<String>) {
    let file = std::fs::File::create(&path).unwrap_or_else(|e| panic!("create {}: {e}", path.display()));
    let mut out = std::io::BufWriter::new(file);
    while let Ok(line) = lines.recv() {
        let _ = writeln!(out, "{line}");
        while let Ok(more) = lines.try_recv() {
            let _ = writeln!(out, "{more}");
        }
        let _ = out.flush();
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mut listen = std::env::var("LISTEN").unwrap_or_else(|_| "127.0.0.1:3000".to_string());
    let (mut log, mut cookie_name) = (None, "queue_admission".to_string());
    while let Some(a) = args.next() {
        let mut value = || args.next().unwrap_or_else(|| panic!("{a} needs a value"));
        match a.as_str() {
            "--listen" => listen = value(),
            "--log" => log = Some(std::path::PathBuf::from(value())),
            "--cookie-name" => cookie_name = value(),
            "-h" | "--help" => {
                println!("gate-upstream --listen ADDR [--log FILE] [--cookie-name NAME]");
                return;
            }
            other => {
                eprintln!("unknown argument {other:?} (try --help)");
                std::process::exit(64);
            }
        }
    }
    let log = log.map(|path| {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || writer(path, rx));
        tx
    });
    let app = Arc::new(App { cookie_name, log });
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("a runtime");
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(&listen).await.unwrap_or_else(|e| panic!("bind {listen}: {e}"));
        let router = Router::new().fallback(serve).with_state(app);
        axum::serve(listener, router).await.expect("serve");
    });
}
