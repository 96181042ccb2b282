//! The admission engine, written once: enter, standing, leave, promote (reaping and
//! the abandonment sweep), claim, heartbeat, end and the counts INFO shows, over a
//! small [`Store`] of sorted-set and hash operations and a clock. The Valkey module
//! implements the store over the queue's keys (static dispatch: every function here
//! is generic); [`crate::memory::MemoryStore`] implements it in memory with a clock
//! the tests set, so every rule is tested without a server.
//!
//! The layout (README, "Key layout"): `waiting` is a sorted set of userId ->
//! sequence number in entry order; each number's record (`crate::record`) says
//! whether its user waits or holds a ticket. Ticket holders keep their place until
//! their ticket is used, withdrawn or expires, and every holder is numbered below
//! every waiting user (newcomers are numbered after `p_max`, the highest number
//! holding a ticket), so the holders are always the first `joining` members and a
//! waiting user's rank is its rank in `waiting` minus `joining`.

use crate::admission::{self, Bucket, RateWindow, SWEEP_BUDGET};
use crate::config::{Config, FIELDS};
use crate::error::QueueError;
use crate::keys;
use crate::record::{self, Record};
use crate::ticket::{self, SECRET_LEN};

/// The keys of a queue a command may need to check before it writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    Waiting,
    Sessions,
    Active,
    Stats,
    Config,
}

/// Every key a command that admits, withdraws or ends may write.
pub const ALL_PARTS: [Part; 4] = [Part::Waiting, Part::Sessions, Part::Active, Part::Stats];

/// Module-wide happenings, counted by a store that keeps server-wide totals.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    Entered,
    Promoted,
    Claimed,
    TicketsExpired,
    Dropped,
    Left,
    Ended,
    LeasesExpired,
}

/// Stats hash fields. The two expiry counters keep their stored (and QUEUE.INFO)
/// names `expired` and `lapsed`; PROMOTE reports them as tickets_expired and
/// leases_expired.
pub mod stat {
    pub const JOINING: &str = "joining";
    pub const P_MAX: &str = "p_max";
    pub const TOKENS: &str = "tokens";
    pub const TOKENS_AT: &str = "tokens_at";
    pub const RATE_AT: &str = "rate_at";
    pub const RATE_COUNT: &str = "rate_count";
    pub const RATE_PER_MIN: &str = "rate_per_min";
    pub const SWEEP: &str = "sweep";
    pub const PROMOTED: &str = "promoted";
    pub const CLAIMED: &str = "claimed";
    pub const TICKETS_EXPIRED: &str = "expired";
    pub const DROPPED: &str = "dropped";
    pub const LEFT: &str = "left";
    pub const ENDED: &str = "ended";
    pub const LEASES_EXPIRED: &str = "lapsed";
    pub const SLOT_WAIT_MS: &str = "slot_wait_ms";
    /// 1 while an opening is scheduled (its seed drawn, not yet opened): the one
    /// field every command reads to know whether to open the queue first.
    pub const OPENING: &str = "opening";
}

/// What the engine needs of the place a queue is kept. Reads never fail (a key of
/// the wrong type reads as empty); commands call [`Store::check`] on every key they
/// may write before writing any.
pub trait Store {
    /// A userId as the store holds it.
    type User: Clone + AsRef<[u8]>;
    /// A stored value (a record, a nickname).
    type Text: AsRef<[u8]>;

