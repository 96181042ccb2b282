//! QUEUE.PASS on the engine over the in-memory store: a pass happens exactly when
//! ENTER would let the user in at once and the claim of that ticket succeeds, and is
//! then that entry and that claim, write for write; otherwise it writes nothing.
//! Checked on scripted cases and on many random queues, each built twice by the same
//! script: one takes the pass, the other ENTER then TICKET.CLAIM.

use queue_core::engine::{self, Standing, Store};
use queue_core::memory::MemoryStore;
use queue_core::QueueError;

const T0: i64 = 1_700_000_000_000;

fn u(name: &str) -> Vec<u8> {
    name.as_bytes().to_vec()
}

/// PASS, then the change log's entry closed as a server closes it at the command's end.
fn pass(s: &mut MemoryStore, user: &str, holder: Option<&[u8]>) -> Option<(Vec<u8>, Vec<u8>, i64)> {
    let r = engine::pass(s, &u(user), user.as_bytes(), holder).unwrap();
    engine::close_log(s);
    r.map(|(ticket, c)| (ticket, c.user, c.lease_ms))
}

#[test]
fn room_lets_the_visitor_straight_in() {
    let mut s = MemoryStore::new(T0, 3);
    s.configure(&[("soft_cap", 2)]).unwrap();
    let (ticket, user, lease) = pass(&mut s, "a", None).expect("room: in");
    assert_eq!((user, lease), (u("a"), 30_000));
    let info = engine::info(&s).unwrap();
    assert_eq!((info.waiting, info.joining, info.active), (0, 0, 1));
    assert_eq!((s.stat("promoted"), s.stat("claimed")), (Some(1), Some(1)));
    // The ticket is spent.
    assert_eq!(engine::claim(&mut s, &ticket).unwrap_err(), QueueError::NoTicket);
    // Inside already: no second pass, nothing written.
    let before = s.keys("q");
    assert_eq!(pass(&mut s, "a", None), None);
    assert_eq!(s.keys("q"), before);
    assert!(pass(&mut s, "b", None).is_some());
    // Full now: nil, nothing written.
    let before = s.keys("q");
    assert_eq!(pass(&mut s, "c", None), None);
    assert_eq!(s.keys("q"), before, "a refused pass writes nothing");
}

/// Someone waiting is never jumped: the pass is refused even when a slot frees up
/// for the head of the line.
#[test]
fn a_pass_never_jumps_the_line() {
    let mut s = MemoryStore::new(T0, 3);
    s.configure(&[("soft_cap", 0)]).unwrap();
    engine::enter(&mut s, &u("w"), b"w").unwrap();
    s.configure(&[("soft_cap", 5)]).unwrap();
    let before = s.keys("q");
    assert_eq!(pass(&mut s, "x", None), None);
    assert_eq!(s.keys("q"), before);
    // Once the waiter got its ticket, nobody waits: the pass goes through.
    assert_eq!(engine::promote(&mut s, None).unwrap().promoted, 1);
    assert!(pass(&mut s, "x", None).is_some());
    // The waiter holding a ticket may not pass again.
    assert_eq!(pass(&mut s, "w", None), None);
}

/// The rate bucket: one token, one pass; the next waits for a refill.
#[test]
fn a_pass_takes_a_rate_token() {
    let mut s = MemoryStore::new(T0, 3);
    s.configure(&[("soft_cap", 10), ("rate", 1), ("burst", 1)]).unwrap();
    assert!(pass(&mut s, "a", None).is_some());
    let before = s.keys("q");
    assert_eq!(pass(&mut s, "b", None), None, "no token left");
    assert_eq!(s.keys("q"), before);
    s.now += 1_000;
    assert!(pass(&mut s, "b", None).is_some());
}

/// Closed, sold out, invite-only or identified entry, paused, an opening ahead: nil.
#[test]
fn a_queue_not_open_to_plain_entries_refuses_passes() {
    type Setup = fn(&mut MemoryStore);
    let setups: [(&str, Setup); 7] = [
        ("closed", |s| s.configure_sale(Some(T0), None, None).unwrap()),
        ("proof of work", |s| s.configure(&[("pow_difficulty", 1)]).unwrap()),
        ("sold out", |s| s.configure_sale(None, Some(0), None).unwrap()),
        ("invite", |s| s.set_entry(b"invite").unwrap()),
        ("identified", |s| s.set_entry(b"identified").unwrap()),
        ("paused", |s| s.configure(&[("soft_cap", 0)]).unwrap()),
        ("opening ahead", |s| s.configure(&[("opens_at", T0 + 60_000)]).unwrap()),
    ];
    for (name, setup) in setups {
        let mut s = MemoryStore::new(T0, 3);
        setup(&mut s);
        let before = s.keys("q");
        assert_eq!(pass(&mut s, "a", None), None, "{name}");
        assert_eq!(s.keys("q"), before, "{name}: nothing written");
    }
}

