//! The ledger's tests, as the engine is tested over its in-memory store: the engine
//! (queue-core over `MemoryStore`) is the truth and writes the change log; a ledger
//! follows it the way the follower does (checkpoints from `engine::watch`, entries as
//! published, some lost, the log read for what was missed), and streams show what its
//! effects tell them. After every step the ledger's own books must agree with
//! themselves, and once everything is applied every open stream must show what the
//! engine says of its person. Scripted cases pin each rule; a seeded loop mixes them.

use super::*;
use queue_core::engine;
use queue_core::memory::MemoryStore;
use queue_core::QueueError;
use std::collections::BTreeMap;

const T0: i64 = 1_700_000_000_000;
const ME: &[u8] = b"api-test";
const LEASE_MS: i64 = 10_000;
const ABANDON_MS: i64 = 5_000;
/// Entries per log read (small, so that reads take several pages).
const PAGE: usize = 3;

fn entry(n: u64, head: Option<(u64, u64)>, left: &[u64]) -> LogEntry {
    LogEntry { id: format!("{n}-0"), n, head, left: left.to_vec(), ..LogEntry::default() }
}

#[test]
fn one_entry_follows_the_documented_rule() {
    let e = entry(1, Some((10, 3)), &[14, 20]);
    assert_eq!(effect_of(&e, 10), Change::Gone, "at the head");
    assert_eq!(effect_of(&e, 7), Change::Gone, "below the head");
    assert_eq!(effect_of(&e, 14), Change::Gone, "listed");
    assert_eq!(effect_of(&e, 12), Change::Ahead(-3));
    assert_eq!(effect_of(&e, 15), Change::Ahead(-4));
    assert_eq!(effect_of(&e, 99), Change::Ahead(-5));
    assert_eq!(effect_of(&entry(2, None, &[5]), 3), Change::Ahead(0));
}

/// In a queue with lanes, a newcomer numbered below someone (in an earlier lane) is
/// one more ahead of them; a newcomer at or above their number changes nothing.
#[test]
fn newcomers_ahead_count_in_the_rule() {
    let e = LogEntry { ahead: vec![20, 30], ..entry(1, Some((10, 2)), &[25]) };
    assert_eq!(effect_of(&e, 15), Change::Ahead(-2), "behind the head only");
    assert_eq!(effect_of(&e, 21), Change::Ahead(-1), "one newcomer ahead, the head");
    assert_eq!(effect_of(&e, 26), Change::Ahead(-2), "one newcomer ahead, the head, one left");
    assert_eq!(effect_of(&e, 31), Change::Ahead(-1), "two newcomers ahead");
    assert_eq!(effect_of(&e, 20), Change::Ahead(-2), "their own number is not ahead of them");
    let only = LogEntry { ahead: vec![5], ..entry(2, None, &[]) };
    assert_eq!(effect_of(&only, 9), Change::Ahead(1));
    assert_eq!(effect_of(&only, 4), Change::Ahead(0));
}

/// The one-pass batch agrees with the rule applied entry by entry, for people
/// spread over numbers around the entries' marks.
#[test]
fn a_batch_is_the_sum_of_its_entries() {
    let entries = [
        entry(1, Some((4, 2)), &[9]),
        LogEntry { ahead: vec![11], ..entry(2, None, &[12, 6]) },
        entry(3, Some((7, 1)), &[15]),
        LogEntry { ahead: vec![3, 16], ..entry(4, None, &[]) },
    ];
    let batch = Batch::new(&entries);
    for seq in 1..20u64 {
        let mut want = Change::Ahead(0);
        let mut sum = 0;
        for e in &entries {
            match effect_of(e, seq) {
                Change::Gone => want = Change::Gone,
                Change::Ahead(n) => sum += n,
            }
        }
        if want != Change::Gone {
            want = Change::Ahead(sum);
        }
        let gone = batch.head.is_some_and(|h| seq <= h) || batch.left.contains(&seq);
        let ahead: i64 = batch.marks.iter().filter(|m| m.0 < seq).map(|m| m.1).sum();
        let got = if gone { Change::Gone } else { Change::Ahead(ahead) };
        assert_eq!(got, want, "number {seq}");
    }
}

impl Ledger {
    /// The ledger's books agree with themselves: everyone in line once by number,
    /// nobody both in line and in the pre-queue, ranks from 1.
    fn check(&self) {
        assert_eq!(self.line.len(), self.by_seq.len(), "line and numbers");
        for (user, l) in &self.line {
            assert_eq!(self.by_seq.get(&l.seq), Some(user), "{user}'s number");
            assert!(l.rank >= 1, "{user} at rank {}", l.rank);
            assert!(!self.pre.contains(user), "{user} in line and in the pre-queue");
        }
        if self.cursor.is_none() {
            assert!(self.line.is_empty() && self.pre.is_empty() && self.pending.is_empty(), "unplaced with books");
        }
        assert!(self.pending.keys().all(|&n| n > 0));
    }
}

