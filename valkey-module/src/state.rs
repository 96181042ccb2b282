//! One queue's keys, opened on first use, and the building blocks every command
//! shares: settings, counters, records, promoting and withdrawing, and reaping what
//! has expired. Each write is applied here and recorded in `fx` for replication.
//!
//! Promoted users keep their place in `waiting` (their record is rewritten in place
//! to hold the ticket), so promotion adds no key and no member; they always form
//! the head of the line, `joining` of them, numbered at most `p_max`. So a waiting
//! user's rank is its rank in the zset minus `joining`.
//!
//! Commands call [`Queue::check`] on every key they may write before writing any,
//! so a key of the wrong type is refused with WRONGTYPE and nothing changes.

use crate::defaults;
use crate::effects::Effects;
use crate::server::{Key, Kind, Server, Str};
use queue_core::admission::{Bucket, RateWindow};
use queue_core::config::{Config, FIELDS};
use queue_core::keys::{self, CHUNK};
use queue_core::record::{self, Record};
use queue_core::QueueError;
use std::cell::{Cell, OnceCell, RefCell};

/// The keys of a queue (see `queue_core::keys` for what each holds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    Waiting,
    Sessions,
    Active,
    Stats,
    Config,
}

const PARTS: [(Part, &str, Kind); 5] = [
    (Part::Waiting, keys::WAITING, Kind::Zset),
    (Part::Sessions, keys::SESSIONS, Kind::Zset),
    (Part::Active, keys::ACTIVE, Kind::Hash),
    (Part::Stats, keys::STATS, Kind::Hash),
    (Part::Config, keys::CONFIG, Kind::Hash),
];

/// Every key a command that admits, withdraws or ends may write.
pub const ALL_PARTS: [Part; 4] = [Part::Waiting, Part::Sessions, Part::Active, Part::Stats];

pub struct Queue<'s> {
    pub srv: &'s Server,
    /// The queue's name: the command's declared key, named in keyspace events.
    pub name: Str,
    prefix: Vec<u8>,
    write: bool,
    names: [Cell<Option<Str>>; 5],
    keys: [OnceCell<Key>; 5],
    settings: [Cell<Option<i64>>; 8],
    /// Stats fields read or written by this command, so each is read once.
    stats_seen: RefCell<Vec<(&'static str, i64)>>,
    pub fx: Effects,
}

/// A user's record, read from its chunk (owned, so it outlives the read).
pub enum Rec {
    Waiting { seen: i64, nickname: Vec<u8> },
    Promoted { expiry: i64, secret: Vec<u8>, nickname: Vec<u8> },
}

/// Where a user stands.
pub enum Standing {
    Waiting { seq: i64, rank: i64, seen: i64, nickname: Vec<u8> },
    Promoted { ticket: Vec<u8>, nickname: Vec<u8> },
    Active { nickname: Option<Str> },
    Unknown,
}

impl<'s> Queue<'s> {
    pub fn open(srv: &'s Server, name: Str, write: bool) -> Result<Self, QueueError> {
        let q = keys::check_queue(name.bytes())?;
        let mut prefix = Vec::with_capacity(q.len() + 24);
        prefix.extend_from_slice(b"queue:{");
        prefix.extend_from_slice(q.as_bytes());
        prefix.extend_from_slice(b"}:");
        Ok(Queue {
            srv,
            name,
            prefix,
            write,
            names: Default::default(),
            keys: Default::default(),
            settings: Default::default(),
            stats_seen: RefCell::default(),
            fx: Effects::default(),
        })
    }

    /// The time, read once per command: the server's clock, or with the test clock
    /// (see `defaults::TEST_CLOCK`) the value of `queue:{Q}:clock` when it is set.
    pub fn now(&self) -> i64 {
        if defaults::test_clock() {
            if let Some(t) = self.srv.get_i64(self.key_name(b"clock")) {
                return t;
            }
        }
        self.srv.now_ms()
    }

    fn key_name(&self, suffix: &[u8]) -> Str {
        let mut buf = [0u8; 128];
        let n = self.prefix.len() + suffix.len();
        buf[..self.prefix.len()].copy_from_slice(&self.prefix);
        buf[self.prefix.len()..n].copy_from_slice(suffix);
        self.srv.str(&buf[..n])
    }

