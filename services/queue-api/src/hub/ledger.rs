//! The push ledger of one queue: where each person streamed from this instance stands,
//! kept from the change log (docs/commands.md, "The change log and watchers") with no
//! I/O, no clock of its own and no locks. In go checkpoints (`QUEUE.WATCH` replies),
//! log entries (as published, or as read after the last one applied) and the tick's
//! counts; out come [`Effect`]s per watched person, and requests: people to register
//! or ask again, people to unregister, the log to read. The follower (follower.rs)
//! makes the calls and hands the effects to the streams.
//!
//! An entry says who left the waiting part (the head up to a number, and other
//! numbers) and, in a queue with lanes, who joined a lane ahead of people waiting in
//! a later one (`ahead`), so a person's new rank is the old one minus those who left
//! ahead of them plus those who joined ahead of them ([`effect_of`]); a batch of
//! entries costs one pass over the people they reach, in number order. The entries
//! also tell the promoted and registered their tickets (by the number they waited
//! under, which a queue with lanes changes at promotion), who left for good, and
//! who entered again and waits under a new number with the nickname and lane they
//! had (`moved`: the new number and rank, [`follow`]). Only people taken at the head
//! with no ticket listed, people still in the queue otherwise (entered again into
//! the pre-queue or with another nickname or lane, or inside), and everyone after a
//! gap in the log (entries trimmed before they were read, a failover, a restart) or
//! an entry that says reset, are asked again. A checkpoint older than what was applied
//! means the log moved back (a failover): everyone is asked again from its new end.

use queue_client::{Checkpoint, LogEntry, Standing, Status};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::time::{Duration, Instant};

/// How long entries that a checkpoint says the log holds beyond what was applied may
/// still be on their way on the changes channel before the log is read for them (a
/// reply on another connection can overtake a message by a little).
pub const IN_FLIGHT: Duration = Duration::from_millis(50);

/// Where a waiting person in line stands, as this instance knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct InLine {
    seq: u64,
    rank: u64,
    /// The log number their rank is as of: entries up to it are already counted.
    pos: u64,
}

/// What the ledger asks the streams of a person (or the follower) to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    /// A standing a checkpoint reported for this person: hand it on as it is.
    Standing(String, Standing),
    /// Their rank as this instance now knows it, with the estimate.
    Rank { user: String, rank: u64, eta: Eta },
    /// They entered again, as they were, and wait at this rank under a new number
    /// (the log's `moved`): a rank as [`Effect::Rank`], and their place after the
    /// re-entry.
    Moved { user: String, rank: u64, eta: Eta },
    /// Out of line as the log tells it: promoted with this ticket, or (None) no
    /// longer in the queue. A stream with no standing yet cannot be told (it has no
    /// nickname to show): then [`Ledger::ask_again`].
    Gone { user: String, ticket: Option<String> },
    /// How many wait in the queue, as the last entry or checkpoint said.
    Waiting(u64),
    /// Everyone is asked again.
    AskedEveryone(Why),
}

/// The estimated wait a [`Effect::Rank`] carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Eta {
    /// The admission rate is not known yet: the stream keeps what it shows.
    Unknown,
    /// Seconds until their turn (none when the rate gives no estimate).
    Is(Option<u64>),
}

/// Why everyone is asked again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Why {
    /// An entry's number skipped some (`expected` came as `got`).
    Gap { expected: u64, got: u64 },
    /// An entry said reset.
    Reset,
    /// The log is not the one applied (`applied` was the last number applied): it
    /// moved back or was written anew; read again from its end.
    Moved { why: &'static str, applied: u64 },
}

/// What applying the published entries needs next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Published {
    /// Applied (or nothing to apply).
    Done,
    /// A number is missing before them: read the log after the cursor, then apply
    /// again with `log_read`.
    ReadLog,
}

/// What a checkpoint ahead of what was applied needs now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Behind {
    /// Not behind, or caught up.
    No,
    /// The entries may still come on the channel: look again at [`Ledger::read_due`].
    Wait,
    /// Waited long enough: read the log, then [`Ledger::behind_read`].
    ReadLog,
}

/// What the log says happened to a person numbered `seq`: gone from the waiting
/// part, or how many more are ahead of them (negative: fewer).
#[derive(Debug, PartialEq, Eq)]
enum Change {
    Gone,
    Ahead(i64),
}