/// The inventory counts the session a pass opens: with one unit left, one pass.
#[test]
fn the_inventory_counts_a_pass() {
    let mut s = MemoryStore::new(T0, 3);
    s.configure_sale(None, Some(1), None).unwrap();
    assert!(pass(&mut s, "a", None).is_some());
    assert_eq!(engine::info(&s).unwrap().outstanding, 1);
    assert_eq!(pass(&mut s, "b", None), None);
    // Reported as bought: a unit sold, the inventory at 0: sold out.
    assert_eq!(engine::sale::sold(&mut s, 1, Some(&u("a"))).unwrap(), Some(0));
    assert_eq!(pass(&mut s, "b", None), None);
}

/// A lapsed session reported as bought stops counting as bought when reaped: the
/// decision counts the inventory as reaping leaves it.
#[test]
fn a_lapsed_buyer_is_counted_as_reaping_leaves_it() {
    let mut s = MemoryStore::new(T0, 3);
    s.configure_sale(None, Some(3), None).unwrap();
    assert!(pass(&mut s, "a", None).is_some());
    s.now += 20_000;
    assert!(pass(&mut s, "b", None).is_some());
    // a bought two units: one left, a no longer counts; b still does: no room.
    assert_eq!(engine::sale::sold(&mut s, 2, Some(&u("a"))).unwrap(), Some(1));
    assert_eq!(pass(&mut s, "c", None), None);
    // a's lease lapses (not yet reaped); b's lives. Reaping would drop a and its
    // "bought": b alone counts, the one unit is still b's.
    s.now += 11_000;
    let before = s.keys("q");
    assert_eq!(pass(&mut s, "c", None), None);
    assert_eq!(s.keys("q"), before);
    let info = engine::info(&s).unwrap();
    assert_eq!((info.active, info.inventory), (1, Some(1)));
}

/// With a holder the pass is remembered as that holder's claim of its ticket.
#[test]
fn a_pass_with_a_holder_answers_the_holders_claim_again() {
    let mut s = MemoryStore::new(T0, 3);
    let (ticket, ..) = pass(&mut s, "a", Some(b"tab-1")).unwrap();
    let again = engine::claim_held(&mut s, &ticket, Some(b"tab-1")).unwrap();
    assert_eq!((again.user, again.lease_ms), (u("a"), 30_000));
    assert_eq!(engine::claim_held(&mut s, &ticket, Some(b"tab-2")).unwrap_err(), QueueError::NoTicket);
}

/// In a queue with lanes a pass is an entry into the last lane, when nobody waits in
/// any lane.
#[test]
fn with_lanes_a_pass_enters_the_last_lane() {
    let mut s = MemoryStore::new(T0, 3);
    s.set_lanes(b"presale,general").unwrap();
    assert!(pass(&mut s, "a", None).is_some());
    let info = engine::info(&s).unwrap();
    let admitted: Vec<i64> = info.lane_counts.iter().map(|l| l.admitted).collect();
    assert_eq!(admitted, [0, 1]);
    s.configure(&[("soft_cap", 1)]).unwrap();
    let presale = engine::Invitation { lane: Some(b"presale"), code: None };
    engine::enter_with(&mut s, &u("p"), b"p", presale).unwrap();
    s.configure(&[("soft_cap", 5)]).unwrap();
    assert_eq!(pass(&mut s, "b", None), None, "someone waits in presale");
}

/// Expired tickets and lapsed leases count as housekeeping would leave them: a slot
/// held only by an expired ticket is free for a pass.
#[test]
fn expired_tickets_and_leases_free_their_slots() {
    let mut s = MemoryStore::new(T0, 3);
    s.configure(&[("soft_cap", 1), ("ticket_ttl", 1_000)]).unwrap();
    assert!(engine::enter(&mut s, &u("t"), b"t").unwrap().ticket().is_some());
    assert_eq!(pass(&mut s, "a", None), None, "the ticket holds the slot");
    s.now += 1_000;
    let (_, user, _) = pass(&mut s, "a", None).expect("the ticket expired: its slot is free");
    assert_eq!(user, u("a"));
    assert_eq!(s.stat("expired"), Some(1));
    // The session lapses unrenewed: its slot is free again.
    s.now += 30_000;
    assert!(pass(&mut s, "b", None).is_some());
    assert_eq!(s.stat("lapsed"), Some(1));
}

