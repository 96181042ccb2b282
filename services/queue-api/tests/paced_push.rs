//! Paced push (`--push-interval`): a stream tells a change of rank alone at most once
//! per interval, always ending on the latest standing, while a promotion goes out at
//! once; interval 0 tells every change. Real valkey-server, module and Lua library.

use futures_util::StreamExt;
use serde_json::Value;
use std::time::{Duration, Instant};
use testkit::{Backend, ValkeyServer};
use tokio::sync::mpsc;

mod common;
use common::Api;

testkit::backend_tests!(
    async
    rank_events_are_paced_and_end_on_the_latest,
    a_promotion_is_told_at_once_right_after_a_rank_event,
    interval_zero_tells_every_change,
);

/// An event as it arrived: when, its name, its data.
type Arrived = (Instant, String, Value);

/// A line of `n` people (`person-00` ..) on a paused queue, and queue-api with
/// `interval` as its push interval.
async fn line(b: Backend, n: usize, interval: Duration) -> (ValkeyServer, queue_client::QueueClient, Api, Vec<String>) {
    let s = ValkeyServer::start(b);
    let qc = queue_client::QueueClient::connect(&s.url()).await.unwrap();
    qc.config_set("default", &[("soft_cap", 0), ("abandon_after", 0)]).await.unwrap();
    let people: Vec<String> = (0..n).map(|i| format!("person-{i:02}")).collect();
    for p in &people {
        qc.enter("default", p, "n").await.unwrap();
    }
    let mut config = queue_api::Config::local(&s.url());
    config.rate_limit = 0.0;
    config.push_interval = interval;
    let api = Api::start(config).await;
    (s, qc, api, people)
}

/// Opens `user`'s stream; its events arrive on the receiver as they come.
async fn stream(api: &Api, user: &str) -> mpsc::UnboundedReceiver<Arrived> {
    let resp = reqwest::get(api.url(&format!("/api/queue/stream?userId={user}"))).await.unwrap();
    assert_eq!(resp.status(), 200);
    let mut body = resp.bytes_stream();
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut text = String::new();
        while let Some(Ok(chunk)) = body.next().await {
            let at = Instant::now();
            text.push_str(&String::from_utf8_lossy(&chunk));
            while let Some(i) = text.find("\n\n") {
                let block: String = text.drain(..i + 2).collect();
                let name = block.lines().find_map(|l| l.strip_prefix("event: ")).unwrap_or("").to_string();
                let Some(data) = block.lines().find_map(|l| l.strip_prefix("data: ")) else { continue };
                if tx.send((at, name, serde_json::from_str(data).unwrap())).is_err() {
                    return;
                }
            }
        }
    });
    rx
}

/// The next event, within `within`.
async fn next(rx: &mut mpsc::UnboundedReceiver<Arrived>, within: Duration) -> Arrived {
    tokio::time::timeout(within, rx.recv()).await.expect("an event in time").expect("the stream is open")
}

/// Events until one named `name` with rank `rank` (any rank: None), within `within`.
async fn until(
    rx: &mut mpsc::UnboundedReceiver<Arrived>,
    name: &str,
    rank: Option<u64>,
    within: Duration,
) -> Vec<Arrived> {
    let deadline = Instant::now() + within;
    let mut seen = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let ev = tokio::time::timeout(left, rx.recv())
            .await
            .unwrap_or_else(|_| panic!("no {name} {rank:?} in time; saw {seen:?}"))
            .expect("the stream is open");
        let done = ev.1 == name && rank.is_none_or(|r| ev.2["rank"] == r);
        seen.push(ev);
        if done {
            return seen;
        }
    }
}