fn client_standing(user: &str, st: &engine::Standing) -> Standing {
    let text = |b: &[u8]| String::from_utf8(b.to_vec()).unwrap();
    Standing {
        status: match st.status() {
            "WAITING" => Status::Waiting,
            "PROMOTED" => Status::Promoted,
            "ACTIVE" => Status::Active,
            _ => Status::Unknown,
        },
        rank: st.rank() as u64,
        user_id: user.to_string(),
        nickname: st.nickname().map(text),
        ticket_id: st.ticket().map(text),
        estimated_wait_seconds: None,
        opens_at: None,
        lane: None,
    }
}

/// The engine, a ledger following it, and the streams.
struct World {
    s: MemoryStore,
    ledger: Ledger,
    /// What each open stream shows.
    streams: BTreeMap<String, Option<Standing>>,
    /// Log entries handed on as published (or lost) so far.
    published: usize,
    /// Added to an entry's number to make its stream id (a log written anew has ids
    /// that moved back).
    id_base: u64,
    now: Instant,
    effects: Vec<Effect>,
    /// Everyone's standing after each command since the streams were last checked
    /// (a stream that shows its person out of line ends there, and may have been
    /// right at a moment since gone: promoted, then entered again).
    history: BTreeMap<String, Vec<Standing>>,
    /// Log reads made.
    reads: usize,
}

impl World {
    fn new() -> World {
        let mut s = MemoryStore::new(T0, 7);
        s.configure(&[("soft_cap", 0), ("abandon_after", ABANDON_MS)]).unwrap();
        World {
            s,
            ledger: Ledger::new(),
            streams: BTreeMap::new(),
            published: 0,
            id_base: 1_000_000,
            now: Instant::now(),
            effects: Vec::new(),
            history: BTreeMap::new(),
            reads: 0,
        }
    }

    fn id(&self, n: u64) -> String {
        format!("{}-0", self.id_base + n)
    }

    /// The log's entry `i` (from 0) as the channel or XRANGE gives it.
    fn log_entry(&self, i: usize) -> LogEntry {
        let mut msg = self.id(i as u64 + 1);
        for (f, v) in &self.s.log[i] {
            msg.push_str(&format!(" {f} {}", std::str::from_utf8(v).unwrap()));
        }
        let e = LogEntry::from_message(msg.as_bytes()).unwrap();
        assert_eq!(e.n, i as u64 + 1, "the log's numbers");
        e
    }

    fn user(u: &str) -> Vec<u8> {
        u.as_bytes().to_vec()
    }

    fn truth(&self, u: &str) -> Standing {
        client_standing(u, &engine::standing(&self.s, &Self::user(u), self.s.now))
    }

    /// A command ran: its entry (if any) closed, everyone's standing noted.
    fn ran(&mut self) {
        engine::close_log(&mut self.s);
        let users: Vec<String> = self.history.keys().cloned().collect();
        for u in users {
            let st = self.truth(&u);
            self.history.get_mut(&u).unwrap().push(st);
        }
    }

    fn enter(&mut self, u: &str) {
        self.enter_as(u, u);
    }

    /// QUEUE.ENTER of `u` with the nickname `nickname`.
    fn enter_as(&mut self, u: &str, nickname: &str) {
        engine::enter(&mut self.s, &Self::user(u), nickname.as_bytes()).unwrap();
        self.history.entry(u.to_string()).or_default();
        self.ran();
    }

    /// A queue with `lanes` (names, comma-separated, in admission order).
    fn with_lanes(lanes: &str) -> World {
        let mut w = World::new();
        w.s.set_lanes(lanes.as_bytes()).unwrap();
        w
    }

    /// QUEUE.ENTER with LANE and/or CODE; a refusal (a code unknown or used up, or
    /// of another lane) changes nothing and writes no entry.
    fn enter_with(&mut self, u: &str, lane: Option<&str>, code: Option<&[u8]>) -> Result<(), QueueError> {
        let inv = engine::Invitation { lane: lane.map(str::as_bytes), code };
        let entries = self.s.log.len();
        let result = engine::enter_with(&mut self.s, &Self::user(u), u.as_bytes(), inv).map(|_| ());
        match &result {
            Ok(()) => {
                self.history.entry(u.to_string()).or_default();
            }
            Err(e) => assert!(matches!(e, QueueError::NoCode | QueueError::CodeLane), "{u}: {e}"),
        }
        self.ran();
        if result.is_err() {
            assert_eq!(self.s.log.len(), entries, "a refused entry writes no log entry");
        }
        result
    }

    fn leave(&mut self, u: &str) {
        engine::leave(&mut self.s, &Self::user(u)).unwrap();
        self.ran();
    }

