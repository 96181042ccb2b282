//! The fair opening on the engine over the in-memory store: the pre-queue, the
//! commitment, the opening in the seeded order, later arrivals at the back.

use queue_core::engine::{self, Standing};
use queue_core::memory::MemoryStore;
use queue_core::opening::{self, State};

const T0: i64 = 1_700_000_000_000;
const OPENS: i64 = T0 + 60_000;

fn u(name: &str) -> Vec<u8> {
    name.as_bytes().to_vec()
}

fn scheduled() -> MemoryStore {
    let mut s = MemoryStore::new(T0, 3);
    s.configure(&[("opens_at", OPENS), ("soft_cap", 2)]).unwrap();
    assert!(opening::schedule_if_needed(&mut s, T0).unwrap());
    s
}

fn rank(s: &mut MemoryStore, user: &str) -> (String, i64, Option<i64>) {
    let now = engine::begin_observing(s).unwrap();
    let st = engine::observe(s, &u(user), now);
    (st.status().to_string(), st.rank(), st.opens_at())
}

#[test]
fn pre_queue_then_opening_in_the_seeded_order() {
    let mut s = scheduled();
    let before = opening::info(&s);
    assert_eq!(before.state, State::Scheduled);
    assert_eq!(before.seed, None);
    let commitment = before.commitment.clone().unwrap();
    assert_eq!(commitment.len(), 64);
    let users: Vec<String> = (0..20).map(|i| format!("user-{i}")).collect();
    for name in &users {
        let st = engine::enter(&mut s, &u(name), b"nick").unwrap();
        assert_eq!(st, Standing::Pre { nickname: b"nick".to_vec(), opens_at: OPENS });
    }
    // Re-entry keeps the place; leave takes out.
    engine::enter(&mut s, &u("user-0"), b"again").unwrap();
    assert!(engine::leave(&mut s, &u("user-19")).unwrap());
    assert!(!engine::leave(&mut s, &u("user-19")).unwrap());
    assert_eq!(rank(&mut s, "user-3"), ("WAITING".into(), 0, Some(OPENS)));
    assert_eq!(opening::info(&s).entrants, 19);
    // Nobody is promoted before the opening.
    s.now = OPENS - 1;
    assert_eq!(engine::promote(&mut s, None).unwrap().promoted, 0);
    assert_eq!(engine::info(&s).unwrap().waiting, 0);

    s.now = OPENS;
    let p = engine::promote(&mut s, None).unwrap();
    assert_eq!(p.promoted, 2);
    assert_eq!(p.waiting, 17);
    let after = opening::info(&s);
    assert_eq!(after.state, State::Open);
    assert_eq!(after.commitment.as_deref(), Some(commitment.as_str()));
    let seed = after.seed.clone().unwrap();
    assert_eq!(opening::commitment(&seed), commitment);
    assert_eq!(after.opened_at, Some(OPENS));
    assert_eq!(after.entrants, 19);

    // The proof is the order recomputed from the seed, and the line follows it.
    let proof: Vec<String> = opening::proof(&s, 0, 1000).into_iter().map(|v| String::from_utf8(v).unwrap()).collect();
    let expected = opening::order(&seed, users[..19].iter().map(|n| opening::id_hash(n.as_bytes())));
    assert_eq!(proof, expected);
    let line: Vec<String> = s.line().into_iter().map(|(user, _, _)| opening::id_hash(user.as_bytes())).collect();
    assert_eq!(line, expected);
    let idx = |name: &str| expected.iter().position(|h| *h == opening::id_hash(name.as_bytes())).unwrap() as i64;
    for name in &users[..19] {
        let (status, r, opens_at) = rank(&mut s, name);
        assert_eq!(opens_at, None);
        if idx(name) >= 2 {
            assert_eq!((status.as_str(), r), ("WAITING", idx(name) - 1), "{name}");
        } else {
            assert_eq!(status, "PROMOTED");
        }
    }
    // Later arrivals join at the back; the nickname given last was kept.
    let late = engine::enter(&mut s, &u("late"), b"late").unwrap();
    assert_eq!(late.rank(), 18);
    assert!(s.line().iter().find(|l| l.0 == "user-0").unwrap().2.ends_with("again"));
}

#[test]
fn nothing_to_open_without_a_schedule_and_moving_keeps_the_seed() {
    let mut s = MemoryStore::new(T0, 4);
    assert_eq!(opening::info(&s).state, State::None);
    assert_eq!(engine::enter(&mut s, &u("a"), b"a").unwrap().status(), "PROMOTED");
    s.configure(&[("opens_at", OPENS)]).unwrap();
    // An entry schedules it when CONFIG did not.
    assert_eq!(engine::enter(&mut s, &u("b"), b"b").unwrap().opens_at(), Some(OPENS));
    let c = opening::info(&s).commitment.unwrap();
    s.configure(&[("opens_at", OPENS + 5_000)]).unwrap();
    assert!(!opening::schedule_if_needed(&mut s, T0).unwrap());
    assert_eq!(opening::info(&s).commitment.unwrap(), c);
    s.now = OPENS + 1;
    assert_eq!(rank(&mut s, "b"), ("WAITING".into(), 0, Some(OPENS + 5_000)));
    // Setting 0 opens at the next command.
    s.configure(&[("opens_at", 0)]).unwrap();
    assert_eq!(rank(&mut s, "b"), ("WAITING".into(), 1, None));
    let o = opening::info(&s);
    assert_eq!((o.state, o.entrants, o.commitment.unwrap()), (State::Open, 1, c));
}

#[test]
fn someone_in_line_entering_before_the_opening_moves_to_the_pre_queue() {
    let mut s = MemoryStore::new(T0, 5);
    s.configure(&[("soft_cap", 1)]).unwrap();
    engine::enter(&mut s, &u("a"), b"a").unwrap();
    assert_eq!(engine::enter(&mut s, &u("b"), b"b").unwrap().rank(), 1);
    s.configure(&[("opens_at", OPENS)]).unwrap();
    opening::schedule_if_needed(&mut s, T0).unwrap();
    // a held a ticket: giving it back promotes nobody before the opening.
    assert_eq!(engine::enter(&mut s, &u("a"), b"a").unwrap().opens_at(), Some(OPENS));
    assert_eq!(engine::info(&s).unwrap().joining, 0);
    assert_eq!(rank(&mut s, "b"), ("WAITING".into(), 1, None));
    s.now = OPENS;
    engine::promote(&mut s, Some(0)).unwrap();
    assert_eq!(rank(&mut s, "a"), ("WAITING".into(), 2, None));
    assert_eq!(opening::proof(&s, 0, 10), vec![opening::id_hash(b"a").into_bytes()]);
}