    /// WRONGTYPE unless each of `parts` is empty or of its type.
    fn check(&self, parts: &[Part]) -> Result<(), QueueError>;
    /// The time in ms; a command reads it once.
    fn now(&self) -> i64;
    /// Setting `i` (index into `FIELDS`): the queue's config, else the default.
    fn setting(&self, i: usize) -> i64;
    /// A stats field, None when absent.
    fn stat_opt(&self, field: &'static str) -> Option<i64>;
    fn set_stat(&mut self, field: &'static str, v: i64);
    /// A fresh ticket secret.
    fn new_secret(&mut self) -> [u8; SECRET_LEN];
    /// Counts a happening server-wide (the module's `INFO queue`); by default nothing.
    fn count(&self, _event: Event, _n: i64) {}
    /// Whether this queue's layout marker was already seen (a store may remember it
    /// to skip the read; by default it does not).
    fn layout_known(&self) -> bool {
        false
    }
    /// Notes that this queue's layout marker is set.
    fn note_layout(&self) {}
    /// Announces on the queue's promotion channel (see [`announcement`]) that a
    /// command promoted `promoted` users or dropped some, leaving `waiting`; by
    /// default nothing.
    fn announce(&mut self, _promoted: i64, _waiting: i64, _at_ms: i64) {}

    fn waiting_len(&self) -> i64;
    fn waiting_score(&self, user: &Self::User) -> Option<i64>;
    /// 0-based rank and number of `user` in `waiting`.
    fn waiting_rank(&self, user: &Self::User) -> Option<(i64, i64)>;
    fn waiting_max(&self) -> Option<i64>;
    /// Visits members numbered `min..=max`, lowest first, while `f` returns true.
    fn waiting_scan<F: FnMut(Self::User, i64) -> bool>(&self, min: i64, max: i64, f: F);
    fn waiting_add(&mut self, user: &Self::User, seq: i64);
    /// Adds `user` with number `seq` unless it is in `waiting` already (then changes
    /// nothing); whether it was added. One lookup where a check and an add take two.
    fn waiting_add_new(&mut self, user: &Self::User, seq: i64) -> bool {
        if self.waiting_score(user).is_some() {
            return false;
        }
        self.waiting_add(user, seq);
        true
    }
    fn waiting_remove(&mut self, user: &Self::User);

    /// The record of number `seq`, raw.
    fn record(&self, seq: i64) -> Option<Self::Text>;
    fn put_record(&mut self, seq: i64, value: &[u8]);
    fn delete_record(&mut self, seq: i64);

    fn sessions_len(&self) -> i64;
    fn session_expiry(&self, user: &Self::User) -> Option<i64>;
    /// Users whose lease ended at or before `now`.
    fn sessions_ended_by(&self, now: i64) -> Vec<Self::User>;
    /// Sets `user`'s lease expiry (opening or extending).
    fn set_lease(&mut self, user: &Self::User, until: i64);
    fn active_nickname(&self, user: &Self::User) -> Option<Self::Text>;
    fn set_active(&mut self, user: &Self::User, nickname: &[u8]);
    /// Removes `user` from the sessions and the active users.
    fn close_session(&mut self, user: &Self::User);

    // The pre-queue and the opening (`crate::opening`): small keys, read and written
    // only while an opening is scheduled or by QUEUE.OPENING. A key of another type
    // reads as empty.
    fn aux_hget(&self, key: Aux, field: &[u8]) -> Option<Vec<u8>>;
    fn aux_hset(&mut self, key: Aux, field: &[u8], value: &[u8]);
    /// Whether the field was there.
    fn aux_hdel(&mut self, key: Aux, field: &[u8]) -> bool;
    fn aux_hlen(&self, key: Aux) -> i64;
    /// Every field and value of the hash `key`.
    fn aux_hgetall(&self, key: Aux) -> Vec<(Vec<u8>, Vec<u8>)>;
    fn aux_del(&mut self, key: Aux);
    /// Appends to the proof list.
    fn proof_push(&mut self, items: &[Vec<u8>]);
    fn proof_len(&self) -> i64;
    /// Up to `count` items of the proof list from index `start`.
    fn proof_range(&self, start: i64, count: i64) -> Vec<Vec<u8>>;
    /// A userId as the store holds it, from its bytes.
    fn user_of(&self, id: &[u8]) -> Self::User;
    /// 32 fresh random bytes (an opening's seed).
    fn random_seed(&mut self) -> [u8; 32];
}

/// The opening's keys (README, "A verifiably fair opening").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Aux {
    /// hash userId -> nickname: the pre-queue.
    Pre,
    /// hash: seed, commitment, opened_at, entrants.
    Opening,
    /// list: idHashes in placed order (only through `proof_*`).
    Proof,
}

impl Aux {
    pub fn suffix(self) -> &'static str {
        match self {
            Aux::Pre => keys::PRE,
            Aux::Opening => keys::OPENING,
            Aux::Proof => keys::PROOF,
        }
    }
}

/// A user's record, decoded (owned, so it outlives the read).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rec {
    Waiting { seen: i64, nickname: Vec<u8> },
    Promoted { expiry: i64, secret: Vec<u8>, nickname: Vec<u8> },
}

/// Where a user stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Standing {
    Waiting {
        seq: i64,
        rank: i64,
        seen: i64,
        nickname: Vec<u8>,
    },
    /// In the pre-queue of an opening at `opens_at` (ms): WAITING with rank 0.
    Pre {
        nickname: Vec<u8>,
        opens_at: i64,
    },
    Promoted {
        ticket: Vec<u8>,
        nickname: Vec<u8>,
    },
    Active {
        nickname: Option<Vec<u8>>,
    },
    Unknown,
}

impl Standing {
    /// The reply's `status` field.
    pub fn status(&self) -> &'static str {
        match self {
            Standing::Waiting { .. } | Standing::Pre { .. } => "WAITING",
            Standing::Promoted { .. } => "PROMOTED",
            Standing::Active { .. } => "ACTIVE",
            Standing::Unknown => "UNKNOWN",
        }
    }
    /// The reply's `rank` (0 unless waiting).
    pub fn rank(&self) -> i64 {
        match self {
            Standing::Waiting { rank, .. } => *rank,
            _ => 0,
        }
    }
    pub fn nickname(&self) -> Option<&[u8]> {
        match self {
            Standing::Waiting { nickname, .. }
            | Standing::Promoted { nickname, .. }
            | Standing::Pre { nickname, .. } => Some(nickname),
            Standing::Active { nickname } => nickname.as_deref(),
            Standing::Unknown => None,
        }
    }
    /// The reply's `opensAt`: set only in a pre-queue.
    pub fn opens_at(&self) -> Option<i64> {
        match self {
            Standing::Pre { opens_at, .. } => Some(*opens_at),
            _ => None,
        }
    }
    pub fn ticket(&self) -> Option<&[u8]> {
        match self {
            Standing::Promoted { ticket, .. } => Some(ticket),
            _ => None,
        }
    }
}

/// PROMOTE's reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Promotion {
    pub promoted: i64,
    pub tickets_expired: i64,
    pub leases_expired: i64,
    pub dropped: i64,
    pub waiting: i64,
    pub joining: i64,
    pub active: i64,
    pub available_slots: i64,
}

impl Promotion {
    /// The reply's fields by name.
    pub fn fields(&self) -> [(&'static str, i64); 8] {
        [
            ("promoted", self.promoted),
            ("tickets_expired", self.tickets_expired),
            ("leases_expired", self.leases_expired),
            ("dropped", self.dropped),
            ("waiting", self.waiting),
            ("joining", self.joining),
            ("active", self.active),
            ("available_slots", self.available_slots),
        ]
    }
}

/// TICKET.CLAIM's reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claimed<U> {
    pub user: U,
    pub nickname: Vec<u8>,
    pub lease_ms: i64,
}