    /// A status read: the person counts as heard from.
    fn status(&mut self, u: &str) {
        let now = engine::begin_observing(&mut self.s).unwrap();
        engine::observe(&mut self.s, &Self::user(u), now);
        self.ran();
    }

    /// PROMOTE MAX `max` with room for that many.
    fn promote(&mut self, max: i64) {
        let info = engine::info(&self.s).unwrap();
        self.s.configure(&[("soft_cap", info.active + info.joining + max)]).unwrap();
        engine::promote(&mut self.s, Some(max)).unwrap();
        self.ran();
        self.s.configure(&[("soft_cap", 0)]).unwrap();
    }

    fn open(&mut self, u: &str) {
        if !self.streams.contains_key(u) {
            self.streams.insert(u.to_string(), None);
            self.ledger.ask(u.to_string());
        }
    }

    fn close(&mut self, u: &str) {
        if self.streams.remove(u).is_some() {
            self.ledger.closed(u.to_string());
        }
    }

    /// Hands on the entries written since as published, but those `lost`.
    fn publish(&mut self, lost: impl Fn(u64) -> bool) {
        let entries: Vec<LogEntry> =
            (self.published..self.s.log.len()).filter(|&i| !lost(i as u64 + 1)).map(|i| self.log_entry(i)).collect();
        self.published = self.s.log.len();
        self.ledger.published(entries);
    }

    /// The follower's hand_out, onto the streams.
    fn deliver(&mut self) {
        for effect in self.ledger.take_effects() {
            self.effects.push(effect.clone());
            match effect {
                Effect::Standing(u, st) => {
                    if let Some(shown) = self.streams.get_mut(&u) {
                        *shown = Some(st);
                    }
                }
                Effect::Rank { user, rank, eta } | Effect::Moved { user, rank, eta } => {
                    if let Some(shown) = self.streams.get_mut(&user) {
                        set_rank(shown, rank, eta);
                    }
                }
                Effect::Gone { user, ticket } => {
                    let Some(shown) = self.streams.get_mut(&user) else { continue };
                    match gone_standing(&user, shown.as_ref(), ticket) {
                        Some(st) => *shown = Some(st),
                        None => self.ledger.ask_again(user),
                    }
                }
                Effect::Waiting(_) | Effect::AskedEveryone(_) => {}
            }
        }
        self.ledger.check();
    }

    /// The log after `from`, a page of it.
    fn log_after(&self, from: &str) -> Vec<LogEntry> {
        let from = stream_id(from);
        (0..self.s.log.len()).map(|i| self.log_entry(i)).filter(|e| stream_id(&e.id) > from).take(PAGE).collect()
    }

    fn catch_up(&mut self) {
        loop {
            let Some(from) = self.ledger.cursor().map(str::to_string) else { return };
            let entries = self.log_after(&from);
            self.reads += 1;
            let follows = self.ledger.read(&entries);
            self.deliver();
            if !follows || entries.len() < PAGE {
                return;
            }
        }
    }

    fn apply_published(&mut self) {
        let mut log_read = false;
        loop {
            let next = self.ledger.apply_published(log_read);
            self.deliver();
            match next {
                Published::Done => return,
                Published::ReadLog => {
                    log_read = true;
                    self.catch_up();
                }
            }
        }
    }

    fn checkpoint(&mut self, users: &[String]) -> Checkpoint {
        let ids: Vec<Vec<u8>> = users.iter().map(|u| Self::user(u)).collect();
        let w = engine::watch(&mut self.s, ME, LEASE_MS, &ids).unwrap();
        self.ran();
        let users = w.users.iter().zip(users).map(|((seq, st), u)| (*seq as u64, client_standing(u, st))).collect();
        Checkpoint { log: w.log as u64, waiting: w.waiting as u64, users }
    }

    /// One cycle of the follower (follower.rs), in its order.
    fn cycle(&mut self, tick: bool) {
        if self.ledger.cursor().is_none() {
            let n = self.s.log.len() as u64;
            let id = self.id(n);
            self.ledger.start((n > 0).then_some((id.as_str(), n)));
        }
        self.apply_published();
        if tick {
            let info = engine::info(&self.s).unwrap();
            self.ledger.tick(info.waiting as u64, 60, None);
            self.deliver();
        }
        if self.ledger.nobody_to_watch() && tick {
            let cp = self.checkpoint(&[]);
            self.ledger.position(cp.log, cp.waiting, self.now);
            self.deliver();
        }
        while let Some(batch) = self.ledger.next_to_watch(4) {
            let cp = self.checkpoint(&batch);
            let streams = &self.streams;
            self.ledger.checkpoint(batch, cp, self.now, |u| streams.contains_key(u));
            self.deliver();
        }
        if self.ledger.read_due().is_some() {
            self.apply_published();
            if self.ledger.behind(self.now) == Behind::ReadLog {
                self.catch_up();
                self.ledger.behind_read();
                self.deliver();
            }
        }
        while let Some(batch) = self.ledger.next_to_unwatch(4) {
            let ids: Vec<Vec<u8>> = batch.iter().map(|u| Self::user(u)).collect();
            engine::unwatch(&mut self.s, ME, &ids).unwrap();
            self.ran();
        }
    }

