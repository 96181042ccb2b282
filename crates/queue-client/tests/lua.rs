//! The client against servers without the module: it installs and then uses the Lua
//! functions library.

mod common;

use common::{
    bare_server, error_mapping, eventually, fast_options, installed_version, kill_and_expect_fast_failures,
    library_at_version, library_code, resp3, round_trip,
};
use queue_client::QueueError;
use queue_client::{Backend, ClientError, QueueClient, Status, LIBRARY_VERSION};
use std::time::Duration;
use testkit::ValkeyServer;

fn load(server: &ValkeyServer, code: &str) {
    redis::cmd("FUNCTION").arg("LOAD").arg("REPLACE").arg(code).query::<String>(&mut server.conn()).unwrap();
}

#[tokio::test]
async fn loads_the_library_on_a_bare_server() {
    let server = bare_server();
    assert_eq!(library_code(&mut server.conn()), None);

    let client = QueueClient::connect(&server.url()).await.unwrap();
    assert_eq!(client.backend(), Backend::Lua);
    let code = library_code(&mut server.conn()).expect("the library was loaded");
    assert!(!code.contains("__QUEUE_ENTROPY__"), "entropy was injected");
    assert_eq!(installed_version(&mut server.conn()), LIBRARY_VERSION);

    // The commands work through the functions.
    let q = "lua";
    let a = client.enter(q, "u-1", "alice").await.unwrap();
    assert_eq!(a.status, Status::Promoted, "{a:?}");
    client.config_set(q, &[("soft_cap", 1)]).await.unwrap();
    let b = client.enter(q, "u-2", "bob").await.unwrap();
    assert_eq!((b.status, b.rank), (Status::Waiting, 1));
    assert_eq!(client.status(q, "u-2").await.unwrap().rank, 1);
    client.claim(q, a.ticket_id.as_deref().unwrap()).await.unwrap();
    // The freed slot goes to u-2 inside SESSION.END.
    assert!(client.end_session(q, "u-1").await.unwrap());
    assert_eq!(client.promote(q, None).await.unwrap().promoted, 0);
    let t = client.status(q, "u-2").await.unwrap().ticket_id.expect("bob's ticket");
    assert_eq!(client.claim(q, &t).await.unwrap().user_id, "u-2");
}

#[tokio::test]
async fn a_second_client_finds_the_library_and_does_not_reload() {
    let server = bare_server();
    let first = QueueClient::connect(&server.url()).await.unwrap();
    let code = library_code(&mut server.conn()).unwrap();
    let ticket = first.enter("keep", "u-1", "n").await.unwrap().ticket_id.unwrap();

    let second = QueueClient::connect(&server.url()).await.unwrap();
    assert_eq!(second.backend(), Backend::Lua);
    assert_eq!(library_code(&mut server.conn()).unwrap(), code, "same code, same entropy: not reloaded");
    assert_eq!(second.claim("keep", &ticket).await.unwrap().user_id, "u-1");
}

#[tokio::test]
async fn an_outdated_library_is_replaced_and_a_newer_one_kept() {
    let server = bare_server();
    load(&server, &library_at_version("0"));
    assert_eq!(installed_version(&mut server.conn()), "0");
    let client = QueueClient::connect(&server.url()).await.unwrap();
    assert_eq!(client.backend(), Backend::Lua);
    assert_eq!(installed_version(&mut server.conn()), LIBRARY_VERSION);

    let newer = format!("{LIBRARY_VERSION}.1");
    load(&server, &library_at_version(&newer));
    let client = QueueClient::connect(&server.url()).await.unwrap();
    assert_eq!(client.backend(), Backend::Lua);
    assert_eq!(installed_version(&mut server.conn()), newer, "an old client does not downgrade");
    assert_eq!(client.enter("q", "u", "n").await.unwrap().status, Status::Promoted);
}

#[tokio::test]
async fn every_call_round_trips_resp2() {
    let server = bare_server();
    let client = QueueClient::connect(&server.url()).await.unwrap();
    round_trip(&client, "rt").await;
}

#[tokio::test]
async fn every_call_round_trips_resp3() {
    let server = bare_server();
    let client = QueueClient::connect(&resp3(&server.url())).await.unwrap();
    assert_eq!(client.backend(), Backend::Lua);
    round_trip(&client, "rt3").await;
}

#[tokio::test]
async fn errors_map_to_variants() {
    let server = bare_server();
    let client = QueueClient::connect(&server.url()).await.unwrap();
    error_mapping(&client, "errs").await;

    redis::cmd("SET").arg("queue:{wt}:waiting").arg("x").query::<()>(&mut server.conn()).unwrap();
    assert_eq!(client.enter("wt", "u", "n").await.unwrap_err(), ClientError::Refused(QueueError::WrongType));
}

#[tokio::test]
async fn a_flushed_library_is_loaded_again_on_the_next_call() {
    let server = bare_server();
    let client = QueueClient::connect(&server.url()).await.unwrap();
    redis::cmd("FUNCTION").arg("FLUSH").query::<()>(&mut server.conn()).unwrap();
    assert_eq!(client.enter("f", "u", "n").await.unwrap().status, Status::Promoted);
    assert_eq!(installed_version(&mut server.conn()), LIBRARY_VERSION);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn survives_the_server_going_away_and_coming_back_empty() {
    let mut server = bare_server();
    let options = fast_options();
    let client = QueueClient::connect_with(&server.url(), options.clone()).await.unwrap();
    client.enter("rc", "u-1", "n").await.unwrap();

    kill_and_expect_fast_failures(&mut server, &client, &options).await;

    // Back empty, without its functions: the client reconnects and loads them again.
    server.restart();
    assert_eq!(library_code(&mut server.conn()), None);
    let back = eventually(Duration::from_secs(20), || client.enter("rc", "u-2", "n")).await.unwrap();
    assert_eq!(back.status, Status::Promoted);
    assert_eq!(installed_version(&mut server.conn()), LIBRARY_VERSION);
}

#[tokio::test]
async fn a_service_user_limited_to_fcall_still_finds_the_library() {
    let server = ValkeyServer::start(testkit::Backend::Lua);
    let code = library_code(&mut server.conn()).unwrap();
    // The functions run their commands as the user: everything but FUNCTION and MODULE.
    redis::cmd("ACL")
        .arg(&["SETUSER", "svc", "on", ">pw", "~*", "+@all", "-function", "-module"][..])
        .query::<()>(&mut server.conn())
        .unwrap();
    let url = format!("redis://svc:pw@127.0.0.1:{}/", server.port);
    let client = QueueClient::connect(&url).await.unwrap();
    assert_eq!(client.backend(), Backend::Lua, "MODULE and FUNCTION LIST are forbidden: found by asking queue_version");
    assert_eq!(library_code(&mut server.conn()).unwrap(), code, "not reloaded");
    assert_eq!(client.enter("acl", "u", "n").await.unwrap().status, Status::Promoted);
}

#[tokio::test]
async fn a_user_who_may_not_load_functions_gets_a_clear_error() {
    let server = bare_server();
    redis::cmd("ACL")
        .arg(&["SETUSER", "svc", "on", ">pw", "~*", "+fcall", "+fcall_ro", "+ping"][..])
        .query::<()>(&mut server.conn())
        .unwrap();
    let url = format!("redis://svc:pw@127.0.0.1:{}/", server.port);
    match QueueClient::connect(&url).await.unwrap_err() {
        ClientError::Unavailable(why) => assert!(why.contains("cannot load the queue library"), "{why}"),
        other => panic!("{other:?}"),
    }
}
