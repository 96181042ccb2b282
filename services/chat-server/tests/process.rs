//! The real `chat-server` binary as a child process: a kill -9 leaks no capacity
//! (the leases lapse), a SIGTERM gives every lease back at once.

mod common;

use common::*;
use std::time::{Duration, Instant};
use testkit::{Backend, ValkeyServer};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_leaks_nothing_because_leases_lapse() {
    let s = ValkeyServer::start(Backend::Module);
    let qc = queue_client(&s).await;
    qc.config_set("default", &[("session_lease", 2000)]).await.unwrap();
    let mut p = Process::start(&s.url(), &["--heartbeat", "200ms"], "warn").await;
    let (mut a, _) = Client::join(&game_url(&p.ws(), &ticket(&qc, "default", "u-a", "alice").await, None)).await;
    let (_b, _) = Client::join(&game_url(&p.ws(), &ticket(&qc, "default", "u-b", "bob").await, None)).await;
    // Heartbeats keep the 2 s leases alive past their length.
    tokio::time::sleep(Duration::from_millis(3000)).await;
    assert_eq!(qc.info("default").await.unwrap().active, 2);
    a.say("still here").await;
    a.wait_for("MESSAGE_RECEIVE", |p| p["message"] == "still here").await;

    p.kill9(); // SIGKILL: no close, no SESSION.END
    a.dropped().await;
    let killed = Instant::now();
    let info = wait_active(&qc, "default", 0).await;
    assert!(killed.elapsed() < Duration::from_secs(5), "lapsed within about one lease");
    assert_eq!(info.ended, 0, "nobody ended them: the leases ran out");
    // Their slots are free again: someone new gets in and claims at once.
    assert_eq!(qc.promote("default", None).await.unwrap().leases_expired, 2);
    let t = ticket(&qc, "default", "u-c", "carol").await;
    qc.claim("default", &t).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_closes_sockets_and_ends_every_lease() {
    let s = ValkeyServer::start(Backend::Module);
    let qc = queue_client(&s).await;
    let mut p = Process::start(&s.url(), &["--instance-id", "chat-term"], "warn").await;
    let (mut a, _) = Client::join(&game_url(&p.ws(), &ticket(&qc, "default", "u-a", "alice").await, None)).await;
    let (mut b, _) = Client::join(&game_url(&p.ws(), &ticket(&qc, "default", "u-b", "bob").await, None)).await;
    assert_eq!(qc.info("default").await.unwrap().active, 2);

    p.signal("TERM");
    assert_eq!(a.closed().await, (1001, "server shutting down".to_string()));
    assert_eq!(b.closed().await, (1001, "server shutting down".to_string()));
    assert!(p.exited().await.success());
    // Ended, not lapsed: the leases were 30 s long.
    let info = qc.info("default").await.unwrap();
    assert_eq!((info.active, info.ended), (0, 2));
    let mut conn = s.conn();
    let health: Option<String> =
        redis::cmd("HGET").arg("queue:{default}:health").arg("chat-term").query(&mut conn).unwrap();
    assert_eq!(health, None, "the health signal is withdrawn");
}