    /// Publishes what is left, and cycles (ticks, the overdue read) until the ledger
    /// has applied the whole log and asked everyone it had to.
    fn settle(&mut self) {
        self.publish(|_| false);
        for round in 0.. {
            assert!(round < 20, "the ledger never settled");
            self.cycle(true);
            self.now += IN_FLIGHT;
            let applied = self.ledger.applied() == self.s.log.len() as u64;
            if applied && self.ledger.nobody_to_watch() && self.ledger.read_due().is_none() {
                break;
            }
        }
    }

    /// Every open stream shows what the engine says of its person: their rank now
    /// while waiting, else a standing they held since the last check; streams that
    /// showed their person out of line end, as real streams do.
    fn check_streams(&mut self) {
        for (u, shown) in &self.streams {
            let truth = self.truth(u);
            let shown = shown.as_ref().unwrap_or_else(|| panic!("{u}'s stream shows nothing"));
            if shown.status == Status::Waiting {
                assert_eq!(
                    (shown.status, shown.rank),
                    (truth.status, truth.rank),
                    "{u}: shown {shown:?}, truth {truth:?}"
                );
            } else {
                let held = |st: &Standing| st.status == shown.status && st.ticket_id == shown.ticket_id;
                let history = self.history.get(u).map_or(&[][..], Vec::as_slice);
                assert!(
                    held(&truth) || history.iter().any(held),
                    "{u}: shown {shown:?}, truth {truth:?}, held since {history:?}"
                );
            }
        }
        for h in self.history.values_mut() {
            h.clear();
        }
        let ended: Vec<String> = self
            .streams
            .iter()
            .filter(|(_, s)| s.as_ref().is_some_and(|s| s.status != Status::Waiting))
            .map(|(u, _)| u.clone())
            .collect();
        for u in ended {
            self.close(&u);
        }
        self.cycle(false);
    }

    fn asked_everyone(&self) -> usize {
        self.effects.iter().filter(|e| matches!(e, Effect::AskedEveryone(_))).count()
    }

    fn shown(&self, u: &str) -> (Status, u64) {
        let st = self.streams[u].as_ref().unwrap();
        (st.status, st.rank)
    }
}

/// People streamed from here are told their rank from the entries alone: no
/// checkpoint after the first, no one asked again.
#[test]
fn ranks_follow_the_entries() {
    let mut w = World::new();
    for u in ["a", "b", "c", "d", "e"] {
        w.enter(u);
        w.open(u);
    }
    w.settle();
    w.check_streams();
    assert_eq!(w.shown("e"), (Status::Waiting, 5));
    w.leave("b");
    w.promote(1);
    w.publish(|_| false);
    w.cycle(false);
    assert!(w.ledger.nobody_to_watch(), "nobody asked again");
    assert_eq!(w.shown("c"), (Status::Waiting, 1));
    assert_eq!(w.shown("e"), (Status::Waiting, 3));
    w.check_streams();
}

/// The promoted and registered get their ticket from the entry; a person who left
/// is told they are no longer in the queue; one who entered again as they were is
/// placed at their new number from the entry, one who entered again under another
/// nickname is asked.
#[test]
fn the_log_tells_tickets_and_who_left() {
    let mut w = World::new();
    for u in ["a", "b", "c", "d", "e"] {
        w.enter(u);
        w.open(u);
    }
    w.settle();
    w.effects.clear();
    w.promote(1);
    w.leave("b");
    w.enter("c"); // again, at the back: e d c
    w.enter_as("d", "dee"); // again, renamed: e c dee
    w.publish(|_| false);
    w.cycle(false);
    let told: Vec<&Effect> = w.effects.iter().filter(|e| matches!(e, Effect::Gone { .. })).collect();
    assert_eq!(told.len(), 2, "{told:?}");
    assert!(matches!(told[0], Effect::Gone { user, ticket: Some(t) } if user == "a" && t.starts_with("1.")));
    assert!(matches!(told[1], Effect::Gone { user, ticket: None } if user == "b"));
    assert_eq!(w.streams["a"].as_ref().unwrap().status, Status::Promoted);
    assert_eq!(w.streams["a"].as_ref().unwrap().nickname.as_deref(), Some("a"), "the nickname kept");
    assert_eq!(w.shown("b"), (Status::Unknown, 0));
    assert_eq!(w.shown("c"), (Status::Waiting, 2), "c, who entered again, placed from the entries");
    let asked: Vec<&str> =
        w.effects.iter().filter_map(|e| if let Effect::Standing(u, _) = e { Some(u.as_str()) } else { None }).collect();
    assert_eq!(asked, ["d"], "only d, renamed, is asked: {:?}", w.effects);
    w.settle();
    assert_eq!(w.shown("d"), (Status::Waiting, 3));
    assert_eq!(w.streams["d"].as_ref().unwrap().nickname.as_deref(), Some("dee"));
    w.check_streams();
}

