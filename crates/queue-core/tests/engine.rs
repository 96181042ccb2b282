//! Every admission rule, table-driven, on the engine over the in-memory store with a
//! clock the table sets: no server, no sleeping. Each case is a script of steps, each
//! step with the outcome the rules demand. (The same rules run against the real
//! module and Lua library in valkey-module/tests.)

use queue_core::engine::{self, Standing, Store};
use queue_core::memory::MemoryStore;
use std::collections::HashMap;

const T0: i64 = 1_700_000_000_000;

#[derive(Debug, Clone, Copy)]
enum Step {
    /// Settings for the rest of the case.
    Set(&'static [(&'static str, i64)]),
    /// The clock, in ms after T0.
    At(i64),
    /// ENTER user; expect WAITING with that rank, or PROMOTED (rank 0).
    Enter(&'static str, i64),
    /// A line with nobody admitted: soft cap 0, then ENTER each user in turn; expect
    /// WAITING at ranks 1, 2, ...
    Line(&'static [&'static str]),
    /// STATUS user: expected status and rank.
    Status(&'static str, &'static str, i64),
    /// PROMOTE [MAX]: expected promoted and dropped.
    Promote(Option<i64>, i64, i64),
    /// PROMOTE: expected tickets_expired and leases_expired.
    Reaped(i64, i64),
    /// TICKET.CLAIM with the user's latest ticket: Ok, or the error's first word.
    Claim(&'static str, Result<(), &'static str>),
    Leave(&'static str, bool),
    Heartbeat(&'static str, bool),
    End(&'static str, bool),
    /// QUEUE.INFO: waiting, joining, active.
    Counts(i64, i64, i64),
    /// Announcements so far, and the promoted count of the last one.
    Announced(usize, i64),
}
use Step::*;

struct Case {
    name: &'static str,
    steps: &'static [Step],
}

fn ticket_of(st: &Standing) -> Option<String> {
    st.ticket().map(|t| String::from_utf8(t.to_vec()).unwrap())
}

fn run(case: &Case) {
    let mut s = MemoryStore::new(T0, 7);
    let mut tickets: HashMap<&str, String> = HashMap::new();
    for (i, step) in case.steps.iter().enumerate() {
        let at = format!("{}: step {i} {step:?}", case.name);
        let u = |name: &str| name.as_bytes().to_vec();
        match *step {
            Set(pairs) => s.configure(pairs).expect(&at),
            At(ms) => s.now = T0 + ms,
            Enter(user, rank) => {
                let st = engine::enter(&mut s, &u(user), user.as_bytes()).expect(&at);
                if let Some(t) = ticket_of(&st) {
                    tickets.insert(user, t);
                }
                assert_eq!(st.rank(), rank, "{at}: {st:?}");
                assert_eq!(st.status(), if rank == 0 { "PROMOTED" } else { "WAITING" }, "{at}");
            }
            Line(users) => {
                s.configure(&[("soft_cap", 0)]).expect(&at);
                for (i, user) in users.iter().enumerate() {
                    let st = engine::enter(&mut s, &u(user), user.as_bytes()).expect(&at);
                    assert_eq!((st.status(), st.rank()), ("WAITING", i as i64 + 1), "{at}: {user}");
                }
            }
            Status(user, status, rank) => {
                let now = engine::begin_observing(&mut s).expect(&at);
                let st = engine::observe(&mut s, &u(user), now);
                if let Some(t) = ticket_of(&st) {
                    tickets.insert(user, t);
                }
                assert_eq!((st.status(), st.rank()), (status, rank), "{at}");
            }
            Promote(max, promoted, dropped) => {
                let p = engine::promote(&mut s, max).expect(&at);
                assert_eq!((p.promoted, p.dropped), (promoted, dropped), "{at}: {p:?}");
            }
            Reaped(tickets_expired, leases_expired) => {
                let p = engine::promote(&mut s, Some(0)).expect(&at);
                assert_eq!((p.tickets_expired, p.leases_expired), (tickets_expired, leases_expired), "{at}: {p:?}");
            }
            Claim(user, want) => {
                let t = tickets.get(user).cloned().unwrap_or_else(|| "1.AAAAAAAAAAAAAAAA".into());
                let got = engine::claim(&mut s, t.as_bytes());
                match (got, want) {
                    (Ok(c), Ok(())) => assert_eq!(c.user, u(user), "{at}"),
                    (Err(e), Err(word)) => assert_eq!(e.to_string().split(' ').next(), Some(word), "{at}"),
                    (got, want) => panic!("{at}: got {got:?}, want {want:?}"),
                }
            }
            Leave(user, was) => assert_eq!(engine::leave(&mut s, &u(user)).expect(&at), was, "{at}"),
            Heartbeat(user, live) => assert_eq!(engine::heartbeat(&mut s, &[u(user)]).expect(&at), vec![live], "{at}"),
            End(user, was) => assert_eq!(engine::end(&mut s, &u(user)).expect(&at), was, "{at}"),
            Counts(waiting, joining, active) => {
                let i = engine::info(&s).expect(&at);
                assert_eq!((i.waiting, i.joining, i.active), (waiting, joining, active), "{at}: {i:?}");
                assert!(i.active + i.joining <= s.setting(0) || s.setting(0) == 0, "{at}: over the soft cap");
            }
            Announced(n, promoted) => {
                assert_eq!(s.announcements.len(), n, "{at}: {:?}", s.announcements);
                assert_eq!(s.announcements.last().map(|a| a.0), Some(promoted), "{at}");
            }
        }
    }
}

const CASES: &[Case] = &[
    Case {
        name: "fifo: tickets go out in entry order",
        steps: &[
            Line(&["a", "b", "c", "d"]),
            Set(&[("soft_cap", 10)]),
            Promote(Some(1), 1, 0),
            Status("a", "PROMOTED", 0),
            Status("b", "WAITING", 1),
            Promote(Some(2), 2, 0),
            Status("c", "PROMOTED", 0),
            Status("d", "WAITING", 1),
        ],
    },
    Case {
        name: "fifo: re-entry goes to the back, leave moves everyone up",
        steps: &[
            Line(&["a", "b", "c"]),
            Enter("a", 3),
            Status("b", "WAITING", 1),
            Leave("b", true),
            Leave("b", false),
            Status("c", "WAITING", 1),
            Status("a", "WAITING", 2),
            Counts(2, 0, 0),
        ],
    },
    Case {
        name: "fifo: a newcomer after an out-of-order claim is served first",
        steps: &[
            Set(&[("soft_cap", 2), ("ticket_ttl", 60_000), ("session_lease", 60_000)]),
            Enter("a", 0),
            Enter("b", 0),
            Claim("b", Ok(())),
            Enter("c", 1),
            Enter("d", 2),
            End("b", true),
            Promote(None, 0, 0),
            Status("c", "PROMOTED", 0),
            Status("d", "WAITING", 1),
            Counts(1, 2, 0),
            Claim("a", Ok(())),
            Claim("c", Ok(())),
            Counts(1, 0, 2),
        ],
    },
    Case {
        name: "caps: soft cap, MAX and batch_max bound a promotion",
        steps: &[
            Line(&["a", "b", "c", "d", "e"]),
            Set(&[("soft_cap", 3), ("batch_max", 2)]),
            Promote(None, 2, 0),
            Promote(Some(0), 0, 0),
            Promote(None, 1, 0),
            Promote(None, 0, 0),
            Counts(2, 3, 0),
            Status("a", "PROMOTED", 0),
            Claim("a", Ok(())),
            Promote(None, 0, 0),
            End("a", true),
            Status("d", "PROMOTED", 0),
            Promote(None, 0, 0),
        ],
    },
    Case {
        name: "caps: the hard cap refuses a claim and keeps the ticket",
        steps: &[
            Set(&[("hard_cap", 1)]),
            Enter("a", 0),
            Enter("b", 0),
            Claim("a", Ok(())),
            Claim("b", Err("FULL")),
            End("a", true),
            Claim("b", Ok(())),
        ],
    },
    Case {
        name: "token bucket: a burst, then one per 100 ms at rate 10",
        steps: &[
            Line(&["a", "b", "c", "d", "e", "f", "g"]),
            Set(&[("soft_cap", 100), ("rate", 10), ("burst", 3)]),
            Promote(None, 3, 0),
            Promote(None, 0, 0),
            At(99),
            Promote(None, 0, 0),
            At(100),
            Promote(None, 1, 0),
            At(350),
            Promote(None, 2, 0),
            At(50_000),
            Promote(None, 1, 0),
        ],
    },
    Case {
        name: "expiry: an unclaimed ticket frees its slot at ticket_ttl",
        steps: &[
            Set(&[("soft_cap", 1), ("ticket_ttl", 200)]),
            Enter("a", 0),
            Enter("b", 1),
            At(199),
            Promote(None, 0, 0),
            Status("a", "PROMOTED", 0),
            At(200),
            Status("a", "UNKNOWN", 0),
            Claim("a", Err("EXPIRED")),
            Status("b", "PROMOTED", 0),
            Reaped(0, 0),
            Claim("a", Err("NOTICKET")),
            Promote(None, 0, 0),
        ],
    },
    Case {
        name: "expiry: a lease runs out unless heartbeats extend it",
        steps: &[
            Set(&[("soft_cap", 2), ("session_lease", 300)]),
            Enter("a", 0),
            Enter("b", 0),
            Claim("a", Ok(())),
            Claim("b", Ok(())),
            Enter("c", 1),
            At(200),
            Heartbeat("a", true),
            At(299),
            Promote(None, 0, 0),
            At(300),
            Status("b", "UNKNOWN", 0),
            Heartbeat("b", false),
            Status("a", "ACTIVE", 0),
            Reaped(0, 1),
            Promote(None, 1, 0),
            End("b", false),
            End("a", true),
            Counts(0, 1, 0),
        ],
    },
    Case {
        name: "abandonment: silent waiters are dropped after abandon_after, never promoted",
        steps: &[
            Set(&[("abandon_after", 1000)]),
            Line(&["quiet", "talker", "quiet2"]),
            At(600),
            Status("talker", "WAITING", 2),
            At(1000),
            Promote(Some(0), 0, 0),
            At(1001),
            Set(&[("soft_cap", 10)]),
            Promote(None, 1, 2),
            Status("talker", "PROMOTED", 0),
            Status("quiet", "UNKNOWN", 0),
        ],
    },
    Case {
        name: "abandonment: the sweep drops silent users behind the head",
        steps: &[
            Set(&[("abandon_after", 1000)]),
            Line(&["head", "gone", "tail"]),
            At(900),
            Status("head", "WAITING", 1),
            Status("tail", "WAITING", 3),
            At(1600),
            Promote(None, 0, 1),
            Status("tail", "WAITING", 2),
        ],
    },
    Case {
        name: "claim once: a ticket opens one session; re-entry inside waits for the first to end",
        steps: &[
            Enter("a", 0),
            Claim("a", Ok(())),
            Claim("a", Err("NOTICKET")),
            Status("a", "ACTIVE", 0),
            Enter("a", 0),
            Claim("a", Err("INSIDE")),
            End("a", true),
            Claim("a", Ok(())),
            Claim("a", Err("NOTICKET")),
            Counts(0, 0, 1),
        ],
    },
    Case {
        name: "claim once: a ticket given back by leaving no longer claims and its slot is reused",
        steps: &[
            Set(&[("soft_cap", 1)]),
            Enter("a", 0),
            Enter("b", 1),
            Leave("a", true),
            Claim("a", Err("NOTICKET")),
            Status("b", "PROMOTED", 0),
            Promote(None, 0, 0),
            Claim("b", Ok(())),
        ],
    },
    Case {
        name: "freed slot: an ended session's slot goes to the head at once, announced",
        steps: &[
            Set(&[("soft_cap", 2)]),
            Enter("a", 0),
            Enter("b", 0),
            Claim("a", Ok(())),
            Enter("c", 1),
            Enter("d", 2),
            End("a", true),
            Status("c", "PROMOTED", 0),
            Status("d", "WAITING", 1),
            Announced(1, 1),
            Counts(1, 2, 0),
            End("a", false),
            Announced(1, 1),
            Leave("b", true),
            Status("d", "PROMOTED", 0),
            Announced(2, 1),
            Leave("d", true),
            Announced(2, 1),
        ],
    },
    Case {
        name: "freed slot: a ticket given back by re-entering goes to the head",
        steps: &[
            Set(&[("soft_cap", 1)]),
            Enter("a", 0),
            Enter("b", 1),
            Enter("a", 1),
            Status("b", "PROMOTED", 0),
            Counts(1, 1, 0),
        ],
    },
    Case {
        name: "freed slot: the token bucket still bounds promotions",
        steps: &[
            Set(&[("soft_cap", 1), ("rate", 1), ("burst", 1)]),
            Enter("a", 0),
            Enter("b", 1),
            Enter("c", 2),
            Leave("a", true),
            Status("b", "WAITING", 1),
            At(1000),
            Promote(None, 1, 0),
            Status("b", "PROMOTED", 0),
            Claim("b", Ok(())),
            At(1500),
            End("b", true),
            Status("c", "WAITING", 1),
            At(2000),
            Promote(None, 1, 0),
            Counts(0, 1, 0),
        ],
    },
    Case {
        name: "freed slot: silent waiters met on the way are dropped, never promoted",
        steps: &[
            Set(&[("soft_cap", 1), ("abandon_after", 1000)]),
            Enter("a", 0),
            Claim("a", Ok(())),
            Enter("quiet", 1),
            Enter("talker", 2),
            At(900),
            Status("talker", "WAITING", 2),
            At(1500),
            End("a", true),
            Status("talker", "PROMOTED", 0),
            Status("quiet", "UNKNOWN", 0),
            Announced(1, 1),
        ],
    },
    Case {
        name: "freed slot: a claimed ticket that expired before older ones (ttl lowered) is dropped",
        steps: &[
            Set(&[("soft_cap", 2), ("ticket_ttl", 10_000)]),
            Enter("a", 0),
            Set(&[("ticket_ttl", 100)]),
            Enter("b", 0),
            Enter("c", 1),
            At(200),
            Claim("b", Err("EXPIRED")),
            Status("c", "PROMOTED", 0),
            Status("a", "PROMOTED", 0),
            Counts(0, 2, 0),
            Claim("b", Err("NOTICKET")),
        ],
    },
];

#[test]
fn every_rule() {
    for case in CASES {
        run(case);
    }
}

/// The engine promotes on the store it is given only: nothing leaks between stores.
#[test]
fn stores_are_independent() {
    let mut a = MemoryStore::new(T0, 1);
    let mut b = MemoryStore::new(T0, 1);
    engine::enter(&mut a, &b"x".to_vec(), b"x").unwrap();
    assert_eq!(engine::info(&a).unwrap().joining, 1);
    assert_eq!(engine::info(&b).unwrap().joining, 0);
    engine::enter(&mut b, &b"y".to_vec(), b"y").unwrap();
    assert_eq!(b.line().len(), 1);
}

/// TICKET.CLAIM ... HOLDER h: the same holder claiming the same ticket again while
/// the session lives gets the same answer and changes nothing; anyone else does not.
#[test]
fn a_claim_repeated_by_its_holder_answers_again() {
    let mut s = MemoryStore::new(T0, 1);
    let u = b"u".to_vec();
    let Standing::Promoted { ticket, .. } = engine::enter(&mut s, &u, b"una").unwrap() else { panic!("promoted") };
    let first = engine::claim_held(&mut s, &ticket, Some(b"tab-1")).unwrap();
    let before = s.keys("q");
    let again = engine::claim_held(&mut s, &ticket, Some(b"tab-1")).unwrap();
    assert_eq!(again, first);
    assert_eq!(s.keys("q"), before, "a repeat changes nothing");
    for holder in [None, Some(&b"tab-2"[..]), Some(&b"tab-1x"[..])] {
        assert_eq!(
            engine::claim_held(&mut s, &ticket, holder).unwrap_err().to_string().split(' ').next(),
            Some("NOTICKET")
        );
    }
    assert_eq!(engine::info(&s).unwrap().counters[1], 1, "claimed once");
    // The session lapses: the repeat is refused; reaping forgets the claim.
    s.now = T0 + 30_000;
    assert!(engine::claim_held(&mut s, &ticket, Some(b"tab-1")).is_err());
    engine::promote(&mut s, None).unwrap();
    assert!(!s.keys("q").contains_key("queue:{q}:claimed"));
}

/// `entry invite` refuses plain entries, changing nothing.
#[test]
fn an_invite_queue_refuses_plain_entries() {
    let mut s = MemoryStore::new(T0, 1);
    s.set_entry(b"invite").unwrap();
    assert_eq!(engine::enter(&mut s, &b"u".to_vec(), b"u").unwrap_err(), queue_core::QueueError::Invite);
    assert!(s.line().is_empty());
    assert_eq!(s.set_entry(b"nope").unwrap_err(), queue_core::QueueError::InvalidEntry);
    s.set_entry(b"identified").unwrap();
    assert!(engine::enter(&mut s, &b"u".to_vec(), b"u").is_ok());
}

/// QUEUE.INFO's `lane_counts`: per lane, who waits there now and who was promoted
/// from it (PROMOTE, a slot freed inside a command, in at once on entry); the lanes'
/// admissions add up to `promoted`; empty without lanes.
#[test]
fn lane_counts_follow_entries_and_promotions() {
    use engine::{Invitation, LaneCount};
    let mut s = MemoryStore::new(T0, 7);
    let counts = |s: &MemoryStore| -> Vec<(String, i64, i64)> {
        let info = engine::info(s).unwrap();
        info.lane_counts.iter().map(|l| (String::from_utf8(l.lane.clone()).unwrap(), l.waiting, l.admitted)).collect()
    };
    assert_eq!(engine::info(&s).unwrap().lane_counts, Vec::<LaneCount>::new(), "no lanes: empty");
    s.set_lanes(b"presale,general").unwrap();
    // In at once on entry (nobody waits, room): admitted from general.
    s.configure(&[("soft_cap", 1)]).unwrap();
    let st = engine::enter(&mut s, &b"a".to_vec(), b"a").unwrap();
    assert!(st.ticket().is_some());
    assert_eq!(counts(&s), [("presale".into(), 0, 0), ("general".into(), 0, 1)]);
    // Now full: three into general, two into presale.
    for u in ["g1", "g2", "g3"] {
        engine::enter(&mut s, &u.as_bytes().to_vec(), b"n").unwrap();
    }
    let presale = Invitation { lane: Some(b"presale"), code: None };
    for u in ["p1", "p2"] {
        engine::enter_with(&mut s, &u.as_bytes().to_vec(), b"n", presale).unwrap();
    }
    assert_eq!(counts(&s), [("presale".into(), 2, 0), ("general".into(), 3, 1)]);
    // a leaves its ticket: the slot goes to presale's first at once.
    assert!(engine::leave(&mut s, &b"a".to_vec()).unwrap());
    assert_eq!(counts(&s), [("presale".into(), 1, 1), ("general".into(), 3, 1)]);
    // Room for three more: presale's last, then two of general.
    s.configure(&[("soft_cap", 4)]).unwrap();
    assert_eq!(engine::promote(&mut s, None).unwrap().promoted, 3);
    assert_eq!(counts(&s), [("presale".into(), 0, 2), ("general".into(), 1, 3)]);
    let info = engine::info(&s).unwrap();
    assert_eq!(info.lane_counts.iter().map(|l| l.admitted).sum::<i64>(), info.counters[0], "sum is promoted");
    assert_eq!(info.lane_counts.iter().map(|l| l.waiting).sum::<i64>(), info.waiting);
    assert_eq!(s.stat("admitted:presale"), Some(2));
}

/// QUEUE.SOLD Q 0 USER u would mark u as having bought without lowering the
/// inventory, letting one more person in per call: refused, nothing written.
#[test]
fn sold_with_a_user_needs_at_least_one_unit() {
    let mut s = MemoryStore::new(T0, 1);
    s.configure_sale(None, Some(1), None).unwrap();
    let Standing::Promoted { ticket, .. } = engine::enter(&mut s, &b"u".to_vec(), b"u").unwrap() else { panic!() };
    engine::claim(&mut s, &ticket).unwrap();
    let before = s.keys("q");
    let e = engine::sale::sold(&mut s, 0, Some(&b"u".to_vec())).unwrap_err();
    assert_eq!(e.to_string(), "ERR n must be an integer from 1 to 1000000000000");
    assert_eq!(s.keys("q"), before);
    assert_eq!(engine::info(&s).unwrap().outstanding, 1, "u still counts against the inventory");
    // Without a user, 0 is a report of nothing sold: allowed.
    assert_eq!(engine::sale::sold(&mut s, 0, None).unwrap(), Some(1));
}

/// The counter `sold` stops at MAX_SOLD: never wraps, never refuses a sale.
#[test]
fn the_sold_counter_saturates() {
    use engine::sale::MAX_SOLD;
    let mut s = MemoryStore::new(T0, 1);
    let big = queue_core::config::MAX_INVENTORY;
    let calls = MAX_SOLD / big + 2;
    for _ in 0..calls.min(20) {
        engine::sale::sold(&mut s, big, None).unwrap();
    }
    assert_eq!(s.stat("sold"), Some(20 * big));
    // Close to the bound, then over it.
    s.set_stat("sold", MAX_SOLD - 5);
    engine::sale::sold(&mut s, big, None).unwrap();
    assert_eq!(s.stat("sold"), Some(MAX_SOLD));
    engine::sale::sold(&mut s, big, None).unwrap();
    assert_eq!(s.stat("sold"), Some(MAX_SOLD));
    // A value beyond it (written by an older release) is left as it is.
    s.set_stat("sold", i64::MAX);
    assert_eq!(engine::sale::sold(&mut s, big, None).unwrap(), None);
    assert_eq!(s.stat("sold"), Some(i64::MAX));
}

/// QUEUE.WATCH removes the push instances whose lease ended more than
/// INSTANCE_KEEP_MS ago; a live one, and one ended more recently, stay.
#[test]
fn watch_prunes_instances_gone_for_a_day() {
    use queue_core::keys::INSTANCE_KEEP_MS;
    let mut s = MemoryStore::new(T0, 1);
    engine::watch(&mut s, b"gone", 1_000, &[]).unwrap();
    engine::watch(&mut s, b"recent", 1_000, &[]).unwrap();
    engine::watch(&mut s, b"live", 600_000, &[]).unwrap();
    // "recent" renews later, so its lease ends later.
    s.now = T0 + 10_000;
    engine::watch(&mut s, b"recent", 1_000, &[]).unwrap();
    // Exactly INSTANCE_KEEP_MS after "gone" ended: still kept.
    s.now = T0 + 1_000 + INSTANCE_KEEP_MS;
    engine::watch(&mut s, b"live", 600_000, &[]).unwrap();
    assert_eq!(s.instance_lease(b"gone"), Some(T0 + 1_000));
    s.now += 1;
    engine::watch(&mut s, b"live", 600_000, &[]).unwrap();
    assert_eq!(s.instance_lease(b"gone"), None, "gone for longer than the bound: removed");
    assert_eq!(s.instance_lease(b"recent"), Some(T0 + 11_000), "ended more recently: kept");
    assert!(s.instance_lease(b"live").is_some());
}
