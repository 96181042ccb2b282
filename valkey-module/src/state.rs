//! One queue's keys opened for a command, and the building blocks every command
//! shares: settings, counters, records, issuing and revoking tickets, and reaping
//! what has expired. Each write is applied here and recorded in `fx` for replication.

use crate::defaults;
use crate::effects::Effects;
use crate::server::{Key, Kind, Server, Str};
use queue_core::admission::{Bucket, RateWindow};
use queue_core::config::{Config, FIELDS};
use queue_core::keys::QueueKeys;
use queue_core::record;
use queue_core::QueueError;

pub struct Queue<'s> {
    pub srv: &'s Server,
    /// The queue's name: the command's declared key, named in keyspace events.
    pub name: Str,
    pub keys: QueueKeys,
    pub waiting: Key,
    pub promoted: Key,
    pub tickets: Key,
    pub ticket: Key,
    pub sessions: Key,
    pub active: Key,
    pub stats: Key,
    k_waiting: Str,
    k_promoted: Str,
    k_tickets: Str,
    k_ticket: Str,
    k_sessions: Str,
    k_active: Str,
    k_stats: Str,
    pub fx: Effects,
}

/// Where a user stands.
pub enum Standing {
    Waiting { seq: i64, rank: i64, seen: i64, nickname: Str },
    Promoted { ticket: Str, nickname: Option<Str> },
    Active { nickname: Option<Str> },
    Unknown,
}

/// Sequence numbers are kept as zset scores (doubles): exact far beyond any queue.
pub fn score(seq: i64) -> f64 {
    seq as f64
}

impl<'s> Queue<'s> {
    /// Opens (and type-checks, before anything is written) every key of the queue.
    pub fn open(srv: &'s Server, name: Str, write: bool) -> Result<Self, QueueError> {
        let q = queue_core::keys::check_queue(name.bytes())?;
        let keys = QueueKeys::new(q);
        let k = |s: String| srv.str(s.as_bytes());
        let (k_waiting, k_promoted, k_tickets, k_ticket) =
            (k(keys.waiting()), k(keys.promoted()), k(keys.tickets()), k(keys.ticket()));
        let (k_sessions, k_active, k_stats) = (k(keys.sessions()), k(keys.active()), k(keys.stats()));
        Ok(Queue {
            srv,
            name,
            waiting: srv.open(k_waiting, write).expect(Kind::Zset)?,
            promoted: srv.open(k_promoted, write).expect(Kind::Hash)?,
            tickets: srv.open(k_tickets, write).expect(Kind::Zset)?,
            ticket: srv.open(k_ticket, write).expect(Kind::Hash)?,
            sessions: srv.open(k_sessions, write).expect(Kind::Zset)?,
            active: srv.open(k_active, write).expect(Kind::Hash)?,
            stats: srv.open(k_stats, write).expect(Kind::Hash)?,
            keys,
            k_waiting,
            k_promoted,
            k_tickets,
            k_ticket,
            k_sessions,
            k_active,
            k_stats,
            fx: Effects::default(),
        })
    }

    /// The queue's settings: module defaults overridden by its config hash.
    pub fn config(&self) -> Result<Config, QueueError> {
        let mut cfg = defaults::current();
        let key = self.srv.open(self.srv.str(self.keys.config().as_bytes()), false).expect(Kind::Hash)?;
        if key.kind() == Kind::Hash {
            for f in FIELDS.iter() {
                if let Some(v) = key.hget(self.srv.str(f.name.as_bytes())) {
                    cfg.apply_stored(f.name.as_bytes(), v.bytes());
                }
            }
        }
        Ok(cfg)
    }

    pub fn stat(&self, field: &str) -> i64 {
        self.stats.hget(self.srv.str(field.as_bytes())).and_then(Str::parse_i64).unwrap_or(0)
    }

    pub fn set_stat(&mut self, field: &str, v: i64) {
        let (f, v) = (self.srv.str(field.as_bytes()), self.srv.int_str(v));
        self.stats.hset(f, v);
        self.fx.hset(self.k_stats, f, v);
    }

    pub fn add_stat(&mut self, field: &str, by: i64) {
        if by != 0 {
            let v = self.stat(field) + by;
            self.set_stat(field, v);
        }
    }

