//! chat-server over real sockets (tokio-tungstenite) against a real valkey-server,
//! with the module and, for the handshake and broadcast, with the Lua library.

mod common;

use common::*;
use futures_util::SinkExt;
use serde_json::{json, Value};
use std::time::Duration;
use testkit::{Backend, ValkeyServer};

testkit::backend_tests!(async every_handshake_outcome, chat_is_broadcast_with_joins_and_leaves);

fn is_iso_millis(ts: &Value) -> bool {
    let s = ts.as_str().unwrap_or_default();
    let b = s.as_bytes();
    s.len() == 24
        && b[4] == b'-'
        && b[10] == b'T'
        && b[19] == b'.'
        && s.ends_with('Z')
        && b.iter().enumerate().all(|(i, c)| [4, 7, 10, 13, 16, 19, 23].contains(&i) || c.is_ascii_digit())
}

async fn every_handshake_outcome(b: Backend) {
    let mut s = ValkeyServer::start(b);
    let qc = queue_client(&s).await;
    let chat = Chat::start(chat_server::Config::local(&s.url())).await;

    // Not a WebSocket request at all.
    let r = reqwest::get(format!("{}/gameserver?ticketId=x", chat.base)).await.unwrap();
    assert_eq!(r.status().as_u16(), 426);

    // 401: missing, unknown, malformed ticket.
    let (status, body) = try_connect(&format!("{}/gameserver", chat.ws)).await.err().unwrap();
    assert_eq!((status, body["error"].as_str()), (401, Some("missing_ticket")), "{body}");
    let (status, body) = try_connect(&chat.url("7.AAAAAAAAAAAAAAAA", None)).await.err().unwrap();
    assert_eq!((status, body["error"].as_str()), (401, Some("invalid_ticket")), "{body}");
    assert_eq!(try_connect(&chat.url("bad%20ticket", None)).await.err().unwrap().0, 401);
    // 400: a queue name that cannot exist.
    assert_eq!(try_connect(&chat.url("x", Some("a%7Bb"))).await.err().unwrap().0, 400);
    let twice = format!("{}/gameserver?ticketId=a&ticketId=b", chat.ws);
    assert_eq!(
        try_connect(&twice).await.err().unwrap(),
        (
            400,
            json!({"error": "bad_query",
        "message": "the query string cannot be read: give ticketId and queue once each"})
        )
    );

    // 101, then the ticket is used: 401.
    let alice = ticket(&qc, "default", "u-alice", "alice").await;
    let (mut a, snap) = Client::join(&chat.url(&alice, None)).await;
    assert_eq!(snapshot_users(&snap), vec!["u-alice"]);
    let (status, body) = try_connect(&chat.url(&alice, None)).await.err().unwrap();
    assert_eq!((status, body["error"].as_str()), (401, Some("invalid_ticket")), "{body}");

    // 409: a new ticket for a user who is already connected.
    let again = ticket(&qc, "default", "u-alice", "alice").await;
    let (status, body) = try_connect(&chat.url(&again, None)).await.err().unwrap();
    assert_eq!((status, body["error"].as_str()), (409, Some("already_connected")), "{body}");

    // 401: an expired ticket.
    qc.config_set("default", &[("ticket_ttl", 100)]).await.unwrap();
    let late = ticket(&qc, "default", "u-late", "late").await;
    tokio::time::sleep(Duration::from_millis(250)).await;
    let (status, body) = try_connect(&chat.url(&late, None)).await.err().unwrap();
    assert_eq!(status, 401, "{body}");
    assert!(matches!(body["error"].as_str(), Some("expired_ticket" | "invalid_ticket")), "{body}");
    qc.config_set("default", &[("ticket_ttl", 60_000)]).await.unwrap();

    // 503: the hard cap is reached (and the ticket stays good for later).
    qc.config_set("default", &[("hard_cap", 1)]).await.unwrap();
    let bob = ticket(&qc, "default", "u-bob", "bob").await;
    let (status, body) = try_connect(&chat.url(&bob, None)).await.err().unwrap();
    assert_eq!((status, body["error"].as_str()), (503, Some("full")), "{body}");
    qc.config_set("default", &[("hard_cap", 0)]).await.unwrap();
    let (b2, snap) = Client::join(&chat.url(&bob, None)).await;
    assert_eq!(snapshot_users(&snap), vec!["u-alice", "u-bob"]);
    b2.close().await;
    a.say("still here").await;
    a.next_of("MESSAGE_RECEIVE").await;

    let m = chat.metrics().await;
    assert!(m.contains("chatserver_auth_failures_total 6"), "{m}");
    assert!(m.contains("chatserver_handshakes_refused_total{reason=\"full\"} 1"), "{m}");

    // 503: Valkey is unreachable.
    let carol = ticket(&qc, "default", "u-carol", "carol").await;
    a.close().await;
    wait_active(&qc, "default", 0).await;
    s.kill();
    let (status, body) = try_connect(&chat.url(&carol, None)).await.err().unwrap();
    assert_eq!((status, body["error"].as_str()), (503, Some("unavailable")), "{body}");
    chat.stop().await;
}

