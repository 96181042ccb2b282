//! Status polls answered from the push follower (docs/http-api.md, "Status"), over
//! real sockets against a real valkey-server, with the module and with the Lua
//! library. Every answer is compared with what an instance that reads every poll
//! from Valkey (`--status-from-follower false`) answers at the same time: after each
//! change of the line (someone ahead leaving, promotions, newcomers), an unknown
//! person, a person just promoted, a change whose message was lost (the follower reads
//! the log), a restart of queue-api, a poller who stops polling (unregistered
//! after the grace period, then dropped as usual), and people who enter, enter again
//! and leave through queue-api (known from the entry: no read of their own).

use queue_client::QueueClient;
use serde_json::Value;
use std::time::{Duration, Instant};
use testkit::{Backend, ValkeyServer};

mod common;
use common::Api;

const Q: &str = "default";

testkit::backend_tests!(
    async polls_follow_the_line,
    a_lost_change_is_read_within_the_bound,
    a_restart_answers_at_once,
    a_log_moved_back_is_not_answered_from,
    a_poller_who_stops_is_unregistered,
    an_entry_here_is_answered_from_the_follower,
    a_re_entry_elsewhere_is_held_for_the_registration,
    a_re_entry_elsewhere_is_followed_from_the_log,
    people_asked_for_their_polls_are_registered_together,
    a_poller_let_go_by_one_instance_is_kept_by_another,
    who_left_while_gathered_is_not_registered,
);

async fn counter(api: &Api, name: &str) -> f64 {
    let text = reqwest::get(api.url("/metrics")).await.unwrap().text().await.unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(name).and_then(|rest| rest.strip_prefix(' ')))
        .map_or(0.0, |v| v.trim().parse().unwrap())
}

async fn follower_answers(api: &Api) -> f64 {
    counter(api, "queue_api_status_from_follower_total").await
}

async fn valkey_answers(api: &Api) -> f64 {
    counter(api, "queue_api_status_from_valkey_total").await
}

/// An instance answering polls from its follower (`bound`: --status-max-staleness).
async fn follows(s: &ValkeyServer, tick: Duration, bound: Duration) -> Api {
    follows_holding(s, tick, bound, queue_api::Config::local(&s.url()).poll_hold).await
}

/// [`follows`], with `hold` as --poll-hold.
async fn follows_holding(s: &ValkeyServer, tick: Duration, bound: Duration, hold: Duration) -> Api {
    let mut config = queue_api::Config::local(&s.url());
    config.status_from_follower = true;
    config.push_tick = tick;
    config.status_max_staleness = bound;
    config.poll_hold = hold;
    config.rate_limit = 0.0;
    Api::start(config).await
}

/// An instance reading every poll from Valkey (today's path).
async fn reads(s: &ValkeyServer) -> Api {
    let mut config = queue_api::Config::local(&s.url());
    config.status_from_follower = false;
    config.rate_limit = 0.0;
    Api::start(config).await
}

/// A poll's HTTP status and body.
async fn poll(api: &Api, user: &str) -> (u16, Value) {
    let resp = reqwest::get(api.url(&format!("/api/queue/status?userId={user}"))).await.unwrap();
    (resp.status().as_u16(), resp.json().await.unwrap())
}

