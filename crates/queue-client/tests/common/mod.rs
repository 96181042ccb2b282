//! Shared by the client's integration tests: the scenarios both backends must pass,
//! and looks at the server's functions.
#![allow(dead_code)]

use queue_client::QueueError;
use queue_client::{ClientError, ConnectOptions, QueueClient, Status};
use redis::Value;
use std::time::{Duration, Instant};
use testkit::{Backend, ValkeyServer};

/// A server with neither the module nor the library, as a managed Valkey would be.
pub fn bare_server() -> ValkeyServer {
    ValkeyServer::start(Backend::Bare)
}

/// Short timeouts, so that failure tests stay quick.
pub fn fast_options() -> ConnectOptions {
    ConnectOptions {
        response_timeout: Duration::from_secs(1),
        connection_timeout: Duration::from_millis(500),
        reconnect_retries: 4,
        reconnect_max_delay: Duration::from_secs(1),
    }
}

/// The same server with RESP3.
pub fn resp3(url: &str) -> String {
    format!("{url}?protocol=resp3")
}

/// The loaded `queue` library's code (with its entropy), if any.
pub fn library_code(con: &mut redis::Connection) -> Option<String> {
    let v: Value =
        redis::cmd("FUNCTION").arg("LIST").arg("LIBRARYNAME").arg("queue").arg("WITHCODE").query(con).unwrap();
    let Value::Array(libs) = v else { panic!("FUNCTION LIST: {v:?}") };
    libs.iter().find_map(|lib| {
        let f = testkit::fields(lib);
        (testkit::field_str(&f, "library_name").as_deref() == Some("queue"))
            .then(|| testkit::field_str(&f, "library_code").unwrap())
    })
}

/// `FCALL_RO queue_version 0` on the server (no key, so any cluster node answers).
pub fn installed_version(con: &mut redis::Connection) -> String {
    redis::cmd("FCALL_RO").arg("queue_version").arg(0).query(con).unwrap()
}

/// The shipped library with another version and fixed entropy, as an older or newer
/// client would have loaded it.
pub fn library_at_version(version: &str) -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../lua-fallback/queue.lua");
    let src = std::fs::read_to_string(path).unwrap();
    let line = format!("local VERSION = \"{}\"", queue_client::LIBRARY_VERSION);
    assert!(src.contains(&line));
    src.replacen(&line, &format!("local VERSION = \"{version}\""), 1).replacen(
        "__QUEUE_ENTROPY__",
        "0123456789abcdef0123456789abcdef",
        1,
    )
}

/// Kills `server` under `client` (which knows user `u-1` of queue `rc`): every call
/// then fails as unavailable, each within the response timeout of `options` (plus
/// scheduling slack).
pub async fn kill_and_expect_fast_failures(server: &mut ValkeyServer, client: &QueueClient, options: &ConnectOptions) {
    server.kill();
    for _ in 0..3 {
        let started = Instant::now();
        let err = client.status("rc", "u-1").await.unwrap_err();
        assert!(err.is_unavailable(), "{err:?}");
        assert!(started.elapsed() < options.response_timeout + Duration::from_secs(1), "{:?}", started.elapsed());
    }
}