/// QUEUE.INFO's values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Info {
    pub waiting: i64,
    pub joining: i64,
    pub active: i64,
    pub available_slots: i64,
    pub tokens: i64,
    pub admission_rate_per_min: i64,
    pub config: Config,
    /// In the order of `replies::COUNTERS`.
    pub counters: [i64; 8],
}

impl Info {
    /// The reply's fields by name: counts, every setting, counters.
    pub fn fields(&self) -> Vec<(&'static str, i64)> {
        let mut f = vec![
            ("waiting", self.waiting),
            ("joining", self.joining),
            ("active", self.active),
            ("available_slots", self.available_slots),
            ("tokens", self.tokens),
            ("admission_rate_per_min", self.admission_rate_per_min),
        ];
        f.extend(FIELDS.iter().zip(self.config.values).map(|(field, v)| (field.name, v)));
        f.extend(crate::replies::COUNTERS.into_iter().zip(self.counters));
        f
    }
}

pub(crate) fn stat<S: Store>(s: &S, field: &'static str) -> i64 {
    s.stat_opt(field).unwrap_or(0)
}

pub(crate) fn add_stat<S: Store>(s: &mut S, field: &'static str, by: i64) {
    if by != 0 {
        let v = stat(s, field) + by;
        s.set_stat(field, v);
    }
}

pub fn config<S: Store>(s: &S) -> Config {
    let mut c = Config::default();
    for i in 0..FIELDS.len() {
        c.values[i] = s.setting(i);
    }
    c
}

/// Tickets out: promoted users who have not claimed, withdrawn or been reaped.
pub fn joining<S: Store>(s: &S) -> i64 {
    stat(s, stat::JOINING)
}

/// The highest number a ticket holder has (0 when nobody holds a ticket).
pub fn p_max<S: Store>(s: &S) -> i64 {
    if joining(s) > 0 {
        stat(s, stat::P_MAX)
    } else {
        0
    }
}

/// Whether the user numbered `seq` holds a ticket (expired or not).
pub fn is_promoted<S: Store>(s: &S, seq: i64) -> bool {
    seq <= p_max(s)
}

/// Users in line who have no ticket yet.
pub fn waiting_count<S: Store>(s: &S) -> i64 {
    s.waiting_len() - joining(s)
}

fn decode(v: &[u8]) -> Option<Rec> {
    Some(match record::decode(v)? {
        Record::Waiting { seen, nickname } => Rec::Waiting { seen, nickname: nickname.to_vec() },
        Record::Promoted { expiry, secret, nickname } => {
            Rec::Promoted { expiry, secret: secret.to_vec(), nickname: nickname.to_vec() }
        }
    })
}

/// The record of the user numbered `seq`.
pub fn record<S: Store>(s: &S, seq: i64) -> Option<Rec> {
    decode(s.record(seq)?.as_ref())
}

/// The token bucket refilled to `now` (full the first time it is seen).
pub fn bucket<S: Store>(s: &S, now: i64) -> Bucket {
    let cfg = config(s);
    match s.stat_opt(stat::TOKENS) {
        Some(milli) => {
            Bucket { milli_tokens: milli, at_ms: stat(s, stat::TOKENS_AT) }.refill(now, cfg.rate(), cfg.bucket_size())
        }
        None => Bucket::full(cfg.bucket_size(), now),
    }
}

fn save_bucket<S: Store>(s: &mut S, b: Bucket) {
    s.set_stat(stat::TOKENS, b.milli_tokens);
    s.set_stat(stat::TOKENS_AT, b.at_ms);
}

fn rate_window<S: Store>(s: &S) -> RateWindow {
    RateWindow {
        at_ms: stat(s, stat::RATE_AT),
        count: stat(s, stat::RATE_COUNT),
        per_minute: stat(s, stat::RATE_PER_MIN),
    }
}

/// The admissions per minute wait estimates use now.
fn admissions_per_minute<S: Store>(s: &S, now: i64) -> i64 {
    admission::admissions_per_minute(rate_window(s), now, s.setting(crate::config::RATE))
}

/// Counts admissions from the line (PROMOTE and slots filled as they free; not
/// someone let in at once on entry) in the measured window.
fn record_admissions<S: Store>(s: &mut S, now: i64, admitted: i64) {
    let old = rate_window(s);
    let new = old.record(now, admitted);
    if new.at_ms != old.at_ms {
        s.set_stat(stat::RATE_AT, new.at_ms);
    }
    if new.count != old.count {
        s.set_stat(stat::RATE_COUNT, new.count);
    }
    if new.per_minute != old.per_minute {
        s.set_stat(stat::RATE_PER_MIN, new.per_minute);
    }
}

/// The number for a newcomer: after everyone in line and after every number that
/// holds a ticket (the last ticket holder may have left the line by claiming while
/// earlier ones still hold theirs: numbering after the last one in line would then
/// put the newcomer among the ticket holders, where PROMOTE never looks).
pub fn next_seq<S: Store>(s: &S) -> i64 {
    s.waiting_max().unwrap_or(0).max(p_max(s)) + 1
}

/// Repairs, once, data written by releases that numbered newcomers after the last
/// one in line (see [`next_seq`]): such a waiting user, numbered at or below `p_max`,
/// was taken for a ticket holder. Every command that reads or changes the line calls
/// this first; with the layout marker set it costs one read of a stats field, or
/// nothing once the store remembers the queue as marked ([`Store::layout_known`]).
/// Writes nothing for a queue nobody is in. Returns whether it repaired.
pub fn ensure_layout<S: Store>(s: &mut S) -> Result<bool, QueueError> {
    if s.layout_known() {
        return Ok(false);
    }
    if s.stat_opt(keys::LAYOUT_FIELD) == Some(keys::LAYOUT) {
        s.note_layout();
        return Ok(false);
    }
    if s.waiting_len() == 0 && joining(s) == 0 && stat(s, stat::P_MAX) == 0 {
        return Ok(false);
    }
    s.check(&[Part::Waiting, Part::Stats])?;
    repair(s);
    s.set_stat(keys::LAYOUT_FIELD, keys::LAYOUT);
    s.note_layout();
    Ok(true)
}

