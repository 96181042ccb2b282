//! Replicas and the AOF hold exactly the primary's state, although commands read
//! the clock and draw random ticket ids.

use std::time::Duration;
use testkit::{digest, field_int, field_str, Backend, Client, ValkeyServer};

testkit::backend_tests!(
    a_live_replica_ends_with_the_primary_state,
    a_restart_from_the_aof_restores_order_tickets_and_leases
);

/// Every kind of write, including clock reads (leases, seen times, expiries) and
/// random ids (tickets), plus drops, expiries and lapses.
fn mixed_workload(c: &mut Client) {
    c.config_set("q", &[("soft_cap", 6), ("ticket_ttl", 300), ("session_lease", 400), ("abandon_after", 0)]);
    c.config_set("r", &[("rate", 50), ("burst", 3)]);
    for i in 0..40 {
        let u = format!("u{i}");
        let r = c.enter("q", &u, &format!("nick {i}"));
        if i % 3 == 0 {
            if let Some(t) = field_str(&r, "ticketId") {
                c.claim("q", &t).unwrap();
            }
        }
        c.enter("r", &u, "r");
        if i % 5 == 0 {
            c.status("q", &format!("u{}", i / 2));
            c.leave("q", &format!("u{}", i / 3));
        }
        if i % 7 == 0 {
            c.promote("q", None);
            c.promote("r", Some(2));
            c.heartbeat("q", &["u0", "u3", "u6"]);
            c.end("q", "u3");
        }
    }
    c.enter("q", "u5", "again");
    // Let tickets expire and leases lapse, then reap them.
    std::thread::sleep(Duration::from_millis(450));
    c.promote("q", None);
    c.promote("r", None);
    for i in 0..5 {
        if let Some(t) = field_str(&c.status("q", &format!("u{}", 10 + i)), "ticketId") {
            let _ = c.claim("q", &t);
        }
    }
    c.call("QUEUE.RANKS", &["q", "u20", "u21", "u22"]).unwrap();
}

fn a_live_replica_ends_with_the_primary_state(b: Backend) {
    let primary = ValkeyServer::start(b);
    let replica = ValkeyServer::builder(b).start_replica_of(&primary);
    let mut rc = replica.conn();
    let mut c = primary.client();
    mixed_workload(&mut c);
    let acked: i64 = redis::cmd("WAIT").arg(1).arg(5000).query(&mut c.con).unwrap();
    assert_eq!(acked, 1);
    let (pd, rd) = (digest(&mut c.con), digest(&mut rc));
    assert_ne!(pd, "0".repeat(40), "the workload wrote something");
    assert_eq!(pd, rd, "replica digest differs from the primary's");
    // The replica answers read-only questions identically.
    let mut r = replica.client();
    let (pi, ri) = (c.info("q"), r.info("q"));
    for f in ["waiting", "joining", "active", "promoted", "claimed", "expired", "left", "ended", "lapsed"] {
        assert_eq!(field_int(&pi, f), field_int(&ri, f), "{f}");
    }
}

fn a_restart_from_the_aof_restores_order_tickets_and_leases(b: Backend) {
    let mut s = ValkeyServer::builder(b).arg("--appendonly").arg("yes").arg("--appendfsync").arg("always").start();
    let mut c = s.client();
    mixed_workload(&mut c);
    // Long-lived state to compare after the restart.
    c.config_set("z", &[("soft_cap", 2), ("session_lease", 60_000), ("ticket_ttl", 60_000)]);
    let t = field_str(&c.enter("z", "in", "i"), "ticketId").unwrap();
    c.claim("z", &t).unwrap();
    let ticket = field_str(&c.enter("z", "next", "n"), "ticketId").unwrap();
    for i in 0..20 {
        c.enter("z", &format!("w{i}"), "w");
    }
    let before = digest(&mut c.con);
    let ranks: Vec<i64> = (0..20).map(|i| field_int(&c.status("z", &format!("w{i}")), "rank")).collect();
    s.restart();
    let mut c = s.client();
    assert_eq!(digest(&mut c.con), before, "AOF replay must restore the exact state");
    let after: Vec<i64> = (0..20).map(|i| field_int(&c.status("z", &format!("w{i}")), "rank")).collect();
    assert_eq!(after, ranks);
    assert_eq!(ranks, (1..=20).collect::<Vec<_>>());
    assert_eq!(field_str(&c.status("z", "in"), "status").as_deref(), Some("ACTIVE"));
    assert_eq!(field_str(&c.status("z", "next"), "ticketId"), Some(ticket.clone()));
    c.end("z", "in");
    c.claim("z", &ticket).expect("the ticket survived the restart");
    assert_eq!(c.claim("z", &ticket).unwrap_err(), "NOTICKET unknown or already used ticket");
}