/// Every typed call once, on a fresh queue `q`, checking the replies.
pub async fn round_trip(client: &QueueClient, q: &str) {
    pass_round_trip(client, &format!("{q}-pass")).await;
    client.config_set(q, &[("soft_cap", 1)]).await.unwrap();
    let cfg = client.config_get(q).await.unwrap();
    assert_eq!(cfg.soft_cap(), 1);
    assert_eq!((cfg.hard_cap(), cfg.rate(), cfg.get("burst"), cfg.batch_max()), (0, 0, 0, 1000));
    assert_eq!((cfg.ticket_ttl(), cfg.session_lease(), cfg.abandon_after()), (60_000, 30_000, 180_000));
    assert_eq!(cfg.pow_difficulty(), 0);

    // Nobody waits and there is room: in at once.
    let a = client.enter(q, "u-1", "alice").await.unwrap();
    assert_eq!(a.status, Status::Promoted, "{a:?}");
    assert_eq!((a.rank, a.user_id.as_str(), a.nickname.as_deref()), (0, "u-1", Some("alice")));
    assert_eq!(a.estimated_wait_seconds, None);
    let ticket = a.ticket_id.clone().expect("a ticket");

    // Full: bob waits first in line.
    let b = client.enter(q, "u-2", "bob").await.unwrap();
    assert_eq!((b.status, b.rank, b.ticket_id.as_deref()), (Status::Waiting, 1, None), "{b:?}");
    assert_eq!(b.nickname.as_deref(), Some("bob"));
    let b2 = client.status(q, "u-2").await.unwrap();
    assert_eq!((b2.status, b2.rank), (Status::Waiting, 1));

    let nobody = client.status(q, "u-9").await.unwrap();
    assert_eq!(
        (nobody.status, nobody.rank, nobody.nickname, nobody.ticket_id, nobody.estimated_wait_seconds),
        (Status::Unknown, 0, None, None, None)
    );
    let json = serde_json::to_value(&b2).unwrap();
    assert_eq!(json["status"], "WAITING");
    assert_eq!(json["userId"], "u-2");
    assert_eq!(json["rank"], 1);
    assert!(json["ticketId"].is_null());

    let ranks = client.ranks(q, &["u-1", "u-2", "u-9"]).await.unwrap();
    let seen: Vec<(Status, u64, &str)> = ranks.iter().map(|s| (s.status, s.rank, s.user_id.as_str())).collect();
    assert_eq!(seen, [(Status::Promoted, 0, "u-1"), (Status::Waiting, 1, "u-2"), (Status::Unknown, 0, "u-9")]);
    assert_eq!(ranks[0].ticket_id.as_deref(), Some(ticket.as_str()));
    assert!(client.ranks(q, &[] as &[&str]).await.unwrap().is_empty());

    // The line, walked: bob alone waits (alice holds a ticket and is not listed).
    let page = client.line(q, 0, 10).await.unwrap();
    assert_eq!((page.first_rank, page.cursor, page.users.as_slice()), (1, 0, &["u-2".to_string()][..]), "{page:?}");
    assert_eq!(page.rate, 0);
    let full = client.line(q, 0, 1).await.unwrap();
    assert!(full.cursor > 0, "a full page gives a cursor: {full:?}");
    let after = client.line(q, full.cursor, 1).await.unwrap();
    assert_eq!((after.first_rank, after.cursor, after.users.len()), (0, 0, 0), "{after:?}");
    assert!(matches!(client.line(q, 0, 0).await, Err(ClientError::InvalidArgument(_))));

    let claim = client.claim(q, &ticket).await.unwrap();
    assert_eq!(
        (claim.user_id.as_str(), claim.nickname.as_str(), claim.ticket_id.as_str(), claim.lease_ms),
        ("u-1", "alice", ticket.as_str(), 30_000)
    );
    assert_eq!(
        client.claim(q, &ticket).await.unwrap_err(),
        ClientError::Refused(QueueError::NoTicket),
        "a ticket works once"
    );
    let inside = client.status(q, "u-1").await.unwrap();
    assert_eq!((inside.status, inside.nickname.as_deref()), (Status::Active, Some("alice")));

    assert_eq!(client.heartbeat(q, &["u-1", "u-2"]).await.unwrap(), [true, false]);
    assert!(client.heartbeat(q, &[] as &[String]).await.unwrap().is_empty());
    // Renewed in calls of HEARTBEAT_BATCH users: u-1 (inside) in the second one.
    let mut users: Vec<String> = (0..queue_client::sessions::HEARTBEAT_BATCH).map(|i| format!("x-{i}")).collect();
    users.push("u-1".into());
    let mut calls = Vec::new();
    client.renew_leases(q, &users, |call| calls.push(call.gone.unwrap().len())).await;
    assert_eq!(calls, [queue_client::sessions::HEARTBEAT_BATCH, 0], "the gone per call");
    client.renew_leases(q, &[] as &[String], |_| panic!("no user, no call")).await;

    // The slot is taken: nothing to promote.
    let p = client.promote(q, None).await.unwrap();
    assert_eq!((p.promoted, p.waiting, p.joining, p.active, p.available_slots), (0, 1, 0, 1, 0), "{p:?}");

    // Ending the session gives its slot to u-2 at once (inside SESSION.END).
    assert!(client.end_session(q, "u-1").await.unwrap());
    assert!(!client.end_session(q, "u-1").await.unwrap());

    let p = client.promote(q, Some(10)).await.unwrap();
    assert_eq!((p.promoted, p.waiting, p.joining, p.active, p.available_slots), (0, 0, 1, 0, 0), "{p:?}");
    assert_eq!((p.tickets_expired, p.leases_expired, p.dropped), (0, 0, 0));
    assert_eq!(client.status(q, "u-2").await.unwrap().status, Status::Promoted);

    assert!(client.leave(q, "u-2").await.unwrap(), "gives back the ticket");
    assert!(!client.leave(q, "u-2").await.unwrap());

    let info = client.info(q).await.unwrap();
    assert_eq!((info.waiting, info.joining, info.active, info.available_slots), (0, 0, 0, 1), "{info:?}");
    assert_eq!(info.tokens, None, "no rate limit");
    assert_eq!(info.config, client.config_get(q).await.unwrap());
    assert_eq!((info.promoted, info.claimed, info.expired, info.dropped), (2, 1, 0, 0), "{info:?}");
    assert_eq!((info.left, info.ended, info.lapsed), (1, 1, 0), "{info:?}");

    client.config_set(q, &[("rate".to_string(), 5), ("burst".to_string(), 7)]).await.unwrap();
    let info = client.info(q).await.unwrap();
    assert_eq!((info.config.rate(), info.config.get("burst")), (5, 7));
    assert!(info.tokens.is_some_and(|t| t <= 7), "{info:?}");
}

