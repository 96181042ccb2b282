//! `queue-cli verify` of a fair opening in a queue with lanes, end to end on both
//! backends: a real valkey-server, the real queue-api binary (target/release, built
//! before this test) and the queue-cli binary. Two lanes with several people each
//! open and verify, each person's lane and place in it printed; then the stored
//! opening is tampered with (a lane's count changed, a lane's run out of order, a
//! person moved from one lane's run into another's) and each is reported FAILED
//! with what is wrong, until the true proof is put back and verifies again.

use queue_core::engine::opening::{id_hash, sort_key};
use serde_json::Value;
use std::process::Command;
use testkit::process::Service;
use testkit::{Backend, ValkeyServer};

testkit::backend_tests!(async an_opening_with_lanes_verifies_and_tampering_is_named,);

const Q: &str = "default";
const PROOF: &str = "queue:{default}:proof";
const OPENING: &str = "queue:{default}:opening";
const PRESALE: usize = 4;
const GENERAL: usize = 5;

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64
}

/// `queue-cli verify` against `api`: its exit code and everything it printed.
fn verify(api: &str, user: Option<&str>) -> (i32, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_queue-cli"));
    cmd.args(["verify", "--api", api, "--queue", Q]);
    if let Some(u) = user {
        cmd.args(["--user-id", u]);
    }
    let out = cmd.output().expect("queue-cli runs");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.code().unwrap_or(-1), text)
}

/// Writes the stored proof and the per-lane counts the opening wrote.
fn store(s: &ValkeyServer, order: &[String], lane_entrants: &str) {
    let mut con = s.conn();
    let _: () = redis::cmd("DEL").arg(PROOF).query(&mut con).unwrap();
    let _: () = redis::cmd("RPUSH").arg(PROOF).arg(order).query(&mut con).unwrap();
    let _: () = redis::cmd("HSET").arg(OPENING).arg("lane_entrants").arg(lane_entrants).query(&mut con).unwrap();
}

fn failed(api: &str, step: &str, want: &[&str]) {
    let (code, text) = verify(api, None);
    assert_eq!(code, 1, "{step}: {text}");
    assert!(text.starts_with("FAILED: queue default: "), "{step}: {text}");
    for w in want {
        assert!(text.contains(w), "{step}: wants {w:?} in {text}");
    }
}

async fn an_opening_with_lanes_verifies_and_tampering_is_named(b: Backend) {
    let s = ValkeyServer::start(b);
    let mut c = s.client();
    c.call("QUEUE.CONFIG", &[Q, "SET", "lanes", "presale,general"]).unwrap();
    c.call("QUEUE.CONFIG", &[Q, "SET", "opens_at", &(now_ms() + 3_600_000).to_string()]).unwrap();
    let mut users: Vec<(String, &str)> = Vec::new();
    for (lane, n) in [("presale", PRESALE), ("general", GENERAL)] {
        for i in 0..n {
            let user = format!("{lane}-{i}");
            c.call("QUEUE.ENTER", &[Q, &user, "n", "LANE", lane]).unwrap();
            users.push((user, lane));
        }
    }
    let api_service =
        Service::start("queue-api", &["--valkey-url".to_string(), s.url()], |h| h["valkey"] == "up").await;
    let api = api_service.url();

    let (code, text) = verify(&api, None);
    assert_eq!(code, 2, "nothing to verify before the opening: {text}");
    assert!(text.contains("in the pre-queue now: presale 4, general 5"), "{text}");

    // Brought forward to now: the next PROMOTE opens it.
    c.call("QUEUE.CONFIG", &[Q, "SET", "opens_at", &now_ms().to_string()]).unwrap();
    c.call("QUEUE.PROMOTE", &[Q, "MAX", "0"]).unwrap();
    let proof: Value = reqwest::get(format!("{api}/api/queue/opening?queue={Q}")).await.unwrap().json().await.unwrap();
    assert_eq!(proof["state"], "open", "{proof}");
    let seed = proof["seed"].as_str().unwrap().to_string();
    let order: Vec<String> = proof["order"].as_array().unwrap().iter().map(|h| h.as_str().unwrap().into()).collect();
    assert_eq!(order.len(), PRESALE + GENERAL);

    // Everyone verified, each in their lane's run.
    for (user, lane) in &users {
        let (code, text) = verify(&api, Some(user));
        assert_eq!(code, 0, "{user}: {text}");
        assert!(text.contains("all 9 ranks confirmed"), "{text}");
        assert!(text.contains("lane by lane, each run in the seed's order: presale 4, general 5"), "{text}");
        let rank = order.iter().position(|h| *h == id_hash(user.as_bytes())).unwrap() + 1;
        let (k, of) = if *lane == "presale" { (rank, PRESALE) } else { (rank - PRESALE, GENERAL) };
        let want = format!("{user} was placed at rank {rank} of 9, rank {k} of {of} in lane {lane}");
        assert!(text.contains(&want), "wants {want:?} in {text}");
    }

    // A lane's count changed (the sum no longer the entrants).
    store(&s, &order, "5,5");
    failed(&api, "a count changed", &["the lanes' entrants add up to 10 (presale 5 + general 5), but 9 entrants"]);

    // Two of general's run swapped.
    let mut swapped = order.clone();
    swapped.swap(PRESALE + 1, PRESALE + 2);
    store(&s, &swapped, "4,5");
    failed(&api, "a run out of order", &["lane general, rank 2 of its 5 (rank 6 overall): the proof lists"]);

    // Someone of presale moved into general's run, the counts made to match, put
    // anywhere in that run but where the seed would sort them (where they would sort
    // in, only that person can tell: verify names everyone's lane).
    let moved = order[1].clone();
    let key = |h: &String| sort_key(&seed, h);
    let general = &order[PRESALE..];
    let fits = general.iter().filter(|h| key(h) < key(&moved)).count();
    let at = if fits == 0 { GENERAL } else { 0 };
    let mut tampered: Vec<String> = order.iter().filter(|h| **h != moved).cloned().collect();
    tampered.insert(PRESALE - 1 + at, moved.clone());
    store(&s, &tampered, "3,6");
    failed(&api, "a person moved to another lane", &["lane general, rank ", "holds someone of another lane"]);
    // The same, the counts left as they were: then a presale run holds someone of
    // general at its end.
    store(&s, &tampered, "4,5");
    let (code, text) = verify(&api, None);
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("FAILED") && text.contains("lane "), "{text}");

    // The true proof put back verifies again.
    store(&s, &order, "4,5");
    let (code, text) = verify(&api, None);
    assert_eq!(code, 0, "{text}");
}
