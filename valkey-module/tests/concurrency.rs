//! Many clients at once: the soft cap is never exceeded and no ticket is claimed twice.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use testkit::{field_int, field_str, Backend, ValkeyServer};

testkit::backend_tests!(capacity_holds_and_tickets_claim_once_under_load);

const SOFT_CAP: i64 = 25;

fn capacity_holds_and_tickets_claim_once_under_load(b: Backend) {
    let s = ValkeyServer::start(b);
    let mut admin = s.client();
    admin.config_set("q", &[("soft_cap", SOFT_CAP), ("ticket_ttl", 2_000), ("session_lease", 1_000)]);
    let stop = Arc::new(AtomicBool::new(false));
    let claimed: Arc<Mutex<HashSet<String>>> = Arc::default();
    let issued: Arc<Mutex<Vec<String>>> = Arc::default();
    let deadline = Instant::now() + Duration::from_secs(6);
    let mut handles = Vec::new();

    // Entrants: join, poll, and collect their tickets. Each polls its own oldest user
    // still waiting (its users are promoted in the order they entered), so tickets are
    // collected however the threads are scheduled.
    for w in 0..4 {
        let (mut c, issued, stop) = (s.client(), issued.clone(), stop.clone());
        handles.push(std::thread::spawn(move || {
            let (mut i, mut oldest) = (0, 0);
            while !stop.load(Ordering::Relaxed) {
                let u = format!("w{w}-{i}");
                let r = c.enter("q", &u, "n");
                if let Some(t) = field_str(&r, "ticketId") {
                    issued.lock().unwrap().push(t);
                }
                i += 1;
                while oldest < i {
                    let r = c.status("q", &format!("w{w}-{oldest}"));
                    if field_str(&r, "status").as_deref() == Some("WAITING") {
                        break;
                    }
                    if let Some(t) = field_str(&r, "ticketId") {
                        issued.lock().unwrap().push(t);
                    }
                    oldest += 1;
                }
            }
        }));
    }
    // Claimers: several race for the same tickets; exactly one may win each.
    for _ in 0..3 {
        let (mut c, issued, claimed, stop) = (s.client(), issued.clone(), claimed.clone(), stop.clone());
        handles.push(std::thread::spawn(move || {
            let mut n = 0usize;
            while !stop.load(Ordering::Relaxed) {
                let t = { issued.lock().unwrap().get(n).cloned() };
                let Some(t) = t else {
                    std::thread::yield_now();
                    continue;
                };
                n += 1;
                if let Ok(r) = c.claim("q", &t) {
                    assert!(claimed.lock().unwrap().insert(t.clone()), "ticket {t} claimed twice");
                    // Half the sessions end politely; the rest just lapse.
                    if n.is_multiple_of(2) {
                        c.end("q", &field_str(&r, "userId").unwrap());
                    }
                }
            }
        }));
    }
    // The admission loop.
    {
        let (mut c, stop) = (s.client(), stop.clone());
        handles.push(std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                c.promote("q", Some(7));
            }
        }));
    }
    // The sampler: active + joining never exceeds the soft cap.
    let mut samples = 0;
    while Instant::now() < deadline {
        let info = admin.info("q");
        let (active, joining) = (field_int(&info, "active"), field_int(&info, "joining"));
        assert!(active + joining <= SOFT_CAP, "over capacity: {active} active + {joining} joining");
        samples += 1;
    }
    stop.store(true, Ordering::Relaxed);
    for h in handles {
        h.join().expect("worker panicked");
    }
    let claimed = claimed.lock().unwrap().len() as i64;
    let info = admin.info("q");
    assert!(samples > 100, "sampled only {samples} times");
    assert!(claimed > SOFT_CAP, "the load test admitted too few users to mean anything: {claimed}");
    assert_eq!(field_int(&info, "claimed"), claimed, "server and clients agree on claims");
}