/// Recounts `joining` and `p_max` from the records at the head of the line, and
/// renumbers waiting users found among the ticket holders, in their order, after the
/// last holder; later waiting users move up only as far as needed to keep the order
/// (nobody's place changes, only numbers, which waiting users never see).
fn repair<S: Store>(s: &mut S) {
    let stored_p_max = stat(s, stat::P_MAX);
    struct Member<U, T> {
        user: U,
        seq: i64,
        value: Option<T>,
        holds: bool,
    }
    // The head: every member numbered up to the stored p_max, and any ticket holder
    // right after it.
    let mut head: Vec<Member<S::User, S::Text>> = Vec::new();
    s.waiting_scan(i64::MIN, i64::MAX, |user, seq| {
        let value = s.record(seq);
        let holds = value.as_ref().is_some_and(|v| matches!(record::decode(v.as_ref()), Some(Record::Promoted { .. })));
        if seq > stored_p_max && !holds {
            return false;
        }
        head.push(Member { user, seq, value, holds });
        true
    });
    let holders = head.iter().filter(|m| m.holds).count() as i64;
    let last_holder = head.iter().filter(|m| m.holds).map(|m| m.seq).max().unwrap_or(0);
    // Waiting users numbered below the last holder move after it, then the users
    // after them as far as needed.
    // (user, old number, record, new number)
    type Move<U, T> = (U, i64, Option<T>, i64);
    let mut moves: Vec<Move<S::User, S::Text>> = Vec::new();
    let mut next = last_holder + 1;
    let mut all_moved = true;
    let after_head = head.last().map(|m| m.seq);
    for m in head {
        if m.holds {
            continue;
        }
        let new = m.seq.max(next);
        if new == m.seq {
            all_moved = false;
            break;
        }
        next = new + 1;
        moves.push((m.user, m.seq, m.value, new));
    }
    if !moves.is_empty() && all_moved {
        let start = after_head.map_or(i64::MIN, |s| s + 1);
        let mut more = Vec::new();
        s.waiting_scan(start, i64::MAX, |user, seq| {
            let new = seq.max(next);
            if new == seq {
                return false;
            }
            more.push((user, seq, s.record(seq), new));
            next = new + 1;
            true
        });
        moves.extend(more);
    }
    // Only numbers nobody moves to are deleted: a store may replicate one write per
    // field and command.
    let taken: std::collections::HashSet<i64> = moves.iter().map(|m| m.3).collect();
    for (_, seq, value, _) in &moves {
        if value.is_some() && !taken.contains(seq) {
            s.delete_record(*seq);
        }
    }
    for (user, _, value, new) in &moves {
        s.waiting_add(user, *new);
        if let Some(v) = value {
            s.put_record(*new, v.as_ref());
        }
    }
    s.set_stat(stat::JOINING, holders);
    s.set_stat(stat::P_MAX, last_holder);
}

/// Notes that the waiting user `seq` was heard from at `now`.
fn touch<S: Store>(s: &mut S, seq: i64, now: i64, nickname: &[u8]) {
    s.put_record(seq, &record::encode_waiting(now, nickname));
}

/// Marks the queue's data as numbered by the current rule (before its first entry).
fn mark_layout<S: Store>(s: &mut S) {
    if !s.layout_known() && s.stat_opt(keys::LAYOUT_FIELD) != Some(keys::LAYOUT) {
        s.set_stat(keys::LAYOUT_FIELD, keys::LAYOUT);
        s.note_layout();
    }
}

/// Puts `user` in line with number `seq` (the back of the line).
pub(crate) fn add_waiter<S: Store>(s: &mut S, user: &S::User, seq: i64, now: i64, nickname: &[u8]) {
    mark_layout(s);
    s.waiting_add(user, seq);
    touch(s, seq, now, nickname);
}

/// Takes `user` (numbered `seq`) out of line, withdrawing its ticket if it had one.
pub(crate) fn remove<S: Store>(s: &mut S, user: &S::User, seq: i64, was_promoted: bool) {
    s.waiting_remove(user);
    s.delete_record(seq);
    if was_promoted {
        let left = joining(s) - 1;
        s.set_stat(stat::JOINING, left);
        if left == 0 {
            s.set_stat(stat::P_MAX, 0);
        }
    }
}

/// Gives the user numbered `seq` a ticket claimable until now + ticket_ttl: its
/// record becomes the ticket. Returns the ticket id.
fn promote_user<S: Store>(s: &mut S, seq: i64, nickname: &[u8], now: i64) -> Vec<u8> {
    let secret = s.new_secret();
    let expiry = now + s.setting(crate::config::TICKET_TTL);
    s.put_record(seq, &record::encode_promoted(expiry, &secret, nickname));
    ticket::ticket_id(seq, &secret)
}

/// Counts `n` promotions up to number `p_max` (kept apart so a batch writes once).
fn note_promoted<S: Store>(s: &mut S, n: i64, p_max: i64) {
    if n > 0 {
        let j = joining(s) + n;
        s.set_stat(stat::JOINING, j);
        s.set_stat(stat::P_MAX, p_max);
    }
}

/// The user in line with number `seq`.
fn user_at<S: Store>(s: &S, seq: i64) -> Option<S::User> {
    let mut found = None;
    s.waiting_scan(seq, seq, |u, _| {
        found = Some(u);
        false
    });
    found
}