/// Someone leaves from the back and, in the same batch, someone ahead enters again
/// and is given the number the leaver had: the one placed anew keeps that number in
/// the ledger (the leaver's leaving does not take it from them), so the promotion
/// after reaches them.
#[test]
fn a_number_reused_in_one_batch_stays_with_the_one_placed_on_it() {
    let mut w = World::new();
    for u in ["a", "c", "b"] {
        w.enter(u);
        w.open(u);
    }
    w.settle();
    w.leave("b");
    w.enter("a"); // again: numbered after c, the number b had
    w.publish(|_| false);
    w.cycle(false);
    assert!(w.ledger.nobody_to_watch(), "a placed from the entry");
    assert_eq!(w.shown("a"), (Status::Waiting, 2));
    w.ledger.check();
    w.promote(2);
    w.settle();
    assert_eq!(w.shown("a").0, Status::Promoted, "the promotion reached a");
    w.check_streams();
}

/// The last one in line leaves, and a newcomer given their number is registered
/// with a checkpoint from after that leave, before the leave's entry is applied: the
/// one who left is not kept under the newcomer's number (they are asked), and each
/// stream shows the truth.
#[test]
fn a_checkpoint_ahead_onto_a_number_still_held_asks_the_holder() {
    let mut w = World::new();
    for u in ["a", "y"] {
        w.enter(u);
        w.open(u);
    }
    w.settle();
    w.leave("y");
    w.enter("z"); // numbered as y was
    w.open("z");
    w.cycle(false); // z's checkpoint, the leave not applied yet
    w.ledger.check();
    w.settle();
    assert_eq!(w.shown("y"), (Status::Unknown, 0));
    assert_eq!(w.shown("z"), (Status::Waiting, 2));
    w.check_streams();
}

/// In a lane, someone promoted and then, in the same batch, someone who enters
/// again into the emptied lane under the promoted one's number and is promoted too:
/// each stream shows its own ticket (the entry that took them tells it, not an
/// earlier one of the same number).
#[test]
fn a_reused_number_s_ticket_is_the_one_of_the_entry_that_took_them() {
    let mut w = World::with_lanes("vip,general");
    for u in ["b", "m"] {
        w.enter_with(u, Some("vip"), None).unwrap();
        w.open(u);
    }
    w.settle();
    w.promote(1); // b, with a ticket under the number b waited with
    w.enter_with("m", Some("vip"), None).unwrap(); // again: the lane's first number
    w.promote(1); // m
    w.publish(|_| false);
    w.cycle(false);
    w.settle();
    let ticket = |u: &str| w.streams[u].as_ref().unwrap().ticket_id.clone();
    assert!(ticket("b").is_some() && ticket("m").is_some());
    assert_ne!(ticket("b"), ticket("m"), "m shown b's ticket");
    w.check_streams();
}

/// A message lost on the channel: the next one shows the number skipped and the log
/// is read for it; with no next one, the tick's checkpoint shows the log ahead and
/// the log is read once the entries are overdue.
#[test]
fn lost_messages_are_read_from_the_log() {
    let mut w = World::new();
    for u in ["a", "b", "c", "d", "e", "f"] {
        w.enter(u);
        w.open(u);
    }
    w.settle();
    w.leave("a");
    w.leave("b");
    w.publish(|n| n == 1);
    w.cycle(false);
    assert_eq!(w.ledger.applied(), 2, "the gap read from the log");
    assert_eq!(w.shown("c"), (Status::Waiting, 1));

    w.leave("c");
    w.publish(|_| true);
    w.cycle(true);
    assert_eq!(w.ledger.behind(w.now), Behind::Wait, "may still come on the channel");
    assert_eq!(w.shown("d"), (Status::Waiting, 2));
    w.now += IN_FLIGHT;
    w.cycle(false);
    assert_eq!(w.ledger.applied(), 3);
    assert_eq!(w.shown("d"), (Status::Waiting, 1));
    assert_eq!(w.asked_everyone(), 0);
    w.check_streams();
}