    pub fn name_of(&self, p: Part) -> Str {
        let cell = &self.names[p as usize];
        if let Some(s) = cell.get() {
            return s;
        }
        let s = self.key_name(PARTS[p as usize].1.as_bytes());
        cell.set(Some(s));
        s
    }

    pub fn key(&self, p: Part) -> &Key {
        self.keys[p as usize].get_or_init(|| self.srv.open(self.name_of(p), self.write))
    }

    /// WRONGTYPE unless each of `parts` is empty or of its type.
    pub fn check(&self, parts: &[Part]) -> Result<(), QueueError> {
        for &p in parts {
            let k = self.key(p).kind();
            if k != Kind::Empty && k != PARTS[p as usize].2 {
                return Err(QueueError::WrongType);
            }
        }
        Ok(())
    }

    pub fn waiting(&self) -> &Key {
        self.key(Part::Waiting)
    }
    pub fn sessions(&self) -> &Key {
        self.key(Part::Sessions)
    }
    pub fn active(&self) -> &Key {
        self.key(Part::Active)
    }
    pub fn stats(&self) -> &Key {
        self.key(Part::Stats)
    }

    /// One setting (index into `FIELDS`), read on first use: the queue's config
    /// hash, else the module default. Stored values that do not fit are ignored.
    pub fn setting(&self, i: usize) -> i64 {
        if let Some(v) = self.settings[i].get() {
            return v;
        }
        let f = &FIELDS[i];
        let key = self.key(Part::Config);
        let stored = if key.kind() == Kind::Hash {
            key.hget(self.srv.str(f.name.as_bytes())).and_then(|v| queue_core::config::check_value(f, v.bytes()).ok())
        } else {
            None
        };
        let v = stored.unwrap_or_else(|| defaults::get(i));
        self.settings[i].set(Some(v));
        v
    }

    /// All settings at once.
    pub fn config(&self) -> Config {
        let mut c = Config::default();
        for i in 0..FIELDS.len() {
            c.values[i] = self.setting(i);
        }
        c
    }

    pub fn soft_cap(&self) -> i64 {
        self.setting(0)
    }
    pub fn hard_cap(&self) -> i64 {
        self.setting(1)
    }
    pub fn rate(&self) -> i64 {
        self.setting(2)
    }
    pub fn ticket_ttl(&self) -> i64 {
        self.setting(5)
    }
    pub fn session_lease(&self) -> i64 {
        self.setting(6)
    }
    pub fn abandon_after(&self) -> i64 {
        self.setting(7)
    }

    pub fn stat(&self, field: &'static str) -> i64 {
        if let Some(&(_, v)) = self.stats_seen.borrow().iter().find(|(f, _)| *f == field) {
            return v;
        }
        let v = self.stats().hget(self.srv.str(field.as_bytes())).and_then(Str::parse_i64).unwrap_or(0);
        self.stats_seen.borrow_mut().push((field, v));
        v
    }

    pub fn set_stat(&mut self, field: &'static str, v: i64) {
        {
            let mut seen = self.stats_seen.borrow_mut();
            match seen.iter_mut().find(|(f, _)| *f == field) {
                Some(slot) => slot.1 = v,
                None => seen.push((field, v)),
            }
        }
        let (f, v) = (self.srv.str(field.as_bytes()), self.srv.int_str(v));
        self.stats().hset(f, v);
        self.fx.hset(self.name_of(Part::Stats), f, v);
    }

    pub fn add_stat(&mut self, field: &'static str, by: i64) {
        if by != 0 {
            let v = self.stat(field) + by;
            self.set_stat(field, v);
        }
    }

    /// Whether the user numbered `seq` holds a ticket (expired or not).
    pub fn is_promoted(&self, seq: i64) -> bool {
        seq <= self.p_max()
    }

    /// Tickets out: promoted users who have not claimed, withdrawn or been reaped.
    pub fn joining(&self) -> i64 {
        self.stat("joining")
    }

    /// Users in line who have no ticket yet.
    pub fn waiting_count(&self) -> i64 {
        self.waiting().len() - self.joining()
    }

    /// The token bucket refilled to `now` (full the first time it is seen).
    pub fn bucket(&self, now: i64) -> Bucket {
        let size = self.config().bucket_size();
        match self.stats().hget(self.srv.str(b"tokens")).and_then(Str::parse_i64) {
            Some(milli) => Bucket { milli_tokens: milli, at_ms: self.stat("tokens_at") }.refill(now, self.rate(), size),
            None => Bucket::full(size, now),
        }
    }

