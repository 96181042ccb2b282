//! A fair opening end to end, on both backends: the operator schedules it through the
//! back office, people enter over HTTP and wait in the pre-queue (rank 0, "opens at"),
//! the operator brings the opening forward to now (which keeps the commitment), the
//! queue-manager's next tick opens the queue, and `queue-cli verify` confirms the
//! published proof, then fails once one rank of the stored proof is tampered with.

use e2e::{e2e_tests, Stack, StackOptions, ADMIN_TOKEN};
use queue_cli::api::Api;
use queue_client::Status;
use serde_json::{json, Value};
use std::process::Command;
use testkit::Backend;

e2e_tests!(an_opening_is_verified_and_tampering_is_caught);

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64
}

async fn set_opens_at(stack: &Stack, at: i64) {
    let resp = reqwest::Client::new()
        .put(format!("{}/api/admin/queues/{}", stack.api.url(), stack.queue))
        .bearer_auth(ADMIN_TOKEN)
        .json(&json!({ "opens_at": at }))
        .send()
        .await
        .unwrap();
    assert!(resp.status().is_success(), "PUT opens_at: {}", resp.status());
}

async fn proof(stack: &Stack) -> Value {
    let url = format!("{}/api/queue/opening?queue={}", stack.api.url(), stack.queue);
    reqwest::get(url).await.unwrap().json().await.unwrap()
}

fn verify(stack: &Stack, user: Option<&str>) -> (i32, String) {
    let mut cmd = Command::new(e2e::client_binary());
    cmd.args(["verify", "--api", &stack.api.url(), "--queue", &stack.queue]);
    if let Some(u) = user {
        cmd.args(["--user-id", u]);
    }
    let out = cmd.output().expect("queue-cli runs");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.code().unwrap_or(-1), text)
}

async fn an_opening_is_verified_and_tampering_is_caught(backend: Backend) {
    let stack = Stack::start(backend, StackOptions { soft_cap: 2, ..Default::default() }).await;
    let opens_at = now_ms() + 3_600_000;
    set_opens_at(&stack, opens_at).await;
    let before = proof(&stack).await;
    assert_eq!(before["state"], "scheduled", "{before}");
    assert_eq!(before["opensAt"], opens_at);
    assert!(before.get("seed").is_none() && before.get("order").is_none(), "{before}");
    let commitment = before["commitment"].as_str().unwrap().to_string();
    assert_eq!(commitment.len(), 64);
    let (code, text) = verify(&stack, None);
    assert_eq!(code, 2, "nothing to verify before the opening: {text}");
    assert!(text.contains(&commitment), "{text}");

    const N: usize = 9;
    let mut ids = Vec::new();
    for n in 0..N {
        let api = Api::new(Api::http_client(), &stack.api.url(), &stack.queue, Some(format!("10.1.0.{n}")));
        let s = api.enter(&format!("p{n}")).await.unwrap();
        assert_eq!((s.status, s.rank, s.opens_at), (Status::Waiting, 0, Some(opens_at)), "p{n}: {s:?}");
        ids.push(s.user_id);
    }
    // Nobody was let in, with room for two.
    assert_eq!(stack.info()["joining"], 0);

    // Brought forward to now: the manager's next PROMOTE opens the queue.
    set_opens_at(&stack, now_ms()).await;
    let mut opened = Value::Null;
    for _ in 0..600 {
        opened = proof(&stack).await;
        if opened["state"] == "open" {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(opened["state"], "open", "{opened}");
    assert_eq!(opened["commitment"], commitment.as_str(), "the commitment made before the opening holds");
    assert_eq!(opened["entrants"], N);
    assert_eq!(opened["order"].as_array().unwrap().len(), N);

    let (code, text) = verify(&stack, Some(&ids[4]));
    assert_eq!(code, 0, "{text}");
    assert!(text.contains(&format!("all {N} ranks confirmed")), "{text}");
    let rank: usize = text.split("placed at rank ").nth(1).unwrap().split(' ').next().unwrap().parse().unwrap();
    let placed = queue_cli::verify::id_hash(&ids[4]);
    assert_eq!(opened["order"][rank - 1], placed.as_str());
    // A later arrival is not in the opening and joins at the back.
    let late = Api::new(Api::http_client(), &stack.api.url(), &stack.queue, Some("10.1.1.1".into()));
    let s = late.enter("late").await.unwrap();
    assert_eq!(s.opens_at, None);
    let (code, text) = verify(&stack, Some(&s.user_id));
    assert_eq!(code, 1, "{text}");

    // The operator rewrites one rank of the stored proof: verification fails.
    let key = format!("queue:{{{}}}:proof", stack.queue);
    let mut con = stack.valkey.conn();
    let (a, b): (String, String) = (
        redis::cmd("LINDEX").arg(&key).arg(0).query(&mut con).unwrap(),
        redis::cmd("LINDEX").arg(&key).arg(1).query(&mut con).unwrap(),
    );
    let _: () = redis::cmd("LSET").arg(&key).arg(0).arg(&b).query(&mut con).unwrap();
    let _: () = redis::cmd("LSET").arg(&key).arg(1).arg(&a).query(&mut con).unwrap();
    let (code, text) = verify(&stack, None);
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("FAILED") && text.contains("rank 1"), "{text}");
}