async fn chat_is_broadcast_with_joins_and_leaves(b: Backend) {
    let s = ValkeyServer::start(b);
    let qc = queue_client(&s).await;
    let chat = Chat::start(chat_server::Config::local(&s.url())).await;
    let (mut a, _) = Client::join(&chat.url(&ticket(&qc, "default", "u-a", "alice").await, None)).await;
    let own = a.next_of("SYSTEM_MESSAGE_RECEIVE").await;
    assert_eq!(own["payload"]["message"], "alice joined");
    assert!(is_iso_millis(&own["payload"]["timestamp"]), "{own}");
    let (mut b2, _) = Client::join(&chat.url(&ticket(&qc, "default", "u-b", "bob").await, None)).await;
    let joined = a.next_of("SYSTEM_MESSAGE_RECEIVE").await;
    assert_eq!(joined["payload"]["message"], "bob joined");

    assert!(chat.metrics().await.contains("chatserver_current_users 2\n"));
    a.say("안녕하세요!").await;
    for c in [&mut a, &mut b2] {
        let f = c.next_of("MESSAGE_RECEIVE").await;
        assert_eq!(f["payload"]["nickname"], "alice");
        assert_eq!(f["payload"]["message"], "안녕하세요!");
        assert!(is_iso_millis(&f["payload"]["timestamp"]), "{f}");
        assert_eq!(f["payload"].as_object().unwrap().len(), 3, "seed 000's payload exactly: {f}");
    }

    b2.send("SERVERSTATUS_REQUEST", json!({})).await;
    let status = b2.next_of("SERVERSTATUS_RESPONSE").await;
    assert_eq!(status, json!({"type": "SERVERSTATUS_RESPONSE", "payload": {"clientCount": 2}}));

    b2.close().await;
    let left = a.next_of("SYSTEM_MESSAGE_RECEIVE").await;
    assert_eq!(left["payload"]["message"], "bob left");
    let info = wait_active(&qc, "default", 1).await;
    assert_eq!(info.ended, 1, "the close ended bob's session");
    chat.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn presence_snapshot_then_deltas() {
    let s = ValkeyServer::start(Backend::Module);
    let qc = queue_client(&s).await;
    let mut config = chat_server::Config::local(&s.url());
    config.heartbeat = Duration::from_millis(200);
    let chat = Chat::start(config).await;
    qc.config_set("default", &[("session_lease", 2000)]).await.unwrap();

    let (mut a, snap) = Client::join(&chat.url(&ticket(&qc, "default", "u-2", "zoe").await, None)).await;
    assert_eq!(snap["payload"]["users"], json!([{"userId": "u-2", "nickname": "zoe"}]));
    // Someone inside through another server that stopped heartbeating: out of the
    // snapshot once the lease has lapsed, though still in the active hash.
    let ghost = ticket(&qc, "default", "u-ghost", "ghost").await;
    qc.claim("default", &ghost).await.unwrap();
    let (mut b2, snap) = Client::join(&chat.url(&ticket(&qc, "default", "u-1", "amy").await, None)).await;
    assert_eq!(snapshot_users(&snap), vec!["u-1", "u-ghost", "u-2"], "sorted by nickname: {snap}");
    let j = a.wait_for("PRESENCE_JOINED", |p| has_user(p, "u-1")).await;
    // zoe's own join may come in the same batch (one presence tick).
    let amy = j["payload"]["users"].as_array().unwrap().iter().find(|u| u["userId"] == "u-1").cloned();
    assert_eq!(amy, Some(json!({"userId": "u-1", "nickname": "amy"})), "{j}");

    tokio::time::sleep(Duration::from_millis(2300)).await;
    let (c, snap) = Client::join(&chat.url(&ticket(&qc, "default", "u-3", "max").await, None)).await;
    assert_eq!(snapshot_users(&snap), vec!["u-1", "u-3", "u-2"], "the lapsed lease is left out: {snap}");
    for x in [&mut a, &mut b2] {
        x.wait_for("PRESENCE_JOINED", |p| has_user(p, "u-3")).await;
    }
    c.close().await;
    for x in [&mut a, &mut b2] {
        let l = x.next_of("PRESENCE_LEFT").await;
        assert_eq!(l["payload"], json!({"users": [{"userId": "u-3", "nickname": "max"}]}));
    }
    chat.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_share_a_room() {
    let s = ValkeyServer::start(Backend::Module);
    let qc = queue_client(&s).await;
    let one = Chat::start(chat_server::Config::local(&s.url())).await;
    let two = Chat::start(chat_server::Config::local(&s.url())).await;
    let (mut a, _) = Client::join(&one.url(&ticket(&qc, "launch", "u-a", "alice").await, Some("launch"))).await;
    let (mut b2, snap) = Client::join(&two.url(&ticket(&qc, "launch", "u-b", "bob").await, Some("launch"))).await;
    assert_eq!(snapshot_users(&snap), vec!["u-a", "u-b"]);
    // Bob's instance sends the system line first, then the presence delta. Alice's own
    // join, announced by the other instance's tick, may land anywhere among them.
    let mut line_seen = false;
    loop {
        let f = a.next().await;
        if f["type"] == "SYSTEM_MESSAGE_RECEIVE" && f["payload"]["message"] == "bob joined" {
            line_seen = true;
        }
        if f["type"] == "PRESENCE_JOINED" && has_user(&f["payload"], "u-b") {
            assert!(line_seen, "the presence delta came before bob's system line: {f}");
            assert_eq!(f["payload"]["users"], json!([{"userId": "u-b", "nickname": "bob"}]), "{f}");
            break;
        }
    }
    let (mut c, _) = Client::join(&two.url(&ticket(&qc, "launch", "u-c", "carol").await, Some("launch"))).await;

    a.say("from one").await;
    for x in [&mut a, &mut b2, &mut c] {
        let f = x.wait_for("MESSAGE_RECEIVE", |p| p["message"] == "from one").await;
        assert_eq!(f["payload"]["nickname"], "alice");
    }
    b2.say("from two").await;
    a.wait_for("MESSAGE_RECEIVE", |p| p["message"] == "from two" && p["nickname"] == "bob").await;

    for x in [&mut a, &mut c] {
        x.send("SERVERSTATUS_REQUEST", json!({})).await;
        assert_eq!(x.next_of("SERVERSTATUS_RESPONSE").await["payload"]["clientCount"], 3);
    }
    // Another queue is another room.
    let (mut other, snap) = Client::join(&one.url(&ticket(&qc, "default", "u-d", "dan").await, None)).await;
    assert_eq!(snapshot_users(&snap), vec!["u-d"]);
    other.send("SERVERSTATUS_REQUEST", json!({})).await;
    assert_eq!(other.next_of("SERVERSTATUS_RESPONSE").await["payload"]["clientCount"], 1);

    c.close().await;
    a.wait_for("PRESENCE_LEFT", |p| has_user(p, "u-c")).await;
    other.say("other room").await;
    other.wait_for("MESSAGE_RECEIVE", |p| p["message"] == "other room").await;
    a.say("after").await;
    loop {
        let f = b2.next_of("MESSAGE_RECEIVE").await;
        assert_ne!(f["payload"]["message"], "other room", "rooms do not mix");
        if f["payload"]["message"] == "after" {
            break;
        }
    }
    one.stop().await;
    two.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_sessions_are_closed_and_ended() {
    let s = ValkeyServer::start(Backend::Module);
    let qc = queue_client(&s).await;
    let mut config = chat_server::Config::local(&s.url());
    config.idle_timeout = Duration::from_millis(1200);
    let chat = Chat::start(config).await;
    let (mut a, _) = Client::join(&chat.url(&ticket(&qc, "default", "u-a", "alice").await, None)).await;
    let (mut b2, _) = Client::join(&chat.url(&ticket(&qc, "default", "u-b", "bob").await, None)).await;
    // Alice keeps talking: she outlives the timeout several times over.
    let started = std::time::Instant::now();
    while started.elapsed() < Duration::from_millis(2500) {
        a.send("SERVERSTATUS_REQUEST", json!({})).await;
        a.next_of("SERVERSTATUS_RESPONSE").await;
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert_eq!(b2.closed().await, (1000, "idle".to_string()));
    let info = wait_active(&qc, "default", 1).await;
    assert_eq!(info.ended, 1, "the idle session was ended, not left to lapse");
    // Alice keeps talking until she hears bob left (announced a presence tick after his
    // close, which may take the server its whole close handshake): she stays in.
    let (started, mut bob_left) = (std::time::Instant::now(), false);
    while !bob_left {
        assert!(started.elapsed() < Duration::from_secs(10), "alice never heard bob left");
        a.send("SERVERSTATUS_REQUEST", json!({})).await;
        loop {
            let f = a.next().await;
            bob_left |= f["type"] == "SYSTEM_MESSAGE_RECEIVE" && f["payload"]["message"] == "bob left";
            if f["type"] == "SERVERSTATUS_RESPONSE" {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert_eq!(a.closed().await, (1000, "idle".to_string()));
    wait_active(&qc, "default", 0).await;
    eventually("two idle disconnects counted", || async {
        chat.metrics().await.contains("chatserver_idle_disconnects_total 2").then_some(())
    })
    .await;
    chat.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_and_malformed_frames() {
    let s = ValkeyServer::start(Backend::Module);
    let qc = queue_client(&s).await;
    let chat = Chat::start(chat_server::Config::local(&s.url())).await;
    let (mut a, _) = Client::join(&chat.url(&ticket(&qc, "default", "u-a", "alice").await, None)).await;

    let bad = [
        "not json".to_string(),
        json!({"type": "DANCE", "payload": {}}).to_string(),
        json!({"type": "MESSAGE_SEND", "payload": {"message": 42}}).to_string(),
        json!({"payload": {}}).to_string(),
    ];
    for text in bad {
        a.send_raw(text.clone()).await;
        let e = a.next_of("ERROR").await;
        assert!(e["payload"]["message"].as_str().unwrap().len() > 5, "{text}: {e}");
    }
    a.ws.send(tokio_tungstenite::tungstenite::Message::Binary(vec![1, 2, 3].into())).await.unwrap();
    let e = a.next_of("ERROR").await;
    assert!(e["payload"]["message"].as_str().unwrap().contains("binary"), "{e}");
    // Still open and served.
    a.say("fine").await;
    a.wait_for("MESSAGE_RECEIVE", |p| p["message"] == "fine").await;

    // Just over --max-frame-bytes (4096): 1009.
    a.say(&"x".repeat(4100)).await;
    assert_eq!(a.closed().await, (1009, "message too big".to_string()));
    // Far over the WebSocket limit itself: 1009 as well.
    let (mut b2, _) = Client::join(&chat.url(&ticket(&qc, "default", "u-b", "bob").await, None)).await;
    let _ = b2.ws.send(tokio_tungstenite::tungstenite::Message::Text("y".repeat(200_000).into())).await;
    assert_eq!(b2.closed().await.0, 1009);
    let info = wait_active(&qc, "default", 0).await;
    assert_eq!(info.ended, 2);
    let m = chat.metrics().await;
    assert!(m.contains("chatserver_oversized_frames_total 2"), "{m}");
    assert!(m.contains("chatserver_malformed_frames_total 5"), "{m}");
    chat.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn floods_get_errors_then_a_close() {
    let s = ValkeyServer::start(Backend::Module);
    let qc = queue_client(&s).await;
    let mut config = chat_server::Config::local(&s.url());
    config.messages_per_second = 0.5;
    config.message_burst = 10.0;
    let chat = Chat::start(config).await;
    let (mut a, _) = Client::join(&chat.url(&ticket(&qc, "default", "u-a", "alice").await, None)).await;
    let status = json!({"type": "SERVERSTATUS_REQUEST", "payload": {}}).to_string();
    for _ in 0..20 {
        a.send_raw(status.clone()).await;
    }
    let (mut answered, mut refused) = (0, 0);
    while answered + refused < 20 {
        let f = a.next().await;
        match f["type"].as_str().unwrap() {
            "SERVERSTATUS_RESPONSE" => answered += 1,
            "ERROR" => {
                assert!(f["payload"]["message"].as_str().unwrap().starts_with("too many messages"), "{f}");
                refused += 1;
            }
            _ => {}
        }
    }
    assert_eq!((answered, refused), (10, 10), "the burst is served, the rest refused");
    // Keep going: after 50 refusals in a row the connection is closed.
    for _ in 0..45 {
        a.send_raw(status.clone()).await;
    }
    assert_eq!(a.closed().await, (1008, "too many messages".to_string()));
    wait_active(&qc, "default", 0).await;
    chat.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_lease_closes_with_1008() {
    let s = ValkeyServer::start(Backend::Module);
    let qc = queue_client(&s).await;
    let mut config = chat_server::Config::local(&s.url());
    config.heartbeat = Duration::from_millis(200);
    let chat = Chat::start(config).await;
    let (mut a, _) = Client::join(&chat.url(&ticket(&qc, "default", "u-a", "alice").await, None)).await;
    let (mut b2, _) = Client::join(&chat.url(&ticket(&qc, "default", "u-b", "bob").await, None)).await;
    // An operator (or an expiry) ends bob's session behind the server's back.
    assert!(qc.end_session("default", "u-b").await.unwrap());
    assert_eq!(b2.closed().await, (1008, "session lease lost".to_string()));
    a.wait_for("PRESENCE_LEFT", |p| has_user(p, "u-b")).await;
    let info = qc.info("default").await.unwrap();
    assert_eq!((info.active, info.ended), (1, 1), "no second SESSION.END for a lease that was gone");
    chat.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_shutdown_ends_every_lease_and_withdraws_health() {
    let s = ValkeyServer::start(Backend::Module);
    let qc = queue_client(&s).await;
    let mut config = chat_server::Config::local(&s.url());
    config.capacity = 4;
    config.health_interval = Duration::from_millis(100);
    config.instance_id = Some("chat-under-test".into());
    let chat = Chat::start(config).await;
    let (mut a, _) = Client::join(&chat.url(&ticket(&qc, "default", "u-a", "alice").await, None)).await;
    let (mut b2, _) = Client::join(&chat.url(&ticket(&qc, "launch", "u-b", "bob").await, Some("launch"))).await;

    let mut conn = s.conn();
    let mut hget =
        |key: &str| -> Option<String> { redis::cmd("HGET").arg(key).arg("chat-under-test").query(&mut conn).unwrap() };
    // One tick writes every queue served in turn: wait until both carry it.
    let reading: Value = eventually("a health reading with both sessions in both queues", || {
        let mut read = |key: &str| hget(key).and_then(|v| serde_json::from_str::<Value>(&v).ok());
        let v = read("queue:{default}:health").filter(|v| v["load"] == 0.5);
        let v = v.filter(|_| read("queue:{launch}:health").is_some_and(|l| l["load"] == 0.5));
        async move { v }
    })
    .await;
    let now = chat_server::frames::now_ms();
    let expires = reading["expiresAtMs"].as_u64().unwrap();
    assert!(expires > now && expires <= now + 10_500, "{reading}");
    assert!(reading["latencyMs"].is_u64(), "{reading}");

    let stopping = tokio::spawn(chat.stop());
    assert_eq!(a.closed().await, (1001, "server shutting down".to_string()));
    assert_eq!(b2.closed().await, (1001, "server shutting down".to_string()));
    stopping.await.unwrap();
    // Ended at once, not lapsed: leases are 30 s long.
    let (d, l) = (qc.info("default").await.unwrap(), qc.info("launch").await.unwrap());
    assert_eq!((d.active, d.ended, l.active, l.ended), (0, 1, 0, 1));
    for key in ["queue:{default}:health", "queue:{launch}:health"] {
        assert_eq!(hget(key), None, "{key} withdrawn");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_seed_client_sees_only_seed_frames() {
    const SEED: [&str; 3] = ["MESSAGE_RECEIVE", "SYSTEM_MESSAGE_RECEIVE", "SERVERSTATUS_RESPONSE"];
    const SYSTEM: &str = "SYSTEM_MESSAGE_RECEIVE";
    let mut s = ValkeyServer::builder(Backend::Module).arg("--appendonly").arg("yes").start();
    let qc = queue_client(&s).await;
    let chat = Chat::start(chat_server::Config::local(&s.url())).await;
    let url = seed_url(&chat.ws, &ticket(&qc, "default", "u-a", "alice").await, None);
    let mut a = Client { ws: try_connect(&url).await.expect("alice is let in") };
    // Everything alice hears is a seed frame, in the order things happened.
    let first = a.next().await;
    assert_eq!((first["type"].as_str(), first["payload"]["message"].as_str()), (Some(SYSTEM), Some("alice joined")));
    let (mut b, _) = Client::join(&chat.url(&ticket(&qc, "default", "u-b", "bob").await, None)).await;
    let joined = a.next().await;
    assert_eq!(joined["payload"]["message"], "bob joined", "{joined}");
    a.send_raw("not json".into()).await;
    let notice = a.next().await;
    assert_eq!(notice["type"], SYSTEM, "a refused frame is told as a system message: {notice}");
    assert!(notice["payload"]["message"].as_str().unwrap().contains("JSON"), "{notice}");
    a.send_raw(r#"{"type":"SERVERSTATUS_REQUEST","payload":{}}"#.into()).await;
    assert_eq!(a.next().await, json!({"type": "SERVERSTATUS_RESPONSE", "payload": {"clientCount": 2}}));
    // bob asked for presence and gets it; alice does not see it.
    b.say("hi").await;
    b.wait_for("MESSAGE_RECEIVE", |p| p["message"] == "hi").await;
    let said = a.next().await;
    assert_eq!((said["type"].as_str(), said["payload"]["message"].as_str()), (Some("MESSAGE_RECEIVE"), Some("hi")));
    // With Valkey gone the status is still answered: the last count known.
    s.kill();
    a.send_raw(r#"{"type":"SERVERSTATUS_REQUEST"}"#.into()).await;
    let mut heard = Vec::new();
    let status = loop {
        let f = a.next().await;
        assert!(SEED.contains(&f["type"].as_str().unwrap_or("")), "not a seed frame: {f}");
        if f["type"] == "SERVERSTATUS_RESPONSE" {
            break f;
        }
        heard.push(f);
    };
    assert_eq!(status["payload"]["clientCount"], 2, "after {heard:?}");
    s.restart();
    wait_ready(&chat.base).await;
    b.say("back").await;
    loop {
        let f = a.next().await;
        assert!(SEED.contains(&f["type"].as_str().unwrap_or("")), "not a seed frame after the restart: {f}");
        if f["payload"]["message"] == "back" {
            break;
        }
    }
    chat.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_survive_a_valkey_restart() {
    // With an AOF the queue (and alice's lease) survives the restart.
    let mut s = ValkeyServer::builder(Backend::Module).arg("--appendonly").arg("yes").start();
    let qc = queue_client(&s).await;
    let chat = Chat::start(chat_server::Config::local(&s.url())).await;
    let (mut a, _) = Client::join(&chat.url(&ticket(&qc, "default", "u-a", "alice").await, None)).await;
    s.restart();
    wait_ready(&chat.base).await;
    // The room feed came back: deltas sent meanwhile may be lost, so a fresh snapshot.
    let again = a.next_of("PRESENCE_SNAPSHOT").await;
    assert_eq!(snapshot_users(&again), vec!["u-a"]);
    let qc = queue_client(&s).await;
    let t = ticket(&qc, "default", "u-b", "bob").await;
    // The store connection comes back by itself too.
    let mut b2 = eventually("a handshake after the restart", || async {
        try_connect(&chat.url(&t, None)).await.ok().map(|ws| Client { ws })
    })
    .await;
    assert_eq!(snapshot_users(&b2.next_of("PRESENCE_SNAPSHOT").await), vec!["u-a", "u-b"]);
    a.wait_for("PRESENCE_JOINED", |p| has_user(p, "u-b")).await;
    a.say("back").await;
    for c in [&mut a, &mut b2] {
        c.wait_for("MESSAGE_RECEIVE", |p| p["message"] == "back").await;
    }
    chat.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn page_metrics_and_health() {
    let s = ValkeyServer::start(Backend::Module);
    let chat = Chat::start(chat_server::Config::local(&s.url())).await;
    let page = reqwest::get(format!("{}/?ticketId=abc", chat.base)).await.unwrap();
    assert_eq!(page.status(), 200);
    let html = page.text().await.unwrap();
    assert!(html.contains("/gameserver?presence=1&ticketId=") && html.contains("PRESENCE_SNAPSHOT"));
    let h: Value = reqwest::get(format!("{}/healthz", chat.base)).await.unwrap().json().await.unwrap();
    assert_eq!((h["status"].as_str(), h["valkey"].as_str(), h["room"].as_str()), (Some("ok"), Some("up"), Some("up")));
    let m = chat.metrics().await;
    for name in [
        "# TYPE chatserver_current_users gauge",
        "# TYPE chatserver_connections_total counter",
        "# TYPE chatserver_disconnections_total counter",
        "# TYPE chatserver_messages_received_total counter",
        "# TYPE chatserver_messages_sent_total counter",
        "# TYPE chatserver_messages_broadcast_total counter",
        "# TYPE chatserver_auth_failures_total counter",
        "# TYPE chatserver_idle_disconnects_total counter",
        "# TYPE chatserver_message_size_bytes histogram",
    ] {
        assert!(m.contains(name), "{name} missing:\n{m}");
    }
    let r = reqwest::get(format!("{}/nope", chat.base)).await.unwrap();
    assert_eq!(r.status(), 404);
    chat.stop().await;
}
