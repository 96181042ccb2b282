//! One queue's keys, opened on first use, and the building blocks every command
//! shares: settings, counters, records, issuing and revoking tickets, and reaping
//! what has expired. Each write is applied here and recorded in `fx` for replication.
//!
//! Commands call [`Queue::check`] on every key they may write before writing any,
//! so a key of the wrong type is refused with WRONGTYPE and nothing changes.

use crate::defaults;
use crate::effects::Effects;
use crate::server::{Key, Kind, Server, Str};
use queue_core::admission::{Bucket, RateWindow};
use queue_core::config::{Config, FIELDS};
use queue_core::keys::{self, CHUNK};
use queue_core::record;
use queue_core::QueueError;
use std::cell::{Cell, OnceCell};

/// The keys of a queue (see `queue_core::keys` for what each holds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    Waiting,
    Promoted,
    Tickets,
    Ticket,
    Sessions,
    Active,
    Stats,
    Config,
}

const PARTS: [(Part, &str, Kind); 8] = [
    (Part::Waiting, keys::WAITING, Kind::Zset),
    (Part::Promoted, keys::PROMOTED, Kind::Hash),
    (Part::Tickets, keys::TICKETS, Kind::Zset),
    (Part::Ticket, keys::TICKET, Kind::Hash),
    (Part::Sessions, keys::SESSIONS, Kind::Zset),
    (Part::Active, keys::ACTIVE, Kind::Hash),
    (Part::Stats, keys::STATS, Kind::Hash),
    (Part::Config, keys::CONFIG, Kind::Hash),
];

pub struct Queue<'s> {
    pub srv: &'s Server,
    /// The queue's name: the command's declared key, named in keyspace events.
    pub name: Str,
    prefix: Vec<u8>,
    write: bool,
    names: [Cell<Option<Str>>; 8],
    keys: [OnceCell<Key>; 8],
    settings: [Cell<Option<i64>>; 8],
    pub fx: Effects,
}