/// The docs' rule for one entry: gone if numbered at or below `head` or listed in
/// `left`; else fewer ahead by `gone` when the head is below and by each `left`
/// number below, and more by each `ahead` number below (a newcomer in an earlier lane).
fn effect_of(e: &LogEntry, seq: u64) -> Change {
    let mut ahead = 0i64;
    if let Some((head, gone)) = e.head {
        if seq <= head {
            return Change::Gone;
        }
        ahead -= gone as i64;
    }
    for &l in &e.left {
        if l == seq {
            return Change::Gone;
        }
        if l < seq {
            ahead -= 1;
        }
    }
    ahead += e.ahead.iter().filter(|&&a| a < seq).count() as i64;
    Change::Ahead(ahead)
}

/// Where a person gone from the waiting part is after the entries ([`follow`]).
#[derive(Debug, PartialEq, Eq)]
enum Followed {
    /// Waiting again (entered again as they were): their number and rank now.
    Waiting { seq: u64, rank: u64 },
    /// Gone numbered `seq` in `entries[at]` (numbers are reused: only that entry
    /// tells what became of them).
    Gone { seq: u64, at: usize },
}

/// Where a person who left numbered `l.seq` is after the entries past their `pos`:
/// each re-entry an entry tells (`moved`) carries them on to their new number and
/// rank, until they leave without one.
fn follow(entries: &[LogEntry], l: InLine) -> Followed {
    let (mut seq, mut rank) = (l.seq, l.rank);
    for (at, e) in entries.iter().enumerate().filter(|(_, e)| e.n > l.pos) {
        match effect_of(e, seq) {
            Change::Ahead(n) => rank = rank.saturating_add_signed(n).max(1),
            // The entry's other fields are counted in the rank it tells.
            Change::Gone => match e.moved_of(seq) {
                Some(m) => (seq, rank) = (m.new, m.rank),
                None => return Followed::Gone { seq, at },
            },
        }
    }
    Followed::Waiting { seq, rank }
}

/// Several entries at once for everyone numbered in ascending order: one pass over
/// the people and the entries' numbers, as [`effect_of`] summed over the entries.
struct Batch {
    /// (number, how many more are ahead of people numbered above it: minus those who
    /// left there, plus a newcomer there).
    marks: Vec<(u64, i64)>,
    /// People numbered at or below this are gone.
    head: Option<u64>,
    left: HashSet<u64>,
}

impl Batch {
    fn new(entries: &[LogEntry]) -> Batch {
        let mut marks = Vec::new();
        let mut head = None;
        let mut left = HashSet::new();
        for e in entries {
            if let Some((h, gone)) = e.head {
                marks.push((h, -(gone as i64)));
                head = Some(head.map_or(h, |x: u64| x.max(h)));
            }
            for &l in &e.left {
                marks.push((l, -1));
                left.insert(l);
            }
            marks.extend(e.ahead.iter().map(|&a| (a, 1)));
        }
        marks.sort_unstable();
        Batch { marks, head, left }
    }
}

/// A stream id's (milliseconds, sequence), to compare ids.
fn stream_id(id: &str) -> (u64, u64) {
    let (ms, seq) = id.split_once('-').unwrap_or((id, "0"));
    (ms.parse().unwrap_or(0), seq.parse().unwrap_or(0))
}

/// The ledger of one queue.
#[derive(Default)]
pub struct Ledger {
    /// The last entry applied: (stream id, number); None until placed in the log.
    cursor: Option<(String, u64)>,
    line: HashMap<String, InLine>,
    by_seq: BTreeMap<u64, String>,
    /// (pos, user) of everyone put in line from a checkpoint, until the entries up to
    /// their pos are applied: those an entry may reach before their pos is passed
    /// (entries up to it are counted already). Stale pairs (forgotten, checked again)
    /// are skipped.
    fresh: BTreeSet<(u64, String)>,
    /// People in the pre-queue (rank 0 until the opening, which the log announces).
    pre: HashSet<String>,
    to_watch: Vec<String>,
    to_unwatch: Vec<String>,
    /// The admissions per minute estimates use, and the opening time, as of the last tick.
    per_min: Option<i64>,
    opens_at: Option<i64>,
    /// Published entries taken, by number, not applied yet (after a gap).
    pending: BTreeMap<u64, LogEntry>,
    /// The highest log number a checkpoint reported beyond what was applied, and
    /// since when one did.
    behind: Option<(u64, Instant)>,
    /// Effects not taken yet ([`Ledger::take_effects`]).
    out: Vec<Effect>,
}