/// A small deterministic generator (xorshift64*).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

const USERS: [&str; 6] = ["a", "b", "c", "d", "e", "f"];

/// Builds a queue by a random script (the same one for the same seed).
fn build(seed: u64) -> (MemoryStore, Rng) {
    let mut s = MemoryStore::new(T0, 9);
    let mut r = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let mut tickets: Vec<Vec<u8>> = Vec::new();
    for _ in 0..r.below(24) {
        let user = u(USERS[r.below(USERS.len() as u64) as usize]);
        match r.below(12) {
            0..=2 => {
                if let Ok(Standing::Promoted { ticket, .. }) = engine::enter(&mut s, &user, b"n") {
                    tickets.push(ticket);
                }
            }
            3 => {
                if let Some(t) = tickets.pop() {
                    let _ = engine::claim(&mut s, &t);
                }
            }
            4 => {
                let _ = engine::end(&mut s, &user);
            }
            5 => {
                let _ = engine::promote(&mut s, None);
            }
            6 => s.now += [100, 1_000, 30_000, 61_000][r.below(4) as usize],
            7 => {
                let cap = r.below(4) as i64;
                let hard = r.below(4) as i64;
                s.configure(&[("soft_cap", cap), ("hard_cap", hard), ("ticket_ttl", 2_000)]).unwrap();
            }
            8 => s.configure(&[("rate", r.below(2) as i64), ("burst", 1)]).unwrap(),
            9 => {
                let inv = [-1, 0, 1, 3][r.below(4) as usize];
                s.configure_sale(None, Some(inv), None).unwrap();
            }
            10 => {
                let _ = engine::sale::sold(&mut s, 1, Some(&user));
            }
            _ => {
                let _ = engine::leave(&mut s, &user);
            }
        }
        engine::close_log(&mut s);
    }
    (s, r)
}

#[test]
fn a_pass_is_an_instant_entry_and_its_claim_or_nothing() {
    let (mut passes, mut refusals) = (0, 0);
    for seed in 0..3_000u64 {
        let (mut a, mut r) = build(seed);
        let (mut b, _) = build(seed);
        assert_eq!(a.keys("q"), b.keys("q"));
        let user = USERS[r.below(USERS.len() as u64) as usize];
        let holder: Option<&[u8]> = if r.below(2) == 0 { Some(b"h") } else { None };
        let before = a.keys("q");
        let announced = a.announcements.len();
        let got = engine::pass(&mut a, &u(user), b"n", holder).unwrap();
        engine::close_log(&mut a);

        // What ENTER then CLAIM do on the twin, for a user not in line nor inside.
        let now = b.now;
        let in_line = b.waiting_score(&u(user)).is_some();
        let inside = b.session_expiry(&u(user)).is_some_and(|e| e > now);
        let want = if in_line || inside {
            None
        } else {
            match engine::enter(&mut b, &u(user), b"n") {
                Ok(Standing::Promoted { ticket, .. }) => {
                    engine::claim_held(&mut b, &ticket, holder).ok().map(|c| (ticket, c))
                }
                _ => None,
            }
        };
        match (&got, &want) {
            (Some((t1, c1)), Some((t2, c2))) => {
                assert_eq!((t1, c1), (t2, c2), "seed {seed}");
                engine::close_log(&mut b);
                assert_eq!(a.keys("q"), b.keys("q"), "seed {seed}: the pass is the entry and the claim");
                assert_eq!(a.announcements, b.announcements, "seed {seed}");
                passes += 1;
            }
            (None, None) => {
                assert_eq!(a.keys("q"), before, "seed {seed}: a refused pass writes nothing");
                assert_eq!(a.announcements.len(), announced, "seed {seed}");
                refusals += 1;
            }
            _ => panic!("seed {seed}: pass {got:?}, enter and claim {want:?}"),
        }
        let info = engine::info(&a).unwrap();
        let cap = info.config.soft_cap();
        assert!(got.is_none() || info.active + info.joining <= cap, "seed {seed}: over the soft cap");
    }
    assert!(passes > 300 && refusals > 300, "both outcomes exercised: {passes} passes, {refusals} refusals");
}
