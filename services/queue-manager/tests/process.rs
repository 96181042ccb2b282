//! The real `queue-manager` binary as child processes: crashes (SIGKILL), pauses
//! (SIGSTOP/SIGCONT) and graceful stops (SIGTERM), which an in-process test cannot do.

mod common;

use common::*;
use queue_manager::leader::LEADER_KEY;
use std::process::Command;
use std::time::{Duration, Instant};
use testkit::{Backend, ValkeyServer};

testkit::backend_tests!(a_standby_takes_over_within_two_lease_periods_of_a_crash);

/// Two replicas; the leader is killed outright (no lease release). The standby
/// leads within two lease periods and promotion goes on.
fn a_standby_takes_over_within_two_lease_periods_of_a_crash(backend: Backend) {
    const LEASE_MS: u64 = 1500;
    let server = ValkeyServer::start(backend);
    let mut c = server.client();
    waiting_users(&mut c, "p", "u", 300, &[("batch_max", 1), ("soft_cap", 100_000)]);
    let mut a = Process::start(&server, LEASE_MS, &["--queues", "p"]);
    let mut b = Process::start(&server, LEASE_MS, &["--queues", "p"]);
    block_on(async {
        let leader = eventually(Duration::from_secs(10), async || match (a.is_leader().await, b.is_leader().await) {
            (true, false) => Some('a'),
            (false, true) => Some('b'),
            _ => None,
        })
        .await;
        let leader = leader.unwrap_or_else(|| panic!("no single leader\n{}", Process::log(&server)));
        let (dead, survivor) = if leader == 'a' { (&mut a, &b) } else { (&mut b, &a) };
        let promoting =
            eventually(Duration::from_secs(5), async || (info(&mut c, "p", "promoted") > 0).then_some(())).await;
        assert!(promoting.is_some(), "the leader does not promote\n{}", Process::log(&server));

        let killed_at = Instant::now();
        dead.proc.kill9();
        let took =
            eventually(Duration::from_secs(10), async || survivor.is_leader().await.then(|| killed_at.elapsed()))
                .await
                .unwrap_or_else(|| panic!("the standby never took over\n{}", Process::log(&server)));
        // The lease runs out at most LEASE_MS after the last renewal; the standby tries
        // every LEASE_MS / 3: about 2 s at worst, with room for a busy machine.
        assert!(took < Duration::from_millis(3 * LEASE_MS), "takeover took {took:?}");
        eprintln!("takeover {took:?} after the leader's death (lease {LEASE_MS} ms)");

        let after = info(&mut c, "p", "promoted");
        let goes_on =
            eventually(Duration::from_secs(5), async || (info(&mut c, "p", "promoted") > after).then_some(())).await;
        assert!(goes_on.is_some(), "the new leader does not promote");
    });
}

/// A whole process stopped (SIGSTOP) past its lease while another replica takes
/// the key wakes up (SIGCONT) with ticks overdue and room in the queue: it must not
/// promote. Once the key is free again it leads and promotes.
#[test]
fn a_stopped_process_that_lost_the_lease_does_not_promote() {
    let server = ValkeyServer::start(Backend::Module);
    let mut c = server.client();
    waiting_users(&mut c, "s", "u", 5, &[]);
    let manager = Process::start(&server, 600, &["--queues", "s"]);
    block_on(async {
        let leads = eventually(Duration::from_secs(10), async || manager.is_leader().await.then_some(())).await;
        assert!(leads.is_some(), "never led\n{}", Process::log(&server));
        let token = lease_holder(&server).unwrap();

        manager.signal("STOP");
        let expired = eventually(Duration::from_secs(5), async || lease_holder(&server).is_none().then_some(())).await;
        assert!(expired.is_some(), "the lease of a stopped process never expired");
        another_replica_takes_the_lease(&server);
        c.config_set("s", &[("soft_cap", 100)]);
        // Overdue timers fire at once on waking.
        tokio::time::sleep(Duration::from_millis(300)).await;
        manager.signal("CONT");

        let until = Instant::now() + Duration::from_millis(1000);
        while Instant::now() < until {
            assert_eq!(
                info(&mut c, "s", "promoted"),
                0,
                "promoted after waking without the lease\n{}",
                Process::log(&server)
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let h = manager.healthz().await.expect("healthz after waking");
        assert_eq!(h["leader"], false);
        assert_eq!(lease_holder(&server).as_deref(), Some(OTHER_REPLICA));

        let _: () = redis::cmd("DEL").arg(LEADER_KEY).query(&mut server.conn()).unwrap();
        let resumed =
            eventually(Duration::from_secs(5), async || (info(&mut c, "s", "promoted") == 5).then_some(())).await;
        assert!(resumed.is_some(), "never promoted after regaining the lease\n{}", Process::log(&server));
        assert_eq!(lease_holder(&server), Some(token));
    });
}

/// SIGTERM: the process stops promoting, deletes its lease key and exits 0.
#[test]
fn sigterm_releases_the_lease_and_exits_cleanly() {
    let server = ValkeyServer::start(Backend::Module);
    let mut manager = Process::start(&server, 60_000, &[]);
    block_on(async {
        let leads = eventually(Duration::from_secs(10), async || manager.is_leader().await.then_some(())).await;
        assert!(leads.is_some(), "never led\n{}", Process::log(&server));
    });
    assert!(lease_holder(&server).is_some());
    manager.signal("TERM");
    let status = manager.wait_exit(Duration::from_secs(10)).expect("did not exit on SIGTERM");
    assert!(status.success(), "{status:?}\n{}", Process::log(&server));
    assert_eq!(lease_holder(&server), None, "a 60 s lease left behind");
    assert!(Process::log(&server).contains("released the leader lease"));
}

/// Bad flags are refused with a usage error before anything starts.
#[test]
fn bad_flags_exit_with_a_usage_error() {
    let bin = env!("CARGO_BIN_EXE_queue-manager");
    for args in [&["--tick-ms", "50"][..], &["--low-load", "0.9", "--high-load", "0.1"], &["--queues", "no spaces"]] {
        let out = Command::new(bin).args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    // Durations take units; the old spellings in milliseconds (above) still count.
    for args in [&["--tick", "50ms"][..], &["--tick", "100"], &["--lease", "100ms"]] {
        let out = Command::new(bin).args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    // The environment is the fallback of every flag, under its old name too.
    for (var, value) in [("TICK_MS", "50"), ("TICK", "50ms")] {
        let out = Command::new(bin).env(var, value).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{var}={value}: {}", String::from_utf8_lossy(&out.stderr));
    }
    let help = Command::new(bin).arg("--help").output().unwrap();
    let text = String::from_utf8_lossy(&help.stdout);
    for flag in
        ["--valkey-url", "VALKEY_URL", "--tick", "--lease", "--adaptive", "--fail-open", "--listen", "--log-format"]
    {
        assert!(text.contains(flag), "--help lacks {flag}");
    }
}
