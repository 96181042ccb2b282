//! The waiting-room page in headless Chromium, driven by Playwright (tests/browser): a
//! person enters a nickname (the queue asks a proof of work, solved by the page), sees
//! a position while the room is full, keeps it through a reload and in a second tab
//! (no second entry), keeps it while the
//! tab is in the background (hidden, its timers held back to a minute) for several
//! times `abandon_after` (while a silent user behind is dropped), is taken to the chat page when a place frees up, and
//! chats; a second person joins behind and leaves the line with the page's button.
//! Before a queue opens, the page shows when, the commitment to the draw and a link to
//! its proof, then the place the draw gave. The waiting room in Korean and English,
//! branded and replaced by a template, axe-core clean; the back office during a swarm.
//! Behind the gate, Back after admission lands in the app again as the same person.
//! A formless room (a queue that asks no nickname) enters as it loads, keeps one place
//! per browser, and goes on to the app the moment the place's turn comes. A sale's end
//! (the operator's message, sold out, closed) shows on open pages without a reload, in
//! English and Japanese.
//! Screenshots of both pages at desktop and phone widths are saved under
//! target/screenshots/<backend>/. Both backends. `scripts/install-deps.sh` installs
//! Chromium, Node.js and the test's npm packages.

use std::time::Duration;

#[allow(dead_code)]
#[path = "gate/harness.rs"]
mod harness;

use e2e::{e2e_tests, exits_cleanly, start_piped, type_line, Stack, StackOptions};
use queue_cli::api::Api;
use queue_client::Status;
use testkit::Backend;

e2e_tests!(
    a_person_waits_is_admitted_and_chats_in_a_real_browser,
    the_page_shows_the_opening_and_its_commitment,
    the_waiting_room_in_two_languages_branded_and_accessible,
    the_back_office_in_a_real_browser,
    back_after_admission_returns_to_the_app,
    the_formless_room_enters_by_itself_and_goes_on_at_once,
    the_back_office_at_phone_width_with_a_gate,
    a_sales_end_shows_on_open_pages_in_two_languages,
);

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
    out.expect("the same place in a second tab", |l| l == "SECOND_TAB 1").await;
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
    assert_eq!(shown, format!("COMMITMENT {commitment} api/queue/opening?queue={}", stack.queue));
    let ranked = out.expect("a place after the opening", |l| l.starts_with("RANKED ")).await;
    let rank: u64 = ranked["RANKED ".len()..].parse().unwrap();
    assert!(rank == 1 || rank == 2, "{ranked}");
    stack.eventually("the opening to be recorded", |s| s.info()["waiting"] == 2).await;
}

/// The directory of the browser scripts, with its npm packages installed.
fn browser_dir() -> std::path::PathBuf {
    let dir = testkit::workspace_root().join("tests/browser");
    for package in ["playwright-core", "axe-core"] {
        assert!(
            dir.join("node_modules").join(package).exists(),
            "tests/browser/node_modules/{package} is missing: run scripts/install-deps.sh (npm ci there)"
        );
    }
    dir
}

/// Where a test's screenshots go: target/screenshots/<backend>/.
fn screenshots(backend: Backend) -> String {
    let dir = testkit::workspace_root().join("target/screenshots").join(format!("{backend:?}").to_lowercase());
    std::fs::create_dir_all(&dir).unwrap();
    dir.display().to_string()
}

/// A queue-api beside the stack's, on the same Valkey, with flags of its own; killed
/// when dropped.
struct ExtraApi {
    child: std::process::Child,
    url: String,
}

