//! Helpers shared by the chat-server tests: a chat-server in this process or as a
//! child process (testkit's harness), WebSocket clients over real loopback sockets, bounded polls.

#![allow(dead_code)]

use futures_util::{SinkExt, StreamExt};
use queue_client::QueueClient;
use serde_json::{json, Value};
use std::future::Future;
use std::time::{Duration, Instant};
use testkit::process::Service;
use testkit::ValkeyServer;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio_tungstenite::tungstenite::{self, Message};
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

/// How long any single expectation may take.
pub const WAIT: Duration = Duration::from_secs(10);

/// Polls `f` until it returns Some, or panics after `WAIT` with `what`.
pub async fn eventually<T, F, Fut>(what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Waits until a chat-server at `base` (http://host:port) has Valkey and its room feed.
pub async fn wait_ready(base: &str) {
    eventually("chat-server ready", || async {
        let h: Value = reqwest::get(format!("{base}/healthz")).await.ok()?.json().await.ok()?;
        (h["valkey"] == "up" && h["room"] == "up").then_some(())
    })
    .await
}

/// A chat-server running in this process.
pub struct Chat {
    pub base: String,
    pub ws: String,
    pub instance_id: String,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Chat {
    pub async fn start(mut config: chat_server::Config) -> Chat {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let instance_id = config.instance_id.get_or_insert_with(|| format!("test-{}", addr.port())).clone();
        let (tx, rx) = oneshot::channel();
        let task = tokio::spawn(chat_server::serve(listener, config, async {
            let _ = rx.await;
        }));
        let chat =
            Chat { base: format!("http://{addr}"), ws: format!("ws://{addr}"), instance_id, stop: Some(tx), task };
        wait_ready(&chat.base).await;
        chat
    }

    /// The WebSocket URL for a ticket (and a queue other than the default).
    pub fn url(&self, ticket: &str, queue: Option<&str>) -> String {
        game_url(&self.ws, ticket, queue)
    }

    pub async fn metrics(&self) -> String {
        reqwest::get(format!("{}/metrics", self.base)).await.unwrap().text().await.unwrap()
    }

    /// Graceful shutdown; waits until serve() returned.
    pub async fn stop(mut self) {
        let _ = self.stop.take().unwrap().send(());
        tokio::time::timeout(Duration::from_secs(20), self.task).await.expect("graceful shutdown").unwrap().unwrap();
    }
}

/// The URL of a client that asks for the presence frames (as the chat page does).
pub fn game_url(ws_base: &str, ticket: &str, queue: Option<&str>) -> String {
    format!("{}&presence=1", seed_url(ws_base, ticket, queue))
}

/// The URL of a client written to seed 000 alone.
pub fn seed_url(ws_base: &str, ticket: &str, queue: Option<&str>) -> String {
    match queue {
        Some(q) => format!("{ws_base}/gameserver?ticketId={ticket}&queue={q}"),
        None => format!("{ws_base}/gameserver?ticketId={ticket}"),
    }
}

pub async fn queue_client(s: &ValkeyServer) -> QueueClient {
    QueueClient::connect(&s.url()).await.unwrap()
}

/// A fresh ticket for `user` (the queue must have room: nobody waiting, soft cap free).
pub async fn ticket(qc: &QueueClient, queue: &str, user: &str, nickname: &str) -> String {
    let standing = qc.enter(queue, user, nickname).await.unwrap();
    match standing.ticket_id {
        Some(t) => t,
        None => panic!("{user} was not let in at once: {:?}", standing.status),
    }
}

pub type Socket = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// The HTTP status and JSON body of a refused handshake, or the open socket.
pub async fn try_connect(url: &str) -> Result<Socket, (u16, Value)> {
    match tokio::time::timeout(WAIT, tokio_tungstenite::connect_async(url)).await.expect("handshake in time") {
        Ok((ws, _)) => Ok(ws),
        Err(tungstenite::Error::Http(resp)) => {
            let body = resp.body().as_deref().and_then(|b| serde_json::from_slice(b).ok()).unwrap_or(Value::Null);
            Err((resp.status().as_u16(), body))
        }
        Err(e) => panic!("handshake failed without an HTTP status: {e}"),
    }
}

/// A WebSocket client speaking the frames.
pub struct Client {
    pub ws: Socket,
}

impl Client {
    /// Connects and reads the first frame, which must be the presence snapshot.
    pub async fn join(url: &str) -> (Client, Value) {
        let ws = match try_connect(url).await {
            Ok(ws) => ws,
            Err((status, body)) => panic!("handshake refused: {status} {body}"),
        };
        let mut c = Client { ws };
        let first = c.next().await;
        assert_eq!(first["type"], "PRESENCE_SNAPSHOT", "the first frame is the snapshot: {first}");
        (c, first)
    }

    pub async fn send(&mut self, kind: &str, payload: Value) {
        self.send_raw(json!({ "type": kind, "payload": payload }).to_string()).await;
    }

    pub async fn send_raw(&mut self, text: String) {
        self.ws.send(Message::Text(text.into())).await.unwrap();
    }

    pub async fn say(&mut self, message: &str) {
        self.send("MESSAGE_SEND", json!({ "message": message })).await;
    }

    /// The next text frame, as JSON (panics on close or after `WAIT`).
    pub async fn next(&mut self) -> Value {
        loop {
            let msg = tokio::time::timeout(WAIT, self.ws.next()).await.expect("a frame in time");
            match msg {
                Some(Ok(Message::Text(t))) => return serde_json::from_str(&t).expect("frames are JSON"),
                Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
                other => panic!("expected a text frame, got {other:?}"),
            }
        }
    }

    /// The next frame of type `kind`, skipping others.
    pub async fn next_of(&mut self, kind: &str) -> Value {
        loop {
            let f = self.next().await;
            if f["type"] == kind {
                return f;
            }
        }
    }

    /// The next frame of type `kind` whose payload satisfies `pred`.
    pub async fn wait_for(&mut self, kind: &str, pred: impl Fn(&Value) -> bool) -> Value {
        loop {
            let f = self.next_of(kind).await;
            if pred(&f["payload"]) {
                return f;
            }
        }
    }

    /// Waits for the server's close frame: its code and reason. Text frames on the
    /// way are skipped.
    pub async fn closed(&mut self) -> (u16, String) {
        loop {
            let msg = tokio::time::timeout(WAIT, self.ws.next()).await.expect("a close in time");
            match msg {
                Some(Ok(Message::Close(Some(f)))) => return (u16::from(f.code), f.reason.to_string()),
                Some(Ok(Message::Close(None))) => return (1005, String::new()),
                Some(Ok(_)) => continue,
                other => panic!("expected a close frame, got {other:?}"),
            }
        }
    }

    /// Waits until the connection ends without a close frame (the server vanished).
    pub async fn dropped(&mut self) {
        loop {
            match tokio::time::timeout(WAIT, self.ws.next()).await.expect("the connection to end in time") {
                None | Some(Err(_)) => return,
                Some(Ok(Message::Close(f))) => panic!("expected no close frame, got {f:?}"),
                Some(Ok(_)) => continue,
            }
        }
    }

    pub async fn close(mut self) {
        let _ = self.ws.close(None).await;
        // Until the server's answer, so the session is over on its side too.
        let _ = tokio::time::timeout(WAIT, async { while let Some(Ok(_)) = self.ws.next().await {} }).await;
    }
}

/// The userIds of a PRESENCE_SNAPSHOT frame, in its order.
pub fn snapshot_users(frame: &Value) -> Vec<String> {
    frame["payload"]["users"].as_array().unwrap().iter().map(|u| u["userId"].as_str().unwrap().to_string()).collect()
}

/// Whether a PRESENCE_JOINED or PRESENCE_LEFT payload names `user_id`.
pub fn has_user(payload: &Value, user_id: &str) -> bool {
    payload["users"].as_array().is_some_and(|us| us.iter().any(|u| u["userId"] == user_id))
}

/// Waits until QUEUE.INFO shows `active` live sessions.
pub async fn wait_active(qc: &QueueClient, queue: &str, active: u64) -> queue_client::QueueInfo {
    eventually(&format!("{active} active sessions"), || async {
        let info = qc.info(queue).await.ok()?;
        (info.active == active).then_some(info)
    })
    .await
}

/// The real `chat-server` binary as a child process (testkit's [`Service`]: killed on
/// drop, its log printed when the test fails).
pub struct Process(pub Service);

impl Process {
    /// Starts it on a free loopback port with `RUST_LOG=rust_log` and waits until it
    /// has Valkey and its room feed.
    pub async fn start(valkey_url: &str, extra: &[&str], rust_log: &str) -> Process {
        let mut args = vec!["--valkey-url".to_string(), valkey_url.to_string()];
        args.extend(extra.iter().map(|a| a.to_string()));
        let ready: testkit::process::Ready = |h| h["valkey"] == "up" && h["room"] == "up";
        Process(Service::start_with("chat-server", &args, &[("RUST_LOG", rust_log)], ready).await)
    }

    pub fn base(&self) -> String {
        self.0.url()
    }

    pub fn ws(&self) -> String {
        self.0.ws()
    }

    /// Sends `sig` (`TERM`, `KILL`, ...).
    pub fn signal(&self, sig: &str) {
        assert!(self.0.proc.signal(sig), "kill -{sig}");
    }

    /// Kills it abruptly (SIGKILL): no close frames, no SESSION.END.
    pub fn kill9(&mut self) {
        self.0.proc.kill9();
    }

    pub fn pid(&self) -> u32 {
        self.0.proc.pid().expect("running")
    }

    /// Waits for the process to exit; its status.
    pub async fn exited(&mut self) -> std::process::ExitStatus {
        let proc_ = &mut self.0.proc;
        eventually("chat-server to exit", || {
            let s = proc_.wait_exit(Duration::ZERO);
            async move { s }
        })
        .await
    }

    /// Whether it still runs.
    pub fn alive(&mut self) -> bool {
        self.0.proc.alive()
    }

    /// (VmRSS, VmHWM) in KiB.
    pub fn memory(&self) -> (u64, u64) {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap_or_default();
        let field = |name: &str| {
            status
                .lines()
                .find(|l| l.starts_with(name))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
                .unwrap_or(0)
        };
        (field("VmRSS:"), field("VmHWM:"))
    }
}