/// Entries trimmed before they were read (a gap the log cannot fill), an entry
/// that says reset: everyone is asked again, and ends up right.
#[test]
fn gaps_and_resets_ask_everyone() {
    let mut w = World::new();
    for u in ["a", "b", "c"] {
        w.enter(u);
        w.open(u);
    }
    w.settle();
    let n = w.ledger.applied();
    w.ledger.published([LogEntry { id: w.id(n + 2), n: n + 2, waiting: 3, ..LogEntry::default() }]);
    assert_eq!(w.ledger.apply_published(true), Published::Done);
    w.deliver();
    assert_eq!(w.effects.last(), Some(&Effect::AskedEveryone(Why::Gap { expected: n + 1, got: n + 2 })));
    assert!(!w.ledger.nobody_to_watch());

    let mut w = World::new();
    for u in ["a", "b", "c"] {
        w.enter(u);
        w.open(u);
    }
    w.settle();
    let n = w.ledger.applied();
    w.ledger.published([LogEntry { id: w.id(n + 1), n: n + 1, reset: true, waiting: 3, ..LogEntry::default() }]);
    w.ledger.apply_published(false);
    w.deliver();
    assert_eq!(w.effects.last(), Some(&Effect::AskedEveryone(Why::Reset)));
    let mut asked = w.ledger.next_to_watch(10).unwrap();
    asked.sort();
    assert_eq!(asked, ["a", "b", "c"]);
}

/// A checkpoint older than what was applied (a failover lost the newest entries), a
/// published entry whose id disagrees with its number (the log written anew): the
/// ledger leaves its place in the log and asks everyone again from the new end.
#[test]
fn a_log_that_moved_back_asks_everyone_from_its_end() {
    let mut w = World::new();
    for u in ["a", "b", "c", "d"] {
        w.enter(u);
        w.open(u);
    }
    w.settle();
    w.leave("a");
    w.leave("b");
    w.settle();
    assert_eq!(w.ledger.applied(), 2);
    assert!(!w.ledger.position(1, 2, w.now), "a checkpoint behind what was applied");
    w.deliver();
    assert!(matches!(w.effects.last(), Some(Effect::AskedEveryone(Why::Moved { applied: 2, .. }))));
    assert_eq!(w.ledger.cursor(), None);
    assert_eq!(w.ledger.next_to_watch(10), None, "asked once placed again");
    w.settle();
    w.check_streams();

    // Written anew: the same numbers come again under earlier ids.
    let n = w.ledger.applied();
    w.id_base -= 1000;
    w.leave("c");
    w.publish(|_| false);
    w.cycle(false);
    assert!(matches!(w.effects.last(), Some(Effect::AskedEveryone(Why::Moved { .. }))), "{:?}", w.effects.last());
    assert!(w.ledger.applied() < n + 1);
    w.settle();
    w.check_streams();
}

/// Closed streams: a person still waiting is unregistered, one already out of line
/// is not; the ledger forgets both.
#[test]
fn closed_streams_unregister_the_waiting() {
    let mut w = World::new();
    for u in ["a", "b"] {
        w.enter(u);
        w.open(u);
    }
    w.settle();
    w.close("a");
    assert_eq!(w.ledger.next_to_unwatch(10), Some(vec!["a".to_string()]));
    w.leave("b");
    w.settle();
    w.close("b");
    assert_eq!(w.ledger.next_to_unwatch(10), None, "out of line: no registration left");
    assert!(!w.ledger.unwatching());
}

/// A small xorshift: the seeded loop needs no crate.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// Random bursts of entries, leaves, re-entries, promotions, silent people dropped,
/// streams opened and closed and messages lost, each burst followed by the ledger
/// catching up: after each, every open stream shows the engine's truth.
#[test]
fn streams_show_the_engine_s_truth_whatever_happens() {
    // How often each rule was reached, over every seed.
    let (mut ranks, mut tickets, mut left, mut reads, mut moved) = (0, 0, 0, 0, 0);
    for seed in 1..=60u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let mut w = World::new();
        let people: Vec<String> = (0..24).map(|i| format!("u{i:02}")).collect();
        for step in 0..150 {
            for _ in 0..=rng.below(4) {
                let u = people[rng.below(people.len() as u64) as usize].as_str();
                match rng.below(10) {
                    0 | 1 => w.enter(u),
                    // Entering again renamed is asked about; as they were, moved.
                    2 => w.enter_as(u, if rng.below(3) == 0 { "renamed" } else { u }),
                    3 => w.leave(u),
                    4 => w.promote(1 + rng.below(3) as i64),
                    5 | 6 => w.open(u),
                    7 => w.close(u),
                    8 => {
                        w.s.now += rng.below(2 * ABANDON_MS as u64) as i64;
                        w.ran();
                    }
                    _ => w.status(u),
                }
            }
            let lose = rng.below(4) == 0;
            let lost_one = rng.0;
            w.publish(|n| lose && (n ^ lost_one).is_multiple_of(3));
            w.cycle(rng.below(2) == 0);
            w.settle();
            let at = format!("seed {seed}, step {step}");
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| w.check_streams()));
            if let Err(e) = result {
                panic!("{at}: {}", e.downcast_ref::<String>().cloned().unwrap_or_default());
            }
        }
        for e in &w.effects {
            match e {
                Effect::Rank { .. } | Effect::Moved { .. } => ranks += 1,
                Effect::Gone { ticket: Some(_), .. } => tickets += 1,
                Effect::Gone { ticket: None, .. } => left += 1,
                _ => {}
            }
        }
        reads += w.reads;
        moved += w.s.log.iter().filter(|e| e.iter().any(|(f, _)| *f == "moved")).count();
    }
    assert!(
        ranks > 100 && tickets > 100 && left > 10 && reads > 50 && moved > 100,
        "{ranks} {tickets} {left} {reads} {moved}"
    );
}