    pub fn bucket(&self, cfg: &Config, now: i64) -> Bucket {
        match self.stats.hget(self.srv.str(b"tokens")).and_then(Str::parse_i64) {
            Some(milli) => {
                Bucket { milli_tokens: milli, at_ms: self.stat("tokens_at") }.refill(now, cfg.rate(), cfg.bucket_size())
            }
            None => Bucket::full(cfg.bucket_size(), now),
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
        self.srv.str(self.keys.chunk(seq as u64).as_bytes())
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
        self.waiting.zadd(user, score(seq));
        self.fx.zadd(self.k_waiting, self.srv.int_str(seq), user);
        self.write_record(seq, now, nickname);
    }

    /// Takes `user` (sequence number `seq`) out of the line.
    pub fn remove_waiter(&mut self, user: Str, seq: i64) {
        self.waiting.zrem(user);
        self.fx.zrem(self.k_waiting, user);
        self.delete_record(seq);
    }

    /// Issues a ticket to `user`, claimable until now + ticket_ttl.
    pub fn issue_ticket(&mut self, user: Str, nickname: &[u8], now: i64, cfg: &Config) -> Str {
        let id = self.srv.str(crate::ids::next_ticket_id().as_bytes());
        let expiry = now + cfg.ticket_ttl();
        self.tickets.zadd(id, expiry as f64);
        self.fx.zadd(self.k_tickets, self.srv.int_str(expiry), id);
        let v = self.srv.str(&record::encode_ticket(user.bytes(), nickname));
        self.ticket.hset(id, v);
        self.fx.hset(self.k_ticket, id, v);
        self.promoted.hset(user, id);
        self.fx.hset(self.k_promoted, user, id);
        id
    }

    /// Removes a ticket (claimed, expired or revoked) and its user's promotion.
    pub fn remove_ticket(&mut self, ticket: Str, user: Option<Str>) {
        self.tickets.zrem(ticket);
        self.fx.zrem(self.k_tickets, ticket);
        self.ticket.hdel(ticket);
        self.fx.hdel(self.k_ticket, ticket);
        if let Some(u) = user {
            if self.promoted.hget(u).is_some_and(|t| t.bytes() == ticket.bytes()) {
                self.promoted.hdel(u);
                self.fx.hdel(self.k_promoted, u);
            }
        }
    }

    /// The user and nickname a ticket was issued to.
    pub fn ticket_holder(&self, ticket: Str) -> Option<(Str, Str)> {
        let v = self.ticket.hget(ticket)?;
        let (u, n) = record::decode_ticket(v.bytes())?;
        Some((self.srv.str(u), self.srv.str(n)))
    }

    pub fn open_session(&mut self, user: Str, nickname: Str, until: i64) {
        self.sessions.zadd(user, until as f64);
        self.fx.zadd(self.k_sessions, self.srv.int_str(until), user);
        self.active.hset(user, nickname);
        self.fx.hset(self.k_active, user, nickname);
    }

    pub fn extend_session(&mut self, user: Str, until: i64) {
        self.sessions.zadd(user, until as f64);
        self.fx.zadd(self.k_sessions, self.srv.int_str(until), user);
    }

    pub fn close_session(&mut self, user: Str) {
        self.sessions.zrem(user);
        self.fx.zrem(self.k_sessions, user);
        self.active.hdel(user);
        self.fx.hdel(self.k_active, user);
    }

    /// Drops tickets and leases whose time is over; returns (tickets, leases) dropped.
    pub fn reap(&mut self, now: i64) -> (i64, i64) {
        let expired = self.tickets.zrange(f64::NEG_INFINITY, now as f64, usize::MAX);
        for &(t, _) in &expired {
            let holder = self.ticket_holder(t).map(|(u, _)| u);
            self.remove_ticket(t, holder);
        }
        let lapsed = self.sessions.zrange(f64::NEG_INFINITY, now as f64, usize::MAX);
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
        (live(&self.sessions), live(&self.tickets))
    }

    /// Where `user` stands as of `now` (tickets and leases past their time count as gone).
    pub fn standing(&self, user: Str, now: i64) -> Standing {
        if let Some(seq) = self.waiting.zscore(user) {
            let seq = seq as i64;
            let rank = self.srv.zrank(self.k_waiting, user).unwrap_or(0) + 1;
            let (seen, nickname) = self.record(seq).unwrap_or((0, self.srv.str(b"")));
            return Standing::Waiting { seq, rank, seen, nickname };
        }
        if let Some(t) = self.promoted.hget(user) {
            if self.tickets.zscore(t).is_some_and(|exp| exp as i64 > now) {
                return Standing::Promoted { ticket: t, nickname: self.ticket_holder(t).map(|(_, n)| n) };
            }
        }
        if self.sessions.zscore(user).is_some_and(|exp| exp as i64 > now) {
            return Standing::Active { nickname: self.active.hget(user) };
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
