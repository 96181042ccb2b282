//! People walk the whole way through the three services, on both backends: enter over
//! HTTP, follow the line (push stream or polling), are promoted in entry order as places
//! free up, claim their ticket at chat-server and chat; a ticket opens one session only.

use e2e::{e2e_tests, exits_cleanly, type_line, Stack, StackOptions, ADMIN_TOKEN};
use queue_cli::api::{Api, Via};
use queue_cli::chat::{self, Handshake, Incoming, Socket};
use queue_client::{Standing, Status};
use std::time::{Duration, Instant};
use testkit::Backend;

e2e_tests!(
    a_crowd_is_admitted_in_entry_order_and_chats,
    join_waits_its_turn_then_chats_from_stdin,
    a_waiting_client_keeps_its_place_through_a_queue_api_crash
);

fn person(stack: &Stack, n: usize) -> Api {
    Api::new(Api::http_client(), &stack.api.url(), &stack.queue, Some(format!("10.0.0.{n}")))
}

fn seq(ticket: &str) -> u64 {
    ticket.split('.').next().unwrap().parse().unwrap()
}

async fn admit(stack: &Stack, ticket: &str) -> Socket {
    match chat::connect(&stack.chat.url(), &stack.queue, ticket).await {
        Handshake::Admitted(ws) => *ws,
        Handshake::Refused(code, text) => panic!("ticket {ticket} refused: {code} {text}"),
        Handshake::Failed(e) => panic!("chat unreachable: {e}"),
    }
}

/// The frames seed 000 defines from server to client: a client that did not ask for
/// the additions (`presence=1`, as these sessions do not) sees no other.
const SEED_FRAMES: [&str; 3] = ["MESSAGE_RECEIVE", "SYSTEM_MESSAGE_RECEIVE", "SERVERSTATUS_RESPONSE"];

/// The next frame of `kind`, skipping others; panics after a while, or on a frame
/// seed 000 does not define.
async fn frame_of(ws: &mut Socket, kind: &str) -> chat::Frame {
    let deadline = Instant::now() + e2e::WAIT;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, chat::next(ws)).await {
            Ok(Incoming::Frame(f)) if !SEED_FRAMES.contains(&f.kind.as_str()) => {
                panic!("a frame seed 000 does not define: {f:?}")
            }
            Ok(Incoming::Frame(f)) if f.kind == kind => return f,
            Ok(Incoming::Frame(_)) => continue,
            Ok(Incoming::Closed(c)) => panic!("closed while waiting for {kind}: {c:?}"),
            Err(_) => panic!("no {kind} frame"),
        }
    }
}

async fn refused(stack: &Stack, ticket: &str) -> u16 {
    match chat::connect(&stack.chat.url(), &stack.queue, ticket).await {
        Handshake::Refused(code, _) => code,
        Handshake::Admitted(_) => panic!("ticket {ticket} opened a second session"),
        Handshake::Failed(e) => panic!("chat unreachable: {e}"),
    }
}