/// Tickets for up to `n` of the head of the waiting users (right after the holders),
/// in line order; waiters not heard from within `abandon_after` are dropped on the
/// way. Counts them in `joining`/`p_max`; returns (promoted, dropped, the number of
/// the last ticket holder).
fn admit_head<S: Store>(s: &mut S, n: i64, abandon_after: i64, now: i64) -> (i64, i64, i64) {
    let (mut promoted, mut dropped, mut top) = (0i64, 0i64, p_max(s));
    if n <= 0 {
        return (0, 0, top);
    }
    let mut head = Vec::new();
    let limit = n as usize + SWEEP_BUDGET;
    s.waiting_scan(top + 1, i64::MAX, |u, seq| {
        head.push((u, seq));
        head.len() < limit
    });
    for (user, seq) in head {
        if promoted == n {
            break;
        }
        match record(s, seq) {
            Some(Rec::Waiting { seen, nickname }) if !admission::is_abandoned(seen, now, abandon_after) => {
                promote_user(s, seq, &nickname, now);
                promoted += 1;
                top = seq;
            }
            _ => {
                remove(s, &user, seq, false);
                dropped += 1;
            }
        }
    }
    note_promoted(s, promoted, top);
    (promoted, dropped, top)
}

/// A slot was just freed inside a command (a session ended, a ticket holder left or
/// re-entered, a claim found its ticket expired): the head of the line gets the
/// free tickets now, within the soft cap, the token bucket and batch_max, exactly as
/// the next PROMOTE would give them, and the promotion is announced at once. The
/// time-based work (expiries, the abandonment sweep) stays with PROMOTE. Does
/// nothing when nobody waits or the line's keys are not of their types. Returns how
/// many were promoted.
pub fn fill_freed<S: Store>(s: &mut S, now: i64, freed_at: &[i64]) -> i64 {
    if s.check(&ALL_PARTS).is_err()
        || ensure_layout(s).is_err()
        || waiting_count(s) <= 0
        || crate::opening::before_opening(s, now)
    {
        return 0;
    }
    let cfg = config(s);
    let free = admission::free_slots(cfg.soft_cap(), s.sessions_len(), joining(s));
    if free <= 0 {
        return 0;
    }
    let bucket = (cfg.rate() > 0).then(|| bucket(s, now));
    let n = admission::promote_count(free, bucket.map(|b| b.whole()), None, cfg.batch_max());
    let (promoted, dropped, _) = admit_head(s, n, cfg.abandon_after(), now);
    if let Some(b) = bucket.filter(|_| promoted > 0) {
        save_bucket(s, b.take(promoted));
    }
    if promoted > 0 {
        record_admissions(s, now, promoted);
        note_slot_wait(s, freed_at, promoted, now);
    }
    add_stat(s, stat::PROMOTED, promoted);
    add_stat(s, stat::DROPPED, dropped);
    s.count(Event::Promoted, promoted);
    s.count(Event::Dropped, dropped);
    if promoted + dropped > 0 {
        let waiting = waiting_count(s);
        s.announce(promoted, waiting, now);
    }
    promoted
}