/// Everyone in a later lane watching their stream: a newcomer in an earlier lane puts
/// each one back by one, from the entry alone (nobody asked again); a promotion from
/// the earlier lane moves them up again and hands its ticket to the stream of the
/// person promoted, found by the number they waited under.
#[test]
fn a_newcomer_in_an_earlier_lane_moves_later_lanes_back() {
    let mut w = World::with_lanes("presale,general");
    for u in ["a", "b", "c"] {
        w.enter(u); // a plain entry: the last lane
        w.open(u);
    }
    w.settle();
    w.check_streams();
    assert_eq!(w.shown("c"), (Status::Waiting, 3));
    w.effects.clear();

    w.enter_with("p", Some("presale"), None).unwrap();
    let fields: Vec<&str> = w.s.log.last().unwrap().iter().map(|(f, _)| *f).collect();
    assert!(fields.contains(&"ahead"), "the entry names the newcomer: {fields:?}");
    w.publish(|_| false);
    w.cycle(false);
    assert!(w.ledger.nobody_to_watch(), "nobody asked again");
    assert_eq!(w.asked_everyone(), 0);
    assert_eq!(
        [w.shown("a"), w.shown("b"), w.shown("c")],
        [(Status::Waiting, 2), (Status::Waiting, 3), (Status::Waiting, 4)]
    );
    w.open("p");
    w.settle();
    assert_eq!(w.shown("p"), (Status::Waiting, 1));
    w.check_streams();

    // Two more in presale, one by re-entering from general: b is not moved (a left
    // from ahead of them and joined ahead of them again).
    w.enter_with("q", Some("presale"), None).unwrap();
    w.open("q");
    w.enter_with("a", Some("presale"), None).unwrap();
    w.publish(|_| false);
    w.cycle(false);
    w.settle();
    assert_eq!(
        [w.shown("a"), w.shown("b"), w.shown("c")],
        [(Status::Waiting, 3), (Status::Waiting, 4), (Status::Waiting, 5)]
    );
    w.check_streams();

    // Promoted from presale: the ticket carries a new number, listed as old=ticket.
    w.effects.clear();
    w.promote(2);
    let tickets = w.log_entry(w.s.log.len() - 1).tickets;
    assert_eq!(tickets.len(), 2, "{tickets:?}");
    w.publish(|_| false);
    w.cycle(false);
    for (u, (old, ticket)) in ["p", "q"].iter().zip(&tickets) {
        assert!(!ticket.starts_with(&format!("{old}.")), "renumbered: {old}={ticket}");
        assert_eq!(w.streams[*u].as_ref().unwrap().ticket_id.as_deref(), Some(ticket.as_str()), "{u}'s ticket");
        assert_eq!(w.truth(u).ticket_id.as_deref(), Some(ticket.as_str()));
    }
    assert_eq!(
        [w.shown("a"), w.shown("b"), w.shown("c")],
        [(Status::Waiting, 1), (Status::Waiting, 2), (Status::Waiting, 3)]
    );
    assert!(w.ledger.nobody_to_watch(), "the promoted told from the entry, nobody asked");
    w.check_streams();
}

/// Codes: an entry with a code joins the code's lane, a used-up code is refused and
/// changes nothing; the streams follow.
#[test]
fn entries_with_codes_follow_their_lane() {
    let mut w = World::with_lanes("vip,presale,general");
    let code = [b'a'; 64];
    engine::codes_add(&mut w.s, b"presale", 1, &[&code[..]]).unwrap();
    for u in ["a", "b"] {
        w.enter(u);
        w.open(u);
    }
    w.settle();
    w.enter_with("p", None, Some(&code)).unwrap();
    assert_eq!(w.enter_with("r", None, Some(&code)), Err(QueueError::NoCode), "one use");
    w.enter_with("v", Some("vip"), None).unwrap();
    w.settle();
    assert_eq!([w.shown("a"), w.shown("b")], [(Status::Waiting, 3), (Status::Waiting, 4)]);
    w.check_streams();
}