    pub fn save_bucket(&mut self, b: Bucket) {
        self.set_stat("tokens", b.milli_tokens);
        self.set_stat("tokens_at", b.at_ms);
    }

    pub fn rate_window(&self) -> RateWindow {
        RateWindow {
            at_ms: self.stat("rate_at"),
            count: self.stat("rate_count"),
            per_minute: self.stat("rate_per_min"),
        }
    }

    pub fn save_rate_window(&mut self, old: RateWindow, new: RateWindow) {
        if new.at_ms != old.at_ms {
            self.set_stat("rate_at", new.at_ms);
        }
        if new.count != old.count {
            self.set_stat("rate_count", new.count);
        }
        if new.per_minute != old.per_minute {
            self.set_stat("rate_per_min", new.per_minute);
        }
    }

    fn chunk_key(&self, seq: i64) -> Str {
        let mut buf = itoa::Buffer::new();
        let mut suffix = [0u8; 24];
        let digits = buf.format(seq as u64 / CHUNK).as_bytes();
        suffix[..2].copy_from_slice(b"w:");
        suffix[2..2 + digits.len()].copy_from_slice(digits);
        self.key_name(&suffix[..2 + digits.len()])
    }

    /// The record of the user numbered `seq`.
    pub fn record(&self, seq: i64) -> Option<Rec> {
        let key = self.srv.open(self.chunk_key(seq), false);
        let v = key.hget(self.srv.int_str(seq))?;
        Some(match record::decode(v.bytes())? {
            Record::Waiting { seen, nickname } => Rec::Waiting { seen, nickname: nickname.to_vec() },
            Record::Promoted { expiry, secret, nickname } => {
                Rec::Promoted { expiry, secret: secret.to_vec(), nickname: nickname.to_vec() }
            }
        })
    }

    fn put_record(&mut self, seq: i64, value: &[u8]) {
        let (k, f, v) = (self.chunk_key(seq), self.srv.int_str(seq), self.srv.str(value));
        self.srv.open(k, true).hset(f, v);
        self.fx.hset(k, f, v);
    }

    /// Notes that the waiting user `seq` was heard from at `now`.
    pub fn touch(&mut self, seq: i64, now: i64, nickname: &[u8]) {
        self.put_record(seq, &record::encode_waiting(now, nickname));
    }

    fn delete_record(&mut self, seq: i64) {
        let (k, f) = (self.chunk_key(seq), self.srv.int_str(seq));
        self.srv.open(k, true).hdel(f);
        self.fx.hdel(k, f);
    }

    /// The number for a newcomer: after everyone in line and after every number that
    /// holds a ticket (the last ticket holder may have left the line by claiming while
    /// earlier ones still hold theirs: numbering after the last one in line would then
    /// put the newcomer among the ticket holders, where PROMOTE never looks).
    pub fn next_seq(&self) -> i64 {
        self.waiting().zmax_score().map_or(0, |s| s as i64).max(self.p_max()) + 1
    }

    /// Repairs, once, data written by releases that numbered newcomers after the last
    /// one in line (see [`Queue::next_seq`]): such a waiting user, numbered at or
    /// below `p_max`, was taken for a ticket holder. Every command that reads or
    /// changes the line calls this first; with the layout marker set it costs one
    /// read of a stats field. Writes nothing for a queue nobody is in.
    pub fn ensure_layout(&mut self) -> Result<(), QueueError> {
        if self.stat(keys::LAYOUT_FIELD) == keys::LAYOUT {
            return Ok(());
        }
        if self.waiting().len() == 0 && self.stat("joining") == 0 && self.stat("p_max") == 0 {
            return Ok(());
        }
        self.check(&[Part::Waiting, Part::Stats])?;
        self.repair();
        self.set_stat(keys::LAYOUT_FIELD, keys::LAYOUT);
        // Replicated at once: the command may still be refused (TICKET.CLAIM of an
        // unknown ticket), and the repair must reach replicas all the same.
        std::mem::take(&mut self.fx).replicate(self.srv);
        Ok(())
    }

