//! `queue-cli swarm` through lanes, access codes and the app's login, against the real
//! services on both backends: the swarm makes its signing key and writes the JWKS
//! queue-api is started with, gives the queue the lanes presale,general through the
//! back office, uploads codes, and every audit must come out clean with each kind of
//! entry seen (good codes, codes beyond their uses, unknown codes, second tabs).

use queue_cli::swarm::{self, Access, Login, SwarmConfig};
use std::sync::Arc;
use std::time::Duration;
use testkit::stack::{Services, StackOptions, ADMIN_TOKEN};
use testkit::{Backend, ValkeyServer};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_swarm_through_lanes_codes_and_accounts_audits_clean_on_both_backends() {
    for backend in [Backend::Module, Backend::Lua] {
        let dir = tempfile::tempdir().unwrap();
        let (issuer, audience) = ("https://login.test", "room");
        let login = Login::load_or_create(&dir.path().join("key.pem"), issuer, audience).unwrap();
        let jwks = dir.path().join("jwks.json");
        login.write_jwks(&jwks).unwrap();

        let valkey = ValkeyServer::start(backend);
        let set = ["default", "SET", "soft_cap", "4", "ticket_ttl", "10000", "abandon_after", "5000"];
        valkey.client().call("QUEUE.CONFIG", &set).expect("configure the queue");
        let flags = vec!["--valkey-url".to_string(), valkey.url()];
        let mut api_flags = flags.clone();
        for f in
            ["--identity-jwks", jwks.to_str().unwrap(), "--identity-issuer", issuer, "--identity-audience", audience]
        {
            api_flags.push(f.to_string());
        }
        api_flags.extend(["--identity-cookie".to_string(), "app_session".to_string()]);
        let opts = StackOptions::default();
        let services = Services::start_each([flags.clone(), flags, api_flags], &["default".to_string()], &opts).await;

        let cfg = config(&services, login);
        let report = swarm::run(cfg, |_| {}).await;
        assert!(report.clean() && report.complete(), "{backend:?}:\n{report}");
        let l = report.lanes.clone().expect("the lanes' report");
        assert_eq!(l.lanes, ["presale", "general"]);
        assert_eq!(l.identified_users, 80);
        assert!(l.second_tabs > 0, "{report}");
        assert!(l.code_accepted > 0 && l.code_refused > 0, "{report}");
        assert_eq!(l.code_refused, l.code_refusals_expected, "{report}");
        assert_eq!(l.server_codes_used, Some(l.code_accepted), "{report}");
    }
}

/// A queue-api that does not know the login (started without `--identity-jwks`) takes no
/// notice of the tokens: every second tab gets a place of its own, and the audit says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_second_tab_given_a_second_place_fails_the_swarm() {
    let dir = tempfile::tempdir().unwrap();
    let login = Login::load_or_create(&dir.path().join("key.pem"), "https://login.test", "room").unwrap();
    let valkey = ValkeyServer::start(Backend::Module);
    let set = ["default", "SET", "soft_cap", "4", "ticket_ttl", "10000", "abandon_after", "5000"];
    valkey.client().call("QUEUE.CONFIG", &set).expect("configure the queue");
    let flags = vec!["--valkey-url".to_string(), valkey.url()];
    let services = Services::start(&flags, &["default".to_string()], &StackOptions::default()).await;
    let report = swarm::run(config(&services, login), |_| {}).await;
    let l = report.lanes.clone().expect("the lanes' report");
    assert!(l.second_tabs > 0 && l.two_places == l.second_tabs, "{report}");
    assert!(!report.clean(), "{report}");
    assert!(report.to_string().contains("accounts, two places"), "{report}");
}

/// 80 accounts at 40 a second through a soft cap of 4: 30% with a good code (10 codes of
/// 2 uses), 10% with a code beyond its uses, 10% with an unknown one, 30% open a second
/// tab (token in the cookie).
fn config(services: &Services, login: Login) -> SwarmConfig {
    SwarmConfig {
        api: services.api.url(),
        chat: services.chat.url(),
        queue: "default".into(),
        users: 80,
        rate: 40.0,
        abandon: 0.1,
        leave_politely: 0.5,
        abandon_within: Duration::from_secs(2),
        stay: Duration::from_millis(300),
        messages: 1,
        race: 0.1,
        replay: 0.5,
        polling: 0.5,
        poll_every: Duration::from_millis(200),
        soft_cap: None,
        admin_token: Some(ADMIN_TOKEN.into()),
        timeout: Duration::from_secs(120),
        nickname_prefix: "l".into(),
        forwarded_for: true,
        seed: 7,
        outages: None,
        access: Access {
            lanes: vec!["presale".into(), "general".into()],
            codes: 10,
            code_uses: 2,
            presale: 0.3,
            code_reuse: 0.1,
            code_unknown: 0.1,
            login: Some(Arc::new(login)),
            identity_cookie: Some("app_session".into()),
            second_tab: 0.3,
        },
    }
}