impl Ledger {
    pub fn new() -> Ledger {
        Ledger::default()
    }

    /// The number of the last entry applied (0 before any).
    pub fn applied(&self) -> u64 {
        self.cursor.as_ref().map_or(0, |c| c.1)
    }

    /// The id to read the log after, once placed in it.
    pub fn cursor(&self) -> Option<&str> {
        self.cursor.as_ref().map(|c| c.0.as_str())
    }

    /// Places the ledger at the log's end before its first entry: the last entry's
    /// id and number, or none (an empty log).
    pub fn start(&mut self, last: Option<(&str, u64)>) {
        self.cursor = Some(last.map_or(("0-0".to_string(), 0), |(id, n)| (id.to_string(), n)));
    }

    /// The effects since last taken, in the order they happened.
    pub fn take_effects(&mut self) -> Vec<Effect> {
        std::mem::take(&mut self.out)
    }

    /// A new stream for `user`, or their standing may have changed in a way the log
    /// does not tell (they left the pre-queue here): they are asked.
    pub fn ask(&mut self, user: String) {
        self.forget(&user);
        self.to_watch.push(user);
    }

    /// A [`Effect::Gone`] that could not be told: the person is asked.
    pub fn ask_again(&mut self, user: String) {
        self.to_watch.push(user);
    }

    /// `user`'s last stream here closed: forgotten, and unregistered when they may
    /// still be registered (only a person still waiting is: taking someone out of line,
    /// a claim, an expiry, leaving, removed their registration already).
    pub fn closed(&mut self, user: String) {
        let registered = self.line.contains_key(&user)
            || self.pre.contains(&user)
            || self.to_watch.len() > 64
            || self.to_watch.contains(&user);
        self.forget(&user);
        if registered {
            self.to_unwatch.push(user);
        }
    }

    /// Whether unregistrations are still to be sent (the queue is not retired before).
    pub fn unwatching(&self) -> bool {
        !self.to_unwatch.is_empty()
    }

    /// Takes entries as the commands that wrote them published them, to apply in
    /// number order ([`Ledger::apply_published`]).
    pub fn published(&mut self, entries: impl IntoIterator<Item = LogEntry>) {
        self.pending.extend(entries.into_iter().map(|e| (e.n, e)));
    }

    /// Puts `user` in line as `l`. Someone else the ledger still has under that
    /// number (they left in an entry not applied yet, and the number was given
    /// again) is taken out and asked about.
    fn place(&mut self, user: &str, l: InLine) {
        if let Some(prev) = self.by_seq.insert(l.seq, user.to_string()) {
            if prev != user && self.line.get(&prev).is_some_and(|p| p.seq == l.seq) {
                self.line.remove(&prev);
                self.to_watch.push(prev);
            }
        }
        self.line.insert(user.to_string(), l);
    }

    fn forget(&mut self, user: &str) {
        if let Some(l) = self.line.remove(user) {
            self.by_seq.remove(&l.seq);
        }
        self.pre.remove(user);
    }

    /// Everyone is asked again (a gap in the log, or an entry that says reset).
    fn reset_all(&mut self, why: Why) {
        self.out.push(Effect::AskedEveryone(why));
        self.by_seq.clear();
        self.fresh.clear();
        self.to_watch.extend(self.line.drain().map(|(u, _)| u));
        self.to_watch.extend(self.pre.drain());
    }

    /// The log is not the one applied (it moved back, or was written anew after a
    /// failover): everyone is asked again from its end, read at once.
    fn reposition(&mut self, why: &'static str) {
        self.reset_all(Why::Moved { why, applied: self.applied() });
        self.cursor = None;
        self.pending.clear();
        self.behind = None;
    }

    /// The tick's counts: how many wait, the admissions per minute (a new rate
    /// tells everyone in line their estimate) and the opening time (a new one asks the
    /// pre-queue again).
    pub fn tick(&mut self, waiting: u64, per_min: i64, opens_at: Option<i64>) {
        self.out.push(Effect::Waiting(waiting));
        if self.per_min != Some(per_min) {
            self.per_min = Some(per_min);
            let ranks: Vec<Effect> = self
                .line
                .iter()
                .map(|(u, l)| Effect::Rank { user: u.clone(), rank: l.rank, eta: self.eta(l.rank) })
                .collect();
            self.out.extend(ranks);
        }
        if self.opens_at.is_some() && self.opens_at != opens_at {
            self.to_watch.extend(self.pre.drain());
        }
        self.opens_at = opens_at;
    }

