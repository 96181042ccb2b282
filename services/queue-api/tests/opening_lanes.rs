//! The opening's proof of a queue with lanes over HTTP (`GET /api/queue/opening`), on
//! both backends against a real valkey-server: while scheduled, `lanes` counts each
//! lane's pre-queue; once open, it gives each lane's run of `order`, lanes in order,
//! each run holding exactly that lane's entrants. A queue without lanes publishes
//! an empty `lanes`.

use queue_client::{EntryOptions, QueueClient};
use serde_json::{json, Value};
use std::collections::HashSet;
use testkit::{Backend, ValkeyServer};

mod common;
use common::Api;

testkit::backend_tests!(async lanes_are_published_with_the_proof, no_lanes_publish_an_empty_list,);

const Q: &str = "default";

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64
}

fn id_hash(user: &str) -> String {
    queue_core::engine::opening::id_hash(user.as_bytes())
}

async fn opening(api: &Api) -> Value {
    let resp = reqwest::get(api.url(&format!("/api/queue/opening?queue={Q}"))).await.unwrap();
    assert_eq!(resp.status(), 200);
    resp.json().await.unwrap()
}

/// `presale` and `general` lanes, an opening an hour away, `n` people entered into
/// each lane (into the pre-queue): their userIds per lane.
async fn scheduled(s: &ValkeyServer, b: Backend, qc: &QueueClient, n: [usize; 2]) -> [Vec<String>; 2] {
    let mut admin = s.conn();
    let set = testkit::command_for(b, "QUEUE.CONFIG", &[Q, "SET", "lanes", "presale,general"]);
    let _: () = set.query(&mut admin).unwrap();
    qc.config_set(Q, &[("opens_at", now_ms() + 3_600_000)]).await.unwrap();
    let mut ids: [Vec<String>; 2] = Default::default();
    for (lane, name) in ["presale", "general"].into_iter().enumerate() {
        for i in 0..n[lane] {
            let user = format!("{name}-{i}");
            let options = EntryOptions { lane: Some(name.into()), code_hash: None };
            let st = qc.enter_with(Q, &user, "n", &options).await.unwrap();
            assert_eq!(st.rank, 0, "{user} waits in the pre-queue: {st:?}");
            ids[lane].push(user);
        }
    }
    ids
}

async fn lanes_are_published_with_the_proof(b: Backend) {
    let s = ValkeyServer::start(b);
    let qc = QueueClient::connect(&s.url()).await.unwrap();
    let ids = scheduled(&s, b, &qc, [3, 4]).await;
    let api = Api::start(queue_api::Config::local(&s.url())).await;

    let before = opening(&api).await;
    assert_eq!(before["state"], "scheduled", "{before}");
    assert_eq!(before["entrants"], 7);
    assert_eq!(before["lanes"], json!([{"lane": "presale", "entrants": 3}, {"lane": "general", "entrants": 4}]));
    assert!(before.get("order").is_none(), "{before}");

    // Brought forward to now: the next command that may change the line opens it.
    qc.config_set(Q, &[("opens_at", now_ms())]).await.unwrap();
    qc.promote(Q, Some(0)).await.unwrap();
    let after = opening(&api).await;
    assert_eq!(after["state"], "open", "{after}");
    assert_eq!(after["entrants"], 7);
    assert_eq!(after["lanes"], json!([{"lane": "presale", "entrants": 3}, {"lane": "general", "entrants": 4}]));
    let order: Vec<String> =
        after["order"].as_array().unwrap().iter().map(|h| h.as_str().unwrap().to_string()).collect();
    assert_eq!(order.len(), 7, "{after}");
    // The first run is presale's entrants, the second general's.
    let set = |v: &[String]| v.iter().cloned().collect::<HashSet<String>>();
    let want = |lane: usize| ids[lane].iter().map(|u| id_hash(u)).collect::<HashSet<String>>();
    assert_eq!(set(&order[..3]), want(0));
    assert_eq!(set(&order[3..]), want(1));
    // The client reads the same counts from the command.
    let o = qc.opening(Q).await.unwrap();
    assert_eq!(o.lanes, vec![("presale".to_string(), 3), ("general".to_string(), 4)]);
    api.stop().await;
}

async fn no_lanes_publish_an_empty_list(b: Backend) {
    let s = ValkeyServer::start(b);
    let qc = QueueClient::connect(&s.url()).await.unwrap();
    let api = Api::start(queue_api::Config::local(&s.url())).await;
    let none = opening(&api).await;
    assert_eq!((&none["state"], &none["lanes"]), (&json!("none"), &json!([])), "{none}");
    qc.config_set(Q, &[("opens_at", now_ms() + 3_600_000)]).await.unwrap();
    qc.enter(Q, "u-1", "n").await.unwrap();
    let scheduled = opening(&api).await;
    assert_eq!((&scheduled["state"], &scheduled["lanes"]), (&json!("scheduled"), &json!([])), "{scheduled}");
    qc.config_set(Q, &[("opens_at", now_ms())]).await.unwrap();
    qc.promote(Q, Some(0)).await.unwrap();
    let open = opening(&api).await;
    assert_eq!((&open["state"], &open["lanes"], &open["entrants"]), (&json!("open"), &json!([]), &json!(1)), "{open}");
    assert!(qc.opening(Q).await.unwrap().lanes.is_empty());
    api.stop().await;
}
