//! Push streams of a queue with lanes, over real sockets against a real
//! valkey-server, with the module and with the Lua library: people waiting in the
//! later lane are put back by one when someone enters an earlier lane, and moved up
//! again when that person is promoted, from the change log alone (no QUEUE.WATCH
//! call); the promoted person's stream gets the ticket, which claims. Also the
//! client's lane and code calls, and their refusals, on both backends.

use futures_util::StreamExt;
use queue_client::{code_hash, ClientError, EntryOptions, LaneCodes, QueueClient, QueueError, Status};
use serde_json::Value;
use std::time::{Duration, Instant};
use testkit::{Backend, ValkeyServer};

mod common;
use common::Api;

const Q: &str = "default";

testkit::backend_tests!(async lanes_reach_the_push_streams, lane_and_code_calls_and_their_refusals,);

/// Every event of each push stream, as (event name, data), in arrival order.
type Seen = std::sync::Arc<std::sync::Mutex<std::collections::HashMap<String, Vec<(String, Value)>>>>;

/// A closed queue (soft cap 0) with the lanes `presale,general` and one queue-api
/// whose push tick is a minute: in a test's time only the change log, never the
/// tick, brings a change to its streams.
async fn lanes_queue(b: Backend) -> (ValkeyServer, QueueClient, Api) {
    let s = ValkeyServer::start(b);
    let qc = QueueClient::connect(&s.url()).await.unwrap();
    qc.config_set(Q, &[("soft_cap", 0)]).await.unwrap();
    let mut admin = s.conn();
    let set = testkit::command_for(b, "QUEUE.CONFIG", &[Q, "SET", "lanes", "presale,general"]);
    let _: () = set.query(&mut admin).unwrap();
    let mut config = queue_api::Config::local(&s.url());
    config.push_tick = Duration::from_secs(60);
    let api = Api::start(config).await;
    (s, qc, api)
}

/// Follows `user`'s push stream until it ends or the task is aborted.
fn follow_stream(api: &Api, user: &str, seen: Seen) -> tokio::task::JoinHandle<()> {
    let url = api.url(&format!("/api/queue/stream?userId={user}"));
    let user = user.to_string();
    tokio::spawn(async move {
        let resp = reqwest::get(url).await.unwrap();
        assert_eq!(resp.status(), 200, "stream of {user}");
        let mut body = resp.bytes_stream();
        let mut text = String::new();
        while let Some(Ok(chunk)) = body.next().await {
            text.push_str(&String::from_utf8_lossy(&chunk));
            while let Some(i) = text.find("\n\n") {
                let block: String = text.drain(..i + 2).collect();
                let name = block.lines().find_map(|l| l.strip_prefix("event: ")).unwrap_or("").to_string();
                let Some(data) = block.lines().find_map(|l| l.strip_prefix("data: ")) else { continue };
                let v: Value = serde_json::from_str(data).unwrap();
                seen.lock().unwrap().entry(user.clone()).or_default().push((name, v));
            }
        }
    })
}

/// The waiting people in line order (QUEUE.LINE: nobody counts as heard from).
async fn line_now(qc: &QueueClient) -> Vec<String> {
    let mut out = Vec::new();
    let mut cursor = 0;
    loop {
        let page = qc.line(Q, cursor, 1000).await.unwrap();
        out.extend(page.users);
        if page.cursor == 0 {
            return out;
        }
        cursor = page.cursor;
    }
}