async fn a_crowd_is_admitted_in_entry_order_and_chats(backend: Backend) {
    let stack = Stack::start(backend, StackOptions { soft_cap: 3, ..Default::default() }).await;
    const N: usize = 8;
    let people: Vec<Api> = (0..N).map(|n| person(&stack, n)).collect();
    let mut entered = Vec::new();
    for (n, api) in people.iter().enumerate() {
        let s = api.enter(&format!("p{n}")).await.unwrap();
        if n < 3 {
            assert_eq!(s.status, Status::Promoted, "p{n} finds room: {s:?}");
        } else {
            assert_eq!((s.status, s.rank), (Status::Waiting, (n - 2) as u64), "p{n} waits in entry order");
        }
        entered.push(s);
    }
    // Everyone still waiting follows the line: even ones over the push stream, odd ones polling.
    let mut followers = Vec::new();
    for (n, s) in entered.iter().enumerate().skip(3) {
        let (api, user) = (people[n].clone(), s.user_id.clone());
        let first = s.rank;
        followers.push(tokio::spawn(async move {
            let mut ranks = vec![first];
            let deadline = Instant::now() + e2e::WAIT;
            let poll = n % 2 == 1;
            let mut vias = Vec::new();
            let done = api
                .follow(&user, poll, Duration::from_millis(200), deadline, |s: &Standing, via| {
                    ranks.push(s.rank);
                    vias.push(via);
                })
                .await
                .unwrap();
            let expect = if poll { Via::Poll } else { Via::Stream };
            assert!(vias.iter().all(|v| *v == expect), "p{n} updates came by {vias:?}");
            assert!(ranks.windows(2).all(|w| w[1] <= w[0]), "p{n}'s rank never rises: {ranks:?}");
            (done, Instant::now())
        }));
    }

    // The first three are inside and see each other's messages.
    let mut tickets: Vec<String> = entered[..3].iter().map(|s| s.ticket_id.clone().unwrap()).collect();
    let mut inside = Vec::new();
    for t in &tickets {
        let mut ws = admit(&stack, t).await;
        frame_of(&mut ws, "SYSTEM_MESSAGE_RECEIVE").await;
        inside.push(ws);
    }
    assert_eq!(refused(&stack, &tickets[0]).await, 401, "a used ticket is refused, even while its session is open");
    assert_eq!(refused(&stack, "999.AAAAAAAAAAAAAAAA").await, 401, "an unknown ticket is refused");
    assert!(chat::send(&mut inside[0], chat::say("hi all")).await);
    for ws in inside.iter_mut().skip(1) {
        let f = frame_of(ws, "MESSAGE_RECEIVE").await;
        assert_eq!((f.payload["nickname"].as_str(), f.payload["message"].as_str()), (Some("p0"), Some("hi all")));
    }
    let info = stack.info();
    assert_eq!((info["active"], info["waiting"]), (3, 5), "{info:?}");

    // One leaves, the next in line gets the place: in entry order, one at a time.
    for (k, follower) in followers.into_iter().enumerate() {
        let oldest = inside.remove(0);
        let left_at = Instant::now();
        chat::leave(oldest).await;
        let (done, at) = follower.await.unwrap();
        assert_eq!(done.status, Status::Promoted, "p{} promoted: {done:?}", k + 3);
        assert!(at >= left_at, "p{} was promoted only after a place freed", k + 3);
        let ticket = done.ticket_id.unwrap();
        assert!(seq(&ticket) > seq(tickets.last().unwrap()), "tickets are issued in entry order");
        let mut ws = admit(&stack, &ticket).await;
        frame_of(&mut ws, "SYSTEM_MESSAGE_RECEIVE").await;
        assert!(chat::send(&mut ws, chat::say(&format!("p{} here", k + 3))).await);
        for other in inside.iter_mut() {
            let said = format!("p{} here", k + 3);
            while frame_of(other, "MESSAGE_RECEIVE").await.payload["message"] != said.as_str() {}
        }
        inside.push(ws);
        tickets.push(ticket);
        let info = stack.info();
        assert!(info["active"] + info["joining"] <= 3, "never over the soft cap: {info:?}");
    }
    for ws in inside {
        chat::leave(ws).await;
    }
    for t in &tickets {
        let code = refused(&stack, t).await;
        assert!(matches!(code, 401 | 409), "a used ticket is refused, got {code}");
    }
    stack.eventually("every session to end", |s| s.info()["active"] == 0).await;
    let info = stack.info();
    assert_eq!((info["waiting"], info["joining"], info["claimed"]), (0, 0, N as i64), "{info:?}");
}