/// The announcement's payload: `{"queue":..,"promoted":..,"waiting":..,"atMs":..}`,
/// the same JSON the queue-manager publishes after its PROMOTE (queue names need no
/// escaping: `keys::check_queue` allows none of `"` or `\`).
pub fn announcement(queue: &str, promoted: i64, waiting: i64, at_ms: i64) -> String {
    format!(r#"{{"queue":"{queue}","promoted":{promoted},"waiting":{waiting},"atMs":{at_ms}}}"#)
}

/// What housekeeping dropped: expired tickets and leases, and when the slots they
/// held became free (their deadlines, oldest first).
#[derive(Debug, Default)]
pub struct Reaped {
    pub tickets: i64,
    pub leases: i64,
    pub freed_at: Vec<i64>,
}

/// Drops expired tickets and leases.
///
/// Tickets are examined from the head of the line, in the order they were issued, up
/// to the first that is still good: after `ticket_ttl` was lowered a newer ticket may
/// expire first, and is then counted a little longer (never accepted: a claim checks
/// its own expiry).
pub fn reap<S: Store>(s: &mut S, now: i64) -> Reaped {
    let mut gone = Vec::new();
    let mut freed_at = Vec::new();
    let top = p_max(s);
    if top > 0 {
        s.waiting_scan(i64::MIN, top, |user, seq| match record(s, seq) {
            Some(Rec::Promoted { expiry, .. }) if expiry <= now => {
                gone.push((user, seq));
                freed_at.push(expiry);
                true
            }
            _ => false,
        });
    }
    for (user, seq) in &gone {
        remove(s, user, *seq, true);
    }
    let expired = gone.len() as i64;
    let lapsed = s.sessions_ended_by(now);
    for u in &lapsed {
        freed_at.push(s.session_expiry(u).unwrap_or(now));
        s.close_session(u);
    }
    let lapsed = lapsed.len() as i64;
    add_stat(s, stat::TICKETS_EXPIRED, expired);
    add_stat(s, stat::LEASES_EXPIRED, lapsed);
    s.count(Event::TicketsExpired, expired);
    s.count(Event::LeasesExpired, lapsed);
    freed_at.sort_unstable();
    Reaped { tickets: expired, leases: lapsed, freed_at }
}

/// Counts how long the slots `promoted` people just filled had been empty: the
/// oldest of `freed_at` (slots freed by an expiry) are filled first; a slot freed
/// inside the command itself waited nothing.
fn note_slot_wait<S: Store>(s: &mut S, freed_at: &[i64], promoted: i64, now: i64) {
    let waited: i64 = freed_at.iter().take(promoted.max(0) as usize).map(|t| (now - t).max(0)).sum();
    add_stat(s, stat::SLOT_WAIT_MS, waited);
}

/// Live sessions as of `now`, without writing.
pub fn live_sessions<S: Store>(s: &S, now: i64) -> i64 {
    s.sessions_len() - s.sessions_ended_by(now).len() as i64
}

/// Where `user` stands as of `now` (tickets and leases past their time count as gone).
pub fn standing<S: Store>(s: &S, user: &S::User, now: i64) -> Standing {
    if let Some((rank, seq)) = s.waiting_rank(user) {
        return match record(s, seq) {
            Some(Rec::Waiting { seen, nickname }) => {
                Standing::Waiting { seq, rank: rank + 1 - joining(s), seen, nickname }
            }
            Some(Rec::Promoted { expiry, secret, nickname }) if expiry > now => {
                Standing::Promoted { ticket: ticket::ticket_id(seq, &secret), nickname }
            }
            _ => Standing::Unknown,
        };
    }
    if let Some(st) = crate::opening::pre_standing(s, user) {
        return st;
    }
    if s.session_expiry(user).is_some_and(|exp| exp > now) {
        return Standing::Active { nickname: s.active_nickname(user).map(|n| n.as_ref().to_vec()) };
    }
    Standing::Unknown
}

/// The estimated wait of a waiting user, in whole seconds.
pub fn eta<S: Store>(s: &S, standing: &Standing) -> Option<i64> {
    match standing {
        Standing::Waiting { rank, .. } => admission::estimated_wait_seconds(*rank, admissions_per_minute(s, s.now())),
        _ => None,
    }
}

/// QUEUE.ENTER: to the back of the line; re-entry gives up the old place and any
/// unclaimed ticket; in at once when nobody waits and there is room (and a token).
/// A user who is inside may queue again (say, from a second device); claiming the
/// new ticket fails with INSIDE while the first session lives.
pub fn enter<S: Store>(s: &mut S, user: &S::User, nickname: &[u8]) -> Result<Standing, QueueError> {
    s.check(&[Part::Waiting, Part::Stats])?;
    ensure_layout(s)?;
    refuse_if_line_full(s, user)?;
    let now = s.now();
    crate::opening::open_if_due(s, now)?;
    if crate::opening::before_opening(s, now) {
        return crate::opening::enter_pre(s, user, nickname, now);
    }
    // The common case first: someone waits (so nobody is let in at once) and the user
    // is new. The add is the lookup: a user already in line falls through to the
    // general path, which then numbers exactly as if this had not been tried.
    if waiting_count(s) > 0 {
        let seq = next_seq(s);
        if s.waiting_add_new(user, seq) {
            mark_layout(s);
            touch(s, seq, now, nickname);
            s.count(Event::Entered, 1);
            return Ok(Standing::Waiting { seq, rank: waiting_count(s), seen: now, nickname: nickname.to_vec() });
        }
    }
    let old = s.waiting_score(user);
    let old_holds = old.is_some_and(|seq| is_promoted(s, seq));
    let old_waits = old.is_some() && !old_holds;
    let soft_cap = s.setting(crate::config::SOFT_CAP);
    let may_admit_now = waiting_count(s) == i64::from(old_waits) && soft_cap > 0;
    if may_admit_now || old_holds {
        s.check(&ALL_PARTS)?;
    }
    if let Some(seq) = old {
        remove(s, user, seq, old_holds);
    }
    // A ticket given back by re-entering goes to the head of the line at once.
    if old_holds {
        fill_freed(s, now, &[]);
    }
    let may_admit_now = waiting_count(s) == 0 && soft_cap > 0;
    let seq = next_seq(s);
    s.count(Event::Entered, 1);

    if may_admit_now {
        let reaped = reap(s, now);
        let cfg = config(s);
        let free = admission::free_slots(cfg.soft_cap(), s.sessions_len(), joining(s));
        let bucket = (cfg.rate() > 0).then(|| bucket(s, now));
        if free > 0 && bucket.is_none_or(|b| b.whole() >= 1) {
            add_waiter(s, user, seq, now, nickname);
            let ticket = promote_user(s, seq, nickname, now);
            note_promoted(s, 1, seq);
            if let Some(b) = bucket {
                save_bucket(s, b.take(1));
            }
            add_stat(s, stat::PROMOTED, 1);
            note_slot_wait(s, &reaped.freed_at, 1, now);
            s.count(Event::Promoted, 1);
            return Ok(Standing::Promoted { ticket, nickname: nickname.to_vec() });
        }
    }
    add_waiter(s, user, seq, now, nickname);
    Ok(Standing::Waiting { seq, rank: waiting_count(s), seen: now, nickname: nickname.to_vec() })
}

/// `max_waiting`: a newcomer is refused while that many people wait, in line or in
/// the pre-queue (before anything is written, so the refusal changes nothing). Someone
/// already there may enter again: that moves them, it adds nobody.
fn refuse_if_line_full<S: Store>(s: &S, user: &S::User) -> Result<(), QueueError> {
    let max = s.setting(crate::config::MAX_WAITING);
    if max <= 0 {
        return Ok(());
    }
    let pre = if crate::opening::pending(s) { s.aux_hlen(Aux::Pre) } else { 0 };
    if waiting_count(s) + pre < max || s.waiting_score(user).is_some() {
        return Ok(());
    }
    if pre > 0 && s.aux_hget(Aux::Pre, user.as_ref()).is_some() {
        return Ok(());
    }
    Err(QueueError::LineFull)
}

/// QUEUE.STATUS (and each user of QUEUE.RANKS): where `user` stands; a waiting user
/// counts as heard from (its stored time is refreshed at most every
/// `admission::seen_refresh_ms`, so that polling is not a write each time).
pub fn observe<S: Store>(s: &mut S, user: &S::User, now: i64) -> Standing {
    let st = standing(s, user, now);
    if let Standing::Waiting { seq, seen, nickname, .. } = &st {
        if let Some(every) = admission::seen_refresh_ms(s.setting(crate::config::ABANDON_AFTER)) {
            if now - seen >= every {
                touch(s, *seq, now, nickname);
            }
        }
    }
    st
}

/// Checks and repairs what STATUS and RANKS read (only records are written).
pub fn begin_observing<S: Store>(s: &mut S) -> Result<i64, QueueError> {
    s.check(&[Part::Waiting])?;
    ensure_layout(s)?;
    let now = s.now();
    crate::opening::open_if_due(s, now)?;
    Ok(now)
}

/// Most users one QUEUE.LINE call lists.
pub const MAX_LINE_PAGE: i64 = 100_000;
/// The highest QUEUE.LINE cursor (numbers stay far below; 2^53 - 1 is exact in Lua).
pub const MAX_CURSOR: i64 = (1 << 53) - 1;

/// QUEUE.LINE: one page of the waiting users in line order, for refreshing every
/// rank of a long line at the cost of a walk (push updates): no per-user lookup, and
/// nobody counts as heard from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line<U> {
    /// The rank of `users[0]` (0 when the page is empty); the others follow one by one.
    pub first_rank: i64,
    /// The number of the last user listed, to continue after; 0 at the end of the line.
    pub cursor: i64,
    /// What the estimated wait is computed from: the admissions per minute as
    /// `admission::admissions_per_minute` reads them now (0: unknown), and the `rate`
    /// setting (already taken into account there).
    pub measured_per_min: i64,
    pub rate: i64,
    pub users: Vec<U>,
}