    /// The estimated wait at `rank`, at the admission rate of the last tick.
    fn eta(&self, rank: u64) -> Eta {
        match self.per_min {
            Some(m) => Eta::Is(queue_core::admission::estimated_wait_seconds(rank as i64, m).map(|s| s.max(0) as u64)),
            None => Eta::Unknown,
        }
    }

    /// Whether the ledger keeps `user`'s rank current (in line or in the pre-queue).
    pub fn tracks(&self, user: &str) -> bool {
        self.line.contains_key(user) || self.pre.contains(user)
    }

    /// The people to register or ask next (their standing shown may be out of date).
    pub fn asking(&self) -> &[String] {
        &self.to_watch
    }

    /// Keeps only the people to ask that `followed` says are still followed here (a
    /// registration of someone nobody here follows any more would never be taken
    /// back: they left this instance, or stopped polling, while they waited to be
    /// asked).
    pub fn keep_asking(&mut self, followed: impl Fn(&str) -> bool) {
        self.to_watch.retain(|u| followed(u));
    }

    /// Whether nobody is to be registered or asked (the lease is then renewed alone).
    pub fn nobody_to_watch(&self) -> bool {
        self.to_watch.is_empty()
    }

    /// The next people to register or ask (at most `max`, sorted, each once); none
    /// while the ledger is not placed in the log (checkpoints only from a known place:
    /// after a move back, the follower places it first).
    pub fn next_to_watch(&mut self, max: usize) -> Option<Vec<String>> {
        if self.to_watch.is_empty() || self.cursor.is_none() {
            return None;
        }
        let n = self.to_watch.len().min(max);
        let mut batch: Vec<String> = self.to_watch.drain(..n).collect();
        batch.sort_unstable();
        batch.dedup();
        Some(batch)
    }

    /// A registration that failed: asked again next time.
    pub fn watch_failed(&mut self, batch: Vec<String>) {
        self.to_watch.extend(batch);
    }

    /// The next people to unregister (at most `max`).
    pub fn next_to_unwatch(&mut self, max: usize) -> Option<Vec<String>> {
        if self.to_unwatch.is_empty() {
            return None;
        }
        let n = self.to_unwatch.len().min(max);
        Some(self.to_unwatch.drain(..n).collect())
    }

    /// An unregistration that failed: sent again next time.
    pub fn unwatch_failed(&mut self, batch: Vec<String>) {
        self.to_unwatch.extend(batch);
    }

    /// A checkpoint's log number and count, seen `now`. Older than what was applied:
    /// the log moved back since (a failover); everyone is asked again from the log's
    /// new end (false). Newer: entries not applied yet (in flight on the channel, or
    /// lost), looked at by [`Ledger::behind`].
    pub fn position(&mut self, log: u64, waiting: u64, now: Instant) -> bool {
        self.out.push(Effect::Waiting(waiting));
        if log < self.applied() {
            self.reposition("the change log moved back");
            return false;
        }
        if log > self.applied() {
            self.behind = Some(self.behind.map_or((log, now), |(n, t)| (n.max(log), t)));
        }
        true
    }

    /// The checkpoint of registering `batch`, seen `now`: each person `streamed` (still
    /// with a stream here) is told their standing, and put in line (or the pre-queue)
    /// when waiting and the checkpoint is from the log applied.
    pub fn checkpoint(&mut self, batch: Vec<String>, cp: Checkpoint, now: Instant, streamed: impl Fn(&str) -> bool) {
        let current = self.position(cp.log, cp.waiting, now);
        if !current {
            // Asked again with everyone, once the cursor is set anew.
            self.to_watch.extend(batch.iter().cloned());
        }
        for (user, (seq, st)) in batch.into_iter().zip(cp.users) {
            if !streamed(&user) {
                continue;
            }
            if current && st.status == Status::Waiting {
                if seq > 0 {
                    self.place(&user, InLine { seq, rank: st.rank, pos: cp.log });
                    self.fresh.insert((cp.log, user.clone()));
                } else {
                    self.pre.insert(user.clone());
                }
            }
            self.out.push(Effect::Standing(user, st));
        }
    }