/// Every refusal maps to its variant.
pub async fn error_mapping(client: &QueueClient, q: &str) {
    assert_eq!(client.claim(q, "1.AAAAAAAAAAAAAAAA").await.unwrap_err(), ClientError::Refused(QueueError::NoTicket));
    assert_eq!(client.claim(q, "nope").await.unwrap_err(), ClientError::Refused(QueueError::NoTicket));

    // INSIDE: a second ticket for a user who is inside.
    let t1 = client.enter(q, "in-1", "ann").await.unwrap().ticket_id.unwrap();
    client.claim(q, &t1).await.unwrap();
    let t2 = client.enter(q, "in-1", "ann").await.unwrap().ticket_id.expect("promoted again");
    assert_eq!(client.claim(q, &t2).await.unwrap_err(), ClientError::Refused(QueueError::AlreadyInside));

    // FULL: the hard cap of one live session is taken.
    client.config_set(q, &[("hard_cap", 1)]).await.unwrap();
    let t3 = client.enter(q, "in-2", "ben").await.unwrap().ticket_id.expect("promoted");
    assert_eq!(client.claim(q, &t3).await.unwrap_err(), ClientError::Refused(QueueError::HardCap));
    assert_eq!(
        client.claim(q, &t3).await.unwrap_err(),
        ClientError::Refused(QueueError::HardCap),
        "the ticket stays valid"
    );

    // EXPIRED: a ticket past its ticket_ttl.
    client.config_set(q, &[("hard_cap", 0), ("ticket_ttl", 100)]).await.unwrap();
    let t4 = client.enter(q, "in-3", "cat").await.unwrap().ticket_id.expect("promoted");
    tokio::time::sleep(Duration::from_millis(250)).await;
    assert_eq!(client.claim(q, &t4).await.unwrap_err(), ClientError::Refused(QueueError::TicketExpired));

    // ERR replies carry the server's text.
    match client.enter(q, "bad user!", "x").await.unwrap_err() {
        ClientError::InvalidArgument(t) => assert!(t.starts_with("ERR invalid userId"), "{t}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        client.config_set(q, &[("colour", 1)]).await.unwrap_err(),
        ClientError::InvalidArgument("ERR unknown config field 'colour'".into())
    );
    assert_eq!(
        client.config_set(q, &[("soft_cap", -1)]).await.unwrap_err(),
        ClientError::InvalidArgument("ERR soft_cap must be an integer from 0 to 10000000".into())
    );
    assert_eq!(
        client.promote(q, Some(100_001)).await.unwrap_err(),
        ClientError::InvalidArgument("ERR MAX must be an integer from 0 to 100000".into())
    );
    match client.enter("bad queue!", "u", "x").await.unwrap_err() {
        ClientError::InvalidArgument(t) => assert!(t.starts_with("ERR invalid queue name"), "{t}"),
        other => panic!("{other:?}"),
    }

    // A sale's end: SOLDOUT at inventory 0, CLOSED after closes_at, QUEUE.SOLD, the
    // message; INFO shows them.
    let sale = format!("{q}-sale");
    client.config_set(&sale, &[("inventory", 2)]).await.unwrap();
    assert_eq!(client.sold(&sale, 1, None).await.unwrap(), Some(1));
    assert_eq!(client.sold(&sale, 5, Some("nobody-inside")).await.unwrap(), Some(0), "never below 0");
    assert_eq!(client.enter(&sale, "s-1", "sam").await.unwrap_err(), ClientError::Refused(QueueError::SoldOut));
    client.config_set_text(&sale, "message", "sold out, thank you").await.unwrap();
    let info = client.info(&sale).await.unwrap();
    assert_eq!(
        (info.inventory, info.sold_out, info.closed, info.outstanding, info.message.as_str()),
        (Some(0), true, false, 0, "sold out, thank you")
    );
    client.config_set(&sale, &[("inventory", -1), ("closes_at", 1)]).await.unwrap();
    assert_eq!(client.enter(&sale, "s-1", "sam").await.unwrap_err(), ClientError::Refused(QueueError::Closed));
    let info = client.info(&sale).await.unwrap();
    assert_eq!((info.inventory, info.sold_out, info.closed, info.config.closes_at()), (None, false, true, 1));
    assert_eq!(client.sold(&sale, 1, None).await.unwrap(), None, "no inventory: no limit");
    let entries = client.log_after(&sale, "0-0", 10).await.unwrap();
    let states: Vec<(bool, bool, String)> =
        entries.iter().filter_map(|e| e.state.as_ref()).map(|s| (s.closed, s.sold_out, s.message.clone())).collect();
    assert_eq!(
        states,
        [
            (false, true, String::new()),
            (false, true, "sold out, thank you".to_string()),
            (true, false, "sold out, thank you".to_string()),
        ]
    );
    assert!(client.sold(&sale, 1, Some("bad user!")).await.unwrap_err().to_string().starts_with("ERR invalid userId"));
}

/// Polls `f` until it succeeds or `limit` passes; the last error otherwise.
pub async fn eventually<T, F, Fut>(limit: Duration, mut f: F) -> Result<T, ClientError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, ClientError>>,
{
    let end = Instant::now() + limit;
    loop {
        match f().await {
            Ok(v) => return Ok(v),
            Err(e) if Instant::now() >= end => return Err(e),
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// QUEUE.PASS through the client: straight in while there is room (with and without a
/// holder), `None` with nothing changed once the room is full or for someone inside.
pub async fn pass_round_trip(client: &QueueClient, q: &str) {
    client.config_set(q, &[("soft_cap", 2)]).await.unwrap();
    let a = client.pass(q, "p-1", "ann", None).await.unwrap().expect("room: straight in");
    assert_eq!((a.user_id.as_str(), a.nickname.as_str(), a.lease_ms), ("p-1", "ann", 30_000));
    assert!(!a.ticket_id.is_empty());
    let inside = client.status(q, "p-1").await.unwrap();
    assert_eq!(inside.status, Status::Active);
    // Inside already: no second pass.
    assert_eq!(client.pass(q, "p-1", "ann", None).await.unwrap(), None);
    let b = client.pass(q, "p-2", "bob", Some("holder-b")).await.unwrap().expect("room for one more");
    // The holder's claim of the ticket the pass used answers the same admission.
    assert_eq!(client.claim_as(q, &b.ticket_id, "holder-b").await.unwrap(), b);
    // Full: nothing happens, the visitor goes to the waiting room.
    let before = client.info(q).await.unwrap();
    assert_eq!(client.pass(q, "p-3", "cy", Some("holder-c")).await.unwrap(), None);
    let after = client.info(q).await.unwrap();
    assert_eq!((after.active, after.waiting, after.joining), (2, 0, 0));
    assert_eq!((after.promoted, after.claimed), (2, 2), "a refused pass counts nothing");
    assert_eq!((before.promoted, before.claimed), (2, 2));
    assert!(matches!(client.pass(q, "p 4", "dee", None).await, Err(ClientError::InvalidArgument(_))));
    assert!(matches!(client.pass(q, "p-4", "dee", Some("bad holder")).await, Err(ClientError::InvalidArgument(_))));
    assert!(client.end_session(q, "p-1").await.unwrap());
    assert!(client.end_session(q, "p-2").await.unwrap());
}