fn code(i: u64) -> Vec<u8> {
    format!("{i:064x}").into_bytes()
}

/// The seeded loop over a queue with three lanes: entries into random lanes (named,
/// with a code, plain into the last), re-entries into other lanes, leaves,
/// promotions, silent people dropped, streams opened and closed, messages lost;
/// after each burst, every open stream shows the engine's truth.
#[test]
fn lanes_streams_show_the_engine_s_truth_whatever_happens() {
    const LANES: [&str; 3] = ["vip", "presale", "general"];
    let (mut moved_back, mut renumbered, mut refused, mut told) = (0, 0, 0, 0);
    for seed in 1..=40u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let mut w = World::with_lanes(&LANES.join(","));
        // Codes of vip and presale, a few uses each.
        for i in 0..6u64 {
            let c = code(i);
            engine::codes_add(&mut w.s, LANES[(i % 2) as usize].as_bytes(), 1 + (i % 3) as i64, &[&c[..]]).unwrap();
        }
        let people: Vec<String> = (0..24).map(|i| format!("u{i:02}")).collect();
        for step in 0..120 {
            for _ in 0..=rng.below(4) {
                let u = people[rng.below(people.len() as u64) as usize].as_str();
                match rng.below(12) {
                    0 | 1 => w.enter(u),
                    2 | 3 => {
                        let lane = LANES[rng.below(3) as usize];
                        w.enter_with(u, Some(lane), None).unwrap();
                    }
                    4 => {
                        let c = code(rng.below(8));
                        let lane = (rng.below(3) == 0).then(|| LANES[rng.below(3) as usize]);
                        refused += usize::from(w.enter_with(u, lane, Some(&c)).is_err());
                    }
                    5 => w.leave(u),
                    6 => w.promote(1 + rng.below(3) as i64),
                    7 | 8 => w.open(u),
                    9 => w.close(u),
                    10 => {
                        w.s.now += rng.below(2 * ABANDON_MS as u64) as i64;
                        w.ran();
                    }
                    _ => w.status(u),
                }
            }
            let lose = rng.below(4) == 0;
            let lost_one = rng.0;
            w.publish(|n| lose && (n ^ lost_one).is_multiple_of(3));
            w.cycle(rng.below(2) == 0);
            w.settle();
            let at = format!("seed {seed}, step {step}");
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| w.check_streams()));
            if let Err(e) = result {
                let text =
                    e.downcast_ref::<String>().cloned().or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()));
                panic!("{at}: {}", text.unwrap_or_default());
            }
        }
        for i in 0..w.s.log.len() {
            let e = w.log_entry(i);
            moved_back += usize::from(!e.ahead.is_empty());
            renumbered += e.tickets.iter().filter(|(old, t)| !t.starts_with(&format!("{old}."))).count();
        }
        told += w.effects.iter().filter(|e| matches!(e, Effect::Gone { ticket: Some(_), .. })).count();
    }
    // Entries that moved later lanes back, tickets renumbered and handed on from the
    // entry (not asked for), refused codes: each rule reached often.
    assert!(
        moved_back > 200 && renumbered > 100 && told > 100 && refused > 20,
        "{moved_back} {renumbered} {told} {refused}"
    );
}

#[test]
fn a_rate_that_moves_a_little_pushes_no_new_figure() {
    // The tick's rate moves by a few admissions a minute: the figure a stream shows
    // (rounded to a step a person reads) stays, so no update goes out for it.
    let mut shown = Some(Standing {
        status: Status::Waiting,
        rank: 300,
        user_id: "u".into(),
        nickname: None,
        ticket_id: None,
        estimated_wait_seconds: None,
        opens_at: None,
        lane: None,
    });
    let eta = |rank: i64, per_min| {
        Eta::Is(queue_core::admission::estimated_wait_seconds(rank, per_min).map(|s| s.max(0) as u64))
    };
    assert!(set_rank(&mut shown, 300, eta(300, 60)));
    assert_eq!(shown.as_ref().unwrap().estimated_wait_seconds, Some(300));
    for per_min in 58..=62 {
        assert!(!set_rank(&mut shown, 300, eta(300, per_min)), "{per_min} a minute");
    }
    // Moving up a few places changes the rank, not the figure.
    assert!(set_rank(&mut shown, 295, eta(295, 60)));
    assert_eq!(shown.as_ref().unwrap().estimated_wait_seconds, Some(300));
    // Not known yet: the figure stays; the line stopped: no figure.
    assert!(!set_rank(&mut shown, 295, Eta::Unknown));
    assert!(set_rank(&mut shown, 295, eta(295, 0)));
    assert_eq!(shown.as_ref().unwrap().estimated_wait_seconds, None);
}
