//! chat-server's session limits and presence batching, over real loopback sockets
//! against a real valkey-server with the module.

mod common;

use common::*;
use futures_util::StreamExt;
use serde_json::Value;
use std::collections::HashSet;
use std::time::Duration;
use testkit::{Backend, ValkeyServer};
use tokio::net::TcpSocket;
use tokio_tungstenite::tungstenite::Message;

/// Connects from the loopback address `from` (127.0.0.x) to the chat-server.
async fn connect_from(chat: &Chat, from: &str, ticket: &str) -> Socket {
    let addr: std::net::SocketAddr = chat.base.trim_start_matches("http://").parse().unwrap();
    let sock = TcpSocket::new_v4().unwrap();
    sock.bind(format!("{from}:0").parse().unwrap()).unwrap();
    let tcp = sock.connect(addr).await.unwrap();
    let url = chat.url(ticket, None);
    let (ws, _) =
        tokio::time::timeout(WAIT, tokio_tungstenite::client_async(url, tokio_tungstenite::MaybeTlsStream::Plain(tcp)))
            .await
            .expect("handshake in time")
            .expect("the upgrade is taken, refusal or not");
    ws
}

/// The first thing the server sends: a text frame (the session is open), or its close
/// code and reason.
async fn first(ws: &mut Socket) -> Result<Value, (u16, String)> {
    loop {
        match tokio::time::timeout(WAIT, ws.next()).await.expect("a frame in time") {
            Some(Ok(Message::Text(t))) => return Ok(serde_json::from_str(&t).unwrap()),
            Some(Ok(Message::Close(Some(f)))) => return Err((u16::from(f.code), f.reason.to_string())),
            Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
            other => panic!("expected a frame or a close, got {other:?}"),
        }
    }
}

/// --max-sessions-per-addr and --max-sessions: a session over either is closed at
/// once with 1013 (try again later), its ticket left unclaimed and good for later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_limits_close_with_1013_and_keep_the_ticket() {
    let s = ValkeyServer::start(Backend::Module);
    let qc = queue_client(&s).await;
    let mut config = chat_server::Config::local(&s.url());
    config.max_sessions = 2;
    config.max_sessions_per_addr = 1;
    let chat = Chat::start(config).await;
    let t1 = ticket(&qc, "default", "u-1", "one").await;
    let t2 = ticket(&qc, "default", "u-2", "two").await;
    let t3 = ticket(&qc, "default", "u-3", "three").await;
    let mut a = connect_from(&chat, "127.0.0.1", &t1).await;
    assert_eq!(first(&mut a).await.unwrap()["type"], "PRESENCE_SNAPSHOT");
    // A second from the same address: 1013.
    let mut refused = connect_from(&chat, "127.0.0.1", &t2).await;
    let (code, reason) = first(&mut refused).await.expect_err("closed");
    assert_eq!(code, 1013, "{reason}");
    assert!(reason.contains("address") && reason.contains("retry after 5 s"), "{reason}");
    // Another address has its share.
    let mut b = connect_from(&chat, "127.0.0.2", &t2).await;
    assert_eq!(first(&mut b).await.unwrap()["type"], "PRESENCE_SNAPSHOT", "the refused ticket was not used");
    // The instance is full: 1013 for a third address too.
    let mut refused = connect_from(&chat, "127.0.0.3", &t3).await;
    let (code, reason) = first(&mut refused).await.expect_err("closed");
    assert_eq!(code, 1013, "{reason}");
    assert!(reason.contains("most sessions"), "{reason}");
    let m = chat.metrics().await;
    assert!(m.contains("chatserver_handshakes_refused_total{reason=\"too_many_from_address\"} 1"), "{m}");
    assert!(m.contains("chatserver_handshakes_refused_total{reason=\"too_many_sessions\"} 1"), "{m}");
    assert_eq!(qc.info("default").await.unwrap().active, 2, "refusals claim nothing");
    // A session that ends gives its place back: the same ticket now gets in.
    Client { ws: a }.close().await;
    let mut c = eventually("a free place", || async {
        let mut ws = connect_from(&chat, "127.0.0.3", &t3).await;
        first(&mut ws).await.ok().map(|_| ws)
    })
    .await;
    let _ = c.close(None).await;
    Client { ws: b }.close().await;
    chat.stop().await;
}

/// Reads every frame until the socket has been quiet for `quiet`: the presence set it
/// ends up with (snapshot, then JOINED/LEFT batches).
async fn presence_after(ws: &mut Socket, quiet: Duration) -> HashSet<String> {
    let mut people = HashSet::new();
    while let Ok(Some(Ok(msg))) = tokio::time::timeout(quiet, ws.next()).await {
        let Message::Text(t) = msg else { continue };
        let f: Value = serde_json::from_str(&t).unwrap();
        let users = f["payload"]["users"].as_array().cloned().unwrap_or_default();
        let ids = users.iter().map(|u| u["userId"].as_str().unwrap().to_string());
        match f["type"].as_str().unwrap() {
            "PRESENCE_SNAPSHOT" => people = ids.collect(),
            "PRESENCE_JOINED" => people.extend(ids),
            "PRESENCE_LEFT" => ids.for_each(|id| {
                people.remove(&id);
            }),
            _ => {}
        }
    }
    people
}