    /// Applies the published entries taken, in number order. A number missing before
    /// them (a message lost) asks for the log to be read first (unless `log_read`: it
    /// was, and the gap stays); entries whose ids and numbers disagree with what was
    /// applied mean the log was written anew.
    pub fn apply_published(&mut self, log_read: bool) -> Published {
        let Some((cursor_id, applied)) = self.cursor.as_ref().map(|c| (stream_id(&c.0), c.1)) else {
            return Published::Done;
        };
        // An entry already applied has an id at or before the cursor's, and the
        // cursor's own id only with the cursor's number.
        let disagrees =
            |n: u64, id: (u64, u64)| (n <= applied) != (id <= cursor_id) || (id == cursor_id && n != applied);
        if self.pending.iter().any(|(&n, e)| disagrees(n, stream_id(&e.id))) {
            self.reposition("a published entry disagrees with the change log applied");
            return Published::Done;
        }
        self.pending.retain(|&n, _| n > applied);
        let Some(&first) = self.pending.keys().next() else { return Published::Done };
        if first > applied + 1 && !log_read {
            return Published::ReadLog;
        }
        // In order; still a gap after reading the log: apply() asks everyone again.
        let entries: Vec<LogEntry> = std::mem::take(&mut self.pending).into_values().collect();
        self.apply(&entries);
        Published::Done
    }

    /// Entries read from the log after the cursor; false when they cannot follow
    /// what was applied (then everyone is asked again from the log's end).
    pub fn read(&mut self, entries: &[LogEntry]) -> bool {
        if entries.first().is_some_and(|e| e.n <= self.applied()) {
            self.reposition("an entry after the last one applied has an earlier number");
            return false;
        }
        self.apply(entries);
        true
    }

    /// When a checkpoint reported the log beyond what was applied: when the log is
    /// to be read for the entries missing if they have not come on the channel by then.
    pub fn read_due(&self) -> Option<Instant> {
        self.behind.map(|(_, since)| since + IN_FLIGHT)
    }

    /// After a checkpoint said the log holds entries beyond what was applied (the
    /// tick's renewal looks every tick), and what came on the channel meanwhile was
    /// applied: caught up, or still waiting for them, or [`IN_FLIGHT`] passed and the
    /// log is to be read (a message lost, say while the subscription reconnected).
    pub fn behind(&mut self, now: Instant) -> Behind {
        let Some((n, since)) = self.behind else { return Behind::No };
        if n <= self.applied() {
            self.behind = None;
            Behind::No
        } else if now.saturating_duration_since(since) >= IN_FLIGHT {
            Behind::ReadLog
        } else {
            Behind::Wait
        }
    }

    /// The log was read to its end for [`Behind::ReadLog`]: still behind, the entries
    /// cannot be reached after the last one applied (the log was written anew with
    /// ids that moved back), and everyone is asked again from its end.
    pub fn behind_read(&mut self) {
        if let Some((n, _)) = self.behind.take() {
            if self.cursor.is_some() && n > self.applied() {
                self.reposition("the change log's newest entries cannot be read after the last one applied");
            }
        }
    }