    /// Recounts `joining` and `p_max` from the records at the head of the line, and
    /// renumbers waiting users found among the ticket holders, in their order, after
    /// the last holder; later waiting users move up only as far as needed to keep the
    /// order (nobody's place changes, only numbers, which waiting users never see).
    fn repair(&mut self) {
        let stored_p_max = self.stat("p_max");
        // The head: every member numbered up to the stored p_max, and any ticket
        // holder right after it.
        let mut head: Vec<(Str, i64, Option<Str>, bool)> = Vec::new();
        self.waiting().zscan(f64::NEG_INFINITY, f64::INFINITY, |user, seq| {
            let seq = seq as i64;
            let value = self.srv.open(self.chunk_key(seq), false).hget(self.srv.int_str(seq));
            let holds = value.is_some_and(|v| matches!(record::decode(v.bytes()), Some(Record::Promoted { .. })));
            if seq > stored_p_max && !holds {
                return false;
            }
            head.push((user, seq, value, holds));
            true
        });
        let holders = head.iter().filter(|m| m.3).count() as i64;
        let last_holder = head.iter().filter(|m| m.3).map(|m| m.1).max().unwrap_or(0);
        // Waiting users numbered below the last holder move after it, then the users
        // after them as far as needed.
        let mut moves: Vec<(Str, i64, Option<Str>, i64)> = Vec::new();
        let mut next = last_holder + 1;
        let mut all_moved = true;
        for &(user, seq, value, holds) in &head {
            if holds {
                continue;
            }
            let new = seq.max(next);
            if new == seq {
                all_moved = false;
                break;
            }
            moves.push((user, seq, value, new));
            next = new + 1;
        }
        if !moves.is_empty() && all_moved {
            // Every waiting user of the head moved: those after the head may have to.
            let start = head.last().map_or(f64::NEG_INFINITY, |m| m.1 as f64);
            let mut more = Vec::new();
            self.waiting().zscan(start, f64::INFINITY, |user, seq| {
                if seq <= start {
                    return true;
                }
                let seq = seq as i64;
                let new = seq.max(next);
                if new == seq {
                    return false;
                }
                let value = self.srv.open(self.chunk_key(seq), false).hget(self.srv.int_str(seq));
                more.push((user, seq, value, new));
                next = new + 1;
                true
            });
            moves.extend(more);
        }
        // Only numbers nobody moves to are deleted: a field is written by one native
        // command per command (see `effects`).
        for &(_, seq, value, _) in &moves {
            if value.is_some() && !moves.iter().any(|m| m.3 == seq) {
                self.delete_record(seq);
            }
        }
        for &(user, _, value, new) in &moves {
            self.waiting().zadd(user, new as f64);
            self.fx.zadd(self.name_of(Part::Waiting), self.srv.int_str(new), user);
            if let Some(v) = value {
                self.put_record(new, v.bytes());
            }
        }
        self.set_stat("joining", holders);
        self.set_stat("p_max", last_holder);
    }

    /// Puts `user` in line with sequence number `seq` (the back of the line).
    pub fn add_waiter(&mut self, user: Str, seq: i64, now: i64, nickname: &[u8]) {
        if self.stat(keys::LAYOUT_FIELD) != keys::LAYOUT {
            self.set_stat(keys::LAYOUT_FIELD, keys::LAYOUT);
        }
        self.waiting().zadd(user, seq as f64);
        self.fx.zadd(self.name_of(Part::Waiting), self.srv.int_str(seq), user);
        self.touch(seq, now, nickname);
    }

    /// Takes `user` (numbered `seq`) out of line, withdrawing its ticket if it had one.
    pub fn remove(&mut self, user: Str, seq: i64, was_promoted: bool) {
        self.waiting().zrem(user);
        self.fx.zrem(self.name_of(Part::Waiting), user);
        self.delete_record(seq);
        if was_promoted {
            let left = self.joining() - 1;
            self.set_stat("joining", left);
            if left == 0 {
                self.set_stat("p_max", 0);
            }
        }
    }

    /// Promotes the user numbered `seq` (in line, after every promoted user): its
    /// record becomes its ticket, claimable until now + ticket_ttl. Returns the ticket.
    pub fn promote_user(&mut self, seq: i64, nickname: &[u8], now: i64) -> Vec<u8> {
        let secret = crate::ids::next_secret();
        let expiry = now + self.ticket_ttl();
        self.put_record(seq, &record::encode_promoted(expiry, &secret, nickname));
        queue_core::ticket::ticket_id(seq, &secret)
    }

    /// The user in line with number `seq`.
    pub fn user_at(&self, seq: i64) -> Option<Str> {
        let mut found = None;
        self.waiting().zscan(seq as f64, seq as f64, |m, _| {
            found = Some(m);
            false
        });
        found
    }