async fn join_waits_its_turn_then_chats_from_stdin(backend: Backend) {
    let stack = Stack::start(backend, StackOptions { soft_cap: 1, ..Default::default() }).await;
    // Someone is inside already: the room is full.
    let first = person(&stack, 1).enter("first").await.unwrap();
    assert_eq!(first.status, Status::Promoted);
    let first_ws = admit(&stack, first.ticket_id.as_deref().unwrap()).await;

    let (mut child, mut out) = e2e::join(&stack, "alice", &[]);
    out.expect("entered", |l| l.starts_with("entered default as alice")).await;
    out.expect("waiting at rank 1", |l| l.starts_with("waiting: rank 1")).await;

    // dave queues behind alice and changes his mind: Ctrl+C gives his place back.
    let (mut dave, mut dave_out) = e2e::join(&stack, "dave", &[]);
    dave_out.expect("waiting at rank 2", |l| l.starts_with("waiting: rank 2")).await;
    let pid = dave.id().expect("dave runs").to_string();
    assert!(std::process::Command::new("kill").args(["-INT", &pid]).status().unwrap().success());
    dave_out.expect("leaving the line", |l| l == "left the line").await;
    exits_cleanly(&mut dave, &dave_out).await;
    let info = stack.info();
    assert_eq!((info["waiting"], info["left"]), (1, 1), "only alice waits: {info:?}");

    chat::leave(first_ws).await;
    out.expect("admitted", |l| l.starts_with("admitted: ticket ")).await;
    out.expect("connected", |l| l.starts_with("connected to chat as alice")).await;

    // Make room for bob, who talks with alice.
    let put = reqwest::Client::new()
        .put(format!("{}/api/admin/queues/default", stack.api.url()))
        .bearer_auth(ADMIN_TOKEN)
        .json(&serde_json::json!({ "soft_cap": 2 }))
        .send()
        .await
        .unwrap();
    assert!(put.status().is_success());
    let bob = person(&stack, 2).enter("bob").await.unwrap();
    assert_eq!(bob.status, Status::Promoted, "{bob:?}");
    let mut bob_ws = admit(&stack, bob.ticket_id.as_deref().unwrap()).await;
    // Joins in one presence tick share a line ("alice and bob joined").
    out.expect("bob joining", |l| l.contains("* ") && l.contains("bob") && l.ends_with(" joined")).await;

    type_line(&mut child, "hello bob").await;
    let heard = frame_of(&mut bob_ws, "MESSAGE_RECEIVE").await;
    assert_eq!(
        (heard.payload["nickname"].as_str(), heard.payload["message"].as_str()),
        (Some("alice"), Some("hello bob"))
    );
    assert!(chat::send(&mut bob_ws, chat::say("hi alice")).await);
    out.expect("bob's message", |l| l.ends_with("bob: hi alice")).await;
    type_line(&mut child, "/status").await;
    out.expect("the room count", |l| l == "* 2 in the room").await;

    type_line(&mut child, "/quit").await;
    out.expect("leaving", |l| l == "left the chat").await;
    exits_cleanly(&mut child, &out).await;
    // Presence lines come once per tick: a join line may still be ahead of the leave.
    let mut seen = Vec::new();
    for _ in 0..5 {
        let line = frame_of(&mut bob_ws, "SYSTEM_MESSAGE_RECEIVE").await;
        seen.push(line.payload["message"].clone());
        if line.payload["message"] == "alice left" {
            break;
        }
    }
    assert_eq!(seen.last(), Some(&serde_json::json!("alice left")), "{seen:?}");
    stack.eventually("alice's session to end", |s| s.info()["active"] == 1).await;
    chat::leave(bob_ws).await;
}

async fn a_waiting_client_keeps_its_place_through_a_queue_api_crash(backend: Backend) {
    let mut stack = Stack::start(backend, StackOptions { soft_cap: 1, ..Default::default() }).await;
    let holder = person(&stack, 1).enter("holder").await.unwrap();
    assert_eq!(holder.status, Status::Promoted);
    let (mut child, mut out) = e2e::join(&stack, "carol", &["--poll-secs", "0.2"]);
    out.expect("waiting at rank 1", |l| l.starts_with("waiting: rank 1")).await;

    // queue-api dies under the open push stream and comes back: the client polls meanwhile.
    stack.api.kill_and_restart().await;
    out.expect("the fallback", |l| l == "push updates unavailable: polling").await;
    stack.call("QUEUE.LEAVE", &[&stack.queue, &holder.user_id]);
    out.expect("admitted", |l| l.starts_with("admitted: ticket ")).await;
    out.expect("connected", |l| l.starts_with("connected to chat as carol")).await;
    type_line(&mut child, "/quit").await;
    exits_cleanly(&mut child, &out).await;
    let info = stack.info();
    assert_eq!((info["claimed"], info["waiting"]), (1, 0), "{info:?}");
}
