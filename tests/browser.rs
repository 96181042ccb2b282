//! The waiting-room page in headless Chromium, driven by Playwright (tests/browser): a
//! person enters a nickname, sees a position while the room is full, keeps it through a
//! reload, is taken to the chat page when a place frees up, and chats; a second person
//! joins behind and leaves the line with the page's button. Both backends. `scripts/install-deps.sh`
//! installs Chromium, Node.js and the test's npm packages.

use e2e::{e2e_tests, exits_cleanly, start_piped, type_line, Stack, StackOptions};
use queue_cli::api::Api;
use queue_client::Status;
use testkit::Backend;

e2e_tests!(a_person_waits_is_admitted_and_chats_in_a_real_browser);

async fn a_person_waits_is_admitted_and_chats_in_a_real_browser(backend: Backend) {
    let dir = testkit::workspace_root().join("tests/browser");
    assert!(
        dir.join("node_modules/playwright-core").exists(),
        "tests/browser/node_modules is missing: run scripts/install-deps.sh (npm ci there)"
    );
    let stack = Stack::start(backend, StackOptions { soft_cap: 1, ..Default::default() }).await;
    // Someone holds the only place, so the browser's person has to wait.
    let holder = Api::new(Api::http_client(), &stack.api.url(), &stack.queue, None).enter("holder").await.unwrap();
    assert_eq!(holder.status, Status::Promoted);

    let script = dir.join("waiting-room.mjs").display().to_string();
    let (mut node, mut out) = start_piped("node", &[script, stack.api.url(), stack.chat.url(), "alice".into()]);
    out.expect("the page to show rank 1", |l| l == "WAITING 1").await;
    out.expect("the same place after a reload", |l| l == "RELOADED 1").await;
    out.expect("the friend behind alice", |l| l == "FRIEND 2").await;
    out.expect("the friend to leave with the button", |l| l == "LEFT").await;
    let info = stack.info();
    assert_eq!((info["waiting"], info["joining"], info["left"]), (1, 1, 1), "alice waits behind the holder: {info:?}");

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