impl ExtraApi {
    async fn start(stack: &Stack, flags: &[&str]) -> ExtraApi {
        let port = testkit::free_port();
        let url = format!("http://127.0.0.1:{port}");
        let child = std::process::Command::new(testkit::release_binary("queue-api"))
            .args(["--valkey-url", &stack.valkey.url(), "--listen", &format!("127.0.0.1:{port}"), "--rate-limit", "0"])
            .args(flags)
            .env("RUST_LOG", "warn")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("start queue-api");
        let api = ExtraApi { child, url };
        let deadline = std::time::Instant::now() + Duration::from_secs(15);
        loop {
            let health = reqwest::get(format!("{}/healthz", api.url)).await;
            if let Ok(r) = health {
                if r.json::<serde_json::Value>().await.is_ok_and(|h| h["valkey"] == "up") {
                    return api;
                }
            }
            assert!(std::time::Instant::now() < deadline, "queue-api {flags:?} did not come up");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for ExtraApi {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A back-office call to the stack's queue-api.
async fn admin(stack: &Stack, method: reqwest::Method, path: &str, body: serde_json::Value) -> serde_json::Value {
    let r = reqwest::Client::new()
        .request(method, format!("{}{path}", stack.api.url()))
        .bearer_auth(e2e::ADMIN_TOKEN)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{path}: {}", r.status());
    r.json().await.unwrap()
}

/// The waiting room as people see it (tests/browser/pages.mjs): in Korean by
/// Accept-Language and in English by ?lang=, joined with the keyboard, the total from
/// the first push event and formatted for each language, the progress bar moving and
/// "you are next" as the people ahead are admitted, the person's turn and the admit
/// URL (`--admit-url`, relative, with ticketId, queue and return), the paused state; a
/// branded queue and a replaced template (`--templates`); axe-core clean, nothing
/// blocked by the Content-Security-Policy, nothing asked of another origin, usable at
/// 320 px.
async fn the_waiting_room_in_two_languages_branded_and_accessible(backend: Backend) {
    let dir = browser_dir();
    // Silent people are never dropped here (the crowd behind never polls).
    let opts = StackOptions { soft_cap: 1, ticket_ttl_ms: 300_000, abandon_after_ms: 600_000, ..Default::default() };
    let stack = Stack::start(backend, opts).await;
    let q = stack.queue.clone();
    let api = Api::new(Api::http_client(), &stack.api.url(), &q, None);
    let holder = api.enter("holder").await.unwrap();
    assert_eq!(holder.status, Status::Promoted);
    for ahead in ["ahead-1", "ahead-2"] {
        stack.call("QUEUE.ENTER", &[&q, ahead, ahead]);
    }
    let chat = stack.chat.url();
    let room = ExtraApi::start(&stack, &["--admit-url", "default=/landing?from=room", "--chat-url", &chat]).await;
    // A queue with an admit URL asks no nickname by default: this one asks (the form).
    admin(&stack, reqwest::Method::PUT, "/api/admin/queues/default/brand", serde_json::json!({"nickname": "ask"}))
        .await;
    let template = dir.join("template").display().to_string();
    let templated = ExtraApi::start(&stack, &["--templates", &template]).await;
    let script = dir.join("pages.mjs").display().to_string();
    let (mut node, mut out) =
        start_piped("node", &[script, room.url.clone(), templated.url.clone(), screenshots(backend)]);
    out.expect("the Korean person at 3", |l| l == "KO_WAITING 3").await;
    out.expect("the English person at 4", |l| l == "EN_WAITING 4").await;

    // A crowd behind them: only the total changes for both.
    let mut c = stack.valkey.client();
    for i in 0..1500 {
        let id = format!("crowd-{i}");
        c.call("QUEUE.ENTER", &[&q, &id, "c"]).unwrap();
    }
    let total = stack.info()["waiting"];
    assert_eq!(total, 1504);
    type_line(&mut node, &format!("crowd {total}")).await;
    out.expect("the totals, formatted", |l| l == "TOTALS 전체 대기 1,504명 | of 1,504 waiting").await;
    out.expect("axe-core on both pages", |l| l.starts_with("AXE_WAITING ")).await;

    // The people ahead are admitted one by one.
    stack.call("QUEUE.LEAVE", &[&q, &holder.user_id]);
    type_line(&mut node, "admit").await;
    let progress = out.expect("the bar to move", |l| l.starts_with("PROGRESS ")).await;
    assert_eq!(progress, "PROGRESS 33", "from third to second");
    stack.call("QUEUE.LEAVE", &[&q, "ahead-1"]);
    type_line(&mut node, "admit").await;
    out.expect("you are next", |l| l == "NEXT").await;
    stack.call("QUEUE.LEAVE", &[&q, "ahead-2"]);
    type_line(&mut node, "admit").await;
    let admitted = out.expect("the admit URL", |l| l.starts_with("ADMITTED ")).await;
    let url = reqwest::Url::parse(&admitted["ADMITTED ".len()..]).unwrap();
    let query: std::collections::HashMap<String, String> = url.query_pairs().into_owned().collect();
    assert_eq!((url.path(), url.origin().ascii_serialization()), ("/landing", room.url.clone()), "{url}");
    assert_eq!((query["from"].as_str(), query["queue"].as_str()), ("room", "default"), "{url}");
    assert_eq!(query["return"], "/shop/item?id=7", "{url}");
    assert!(query["ticketId"].contains('.'), "{url}");

    // Paused in the back office.
    admin(&stack, reqwest::Method::POST, "/api/admin/queues/default/pause", serde_json::json!({})).await;
    type_line(&mut node, "paused").await;
    out.expect("the paused state", |l| l == "PAUSED").await;

    // A branded queue, and the brand title through the replaced template (escaped).
    let brand = serde_json::json!({
        "title": "봄 콘서트 예매", "message": "공연 예매 대기열입니다. 순서대로 입장합니다.",
        "accent": "#b91c1c", "background": "#fff7ed",
    });
    admin(&stack, reqwest::Method::POST, "/api/admin/queues", serde_json::json!({"queue": "spring"})).await;
    admin(&stack, reqwest::Method::PUT, "/api/admin/queues/spring/brand", brand.clone()).await;
    let template_title = "Shop <b> & \"Co\"";
    admin(
        &stack,
        reqwest::Method::PUT,
        "/api/admin/queues/default/brand",
        serde_json::json!({"title": template_title}),
    )
    .await;
    let told = serde_json::json!({
        "queue": "spring", "title": brand["title"], "message": brand["message"],
        "accentRgb": "rgb(185, 28, 28)", "backgroundRgb": "rgb(255, 247, 237)",
        "templateQueue": "default", "templateTitle": template_title,
    });
    type_line(&mut node, &format!("brand {told}")).await;
    out.expect("the branded page", |l| l == "BRANDED").await;
    out.expect("the replaced template, working", |l| l.starts_with("TEMPLATE ")).await;
    out.expect("the browser to close", |l| l == "CLOSED").await;
    exits_cleanly(&mut node, &out).await;
}

/// The back office (tests/browser/admin.mjs) while `queue-cli swarm` runs: a wrong
/// token refused, the counts moving, a soft cap raised in the form and more people
/// let in, an invalid value shown at its field, pause stopping admissions and resume
/// restarting them, an opening scheduled and its commitment the one published; each
/// change counted.
async fn the_back_office_in_a_real_browser(backend: Backend) {
    let dir = browser_dir();
    let opts = StackOptions { soft_cap: 3, ticket_ttl_ms: 5_000, abandon_after_ms: 60_000, ..Default::default() };
    let stack = Stack::start(backend, opts).await;
    // Someone entered once, so the queue is known to the back office.
    let api = Api::new(Api::http_client(), &stack.api.url(), &stack.queue, None);
    let first = api.enter("first").await.unwrap();
    stack.call("QUEUE.LEAVE", &[&stack.queue, &first.user_id]);
    let script = dir.join("admin.mjs").display().to_string();
    let (mut node, mut out) =
        start_piped("node", &[script, stack.api.url(), e2e::ADMIN_TOKEN.into(), screenshots(backend)]);
    out.expect("a wrong token refused", |l| l == "REFUSED").await;
    out.expect("signed in", |l| l == "SIGNED_IN").await;

    let swarm = tokio::process::Command::new(e2e::client_binary())
        .args(["swarm", "--api", &stack.api.url(), "--chat", &stack.chat.url(), "--queue", &stack.queue])
        .args(["--users", "150", "--rate", "25", "--stay-secs", "2", "--abandon", "0", "--race", "0", "--replay", "0"])
        .args(["--polling", "0", "--timeout-secs", "120", "--quiet", "--json"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("start queue-cli swarm");
    type_line(&mut node, "swarm").await;
    out.expect("the counts to move", |l| l.starts_with("COUNTS ")).await;

    type_line(&mut node, "cap 8").await;
    out.expect("the soft cap saved", |l| l == "SOFT_CAP 8").await;
    assert_eq!(stack.info()["soft_cap"], 8);
    stack
        .eventually("more than the old cap let in", |s| {
            let i = s.info();
            i["active"] + i["joining"] > 3
        })
        .await;
    let invalid = out.expect("the invalid value at its field", |l| l.starts_with("INVALID ")).await;
    assert!(invalid.contains("soft_cap"), "{invalid}");
    assert_eq!(stack.info()["soft_cap"], 8, "the refused value changed nothing");

    type_line(&mut node, "pause").await;
    out.expect("paused", |l| l == "PAUSED").await;
    let promoted = stack.info()["promoted"];
    tokio::time::sleep(Duration::from_secs(3)).await;
    let info = stack.info();
    assert_eq!((info["soft_cap"], info["promoted"]), (0, promoted), "nobody let in while paused: {info:?}");
    assert!(info["waiting"] > 0, "people were waiting meanwhile: {info:?}");
    type_line(&mut node, "resume").await;
    out.expect("resumed", |l| l == "RESUMED").await;
    assert_eq!(stack.info()["soft_cap"], 8, "resume restores the cap it had");
    stack.eventually("admissions again", |s| s.info()["promoted"] > promoted).await;

    out.expect("the chart", |l| l.starts_with("CHART ")).await;
    out.expect("axe-core on the back office", |l| l.starts_with("AXE ")).await;
    type_line(&mut node, "opening later").await;
    let shown = out.expect("the commitment", |l| l.starts_with("COMMITMENT ")).await;
    let published: serde_json::Value =
        reqwest::get(format!("{}/api/queue/opening?queue=later", stack.api.url())).await.unwrap().json().await.unwrap();
    assert_eq!(shown, format!("COMMITMENT {}", published["commitment"].as_str().unwrap()), "{published}");
    out.expect("the browser to close", |l| l == "CLOSED").await;
    exits_cleanly(&mut node, &out).await;
    drop(swarm);

    let metrics = reqwest::get(format!("{}/metrics", stack.api.url())).await.unwrap().text().await.unwrap();
    let count = |action: &str| {
        let prefix = format!("queue_api_admin_changes_total{{action=\"{action}\"}} ");
        metrics.lines().find_map(|l| l.strip_prefix(&prefix)).map_or(0, |n| n.parse::<u64>().unwrap())
    };
    assert_eq!((count("settings"), count("pause"), count("resume")), (2, 1, 1), "{metrics}");
}

/// One person per admitted visitor (tests/browser/back.mjs), behind the gate in proxy
/// mode: a person sent from the app to the waiting room joins as the page loads (no
/// form: the gate's queue asks no nickname), is admitted and lands in
/// the app; Back takes them to the app again as the same person (X-Queue-User), not to
/// the room with an empty form; a bookmark of the room in a second tab too; an entry
/// the browser sends to the room's API anyway gets its own place back (the place
/// cookie). No second place is taken at any point.
async fn back_after_admission_returns_to_the_app(backend: Backend) {
    let dir = browser_dir();
    let stack = Stack::start(backend, StackOptions { soft_cap: 3, ..Default::default() }).await;
    // The room as the gate serves it: admitted people go on to the gate's claim.
    let room = ExtraApi::start(&stack, &["--admit-url", "default=/gate/claim"]).await;
    let scratch = harness::Scratch::new("browser-back");
    let app = harness::upstream(&scratch).await;
    let options = harness::GateOptions {
        routes: vec![("/checkout".into(), stack.queue.clone())],
        tick_ms: 200,
        idle_s: 120,
        token_ttl_s: 120,
        extra: Vec::new(),
    };
    let valkey = ["--valkey-url".to_string(), stack.valkey.url()];
    let gate = harness::gate(&scratch, &valkey, &room.url, &app, harness::Front::Proxy, &options).await;

    let script = dir.join("back.mjs").display().to_string();
    let (mut node, mut out) = start_piped("node", &[script, gate.url()]);
    let admitted = out.expect("the app, once admitted", |l| l.starts_with("ADMITTED ")).await;
    let user = admitted["ADMITTED ".len()..].to_string();
    let counts = |s: &Stack| {
        let i = s.info();
        (i["waiting"], i["joining"], i["active"], i["promoted"])
    };
    assert_eq!(counts(&stack), (0, 0, 1, 1), "alice is inside");
    let back = out.expect("Back after admission", |l| l.starts_with("BACK")).await;
    assert_eq!(back, format!("BACK {user}"), "Back lands in the app as the same person");
    let tab = out.expect("the room's bookmark in a second tab", |l| l.starts_with("TAB")).await;
    assert_eq!(tab, format!("TAB {user}"));
    let entry = out.expect("an entry from the same browser", |l| l.starts_with("ENTRY ")).await;
    assert_eq!(entry, format!("ENTRY ACTIVE {user}"), "the browser's own place, not a second one");
    assert_eq!(counts(&stack), (0, 0, 1, 1), "no second place taken");
    type_line(&mut node, "close").await;
    out.expect("the browser to close", |l| l == "CLOSED").await;
    exits_cleanly(&mut node, &out).await;
}

/// The formless room (tests/browser/formless.mjs): a queue whose people go on to an app
/// (`--admit-url`) asks no nickname, so the page enters as it loads, in Korean and in
/// English; a second tab and a reload show the same place and enter nobody again;
/// another browser given the first one's userId gets a place of its own, not that
/// one; promoted, the page goes on to the admit URL at once (under a second from the
/// turn shown, where it waited 1.5 s before); axe-core clean.
async fn the_formless_room_enters_by_itself_and_goes_on_at_once(backend: Backend) {
    let dir = browser_dir();
    let opts = StackOptions { soft_cap: 1, ticket_ttl_ms: 300_000, abandon_after_ms: 600_000, ..Default::default() };
    let stack = Stack::start(backend, opts).await;
    let api = Api::new(Api::http_client(), &stack.api.url(), &stack.queue, None);
    let holder = api.enter("holder").await.unwrap();
    assert_eq!(holder.status, Status::Promoted);
    let room = ExtraApi::start(&stack, &["--admit-url", "default=/landing?from=room"]).await;
    let script = dir.join("formless.mjs").display().to_string();
    let (mut node, mut out) = start_piped("node", &[script, room.url.clone(), screenshots(backend)]);
    out.expect("the Korean person in line without a form", |l| l == "KO_WAITING 1").await;
    out.expect("the same place in a second tab", |l| l == "KO_TAB 1").await;
    out.expect("the same place after a reload", |l| l == "KO_RELOADED 1").await;
    out.expect("the English person behind", |l| l == "EN_WAITING 2").await;
    let copied = out.expect("a copied id in another browser", |l| l.starts_with("COPIED ")).await;
    assert_eq!(copied, "COPIED 3 other", "a copied userId alone does not carry the place");
    out.expect("axe-core on both pages", |l| l.starts_with("AXE ")).await;
    let info = stack.info();
    assert_eq!((info["waiting"], info["joining"]), (3, 1), "one place per browser: {info:?}");

    stack.call("QUEUE.LEAVE", &[&stack.queue, &holder.user_id]);
    type_line(&mut node, "admit").await;
    let admitted = out.expect("on to the admit URL", |l| l.starts_with("ADMITTED ")).await;
    let mut words = admitted["ADMITTED ".len()..].split(' ');
    let ms: u64 = words.next().unwrap().parse().unwrap();
    let url = reqwest::Url::parse(words.next().unwrap()).unwrap();
    eprintln!("from the turn shown to the admit URL asked: {ms} ms");
    assert!(ms < 1000, "the page went on {ms} ms after the turn was shown");
    let query: std::collections::HashMap<String, String> = url.query_pairs().into_owned().collect();
    assert_eq!((url.path(), query["return"].as_str()), ("/landing", "/shop/item?id=7"), "{url}");
    type_line(&mut node, "close").await;
    out.expect("the browser to close", |l| l == "CLOSED").await;
    exits_cleanly(&mut node, &out).await;
}

/// The back office at 360 px (tests/browser/office.mjs), served by a queue-api whose
/// queue sends admitted people to the gate's claim: without a gate it offers no room
/// link that would end at a claim nobody serves; once a gate (proxy mode, route
/// /checkout) runs, the queue shows that route and its room link opens the room
/// through the gate. Durations shown and typed as durations (a ticket lifetime saved
/// as "90s" is 90000 ms in the store), no sideways scrolling, axe-core clean.
async fn the_back_office_at_phone_width_with_a_gate(backend: Backend) {
    let dir = browser_dir();
    let opts = StackOptions { soft_cap: 3, ticket_ttl_ms: 150_000, ..Default::default() };
    let stack = Stack::start(backend, opts).await;
    let admit = format!("{}=/gate/claim", stack.queue);
    let office = ExtraApi::start(&stack, &["--admit-url", &admit, "--admin-token", e2e::ADMIN_TOKEN]).await;
    let script = dir.join("office.mjs").display().to_string();
    let (mut node, mut out) = start_piped(
        "node",
        &[script, office.url.clone(), e2e::ADMIN_TOKEN.into(), stack.queue.clone(), screenshots(backend)],
    );
    out.expect("signed in", |l| l == "SIGNED_IN").await;
    out.expect("no room link without a gate", |l| l.starts_with("NO_GATE ")).await;

    let scratch = harness::Scratch::new("browser-office");
    let app = harness::upstream(&scratch).await;
    let options = harness::GateOptions {
        routes: vec![("/checkout".into(), stack.queue.clone())],
        tick_ms: 200,
        idle_s: 120,
        token_ttl_s: 120,
        extra: Vec::new(),
    };
    let valkey = ["--valkey-url".to_string(), stack.valkey.url()];
    let gate = harness::gate(&scratch, &valkey, &office.url, &app, harness::Front::Proxy, &options).await;
    type_line(&mut node, &format!("gate {}", gate.url())).await;
    out.expect("the gate's route and the room through it", |l| l.starts_with("ROUTE ")).await;
    let shown = out.expect("a duration shown as one", |l| l.starts_with("DURATION ")).await;
    assert_eq!(shown, "DURATION 2 min 30 s");
    out.expect("90s saved", |l| l == "SAVED 1 min 30 s").await;
    assert_eq!(stack.info()["ticket_ttl"], 90_000);
    out.expect("a bad duration refused at its field", |l| l.starts_with("BAD ")).await;
    assert_eq!(stack.info()["ticket_ttl"], 90_000, "the refused duration changed nothing");
    let width = out.expect("no sideways scrolling", |l| l.starts_with("WIDTH ")).await;
    let axe = out.expect("axe-core at 360 px", |l| l.starts_with("AXE ")).await;
    let room = out.expect("the room through the gate", |l| l.starts_with("ROOM ")).await;
    eprintln!("back office at 360 px: {width}, {axe}, {room}");
    out.expect("the browser to close", |l| l == "CLOSED").await;
    exits_cleanly(&mut node, &out).await;
}

/// A sale's end on open pages (tests/browser/sale.mjs), in English and Japanese: the
/// operator's message shows without a reload; sold out says so and offers to leave;
/// closed says the sale has ended, to people in line and to a newcomer (no form);
/// the message cleared is gone. axe-core clean in every state.
async fn a_sales_end_shows_on_open_pages_in_two_languages(backend: Backend) {
    let dir = browser_dir();
    // The script sets soft cap 0 (nobody let in) before anyone enters.
    let stack = Stack::start(backend, StackOptions::default()).await;
    let office = ExtraApi::start(&stack, &["--admin-token", e2e::ADMIN_TOKEN]).await;
    let script = dir.join("sale.mjs").display().to_string();
    let (mut node, mut out) = start_piped(
        "node",
        &[script, office.url.clone(), e2e::ADMIN_TOKEN.into(), stack.queue.clone(), screenshots(backend)],
    );
    out.expect("two people waiting", |l| l == "WAITING 1 2").await;
    let message = out.expect("the message on both pages", |l| l.starts_with("MESSAGE ")).await;
    let sold_out = out.expect("sold out on both pages", |l| l.starts_with("SOLD_OUT ")).await;
    out.expect("the English person left", |l| l == "LEFT").await;
    let closed = out.expect("closed on the pages", |l| l.starts_with("CLOSED ")).await;
    out.expect("a newcomer told, no form", |l| l == "NEWCOMER").await;
    assert_eq!(stack.info()["waiting"], 1, "nobody new got in: {:?}", stack.info());
    out.expect("the message cleared", |l| l.starts_with("CLEARED ")).await;
    let axe = out.expect("axe-core in every state", |l| l.starts_with("AXE ")).await;
    eprintln!("a sale's end on open pages: {message}, {sold_out}, {closed}, {axe}");
    out.expect("the browser to close", |l| l == "DONE").await;
    exits_cleanly(&mut node, &out).await;
}