/// Up to `count` waiting users numbered after `cursor` (0: from the head), in line
/// order. Calls with consecutive cursors walk the whole line; each page's ranks are
/// exact when it is read.
pub fn line<S: Store>(s: &S, cursor: i64, count: i64) -> Line<S::User> {
    let mut users = Vec::with_capacity(count.clamp(0, 10_000) as usize);
    let mut last = 0;
    s.waiting_scan(cursor.max(p_max(s)) + 1, i64::MAX, |u, seq| {
        users.push(u);
        last = seq;
        (users.len() as i64) < count
    });
    let first_rank = users.first().and_then(|u| s.waiting_rank(u)).map_or(0, |(rank, _)| rank + 1 - joining(s));
    Line {
        first_rank,
        cursor: if users.len() as i64 == count { last } else { 0 },
        measured_per_min: admissions_per_minute(s, s.now()),
        rate: s.setting(crate::config::RATE),
        users,
    }
}

/// QUEUE.LEAVE: whether the user was in line (waiting or holding a ticket).
pub fn leave<S: Store>(s: &mut S, user: &S::User) -> Result<bool, QueueError> {
    s.check(&[Part::Waiting, Part::Stats])?;
    ensure_layout(s)?;
    let now = s.now();
    crate::opening::open_if_due(s, now)?;
    if crate::opening::leave_pre(s, user) {
        add_stat(s, stat::LEFT, 1);
        s.count(Event::Left, 1);
        return Ok(true);
    }
    let Some(seq) = s.waiting_score(user) else {
        return Ok(false);
    };
    let was_promoted = is_promoted(s, seq);
    remove(s, user, seq, was_promoted);
    add_stat(s, stat::LEFT, 1);
    s.count(Event::Left, 1);
    if was_promoted {
        let now = s.now();
        fill_freed(s, now, &[]);
    }
    Ok(true)
}

/// QUEUE.PROMOTE [MAX n]: housekeeping, then tickets for the head of the line within
/// the soft cap, the token bucket, MAX and batch_max; waiters not heard from within
/// abandon_after are dropped on the way, and a sweep drops silent ones further back.
pub fn promote<S: Store>(s: &mut S, max: Option<i64>) -> Result<Promotion, QueueError> {
    s.check(&ALL_PARTS)?;
    ensure_layout(s)?;
    let cfg = config(s);
    let now = s.now();
    crate::opening::open_if_due(s, now)?;

    let reaped = reap(s, now);
    let (tickets_expired, leases_expired) = (reaped.tickets, reaped.leases);
    let free = admission::free_slots(cfg.soft_cap(), s.sessions_len(), joining(s));
    let bucket = (cfg.rate() > 0).then(|| bucket(s, now));
    // Nobody is promoted before the opening.
    let max = if crate::opening::before_opening(s, now) { Some(0) } else { max };
    let n = admission::promote_count(free, bucket.map(|b| b.whole()), max, cfg.batch_max());

    let (promoted, mut dropped, top) = admit_head(s, n, cfg.abandon_after(), now);
    dropped += sweep(s, cfg.abandon_after(), now, top);

    if let Some(b) = bucket {
        save_bucket(s, b.take(promoted));
    }
    record_admissions(s, now, promoted);
    note_slot_wait(s, &reaped.freed_at, promoted, now);
    add_stat(s, stat::PROMOTED, promoted);
    add_stat(s, stat::DROPPED, dropped);
    s.count(Event::Promoted, promoted);
    s.count(Event::Dropped, dropped);

    let (active, joining) = (s.sessions_len(), joining(s));
    Ok(Promotion {
        promoted,
        tickets_expired,
        leases_expired,
        dropped,
        waiting: waiting_count(s),
        joining,
        active,
        available_slots: admission::free_slots(cfg.soft_cap(), active, joining),
    })
}