    /// Counts `n` promotions up to number `p_max` (kept apart so a batch writes once).
    pub fn note_promoted(&mut self, n: i64, p_max: i64) {
        if n > 0 {
            let joining = self.joining() + n;
            self.set_stat("joining", joining);
            self.set_stat("p_max", p_max);
        }
    }

    /// The highest number a promoted user holds (0 when nobody holds a ticket).
    pub fn p_max(&self) -> i64 {
        if self.joining() > 0 {
            self.stat("p_max")
        } else {
            0
        }
    }

    pub fn open_session(&mut self, user: Str, nickname: Str, until: i64) {
        self.sessions().zadd(user, until as f64);
        self.fx.zadd(self.name_of(Part::Sessions), self.srv.int_str(until), user);
        self.active().hset(user, nickname);
        self.fx.hset(self.name_of(Part::Active), user, nickname);
    }

    pub fn extend_session(&mut self, user: Str, until: i64) {
        self.sessions().zadd(user, until as f64);
        self.fx.zadd(self.name_of(Part::Sessions), self.srv.int_str(until), user);
    }

    pub fn close_session(&mut self, user: Str) {
        self.sessions().zrem(user);
        self.fx.zrem(self.name_of(Part::Sessions), user);
        self.active().hdel(user);
        self.fx.hdel(self.name_of(Part::Active), user);
    }

    /// Drops expired tickets and leases; returns (tickets, leases) dropped.
    ///
    /// Tickets are examined from the head of the line, in the order they were
    /// issued, up to the first that is still good: after `ticket_ttl` was lowered a
    /// newer ticket may expire first, and is then counted a little longer (never
    /// accepted: TICKET.CLAIM checks its own expiry).
    pub fn reap(&mut self, now: i64) -> (i64, i64) {
        let mut gone = Vec::new();
        let p_max = self.p_max();
        if p_max > 0 {
            self.waiting().zscan(f64::NEG_INFINITY, p_max as f64, |user, seq| {
                let done = matches!(self.record(seq as i64), Some(Rec::Promoted { expiry, .. }) if expiry <= now);
                if done {
                    gone.push((user, seq as i64));
                }
                done
            });
        }
        for &(user, seq) in &gone {
            self.remove(user, seq, true);
        }
        let expired = gone.len() as i64;
        let lapsed = self.sessions().zrange(f64::NEG_INFINITY, now as f64, usize::MAX);
        for &(u, _) in &lapsed {
            self.close_session(u);
        }
        let lapsed = lapsed.len() as i64;
        self.add_stat("expired", expired);
        self.add_stat("lapsed", lapsed);
        crate::counters::add(&crate::counters::EXPIRED, expired);
        crate::counters::add(&crate::counters::LAPSED, lapsed);
        (expired, lapsed)
    }

    /// Live sessions as of `now`, without writing.
    pub fn live_sessions(&self, now: i64) -> i64 {
        let s = self.sessions();
        s.len() - s.zrange(f64::NEG_INFINITY, now as f64, usize::MAX).len() as i64
    }

    /// Where `user` stands as of `now` (tickets and leases past their time count as gone).
    pub fn standing(&self, user: Str, now: i64) -> Standing {
        if self.waiting().kind() == Kind::Zset {
            if let Some((rank, seq)) = self.srv.zrank_with_score(self.name_of(Part::Waiting), user) {
                return match self.record(seq) {
                    Some(Rec::Waiting { seen, nickname }) => {
                        Standing::Waiting { seq, rank: rank + 1 - self.joining(), seen, nickname }
                    }
                    Some(Rec::Promoted { expiry, secret, nickname, .. }) if expiry > now => {
                        Standing::Promoted { ticket: queue_core::ticket::ticket_id(seq, &secret), nickname }
                    }
                    _ => Standing::Unknown,
                };
            }
        }
        if self.sessions().zscore(user).is_some_and(|exp| exp as i64 > now) {
            return Standing::Active { nickname: self.active().hget(user) };
        }
        Standing::Unknown
    }

    /// Replicates what the command wrote and announces it; nothing when nothing changed.
    pub fn finish(self, event: &std::ffi::CStr) {
        if !self.fx.is_empty() {
            let (srv, name) = (self.srv, self.name);
            self.fx.replicate(srv);
            srv.notify(event, name);
        }
    }
}