/// Where a user stands.
pub enum Standing {
    Waiting { seq: i64, rank: i64, seen: i64, nickname: Str },
    Promoted { ticket: Str, nickname: Option<Str> },
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
            fx: Effects::default(),
        })
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
    pub fn promoted(&self) -> &Key {
        self.key(Part::Promoted)
    }
    pub fn tickets(&self) -> &Key {
        self.key(Part::Tickets)
    }
    pub fn ticket(&self) -> &Key {
        self.key(Part::Ticket)
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

    pub fn stat(&self, field: &str) -> i64 {
        self.stats().hget(self.srv.str(field.as_bytes())).and_then(Str::parse_i64).unwrap_or(0)
    }

    pub fn set_stat(&mut self, field: &str, v: i64) {
        let (f, v) = (self.srv.str(field.as_bytes()), self.srv.int_str(v));
        self.stats().hset(f, v);
        self.fx.hset(self.name_of(Part::Stats), f, v);
    }

    pub fn add_stat(&mut self, field: &str, by: i64) {
        if by != 0 {
            let v = self.stat(field) + by;
            self.set_stat(field, v);
        }
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

    /// A waiting user's record: (last seen ms, nickname).
    pub fn record(&self, seq: i64) -> Option<(i64, Str)> {
        let key = self.srv.open(self.chunk_key(seq), false);
        let v = key.hget(self.srv.int_str(seq))?;
        let (seen, nick) = record::decode_waiting(v.bytes())?;
        Some((seen, self.srv.str(nick)))
    }

    pub fn write_record(&mut self, seq: i64, seen: i64, nickname: &[u8]) {
        let (k, f) = (self.chunk_key(seq), self.srv.int_str(seq));
        let v = self.srv.str(&record::encode_waiting(seen, nickname));
        self.srv.open(k, true).hset(f, v);
        self.fx.hset(k, f, v);
    }

    fn delete_record(&mut self, seq: i64) {
        let (k, f) = (self.chunk_key(seq), self.srv.int_str(seq));
        self.srv.open(k, true).hdel(f);
        self.fx.hdel(k, f);
    }

    /// Puts `user` at the back of the line with sequence number `seq`.
    pub fn add_waiter(&mut self, user: Str, seq: i64, now: i64, nickname: &[u8]) {
        self.waiting().zadd(user, seq as f64);
        self.fx.zadd(self.name_of(Part::Waiting), self.srv.int_str(seq), user);
        self.write_record(seq, now, nickname);
    }

    /// Takes `user` (sequence number `seq`) out of the line.
    pub fn remove_waiter(&mut self, user: Str, seq: i64) {
        self.waiting().zrem(user);
        self.fx.zrem(self.name_of(Part::Waiting), user);
        self.delete_record(seq);
    }

    /// Issues a ticket to `user`, claimable until now + ticket_ttl.
    pub fn issue_ticket(&mut self, user: Str, nickname: &[u8], now: i64) -> Str {
        let id = self.srv.str(crate::ids::next_ticket_id().as_bytes());
        let expiry = now + self.ticket_ttl();
        self.tickets().zadd(id, expiry as f64);
        self.fx.zadd(self.name_of(Part::Tickets), self.srv.int_str(expiry), id);
        let v = self.srv.str(&record::encode_ticket(user.bytes(), nickname));
        self.ticket().hset(id, v);
        self.fx.hset(self.name_of(Part::Ticket), id, v);
        self.promoted().hset(user, id);
        self.fx.hset(self.name_of(Part::Promoted), user, id);
        id
    }

    /// Removes a ticket (claimed, expired or revoked) and its user's promotion.
    pub fn remove_ticket(&mut self, ticket: Str, user: Option<Str>) {
        self.tickets().zrem(ticket);
        self.fx.zrem(self.name_of(Part::Tickets), ticket);
        self.ticket().hdel(ticket);
        self.fx.hdel(self.name_of(Part::Ticket), ticket);
        if let Some(u) = user {
            if self.promoted().hget(u).is_some_and(|t| t.bytes() == ticket.bytes()) {
                self.promoted().hdel(u);
                self.fx.hdel(self.name_of(Part::Promoted), u);
            }
        }
    }

    /// The user and nickname a ticket was issued to.
    pub fn ticket_holder(&self, ticket: Str) -> Option<(Str, Str)> {
        let v = self.ticket().hget(ticket)?;
        let (u, n) = record::decode_ticket(v.bytes())?;
        Some((self.srv.str(u), self.srv.str(n)))
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

    /// Drops tickets and leases whose time is over; returns (tickets, leases) dropped.
    pub fn reap(&mut self, now: i64) -> (i64, i64) {
        let expired = self.tickets().zrange(f64::NEG_INFINITY, now as f64, usize::MAX);
        for &(t, _) in &expired {
            let holder = self.ticket_holder(t).map(|(u, _)| u);
            self.remove_ticket(t, holder);
        }
        let lapsed = self.sessions().zrange(f64::NEG_INFINITY, now as f64, usize::MAX);
        for &(u, _) in &lapsed {
            self.close_session(u);
        }
        let (e, l) = (expired.len() as i64, lapsed.len() as i64);
        self.add_stat("expired", e);
        self.add_stat("lapsed", l);
        crate::counters::add(&crate::counters::EXPIRED, e);
        crate::counters::add(&crate::counters::LAPSED, l);
        (e, l)
    }

    /// Live sessions and claimable tickets, as of `now`, without writing.
    pub fn live_counts(&self, now: i64) -> (i64, i64) {
        let live = |key: &Key| key.len() - key.zrange(f64::NEG_INFINITY, now as f64, usize::MAX).len() as i64;
        (live(self.sessions()), live(self.tickets()))
    }

    /// Where `user` stands as of `now` (tickets and leases past their time count as gone).
    pub fn standing(&self, user: Str, now: i64) -> Standing {
        if self.waiting().kind() == Kind::Zset {
            if let Some((rank, seq)) = self.srv.zrank_with_score(self.name_of(Part::Waiting), user) {
                let (seen, nickname) = self.record(seq).unwrap_or((0, self.srv.str(b"")));
                return Standing::Waiting { seq, rank: rank + 1, seen, nickname };
            }
        }
        if let Some(t) = self.promoted().hget(user) {
            if self.tickets().zscore(t).is_some_and(|exp| exp as i64 > now) {
                return Standing::Promoted { ticket: t, nickname: self.ticket_holder(t).map(|(_, n)| n) };
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