/// Waits (up to 10 s) until every stream's last event matches the line: `position`
/// with the person's rank while they wait, a final event otherwise.
async fn streams_settle(qc: &QueueClient, seen: &Seen, streamed: &[String], step: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let line = line_now(qc).await;
        let wrong: Vec<String> = {
            let seen = seen.lock().unwrap();
            streamed
                .iter()
                .filter_map(|u| {
                    let last = seen.get(u).and_then(|e| e.last());
                    let want = line.iter().position(|x| x == u).map(|i| i as u64 + 1);
                    let ok = match (last, want) {
                        (Some((name, v)), Some(rank)) => name == "position" && v["rank"] == rank,
                        (Some((name, _)), None) => name != "position",
                        (None, _) => false,
                    };
                    (!ok).then(|| format!("{u}: last {last:?}, rank in line {want:?}"))
                })
                .collect()
        };
        if wrong.is_empty() {
            return;
        }
        assert!(Instant::now() < deadline, "{step}: streams disagree with the line: {wrong:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The last event of `user`'s stream, once it is named `name` (within 10 s).
async fn last_event(seen: &Seen, user: &str, name: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let last = seen.lock().unwrap().get(user).and_then(|e| e.last().cloned());
        if let Some((_, v)) = last.filter(|(n, _)| n == name) {
            return v;
        }
        assert!(Instant::now() < deadline, "{user}: no {name} event, last {:?}", seen.lock().unwrap().get(user));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A counter's value on `/metrics` (0 when absent).
async fn counter(api: &Api, name: &str) -> f64 {
    let text = reqwest::get(api.url("/metrics")).await.unwrap().text().await.unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(name).and_then(|rest| rest.strip_prefix(' ')))
        .map_or(0.0, |v| v.trim().parse().unwrap())
}

/// The QUEUE.WATCH calls made once the streams opened are registered: the counter,
/// once it stayed the same for 300 ms (the streams' first standings come from the
/// request itself, their registration a moment later).
async fn settled_calls(api: &Api) -> f64 {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut last = counter(api, "queue_api_watch_calls_total").await;
    loop {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let now = counter(api, "queue_api_watch_calls_total").await;
        if now == last && now > 0.0 {
            return now;
        }
        assert!(Instant::now() < deadline, "the registrations never settled");
        last = now;
    }
}

/// Waits until Valkey has at least `n` pub/sub connections (queue-api holds two:
/// promotions and changes), so that no published entry is missed.
async fn wait_subscribed(s: &ValkeyServer, n: usize) {
    let mut admin = s.conn();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let list: String = redis::cmd("CLIENT").arg("LIST").arg("TYPE").arg("pubsub").query(&mut admin).unwrap();
        if list.lines().count() >= n {
            return;
        }
        assert!(Instant::now() < deadline, "queue-api did not subscribe");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// People in `general` watch their streams; someone enters `presale` with a code and
/// another with the lane: every general stream's rank grows by one each time, from
/// the entries alone. Both presale people are promoted: the general ranks come back,
/// and each ticket reaches its own person's stream (renumbered at promotion, found
/// by the number they waited under) and claims.
async fn lanes_reach_the_push_streams(b: Backend) {
    let (s, qc, api) = lanes_queue(b).await;
    let general: Vec<String> = (0..6).map(|i| format!("g{i:02}")).collect();
    for u in &general {
        let st = qc.enter(Q, u, u).await.unwrap();
        assert_eq!(st.lane.as_deref(), Some("general"), "a plain entry joins the last lane");
    }
    let seen: Seen = Default::default();
    let mut tasks: Vec<_> = general.iter().map(|u| follow_stream(&api, u, seen.clone())).collect();
    streams_settle(&qc, &seen, &general, "opened").await;
    wait_subscribed(&s, 2).await;
    let first = last_event(&seen, "g05", "position").await;
    assert_eq!((first["rank"].as_u64(), first["lane"].as_str()), (Some(6), Some("general")), "{first}");

    let code = "PRESALE-ONE";
    assert_eq!(qc.codes_add(Q, "presale", 1, &[code_hash(code)]).await.unwrap(), 1);
    let calls = settled_calls(&api).await;
    let options = EntryOptions { lane: None, code_hash: Some(code_hash(code)) };
    let p0 = qc.enter_with(Q, "p0", "p0", &options).await.unwrap();
    assert_eq!((p0.status, p0.rank, p0.lane.as_deref()), (Status::Waiting, 1, Some("presale")));
    streams_settle(&qc, &seen, &general, "p0 entered presale with a code").await;
    assert_eq!(last_event(&seen, "g05", "position").await["rank"], 7);
    let by_lane = EntryOptions { lane: Some("presale".into()), code_hash: None };
    let p1 = qc.enter_with(Q, "p1", "p1", &by_lane).await.unwrap();
    assert_eq!((p1.rank, p1.lane.as_deref()), (2, Some("presale")));
    streams_settle(&qc, &seen, &general, "p1 entered presale by its name").await;
    assert_eq!(last_event(&seen, "g00", "position").await["rank"], 3);
    assert_eq!(counter(&api, "queue_api_watch_calls_total").await, calls, "nobody was asked: the entries told");

    // The presale people stream too; then both are promoted.
    let presale = vec!["p0".to_string(), "p1".to_string()];
    tasks.extend(presale.iter().map(|u| follow_stream(&api, u, seen.clone())));
    streams_settle(&qc, &seen, &presale, "presale streams opened").await;
    let calls = settled_calls(&api).await;
    qc.config_set(Q, &[("soft_cap", 2)]).await.unwrap();
    assert_eq!(qc.promote(Q, None).await.unwrap().promoted, 2);
    for u in &presale {
        let promoted = last_event(&seen, u, "promoted").await;
        let status = qc.status(Q, u).await.unwrap();
        assert_eq!(promoted["ticketId"].as_str(), status.ticket_id.as_deref(), "{u}: the ticket STATUS tells");
        let claim = qc.claim(Q, promoted["ticketId"].as_str().unwrap()).await.unwrap();
        assert_eq!(&claim.user_id, u, "the streamed ticket claims for its own person");
    }
    streams_settle(&qc, &seen, &general, "presale promoted").await;
    assert_eq!(last_event(&seen, "g05", "position").await["rank"], 6);
    assert_eq!(counter(&api, "queue_api_watch_calls_total").await, calls, "the promotion told everyone");
    for t in tasks {
        t.abort();
    }
    api.stop().await;
}

/// The client's calls for lanes and codes on each backend, and every refusal leaving
/// the queue as it was (a refused entry consumes no use of its code).
async fn lane_and_code_calls_and_their_refusals(b: Backend) {
    let s = ValkeyServer::start(b);
    let qc = QueueClient::connect(&s.url()).await.unwrap();
    qc.config_set(Q, &[("soft_cap", 0)]).await.unwrap();
    let with_code = |c: &str| EntryOptions { lane: None, code_hash: Some(code_hash(c)) };
    // No lanes yet: LANE and CODE are refused as bad arguments.
    let err = qc.enter_with(Q, "u", "u", &with_code("x")).await.unwrap_err();
    assert!(matches!(&err, ClientError::InvalidArgument(t) if t.contains("no lanes")), "{err:?}");
    assert!(matches!(qc.codes_counts(Q).await, Ok(c) if c.is_empty()));

    let mut admin = s.conn();
    let set = testkit::command_for(b, "QUEUE.CONFIG", &[Q, "SET", "lanes", "vip,presale,general"]);
    let _: () = set.query(&mut admin).unwrap();
    let hashes: Vec<String> = ["A", "B", "C"].iter().map(|c| code_hash(c)).collect();
    assert_eq!(qc.codes_add(Q, "vip", 2, &hashes[..2]).await.unwrap(), 2);
    assert_eq!(qc.codes_add(Q, "presale", 1, &hashes[2..]).await.unwrap(), 1);
    assert_eq!(qc.codes_add::<&str>(Q, "vip", 1, &[]).await.unwrap(), 0, "nothing to add asks nothing");
    let err = qc.codes_add(Q, "nope", 1, &hashes[..1]).await.unwrap_err();
    assert!(matches!(&err, ClientError::InvalidArgument(t) if t.contains("unknown lane 'nope'")), "{err:?}");
    let err = qc.codes_add(Q, "vip", 1, &["not-a-hash"]).await.unwrap_err();
    assert!(matches!(&err, ClientError::InvalidArgument(t) if t.starts_with("ERR invalid code")), "{err:?}");

    let lane = |l: &str, codes, used, left| LaneCodes { lane: l.into(), codes, used, left };
    let fresh = vec![lane("vip", 2, 0, 4), lane("presale", 1, 0, 1), lane("general", 0, 0, 0)];
    assert_eq!(qc.codes_counts(Q).await.unwrap(), fresh);

    // Refusals change nothing.
    let refused = |e: Result<_, ClientError>| e.map(|_: queue_client::Standing| ()).unwrap_err();
    assert_eq!(refused(qc.enter_with(Q, "u1", "u", &with_code("D")).await), ClientError::Refused(QueueError::NoCode));
    let wrong = EntryOptions { lane: Some("vip".into()), code_hash: Some(code_hash("C")) };
    assert_eq!(refused(qc.enter_with(Q, "u1", "u", &wrong).await), ClientError::Refused(QueueError::CodeLane));
    let unknown = EntryOptions { lane: Some("nope".into()), code_hash: None };
    assert!(matches!(refused(qc.enter_with(Q, "u1", "u", &unknown).await), ClientError::InvalidArgument(_)));
    assert_eq!(qc.codes_counts(Q).await.unwrap(), fresh, "no use consumed by a refusal");
    assert_eq!(qc.info(Q).await.unwrap().waiting, 0);

    // Entries: a code's lane, its uses consumed, a used-up code refused.
    let st = qc.enter_with(Q, "u1", "u", &with_code("C")).await.unwrap();
    assert_eq!((st.rank, st.lane.as_deref()), (1, Some("presale")));
    assert_eq!(refused(qc.enter_with(Q, "u2", "u", &with_code("C")).await), ClientError::Refused(QueueError::NoCode));
    let st = qc.enter_with(Q, "u3", "u", &with_code("A")).await.unwrap();
    assert_eq!((st.rank, st.lane.as_deref()), (1, Some("vip")));
    let st = qc.enter(Q, "u4", "u").await.unwrap();
    assert_eq!((st.rank, st.lane.as_deref()), (3, Some("general")));
    let ranks = qc.ranks(Q, &["u1", "u3", "u4", "nobody"]).await.unwrap();
    let lanes: Vec<Option<&str>> = ranks.iter().map(|s| s.lane.as_deref()).collect();
    assert_eq!(lanes, [Some("presale"), Some("vip"), Some("general"), None]);
    let want = vec![lane("vip", 2, 1, 3), lane("presale", 1, 1, 0), lane("general", 0, 0, 0)];
    assert_eq!(qc.codes_counts(Q).await.unwrap(), want);

    // Invitation only: a plain entry is refused, a code still admits.
    let set = testkit::command_for(b, "QUEUE.CONFIG", &[Q, "SET", "entry", "invite"]);
    let _: () = set.query(&mut admin).unwrap();
    assert_eq!(refused(qc.enter(Q, "u5", "u").await), ClientError::Refused(QueueError::Invite));
    assert_eq!(qc.enter_with(Q, "u5", "u", &with_code("B")).await.unwrap().lane.as_deref(), Some("vip"));

    assert_eq!(qc.codes_remove(Q, &[hashes[0].as_str(), &code_hash("D")]).await.unwrap(), 1);
    assert_eq!(qc.codes_remove::<&str>(Q, &[]).await.unwrap(), 0);
    assert_eq!(qc.codes_counts(Q).await.unwrap()[0], lane("vip", 1, 1, 1), "B is left, one use of two consumed");
}