/// Under a leave every 100 ms for 3 s, a stream paced at 2 s tells its rank a few
/// times, each at least an interval after the one before, and ends on the rank after
/// the last leave (never an older one left standing).
async fn rank_events_are_paced_and_end_on_the_latest(b: Backend) {
    let interval = Duration::from_secs(2);
    let (_s, qc, api, people) = line(b, 40, interval).await;
    let watcher = people.last().unwrap();
    let mut rx = stream(&api, watcher).await;
    let first = next(&mut rx, Duration::from_secs(10)).await;
    assert_eq!((first.1.as_str(), first.2["rank"].as_u64()), ("position", Some(40)), "{first:?}");
    let leaves = 30;
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    for p in &people[..leaves] {
        tick.tick().await;
        assert!(qc.leave("default", p).await.unwrap());
    }
    // The last standing comes within a gap (at most 1.25 intervals) of the last
    // leave; generous bounds for a busy machine.
    let mut events = vec![first];
    events.extend(until(&mut rx, "position", Some(40 - leaves as u64), Duration::from_secs(10)).await);
    for e in &events {
        assert_eq!(e.1, "position", "{events:?}");
    }
    for w in events.windows(2) {
        let apart = w[1].0 - w[0].0;
        // The client reads them: allow for a late read of the earlier one.
        assert!(apart >= interval - Duration::from_millis(250), "rank events {apart:?} apart: {events:?}");
    }
    assert!(events.len() <= 4, "{} rank events for {leaves} leaves in 3 s: {events:?}", events.len());
    let last = &events.last().unwrap().2;
    assert_eq!(last["totalWaiting"], 40 - leaves as u64, "the latest total too: {last}");
    // Nothing more: the last standing was told.
    assert!(tokio::time::timeout(Duration::from_secs(3), rx.recv()).await.is_err(), "nothing left to tell");
    api.stop().await;
}

/// A promotion right after a rank event goes out at once, not an interval later.
async fn a_promotion_is_told_at_once_right_after_a_rank_event(b: Backend) {
    let interval = Duration::from_secs(3);
    let (_s, qc, api, people) = line(b, 5, interval).await;
    let watcher = &people[2];
    let mut rx = stream(&api, watcher).await;
    let first = next(&mut rx, Duration::from_secs(10)).await;
    assert_eq!(first.2["rank"], 3, "{first:?}");
    // The first standing paces the next rank event: the leave is told 3 s later.
    assert!(qc.leave("default", &people[0]).await.unwrap());
    let told = until(&mut rx, "position", Some(2), Duration::from_secs(10)).await;
    let at = told.last().unwrap().0;
    assert!(at - first.0 >= interval - Duration::from_millis(250), "paced: {told:?}");
    // Right after that rank event, the promotion.
    qc.config_set("default", &[("soft_cap", 2)]).await.unwrap();
    let t0 = Instant::now();
    assert_eq!(qc.promote("default", None).await.unwrap().promoted, 2);
    let got = until(&mut rx, "promoted", None, Duration::from_secs(10)).await;
    let (t1, _, promoted) = got.last().unwrap();
    assert!(promoted["ticketId"].is_string(), "{promoted}");
    let took = *t1 - t0;
    assert!(took < Duration::from_millis(1500), "the promotion took {took:?} (interval {interval:?}): {got:?}");
    api.stop().await;
}

/// `--push-interval 0`: every leave ahead is told, one event per change.
async fn interval_zero_tells_every_change(b: Backend) {
    let (_s, qc, api, people) = line(b, 12, Duration::ZERO).await;
    let watcher = people.last().unwrap();
    let mut rx = stream(&api, watcher).await;
    let first = next(&mut rx, Duration::from_secs(10)).await;
    assert_eq!(first.2["rank"], 12, "{first:?}");
    for (k, p) in people[..8].iter().enumerate() {
        let t0 = Instant::now();
        assert!(qc.leave("default", p).await.unwrap());
        let ev = next(&mut rx, Duration::from_secs(5)).await;
        assert_eq!((ev.1.as_str(), ev.2["rank"].as_u64()), ("position", Some(11 - k as u64)), "{ev:?}");
        assert!(ev.0 - t0 < Duration::from_secs(2), "told at once: {:?}", ev.0 - t0);
    }
    api.stop().await;
}