/// Polls everyone on `on` until every answer equals `off`'s (read from Valkey just
/// before), within `limit`.
async fn polls_agree(on: &Api, off: &Api, users: &[String], limit: Duration, step: &str) {
    let deadline = Instant::now() + limit;
    loop {
        let mut differ = Vec::new();
        for u in users {
            let want = poll(off, u).await;
            let got = poll(on, u).await;
            if got != want {
                differ.push((u.clone(), got, want));
            }
        }
        if differ.is_empty() {
            return;
        }
        assert!(Instant::now() < deadline, "{step}: answers differ (user, follower, valkey): {differ:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Polls everyone until a whole round of `on`'s answers agreed with `off`'s and
/// came from its follower (they are registered), within 10 s.
async fn answered_from_follower(on: &Api, off: &Api, users: &[String]) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let before = follower_answers(on).await;
        polls_agree(on, off, users, Duration::from_secs(10), "registered").await;
        if follower_answers(on).await - before >= users.len() as f64 {
            return;
        }
        assert!(Instant::now() < deadline, "polls are not answered from the follower");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn closed_queue(b: Backend, abandon_ms: i64) -> (ValkeyServer, QueueClient) {
    let s = ValkeyServer::start(b);
    let qc = QueueClient::connect(&s.url()).await.unwrap();
    qc.config_set(Q, &[("soft_cap", 0), ("abandon_after", abandon_ms)]).await.unwrap();
    (s, qc)
}

/// Twenty people poll; after the first poll each is answered from the follower and
/// every answer agrees with Valkey's after each change; an unknown person gets the
/// same 404; a promoted person gets their ticket and never a waiting answer after it.
async fn polls_follow_the_line(b: Backend) {
    let (s, qc) = closed_queue(b, 600_000).await;
    let on = follows(&s, Duration::from_millis(200), Duration::from_secs(1)).await;
    let off = reads(&s).await;
    let users: Vec<String> = (0..20).map(|i| format!("p{i:02}")).collect();
    for u in &users {
        qc.enter(Q, u, u).await.unwrap();
    }
    polls_agree(&on, &off, &users, Duration::from_secs(10), "first polls").await;
    // Registered: the next polls come from the follower.
    answered_from_follower(&on, &off, &users).await;
    let from_valkey = valkey_answers(&on).await;
    qc.leave(Q, "p03").await.unwrap();
    let rest: Vec<String> = users.iter().filter(|u| *u != "p03").cloned().collect();
    polls_agree(&on, &off, &rest, Duration::from_secs(5), "someone ahead left").await;
    for i in 0..3 {
        qc.enter(Q, &format!("new{i}"), "n").await.unwrap();
    }
    polls_agree(&on, &off, &rest, Duration::from_secs(5), "newcomers").await;
    assert_eq!(valkey_answers(&on).await, from_valkey, "waiting people's polls need no Valkey read");
    // Who left is read from Valkey (the log does not tell what they do next).
    assert_eq!(poll(&on, "p03").await, poll(&off, "p03").await);
    // An unknown person: the same 404 as today.
    assert_eq!(poll(&on, "nobody").await, poll(&off, "nobody").await);
    assert_eq!(poll(&on, "nobody").await.0, 404);
    // Two promoted: their tickets, then never waiting again.
    qc.config_set(Q, &[("soft_cap", 2)]).await.unwrap();
    assert_eq!(qc.promote(Q, None).await.unwrap().promoted, 2);
    qc.config_set(Q, &[("soft_cap", 0)]).await.unwrap();
    for u in ["p00", "p01"] {
        let deadline = Instant::now() + Duration::from_secs(2);
        let promoted = loop {
            let (code, body) = poll(&on, u).await;
            assert_eq!(code, 200, "{u}: {body}");
            if body["status"] == "PROMOTED" {
                break body;
            }
            assert!(Instant::now() < deadline, "{u} not promoted: {body}");
        };
        let ticket = qc.status(Q, u).await.unwrap().ticket_id;
        assert_eq!(promoted["ticketId"].as_str(), ticket.as_deref(), "{u}: the ticket STATUS tells");
        for _ in 0..20 {
            let (_, body) = poll(&on, u).await;
            assert_eq!(body["status"], "PROMOTED", "{u}: waiting again after the promotion: {body}");
        }
    }
    let waiting: Vec<String> = users.iter().filter(|u| !["p00", "p01", "p03"].contains(&u.as_str())).cloned().collect();
    polls_agree(&on, &off, &waiting, Duration::from_secs(5), "two promoted").await;
    assert_eq!(counter(&off, "queue_api_status_from_follower_total").await, 0.0, "turned off");
    on.stop().await;
    off.stop().await;
}

/// With no tick in the test's time (a minute), a change whose message is lost (the
/// subscriptions killed before it) is still in the answers within the staleness
/// bound: the follower's confirmation sees the log ahead and reads it.
async fn a_lost_change_is_read_within_the_bound(b: Backend) {
    let (s, qc) = closed_queue(b, 600_000).await;
    let on = follows(&s, Duration::from_secs(60), Duration::from_millis(400)).await;
    let off = reads(&s).await;
    let users: Vec<String> = (0..10).map(|i| format!("p{i:02}")).collect();
    for u in &users {
        qc.enter(Q, u, u).await.unwrap();
    }
    polls_agree(&on, &off, &users, Duration::from_secs(10), "first polls").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    polls_agree(&on, &off, &users, Duration::from_secs(10), "registered").await;
    let mut admin = s.conn();
    let _: i64 = redis::cmd("CLIENT").arg("KILL").arg("TYPE").arg("pubsub").query(&mut admin).unwrap();
    qc.leave(Q, "p01").await.unwrap();
    let reads_before = counter(&on, "queue_api_log_reads_total").await;
    let users: Vec<String> = users.into_iter().filter(|u| u != "p01").collect();
    // The bound (400 ms), the wait for messages in flight and the read, with room
    // for a busy machine.
    polls_agree(&on, &off, &users, Duration::from_secs(3), "a lost change").await;
    let deadline = Instant::now() + Duration::from_secs(3);
    while counter(&on, "queue_api_log_reads_total").await <= reads_before {
        assert!(Instant::now() < deadline, "the log was not read for the lost change");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    on.stop().await;
    off.stop().await;
}

/// A failover to a copy that lost the newest writes, as a restore (the queue's keys
/// put back as they were before two people left): with no new change and no tick in
/// the test's time, the follower's next confirmation finds the log moved back, and
/// the answers agree with Valkey again within the bound (read from Valkey until the
/// follower asked everyone again).
async fn a_log_moved_back_is_not_answered_from(b: Backend) {
    let (s, qc) = closed_queue(b, 600_000).await;
    let on = follows(&s, Duration::from_secs(60), Duration::from_millis(400)).await;
    let off = reads(&s).await;
    let users: Vec<String> = (0..10).map(|i| format!("p{i:02}")).collect();
    for u in &users {
        qc.enter(Q, u, u).await.unwrap();
    }
    polls_agree(&on, &off, &users, Duration::from_secs(10), "first polls").await;
    let mut admin = s.conn();
    let keys: Vec<String> = redis::cmd("KEYS").arg("queue:{default}:*").query(&mut admin).unwrap();
    let snapshot: Vec<(String, Vec<u8>)> =
        keys.iter().map(|k| (k.clone(), redis::cmd("DUMP").arg(k).query(&mut admin).unwrap())).collect();
    for u in ["p00", "p01"] {
        qc.leave(Q, u).await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    polls_agree(&on, &off, &users, Duration::from_secs(5), "two left").await;
    let from_follower = follower_answers(&on).await;
    let now: Vec<String> = redis::cmd("KEYS").arg("queue:{default}:*").query(&mut admin).unwrap();
    for k in now.iter().filter(|k| !keys.contains(k)) {
        let _: i64 = redis::cmd("DEL").arg(k).query(&mut admin).unwrap();
    }
    for (k, v) in &snapshot {
        let _: () = redis::cmd("RESTORE").arg(k).arg(0).arg(v).arg("REPLACE").query(&mut admin).unwrap();
    }
    assert_eq!(qc.status(Q, "p00").await.unwrap().status, queue_client::Status::Waiting, "restored");
    polls_agree(&on, &off, &users, Duration::from_secs(3), "the log moved back").await;
    assert!(follower_answers(&on).await > from_follower, "answered from the follower before");
    on.stop().await;
    off.stop().await;
}

/// A restarted instance knows nobody: its first answers are read from Valkey, the
/// next ones come from its follower, all right.
async fn a_restart_answers_at_once(b: Backend) {
    let (s, qc) = closed_queue(b, 600_000).await;
    let off = reads(&s).await;
    let users: Vec<String> = (0..5).map(|i| format!("p{i:02}")).collect();
    for u in &users {
        qc.enter(Q, u, u).await.unwrap();
    }
    let on = follows(&s, Duration::from_millis(200), Duration::from_secs(1)).await;
    polls_agree(&on, &off, &users, Duration::from_secs(10), "before").await;
    on.stop().await;
    qc.leave(Q, "p00").await.unwrap();
    let on = follows(&s, Duration::from_millis(200), Duration::from_secs(1)).await;
    let users = &users[1..];
    for u in users {
        assert_eq!(poll(&on, u).await, poll(&off, u).await, "{u}: the restarted instance's first answer");
    }
    assert_eq!(follower_answers(&on).await, 0.0, "first answers are read from Valkey");
    tokio::time::sleep(Duration::from_millis(500)).await;
    polls_agree(&on, &off, users, Duration::from_secs(10), "after the restart").await;
    assert!(follower_answers(&on).await > 0.0, "then from the follower");
    on.stop().await;
    off.stop().await;
}

/// An instance answering polls from its follower that lets a person go after a
/// second without a poll from them (--poll-grace 1s), renewing its lease every 200ms.
async fn lets_pollers_go(s: &ValkeyServer) -> Api {
    let mut config = queue_api::Config::local(&s.url());
    config.status_from_follower = true;
    config.push_tick = Duration::from_millis(200);
    config.poll_grace = Duration::from_secs(1);
    config.rate_limit = 0.0;
    Api::start(config).await
}

/// Who waits after a `QUEUE.PROMOTE MAX 0` (which drops the abandoned, promoting nobody).
async fn swept_line(qc: &QueueClient) -> Vec<String> {
    qc.promote(Q, Some(0)).await.unwrap();
    qc.line(Q, 0, 100).await.unwrap().users
}

/// A poller is kept in line by the instance's lease (no Valkey call per poll) while
/// polling, past abandon_after; once they stop, they are unregistered after the
/// grace period and dropped abandon_after later.
async fn a_poller_who_stops_is_unregistered(b: Backend) {
    let (s, qc) = closed_queue(b, 2000).await;
    let on = lets_pollers_go(&s).await;
    for u in ["silent", "poller"] {
        qc.enter(Q, u, u).await.unwrap();
    }
    let until = Instant::now() + Duration::from_millis(4000);
    while Instant::now() < until {
        let (code, body) = poll(&on, "poller").await;
        assert_eq!(code, 200, "{body}");
        tokio::time::sleep(Duration::from_millis(300)).await;
        swept_line(&qc).await;
    }
    assert!(follower_answers(&on).await > 5.0, "answered from the follower");
    assert_eq!(swept_line(&qc).await, vec!["poller".to_string()], "the poller stays, the silent one is dropped");
    // Stopped polling: grace (1 s), then abandon_after (2 s), with room.
    let deadline = Instant::now() + Duration::from_secs(12);
    loop {
        tokio::time::sleep(Duration::from_millis(300)).await;
        if swept_line(&qc).await.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "a poller who stopped was never dropped");
    }
    on.stop().await;
}

/// A poller registered by two instances, who then polls only one of them: the other
/// lets them go after the grace period (its `QUEUE.UNWATCH`), and the one they still
/// poll keeps them in line past abandon_after, as if they had polled it alone.
async fn a_poller_let_go_by_one_instance_is_kept_by_another(b: Backend) {
    let (s, qc) = closed_queue(b, 2000).await;
    let (kept, left) = (lets_pollers_go(&s).await, lets_pollers_go(&s).await);
    qc.enter(Q, "poller", "n").await.unwrap();
    // Registered by both, the instance that lets go last (the registration is its).
    for api in [&kept, &left] {
        let deadline = Instant::now() + Duration::from_secs(10);
        let before = follower_answers(api).await;
        while follower_answers(api).await <= before {
            assert_eq!(poll(api, "poller").await.0, 200);
            assert!(Instant::now() < deadline, "never answered from the follower");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    // Only `kept` polled from now on: `left` lets them go after 1 s, and
    // abandon_after (2 s) passes twice over.
    let until = Instant::now() + Duration::from_millis(5000);
    while Instant::now() < until {
        let (code, body) = poll(&kept, "poller").await;
        assert_eq!(code, 200, "{body}");
        assert_eq!(swept_line(&qc).await, vec!["poller".to_string()], "dropped while polling");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    kept.stop().await;
    left.stop().await;
}

/// Someone asked about for their poll who leaves through the instance while the
/// follower gathers, and is back in line before the gathering's registration goes
/// out, is not registered by it: the instance no longer follows them, so a
/// registration of its would keep them in line (its lease renewed every tick) with
/// nobody to take it back.
async fn who_left_while_gathered_is_not_registered(b: Backend) {
    let (s, qc) = closed_queue(b, 600_000).await;
    // A hold of a second: gathered for 500ms.
    let here = follows_holding(&s, Duration::from_secs(60), Duration::from_secs(10), Duration::from_secs(1)).await;
    let off = reads(&s).await;
    qc.enter(Q, "first", "n").await.unwrap();
    qc.enter(Q, "p", "n").await.unwrap();
    // (`first` keeps the follower of the queue running here.)
    answered_from_follower(&here, &off, &["first".to_string(), "p".to_string()]).await;
    let registration = |s: &ValkeyServer| -> Option<String> {
        redis::cmd("HGET").arg(format!("queue:{{{Q}}}:watched")).arg("p").query(&mut s.conn()).unwrap()
    };
    assert!(registration(&s).is_some(), "registered by its poll");
    // Left and back elsewhere: known here, not current, asked at the next poll.
    qc.leave(Q, "p").await.unwrap();
    qc.enter(Q, "p", "n").await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(registration(&s), None, "entering after leaving starts with no registration");
    let url = here.url("/api/queue/status?userId=p");
    let held = tokio::spawn(async move { reqwest::get(url).await.unwrap().status().as_u16() });
    tokio::time::sleep(Duration::from_millis(100)).await;
    // While gathered: leaves through this instance (forgotten here), then back in
    // line without it.
    leave(&here, "p").await;
    qc.enter(Q, "p", "n").await.unwrap();
    held.await.unwrap();
    // Past the gathering (500ms from the ask), with room; `first` still polls.
    for _ in 0..12 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(poll(&here, "first").await.0, 200);
    }
    assert_eq!(registration(&s), None, "registered by an instance that no longer follows them");
    here.stop().await;
    off.stop().await;
}

/// Calls of the batched read (QUEUE.RANKS) Valkey served so far (the module; the Lua
/// library's go through FCALL, counted by the metrics instead).
fn ranks_calls(s: &ValkeyServer) -> u64 {
    let info: String = redis::cmd("INFO").arg("commandstats").query(&mut s.conn()).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("cmdstat_queue.ranks:calls="))
        .map_or(0, |rest| rest.split(',').next().unwrap().parse().unwrap())
}

/// Enters through `api` (a new person, or `again` naming the userId it gave).
async fn enter(api: &Api, again: Option<&str>) -> Value {
    let mut body = serde_json::json!({ "nickname": "n" });
    if let Some(u) = again {
        body["userId"] = u.into();
    }
    let resp = reqwest::Client::new().post(api.url("/api/queue/entry")).json(&body).send().await.unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    resp.json().await.unwrap()
}

/// Leaves through `api`.
async fn leave(api: &Api, user: &str) {
    let resp = reqwest::Client::new().delete(api.url(&format!("/api/queue/entry?userId={user}"))).send().await;
    assert_eq!(resp.unwrap().status().as_u16(), 200);
}

/// People who enter through the instance are known to its follower from the entry:
/// registered in its next cycle, their first poll is answered from it (no batched
/// read); someone ahead entering again moves everyone behind; a re-entry and a leave
/// through the instance are in its very next answer (read-your-writes here).
async fn an_entry_here_is_answered_from_the_follower(b: Backend) {
    let (s, qc) = closed_queue(b, 600_000).await;
    let on = follows(&s, Duration::from_secs(60), Duration::from_secs(2)).await;
    let off = reads(&s).await;
    // Someone entered elsewhere, so the line has a head the log moves.
    qc.enter(Q, "first", "n").await.unwrap();
    let mut users = Vec::new();
    let watches = counter(&on, "queue_api_watch_calls_total").await;
    for _ in 0..5 {
        users.push(enter(&on, None).await["userId"].as_str().unwrap().to_string());
    }
    // Registered by the follower (one QUEUE.WATCH for all or a few), then answered.
    let deadline = Instant::now() + Duration::from_secs(10);
    while counter(&on, "queue_api_watch_calls_total").await <= watches {
        assert!(Instant::now() < deadline, "the entries were never registered");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (ranks, from_valkey) = (ranks_calls(&s), valkey_answers(&on).await);
    for u in &users {
        assert_eq!(poll(&on, u).await, poll(&off, u).await, "{u}: the first poll");
    }
    assert_eq!(valkey_answers(&on).await, from_valkey, "the first polls were read from Valkey");
    assert_eq!(follower_answers(&on).await, users.len() as f64, "the first polls came from the follower");
    // The instance reading from Valkey sent its own QUEUE.RANKS: one per poll of it.
    if b == Backend::Module {
        assert_eq!(ranks_calls(&s), ranks + users.len() as u64, "no batched read for the follower's answers");
    }
    // The first one enters again at the back (through the instance): their own next
    // answer is the new place, and everyone behind moves up.
    let again = users[0].clone();
    enter(&on, Some(&again)).await;
    assert_eq!(poll(&on, &again).await, poll(&off, &again).await, "the re-entered person's next answer");
    assert_eq!(poll(&on, &again).await.1["rank"], 6);
    polls_agree(&on, &off, &users, Duration::from_secs(3), "a re-entry").await;
    // The second one leaves through the instance: unknown at once.
    let gone = users[1].clone();
    let resp = reqwest::Client::new().delete(on.url(&format!("/api/queue/entry?userId={gone}"))).send().await.unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    assert_eq!(poll(&on, &gone).await.0, 404, "left, yet answered as waiting");
    polls_agree(&on, &off, &users, Duration::from_secs(3), "a leave").await;
    // Entering again after leaving: known from that entry again.
    enter(&on, Some(&gone)).await;
    assert_eq!(poll(&on, &gone).await, poll(&off, &gone).await, "back after leaving");
    polls_agree(&on, &off, &users, Duration::from_secs(3), "back in line").await;
    on.stop().await;
    off.stop().await;
}

/// Two instances following (`here`, `elsewhere`) and one reading from Valkey; four
/// people who entered through `elsewhere` behind someone else, known `here` from
/// their first polls (read from Valkey, then registered). `here` has `bound` as
/// --status-max-staleness and `hold` as --poll-hold.
async fn known_here_entered_elsewhere(
    b: Backend,
    bound: Duration,
    hold: Duration,
) -> (ValkeyServer, Api, Api, Api, Vec<String>) {
    let (s, qc) = closed_queue(b, 600_000).await;
    let here = follows_holding(&s, Duration::from_secs(60), bound, hold).await;
    let elsewhere = follows(&s, Duration::from_secs(60), Duration::from_secs(2)).await;
    let off = reads(&s).await;
    qc.enter(Q, "first", "n").await.unwrap();
    let mut users = Vec::new();
    for _ in 0..4 {
        users.push(enter(&elsewhere, None).await["userId"].as_str().unwrap().to_string());
    }
    answered_from_follower(&here, &off, &users).await;
    (s, here, elsewhere, off, users)
}

/// Someone known to an instance leaves and enters again through another: the
/// instance learns from the log that they left, and their next poll there is held
/// for its follower's registration (`--poll-hold`), which answers it, instead of a
/// read from Valkey of their own followed by that registration. Someone who left for
/// good is still read from Valkey (the same 404).
async fn a_re_entry_elsewhere_is_held_for_the_registration(b: Backend) {
    let (_s, here, elsewhere, off, users) = known_here_entered_elsewhere(b, BOUND, HOLD).await;
    let from_valkey = valkey_answers(&here).await;
    // The first leaves and enters again at the back, elsewhere (as a page that lost
    // its place does): here they agree with Valkey again within the bound, every
    // answer from the follower.
    let again = users[0].clone();
    leave(&elsewhere, &again).await;
    enter(&elsewhere, Some(&again)).await;
    polls_agree(&here, &off, &users, Duration::from_secs(3), "a re-entry elsewhere").await;
    assert_eq!(poll(&here, &again).await.1["rank"], 5, "at the back");
    assert_eq!(valkey_answers(&here).await, from_valkey, "the re-entered person's polls were read from Valkey");
    // The second leaves for good, elsewhere: the same 404 here, read from Valkey.
    let gone = users[1].clone();
    leave(&elsewhere, &gone).await;
    let deadline = Instant::now() + Duration::from_secs(3);
    while poll(&here, &gone).await.0 != 404 {
        assert!(Instant::now() < deadline, "left, yet answered as waiting");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(valkey_answers(&here).await > from_valkey, "who left is read from Valkey");
    for api in [here, elsewhere, off] {
        api.stop().await;
    }
}

/// --status-max-staleness and --poll-hold of most tests here.
const BOUND: Duration = Duration::from_secs(2);
const HOLD: Duration = Duration::from_millis(100);

/// People known to an instance leave and enter again through another, one after
/// another, and then poll it, one after another: the instance asks about them for
/// their polls (held meanwhile), and registers them together, one `QUEUE.WATCH`
/// for all of them rather than one each, and answers every poll from it.
async fn people_asked_for_their_polls_are_registered_together(b: Backend) {
    // A hold of 600ms: gathered for 300ms from the first asked.
    let hold = Duration::from_millis(600);
    let bound = Duration::from_secs(10);
    let (_s, here, elsewhere, off, users) = known_here_entered_elsewhere(b, bound, hold).await;
    // Past the confirmation the set-up's polls made due (one every half bound).
    tokio::time::sleep(Duration::from_millis(100)).await;
    let (watches, from_valkey) = (counter(&here, "queue_api_watch_calls_total").await, valkey_answers(&here).await);
    for u in &users {
        leave(&elsewhere, u).await;
        enter(&elsewhere, Some(u)).await;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let polls: Vec<_> = users
        .iter()
        .enumerate()
        .map(|(i, u)| {
            let url = here.url(&format!("/api/queue/status?userId={u}"));
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(20 * i as u64)).await;
                let sent = Instant::now();
                (sent, reqwest::get(url).await.unwrap().json::<Value>().await.unwrap())
            })
        })
        .collect();
    let (mut sent, mut answers) = (Vec::new(), Vec::new());
    for p in polls {
        let (at, answer) = p.await.unwrap();
        sent.push(at);
        answers.push(answer);
    }
    let watched = counter(&here, "queue_api_watch_calls_total").await - watches;
    // One registration when every poll came within the gathering (300ms from the
    // first); a machine too busy to send them 20ms apart may split them in two.
    let spread = sent.iter().max().unwrap().duration_since(*sent.iter().min().unwrap());
    if spread < Duration::from_millis(200) {
        assert_eq!(watched, 1.0, "registrations for {} people asked within {spread:?}", users.len());
    } else {
        assert!(watched <= 2.0, "{watched} registrations for {} people asked within {spread:?}", users.len());
    }
    for (u, got) in users.iter().zip(&answers) {
        assert_eq!(got, &poll(&off, u).await.1, "{u}");
    }
    assert_eq!(answers.iter().map(|a| a["rank"].as_u64().unwrap()).collect::<Vec<_>>(), [2, 3, 4, 5]);
    assert_eq!(valkey_answers(&here).await, from_valkey, "polls read from Valkey, not held for the registration");
    for api in [here, elsewhere, off] {
        api.stop().await;
    }
}

/// Someone known to an instance enters again through another without leaving, as
/// they were (the same nickname): the instance places them at the back from the
/// change log's entry alone (`moved`), and every poll of them there is answered from
/// its follower, none read from Valkey. Entering again under another nickname is not
/// in the entry: that person is asked again.
async fn a_re_entry_elsewhere_is_followed_from_the_log(b: Backend) {
    let (_s, here, elsewhere, off, users) = known_here_entered_elsewhere(b, BOUND, HOLD).await;
    let from_valkey = valkey_answers(&here).await;
    enter(&elsewhere, Some(&users[0])).await;
    polls_agree(&here, &off, &users, Duration::from_secs(3), "a re-entry elsewhere").await;
    assert_eq!(poll(&here, &users[0]).await.1["rank"], 5, "at the back");
    assert_eq!(valkey_answers(&here).await, from_valkey, "the re-entry followed from the log");
    // Renamed: asked again (the poll held for the registration, or read from Valkey).
    let resp = reqwest::Client::new()
        .post(elsewhere.url("/api/queue/entry"))
        .json(&serde_json::json!({ "nickname": "other", "userId": users[1] }))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    polls_agree(&here, &off, &users, Duration::from_secs(3), "a renamed re-entry elsewhere").await;
    assert_eq!(poll(&here, &users[1]).await.1["nickname"], "other");
    for api in [here, elsewhere, off] {
        api.stop().await;
    }
}