/// Examines up to SWEEP_BUDGET waiters after the sweep cursor and drops those not
/// heard from within abandon_after, so that ranks stay honest; wraps at the end.
fn sweep<S: Store>(s: &mut S, abandon_after: i64, now: i64, top: i64) -> i64 {
    if abandon_after <= 0 || waiting_count(s) == 0 {
        return 0;
    }
    let cursor = stat(s, stat::SWEEP).max(top);
    let mut batch = Vec::new();
    s.waiting_scan(cursor + 1, i64::MAX, |u, seq| {
        batch.push((u, seq));
        batch.len() < SWEEP_BUDGET
    });
    let next = if batch.len() < SWEEP_BUDGET { 0 } else { batch.last().map_or(0, |b| b.1) };
    let mut dropped = 0;
    for (user, seq) in batch {
        let abandoned = match record(s, seq) {
            Some(Rec::Waiting { seen, .. }) => admission::is_abandoned(seen, now, abandon_after),
            Some(Rec::Promoted { .. }) => false,
            None => true,
        };
        if abandoned {
            remove(s, &user, seq, false);
            dropped += 1;
        }
    }
    if next != cursor {
        s.set_stat(stat::SWEEP, next);
    }
    dropped
}

/// TICKET.CLAIM: a ticket is good exactly once, before it expires, while its user is
/// not inside already and the hard cap allows; it opens a session lease.
pub fn claim<S: Store>(s: &mut S, ticket_id: &[u8]) -> Result<Claimed<S::User>, QueueError> {
    s.check(&ALL_PARTS)?;
    ensure_layout(s)?;
    let now = s.now();
    crate::opening::open_if_due(s, now)?;
    let (seq, secret) = ticket::parse_ticket(ticket_id).ok_or(QueueError::NoTicket)?;
    let Some(Rec::Promoted { expiry, secret: held, nickname }) = record(s, seq) else {
        return Err(QueueError::NoTicket);
    };
    if !ticket::same_secret(secret, &held) {
        return Err(QueueError::NoTicket);
    }
    if expiry <= now {
        expire_claimed(s, seq, now);
        return Err(QueueError::TicketExpired);
    }
    let user = user_at(s, seq).ok_or(QueueError::NoTicket)?;
    if s.session_expiry(&user).is_some_and(|exp| exp > now) {
        return Err(QueueError::AlreadyInside);
    }
    let hard_cap = s.setting(crate::config::HARD_CAP);
    if hard_cap > 0 && live_sessions(s, now) >= hard_cap {
        return Err(QueueError::HardCap);
    }
    remove(s, &user, seq, true);
    let lease = s.setting(crate::config::SESSION_LEASE);
    s.set_lease(&user, now + lease);
    s.set_active(&user, &nickname);
    add_stat(s, stat::CLAIMED, 1);
    s.count(Event::Claimed, 1);
    Ok(Claimed { user, nickname, lease_ms: lease })
}

/// A claim found ticket `seq` expired: expired tickets (this one too) and leases are
/// dropped now, as PROMOTE would, and the slots they held go to the head of the line.
fn expire_claimed<S: Store>(s: &mut S, seq: i64, now: i64) {
    let mut freed_at = reap(s, now).freed_at;
    // After ticket_ttl was lowered a newer ticket may expire before older ones, which
    // the reaper (in issue order) has not reached: this one goes all the same.
    if let Some(Rec::Promoted { expiry, .. }) = record(s, seq) {
        if let Some(user) = user_at(s, seq) {
            remove(s, &user, seq, true);
            add_stat(s, stat::TICKETS_EXPIRED, 1);
            s.count(Event::TicketsExpired, 1);
            freed_at.push(expiry);
            freed_at.sort_unstable();
        }
    }
    fill_freed(s, now, &freed_at);
}

/// SESSION.HEARTBEAT: extends each live lease (true), false where none is live.
pub fn heartbeat<S: Store>(s: &mut S, users: &[S::User]) -> Result<Vec<bool>, QueueError> {
    s.check(&[Part::Sessions])?;
    let now = s.now();
    let until = now + s.setting(crate::config::SESSION_LEASE);
    Ok(users
        .iter()
        .map(|u| {
            let live = s.session_expiry(u).is_some_and(|exp| exp > now);
            if live {
                s.set_lease(u, until);
            }
            live
        })
        .collect())
}

/// SESSION.END: whether the user had a session (even one whose lease ran out).
pub fn end<S: Store>(s: &mut S, user: &S::User) -> Result<bool, QueueError> {
    s.check(&[Part::Sessions, Part::Active, Part::Stats])?;
    let ended = s.session_expiry(user).is_some();
    if ended {
        s.close_session(user);
        add_stat(s, stat::ENDED, 1);
        s.count(Event::Ended, 1);
        let now = s.now();
        fill_freed(s, now, &[]);
    }
    Ok(ended)
}

/// QUEUE.INFO, without writing.
pub fn info<S: Store>(s: &S) -> Result<Info, QueueError> {
    s.check(&[Part::Waiting, Part::Sessions, Part::Stats, Part::Config])?;
    let cfg = config(s);
    let now = s.now();
    let (active, joining) = (live_sessions(s, now), joining(s));
    Ok(Info {
        waiting: waiting_count(s),
        joining,
        active,
        available_slots: admission::free_slots(cfg.soft_cap(), active, joining),
        tokens: if cfg.rate() > 0 { bucket(s, now).whole() } else { -1 },
        admission_rate_per_min: admissions_per_minute(s, now),
        config: cfg,
        // Each counter is the stats field of the same name.
        counters: crate::replies::COUNTERS.map(|c| stat(s, c)),
    })
}
