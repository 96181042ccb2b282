//! What the engine needs of the place a queue is kept: the [`Store`] trait and its
//! vocabulary (the parts a command checks, the happenings counted server-wide, the
//! stats fields, the opening's keys, the change-log entry a command is writing). The
//! Valkey module implements it over the queue's keys;
//! [`crate::memory::MemoryStore`] in memory.
//!
//! The bottom of the engine: this file uses none of its siblings, they all use it.

use crate::error::QueueError;
use crate::keys;
use crate::ticket::SECRET_LEN;

/// The keys of a queue a command may need to check before it writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    Waiting,
    Sessions,
    Active,
    Stats,
    Config,
    /// The change log's watchers (hash userId -> the instances registering it,
    /// comma-separated).
    Watched,
    /// The push instances' leases (zset instance -> expiry).
    Instances,
    /// The claims made with a holder (hash, [`Aux::Claimed`]).
    Claimed,
    /// The access codes (hash, [`Aux::Codes`]).
    Codes,
    /// People inside reported as having bought (hash, [`Aux::Bought`]).
    Bought,
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
    /// The change log's last entry number (0 before any).
    pub const LOG: &str = "log";
    /// Prefix of a lane's admissions counter, `admitted:<lane>` (a queue with lanes):
    /// the people promoted from that lane (let in at once on entry too), counted in
    /// the command that promotes them.
    pub const ADMITTED_PREFIX: &str = "admitted:";
    /// Units left to sell (absent or -1: no limit): the setting `inventory`, lowered
    /// by QUEUE.SOLD.
    pub const INVENTORY: &str = "inventory";
    /// Units reported sold (QUEUE.SOLD), in all.
    pub const SOLD: &str = "sold";
    /// People inside reported as having bought (the fields of `bought`).
    pub const BOUGHT: &str = "bought";
    /// Whether the queue was last announced closed (0/1), and sold out (0/1): a
    /// change writes a `state` entry in the change log.
    pub const CLOSED: &str = "closed";
    pub const SOLD_OUT: &str = "sold_out";
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
    /// The text setting `entry` (`crate::config::ENTRY`): the queue's config, else
    /// open (a stored value that is not a mode reads as open).
    fn entry_mode(&self) -> crate::config::EntryMode;
    /// The text setting `lanes` (`crate::lanes::LANES`): the queue's config, else one
    /// lane (a stored value that is not a list of lanes reads as one lane).
    fn lanes(&self) -> crate::lanes::Lanes;
    /// The text setting `message` (`crate::config::MESSAGE`), empty when unset.
    fn message(&self) -> Vec<u8>;
    /// A stats field, None when absent.
    fn stat_opt(&self, field: &'static str) -> Option<i64>;
    fn set_stat(&mut self, field: &'static str, v: i64);
    /// A stats field whose name is made at run time (a lane's counter), None when absent.
    fn stat_named(&self, field: &[u8]) -> Option<i64>;
    fn set_stat_named(&mut self, field: &[u8], v: i64);
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
    /// Announces on the queue's promotion channel (see [`super::announcement`]) that a
    /// command promoted `promoted` users or dropped some, leaving `waiting`; by
    /// default nothing.
    fn announce(&mut self, _promoted: i64, _waiting: i64, _at_ms: i64) {}

    fn waiting_len(&self) -> i64;
    fn waiting_score(&self, user: &Self::User) -> Option<i64>;
    /// 0-based rank and number of `user` in `waiting`.
    fn waiting_rank(&self, user: &Self::User) -> Option<(i64, i64)>;
    fn waiting_max(&self) -> Option<i64>;
    /// The highest number in `min..=max`, if any.
    fn waiting_max_in(&self, min: i64, max: i64) -> Option<i64>;
    /// How many members are numbered `min..=max`: a count, never a walk (ZCOUNT).
    fn waiting_count_in(&self, min: i64, max: i64) -> i64;
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

    // The pre-queue and the opening (`super::opening`): small keys, read and written
    // only while an opening is scheduled or by QUEUE.OPENING; and the claims made with
    // a holder (`super::claim_held`). A key of another type reads as empty, and a
    // store writes nothing into it.
    fn aux_hget(&self, key: Aux, field: &[u8]) -> Option<Vec<u8>>;
    /// [`Store::aux_hget`]'s value handed to `f`, without a copy where the store can.
    fn aux_hget_with<R>(&self, key: Aux, field: &[u8], f: impl FnOnce(Option<&[u8]>) -> R) -> R {
        f(self.aux_hget(key, field).as_deref())
    }
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

    // The change log and watchers (`super::changelog`).
    /// The log entry this command is writing.
    fn log_draft(&mut self) -> &mut LogDraft;
    /// Appends an entry, its fields in order, to the change log (keeping about
    /// `keys::LOG_MAX` entries).
    fn log_append(&mut self, fields: &[(&'static str, Vec<u8>)]);
    /// `user`'s registration, if any: the instances it is registered under,
    /// comma-separated (changelog.rs reads and writes the list; a store keeps the
    /// value as it is given).
    fn watcher(&self, user: &Self::User) -> Option<Vec<u8>>;
    fn set_watcher(&mut self, user: &Self::User, registration: &[u8]);
    /// Removes `user`'s registration, if any.
    fn remove_watcher(&mut self, user: &Self::User);
    /// An instance's lease expiry (ms), if it has one.
    fn instance_lease(&self, instance: &[u8]) -> Option<i64>;
    fn set_instance_lease(&mut self, instance: &[u8], until: i64);
    /// Up to `limit` instances whose lease ended before `before` (earliest first).
    fn instances_ended_before(&self, before: i64, limit: i64) -> Vec<Vec<u8>>;
    fn remove_instance(&mut self, instance: &[u8]);
}

/// The opening's keys (docs/commands.md, "A verifiably fair opening").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Aux {
    /// hash userId -> nickname: the pre-queue.
    Pre,
    /// hash: seed, commitment, opened_at, entrants.
    Opening,
    /// list: idHashes in placed order (only through `proof_*`).
    Proof,
    /// hash: the claims made with a holder whose session is live (`keys::CLAIMED`).
    Claimed,
    /// hash: the access codes (`keys::CODES`).
    Codes,
    /// hash userId -> 1: people inside who bought (`keys::BOUGHT`).
    Bought,
}

impl Aux {
    pub fn suffix(self) -> &'static str {
        match self {
            Aux::Pre => keys::PRE,
            Aux::Opening => keys::OPENING,
            Aux::Proof => keys::PROOF,
            Aux::Claimed => keys::CLAIMED,
            Aux::Codes => keys::CODES,
            Aux::Bought => keys::BOUGHT,
        }
    }
}

/// The change-log entry a command is writing (docs/commands.md, "The change log and
/// watchers"): who left the line's waiting part, as the log tells it. The engine
/// notes into it while a command runs; [`super::changelog::close_log`] appends it.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct LogDraft {
    /// The number of the last one taken from the head, and how many were taken there.
    pub head: Option<(i64, i64)>,
    /// The tickets of those taken from the head who were promoted while a push
    /// instance had them registered, in the order they were promoted.
    pub tickets: Vec<Vec<u8>>,
    /// Numbers of other waiting users who left, in the order they left.
    pub left: Vec<i64>,
    /// Those numbers in `left` whose users are still in the queue's books after the
    /// command: they entered again (under a new number, or into the pre-queue), or
    /// are inside (a session), in the order they left.
    pub again: Vec<i64>,
    /// Of those in `again`, the ones who entered the line again with the nickname and
    /// lane they had: (the old number, the new one, their rank after the command).
    pub moved: Vec<(i64, i64, i64)>,
    /// Numbers or ranks changed in a way the entry does not list.
    pub reset: bool,
    /// Numbers of people who joined a lane ahead of others waiting (a queue with
    /// lanes), in the order they joined.
    pub ahead: Vec<i64>,
    /// The queue's state (closed, sold out, message) changed: the entry says it.
    pub state: bool,
}

impl LogDraft {
    pub fn is_empty(&self) -> bool {
        self.head.is_none() && self.left.is_empty() && !self.reset && self.ahead.is_empty() && !self.state
    }

    /// The waiting user numbered `seq` was taken from the head (promoted, or dropped on the way).
    pub(super) fn note_head(&mut self, seq: i64) {
        let gone = self.head.map_or(0, |(_, n)| n);
        self.head = Some((seq, gone + 1));
    }

    /// The waiting user numbered `seq` left other than from the head.
    pub(super) fn note_left(&mut self, seq: i64) {
        self.left.push(seq);
    }

    /// The waiting user numbered `seq`, who left in this command, is still in the
    /// queue's books: entering again, or inside (a session).
    pub(super) fn note_again(&mut self, seq: i64) {
        if self.again.last() != Some(&seq) {
            self.again.push(seq);
        }
    }

    /// The waiting user numbered `old`, who left in this command and is listed in
    /// `again`, waits again as `new` at `rank`, with the nickname and lane they had.
    pub(super) fn note_moved(&mut self, old: i64, new: i64, rank: i64) {
        self.moved.push((old, new, rank));
    }

    /// The waiting user numbered `seq` joined a lane ahead of people waiting in a later one.
    pub(super) fn note_ahead(&mut self, seq: i64) {
        self.ahead.push(seq);
    }

    /// Numbers or ranks changed in a way the entry does not list.
    pub(super) fn note_reset(&mut self) {
        self.reset = true;
    }
}

/// A stats field, 0 when absent.
pub fn stat<S: Store>(s: &S, field: &'static str) -> i64 {
    s.stat_opt(field).unwrap_or(0)
}

/// Adds `by` to a stats field (writing nothing when it is 0).
pub fn add_stat<S: Store>(s: &mut S, field: &'static str, by: i64) {
    if by != 0 {
        let v = stat(s, field) + by;
        s.set_stat(field, v);
    }
}