    /// Applies entries read after the cursor: a gap or a reset asks everyone again.
    fn apply(&mut self, entries: &[LogEntry]) {
        // Entries already applied (the reader still on a cursor from before a reset).
        let applied = self.applied();
        let entries = &entries[entries.iter().position(|e| e.n > applied).unwrap_or(entries.len())..];
        let Some(last) = entries.last() else { return };
        if self.cursor.is_none() {
            return;
        }
        let first = applied + 1;
        let contiguous = entries.iter().enumerate().all(|(i, e)| e.n == first + i as u64);
        let reset = entries.iter().any(|e| e.reset);
        self.cursor = Some((last.id.clone(), last.n));
        self.out.push(Effect::Waiting(last.waiting));
        if !contiguous {
            self.reset_all(Why::Gap { expected: first, got: entries[0].n });
            return;
        }
        if reset {
            self.reset_all(Why::Reset);
            return;
        }
        let batch = Batch::new(entries);
        let mut changed: Vec<(String, Change)> = Vec::new();
        // Everyone whose rank is as of an entry before these: one pass in number order,
        // from the first person the entries reach (a head that moved reaches everyone;
        // people who left or joined ahead reach those from them on; entries at the
        // back, no one).
        let start = match (batch.head, batch.marks.first()) {
            (Some(_), _) => Some(0),
            (None, Some(&(at, _))) => Some(at),
            (None, None) => None,
        };
        let mut marks = batch.marks.iter().peekable();
        let mut ahead = 0i64;
        for (&seq, user) in start.map(|from| self.by_seq.range(from..)).into_iter().flatten() {
            let l = &self.line[user];
            if l.pos >= first {
                continue;
            }
            while let Some(&&(at, n)) = marks.peek() {
                if at >= seq {
                    break;
                }
                ahead += n;
                marks.next();
            }
            let gone = batch.head.is_some_and(|h| seq <= h) || batch.left.contains(&seq);
            if gone {
                changed.push((user.clone(), Change::Gone));
            } else if ahead != 0 {
                changed.push((user.clone(), Change::Ahead(ahead)));
            }
        }
        // Those checked in between: only the entries after their checkpoint. Everyone
        // checked before these entries' last is taken out of `fresh` (from then on
        // the first pass reaches them).
        let later = self.fresh.split_off(&(last.n, String::new()));
        let reached = std::mem::replace(&mut self.fresh, later);
        for (pos, user) in &reached {
            let Some(l) = self.line.get(user) else { continue };
            if l.pos != *pos || l.pos < first {
                continue;
            }
            let mut total = 0;
            let mut gone = false;
            for e in entries.iter().filter(|e| e.n > l.pos) {
                match effect_of(e, l.seq) {
                    Change::Gone => gone = true,
                    Change::Ahead(n) => total += n,
                }
            }
            changed.push((user.clone(), if gone { Change::Gone } else { Change::Ahead(total) }));
        }
        // Of those gone, the entries tell the promoted and watched their tickets, and
        // who left the queue altogether; the rest (taken at the head without a ticket
        // listed, or still in the queue otherwise: entered again, inside) are asked.
        // People placed anew (entered again), once everyone gone here is forgotten.
        let mut placed = Vec::new();
        for (user, change) in changed {
            match change {
                Change::Gone => {
                    let Some(&l) = self.line.get(&user) else { continue };
                    self.forget(&user);
                    // Entered again with the nickname and lane they had: in line
                    // under the new number, with nobody asked.
                    let (seq, at) = match follow(entries, l) {
                        Followed::Waiting { seq, rank } => {
                            placed.push((user, InLine { seq, rank, pos: last.n }));
                            continue;
                        }
                        Followed::Gone { seq, at } => (seq, &entries[at]),
                    };
                    // What the entry that took them tells, of that number there.
                    let ticket = at.ticket_of(seq);
                    let left_for_good = at.left.contains(&seq) && !at.again.contains(&seq);
                    match ticket {
                        Some(ticket) => self.out.push(Effect::Gone { user, ticket: Some(ticket.to_string()) }),
                        None if left_for_good => self.out.push(Effect::Gone { user, ticket: None }),
                        None => self.to_watch.push(user),
                    }
                }
                Change::Ahead(n) => {
                    let Some(l) = self.line.get_mut(&user) else { continue };
                    l.rank = l.rank.saturating_add_signed(n).max(1);
                    if n != 0 {
                        let rank = l.rank;
                        self.out.push(Effect::Rank { user, rank, eta: self.eta(rank) });
                    }
                }
            }
        }
        for (user, l) in placed {
            self.place(&user, l);
            self.out.push(Effect::Moved { user, rank: l.rank, eta: self.eta(l.rank) });
        }
    }
}

/// What a stream showing `shown` shows once told it left the line: promoted with
/// `ticket` (and the nickname it shows), or no longer in the queue. None when it
/// shows no standing yet (no nickname to show): the person is asked instead.
pub fn gone_standing(user: &str, shown: Option<&Standing>, ticket: Option<String>) -> Option<Standing> {
    let nickname = shown?.nickname.clone();
    let (status, nickname) = match ticket {
        Some(_) => (Status::Promoted, nickname),
        None => (Status::Unknown, None),
    };
    Some(Standing {
        status,
        rank: 0,
        user_id: user.to_string(),
        nickname,
        ticket_id: ticket,
        estimated_wait_seconds: None,
        opens_at: None,
        lane: None,
    })
}

/// Sets a waiting standing's rank and estimate; whether anything changed (a stream
/// not waiting is left as it is).
pub fn set_rank(shown: &mut Option<Standing>, rank: u64, eta: Eta) -> bool {
    match shown {
        Some(st) if st.status == Status::Waiting => {
            let eta = match eta {
                Eta::Is(eta) => eta,
                Eta::Unknown => st.estimated_wait_seconds,
            };
            let changed = st.rank != rank || st.estimated_wait_seconds != eta;
            st.rank = rank;
            st.estimated_wait_seconds = eta;
            changed
        }
        _ => false,
    }
}

#[cfg(test)]
#[path = "ledger_tests.rs"]
mod tests;