fn frames_sent(metrics: &str) -> u64 {
    metrics.lines().find_map(|l| l.strip_prefix("chatserver_messages_sent_total ")).unwrap().parse().unwrap()
}

/// N people joining together cost O(N) frames, not N²: presence changes go out once
/// per tick, all of a tick's joins in one PRESENCE_JOINED and one system line; and
/// everyone still ends up with the whole room.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crowd_joining_costs_frames_in_proportion_to_its_size() {
    const N: usize = 40;
    let s = ValkeyServer::start(Backend::Module);
    let qc = queue_client(&s).await;
    qc.config_set("default", &[("soft_cap", N as i64)]).await.unwrap();
    let mut config = chat_server::Config::local(&s.url());
    config.presence_tick = Duration::from_secs(1);
    let chat = Chat::start(config).await;
    let mut tickets = Vec::new();
    for i in 0..N {
        tickets.push(ticket(&qc, "default", &format!("u-{i:02}"), &format!("n{i:02}")).await);
    }
    let before = frames_sent(&chat.metrics().await);
    let joins = tickets.iter().map(|t| async { try_connect(&chat.url(t, None)).await.expect("joined") });
    let mut sockets = futures_util::future::join_all(joins).await;
    let seen =
        futures_util::future::join_all(sockets.iter_mut().map(|ws| presence_after(ws, Duration::from_millis(2500))))
            .await;
    for people in seen {
        assert_eq!(people.len(), N, "every socket ends up with the whole room");
    }
    let sent = frames_sent(&chat.metrics().await) - before;
    // Per socket: its snapshot, then per tick one PRESENCE_JOINED and one system line
    // (the joins span at most a few ticks). One frame per join per socket would be
    // N(N+1) (1,640 here).
    assert!(sent <= 8 * N as u64, "{sent} frames for {N} joins");
    assert!(sent >= N as u64, "every socket got its snapshot at least ({sent})");
    for ws in sockets {
        Client { ws }.close().await;
    }
    chat.stop().await;
}

/// The status line and headers chat-server answers a WebSocket handshake from the
/// loopback address `from` with (read until the end of the head).
async fn handshake_from(chat: &Chat, from: &str, ticket: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr: std::net::SocketAddr = chat.base.trim_start_matches("http://").parse().unwrap();
    let sock = TcpSocket::new_v4().unwrap();
    sock.bind(format!("{from}:0").parse().unwrap()).unwrap();
    let mut tcp = sock.connect(addr).await.unwrap();
    let req = format!(
        "GET /gameserver?ticketId={ticket} HTTP/1.1\r\nHost: {addr}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
         Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
    );
    tcp.write_all(req.as_bytes()).await.unwrap();
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = tokio::time::timeout(WAIT, tcp.read(&mut buf)).await.expect("an answer in time").unwrap();
        assert!(n > 0, "closed before answering: {}", String::from_utf8_lossy(&head));
        head.extend_from_slice(&buf[..n]);
    }
    String::from_utf8_lossy(&head).to_ascii_lowercase()
}

/// Ticket guessing: an address that keeps presenting unknown tickets is refused with
/// 429 and Retry-After past its burst, before any claim; other addresses, and real
/// tickets from them, are not affected; the refusals are counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ticket_guessing_is_limited_per_address() {
    let s = ValkeyServer::start(Backend::Module);
    let qc = queue_client(&s).await;
    let mut config = chat_server::Config::local(&s.url());
    config.ticket_failures_per_minute = 1.0;
    config.ticket_failure_burst = 3.0;
    let chat = Chat::start(config).await;
    for i in 0..3 {
        let head = handshake_from(&chat, "127.0.0.7", &format!("1.guess{i}")).await;
        assert!(head.starts_with("http/1.1 401"), "{head}");
    }
    let head = handshake_from(&chat, "127.0.0.7", "1.guess3").await;
    assert!(head.starts_with("http/1.1 429") && head.contains("retry-after: "), "{head}");
    // Even a real ticket waits from that address (checked before the claim, so it
    // stays good), and is taken from another.
    let t = ticket(&qc, "default", "u-1", "one").await;
    assert!(handshake_from(&chat, "127.0.0.7", &t).await.starts_with("http/1.1 429"));
    let mut ws = connect_from(&chat, "127.0.0.8", &t).await;
    assert_eq!(first(&mut ws).await.unwrap()["type"], "PRESENCE_SNAPSHOT");
    let metrics = chat.metrics().await;
    let count = |reason: &str| {
        metrics
            .lines()
            .find(|l| l.starts_with("chatserver_handshakes_refused_total") && l.contains(&format!("\"{reason}\"")))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse::<u64>().ok())
    };
    assert_eq!((count("invalid_ticket"), count("too_many_ticket_failures")), (Some(3), Some(2)), "{metrics}");
    drop(ws);
    chat.stop().await;
}
