//! The waiting-room page in headless Chromium, driven by Playwright (tests/browser): a
//! person enters a nickname (the queue asks a proof of work, solved by the page), sees
//! a position while the room is full, keeps it through a reload, keeps it while the
//! tab is in the background (hidden, its timers held back to a minute) for several
//! times `abandon_after` (while a silent user behind is dropped), is taken to the chat page when a place frees up, and
//! chats; a second person joins behind and leaves the line with the page's button.
//! Before a queue opens, the page shows when, the commitment to the draw and a link to
//! its proof, then the place the draw gave. Both backends. `scripts/install-deps.sh`
//! installs Chromium, Node.js and the test's npm packages.

use std::time::Duration;

use e2e::{e2e_tests, exits_cleanly, start_piped, type_line, Stack, StackOptions};
use queue_cli::api::Api;
use queue_client::Status;
use testkit::Backend;

e2e_tests!(a_person_waits_is_admitted_and_chats_in_a_real_browser, the_page_shows_the_opening_and_its_commitment);

async fn a_person_waits_is_admitted_and_chats_in_a_real_browser(backend: Backend) {
    let dir = testkit::workspace_root().join("tests/browser");
    assert!(
        dir.join("node_modules/playwright-core").exists(),
        "tests/browser/node_modules is missing: run scripts/install-deps.sh (npm ci there)"
    );
    // The holder's ticket outlasts the test unless given back; silent waiters are
    // dropped after 3 s (set from the start: lowering abandon_after at run time drops
    // at the next PROMOTE everyone last heard from longer ago).
    let opts = StackOptions { soft_cap: 1, ticket_ttl_ms: 300_000, abandon_after_ms: 3_000, ..Default::default() };
    let stack = Stack::start(backend, opts).await;
    // Entries need a proof of work (queue-cli and the page solve it by themselves).
    stack.call("QUEUE.CONFIG", &[&stack.queue, "SET", "pow_difficulty", "16"]);
    // Someone holds the only place, so the browser's person has to wait.
    let api = Api::new(Api::http_client(), &stack.api.url(), &stack.queue, None);
    let holder = api.enter("holder").await.unwrap();
    assert_eq!(holder.status, Status::Promoted);

    let script = dir.join("waiting-room.mjs").display().to_string();
    let (mut node, mut out) = start_piped("node", &[script, stack.api.url(), stack.chat.url(), "alice".into()]);
    out.expect("the page to show rank 1", |l| l == "WAITING 1").await;
    let proof = out.expect("the page to solve the proof of work", |l| l.starts_with("PROOF ")).await;
    eprintln!("proof of work at 16 bits in the page: {} ms", &proof["PROOF ".len()..]);
    out.expect("the same place after a reload", |l| l == "RELOADED 1").await;
    out.expect("the friend behind alice", |l| l == "FRIEND 2").await;
    out.expect("the friend to leave with the button", |l| l == "LEFT").await;
    let info = stack.info();
    assert_eq!((info["waiting"], info["joining"], info["left"]), (1, 1, 1), "alice waits behind the holder: {info:?}");

    // Alice's tab goes to the background for several abandon_after periods, its
    // timers held back to a minute: her push stream keeps her place; a user behind her
    // who went silent is dropped meanwhile (the queue drops silent users all along).
    let silent = api.enter("silent").await.unwrap();
    assert_eq!(silent.rank, 2);
    type_line(&mut node, "hide").await;
    out.expect("the tab to go to the background", |l| l == "HIDDEN").await;
    stack.eventually("the silent user to be dropped", |s| s.info()["dropped"] == 1).await;
    tokio::time::sleep(Duration::from_secs(7)).await;
    let info = stack.info();
    assert_eq!((info["waiting"], info["dropped"]), (1, 1), "alice kept her place in the background: {info:?}");
    type_line(&mut node, "show").await;
    out.expect("the tab to show its place again", |l| l == "SHOWN 1").await;

    // The holder gives the place back: the manager promotes alice, the page takes her in.
    stack.call("QUEUE.LEAVE", &[&stack.queue, &holder.user_id]);
    out.expect("the chat page", |l| l == "ADMITTED").await;
    out.expect("the message in the chat log", |l| l == "CHATTED").await;
    let info = stack.info();
    assert_eq!((info["active"], info["waiting"], info["claimed"]), (1, 0, 1), "alice is inside: {info:?}");

    type_line(&mut node, "close").await;
    out.expect("the browser to close", |l| l == "CLOSED").await;
    exits_cleanly(&mut node, &out).await;
    stack.eventually("the closed page's session to end", |s| s.info()["active"] == 0).await;
}

/// A fair opening in the page: "opens in ...", the commitment queue-api publishes
/// (the same one), a link to the proof, then a place once the draw is made.
async fn the_page_shows_the_opening_and_its_commitment(backend: Backend) {
    let dir = testkit::workspace_root().join("tests/browser");
    let stack = Stack::start(backend, StackOptions { soft_cap: 0, ..Default::default() }).await;
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64;
    let opens_at = (now + 12_000).to_string();
    stack.call("QUEUE.CONFIG", &[&stack.queue, "SET", "opens_at", &opens_at]);
    // Someone already in the pre-queue, so that the draw places two.
    let api = Api::new(Api::http_client(), &stack.api.url(), &stack.queue, None);
    api.enter("early").await.unwrap();

    let script = dir.join("opening.mjs").display().to_string();
    let (_node, mut out) = start_piped("node", &[script, stack.api.url(), "alice".into()]);
    out.expect("the page to say when the line opens", |l| l == "OPENS_IN").await;
    let shown = out.expect("the commitment in the page", |l| l.starts_with("COMMITMENT ")).await;
    let published: serde_json::Value =
        reqwest::get(format!("{}/api/queue/opening?queue={}", stack.api.url(), stack.queue))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
    let commitment = published["commitment"].as_str().expect("a commitment before the opening");
    assert_eq!(commitment.len(), 64, "{published}");
    assert_eq!(shown, format!("COMMITMENT {commitment} /api/queue/opening?queue={}", stack.queue));
    let ranked = out.expect("a place after the opening", |l| l.starts_with("RANKED ")).await;
    let rank: u64 = ranked["RANKED ".len()..].parse().unwrap();
    assert!(rank == 1 || rank == 2, "{ranked}");
    stack.eventually("the opening to be recorded", |s| s.info()["waiting"] == 2).await;
}
