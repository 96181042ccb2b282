//! One queue's keys as the admission engine's [`Store`]: keys opened on first use,
//! settings and stats fields read once per command, and every write applied at once
//! and recorded in `fx` for replication. The rules themselves are in
//! `queue_core::engine`.

use crate::cache::{self, Stats, Stored};
use crate::counters;
use crate::defaults;
use crate::effects::Effects;
use crate::server::{Key, Kind, Reply, Server, Str};
use queue_core::config::{Config, EntryMode, FIELDS};
use queue_core::engine::{Aux, Event, LogDraft, Part, Store};
use queue_core::keys::{self, CHUNK};
use queue_core::lanes::Lanes;
use queue_core::ticket::SECRET_LEN;
use queue_core::QueueError;
use std::cell::{Cell, OnceCell, RefCell};

const PARTS: [(Part, &str, Kind); 5] = [
    (Part::Waiting, keys::WAITING, Kind::Zset),
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
    names: [Str; 5],
    /// The last number turned into a string (a record's field and its ZADD score).
    last_int: Cell<Option<(i64, Str)>>,
    keys: [OnceCell<Key>; 5],
    db: i32,
    /// The queue's stored settings, once read (kept across commands: `cache`).
    stored: Cell<Option<Stored>>,
    /// Stats fields read or written, so each is read once (kept across commands).
    stats_seen: RefCell<Stats>,
    /// Parts found empty or of their type (bit `1 << Part`), kept across commands.
    checked: Cell<u8>,
    /// The layout marker was seen.
    layout: Cell<bool>,
    /// What was kept was this generation of the cache's entry (see `cache::save`).
    generation: u64,
    pub fx: Effects,
    /// The change log entry in the making, appended by `finish`.
    draft: LogDraft,
    /// `watched` and `instances`, opened on first use (never cached across commands:
    /// `cache` keeps nothing of them).
    watched: OnceCell<Key>,
    instances: OnceCell<Key>,
    /// `claimed` and `codes`, opened on first use (see `small_hash`).
    claimed: OnceCell<Key>,
    codes: OnceCell<Key>,
    /// The name of `codes` and the last field of a small hash made into a server
    /// string: an entry with a code reads its field and writes it back, one string
    /// each instead of two.
    codes_name: OnceCell<Str>,
    last_field: RefCell<Option<Str>>,
}

impl AsRef<[u8]> for Str {
    fn as_ref(&self) -> &[u8] {
        self.bytes()
    }
}

fn score(v: i64) -> f64 {
    match v {
        i64::MIN => f64::NEG_INFINITY,
        i64::MAX => f64::INFINITY,
        v => v as f64,
    }
}

impl<'s> Queue<'s> {
    pub fn open(srv: &'s Server, name: Str, write: bool) -> Result<Self, QueueError> {
        let q = keys::check_queue(name.bytes())?;
        let mut prefix = Vec::with_capacity(q.len() + 24);
        prefix.extend_from_slice(keys::KEY_OPEN.as_bytes());
        prefix.extend_from_slice(q.as_bytes());
        prefix.extend_from_slice(keys::KEY_CLOSE.as_bytes());
        let db = srv.db();
        let (names, known, generation) = cache::load(db, q.as_bytes(), &prefix);
        Ok(Queue {
            srv,
            name,
            prefix,
            write,
            names: names.0,
            last_int: Cell::new(None),
            keys: Default::default(),
            db,
            stored: Cell::new(known.config),
            stats_seen: RefCell::new(known.stats),
            checked: Cell::new(known.checked),
            layout: Cell::new(known.layout),
            generation,
            fx: Effects::default(),
            draft: LogDraft::default(),
            watched: OnceCell::new(),
            instances: OnceCell::new(),
            claimed: OnceCell::new(),
            codes: OnceCell::new(),
            codes_name: OnceCell::new(),
            last_field: RefCell::new(None),
        })
    }

    /// The key `queue:{Q}:<suffix>`, built on the stack.
    fn key_name(&self, suffix: &[u8]) -> Str {
        let mut buf = [0u8; 128];
        let n = self.prefix.len() + suffix.len();
        buf[..self.prefix.len()].copy_from_slice(&self.prefix);
        buf[self.prefix.len()..n].copy_from_slice(suffix);
        self.srv.str(&buf[..n])
    }

    /// Q, from the key prefix `queue:{Q}:`.
    fn queue_name(&self) -> &[u8] {
        &self.prefix[keys::KEY_OPEN.len()..self.prefix.len() - keys::KEY_CLOSE.len()]
    }

    pub fn name_of(&self, p: Part) -> Str {
        self.names[p as usize]
    }

    /// `v` as a server string, reusing the last one made when it is the same number.
    fn int(&self, v: i64) -> Str {
        if let Some((last, s)) = self.last_int.get() {
            if last == v {
                return s;
            }
        }
        let s = self.srv.int_str(v);
        self.last_int.set(Some((v, s)));
        s
    }

    pub fn key(&self, p: Part) -> &Key {
        self.keys[p as usize].get_or_init(|| self.srv.open(self.name_of(p), self.write))
    }

    fn waiting(&self) -> &Key {
        self.key(Part::Waiting)
    }
    fn sessions(&self) -> &Key {
        self.key(Part::Sessions)
    }
    fn active(&self) -> &Key {
        self.key(Part::Active)
    }
    fn stats(&self) -> &Key {
        self.key(Part::Stats)
    }

    /// All settings at once.
    pub fn config(&self) -> Config {
        queue_core::engine::config(self)
    }

    fn chunk_key(&self, seq: i64) -> Str {
        let mut buf = itoa::Buffer::new();
        let mut suffix = [0u8; 24];
        let digits = buf.format(seq as u64 / CHUNK).as_bytes();
        let p = keys::CHUNK_PREFIX.len();
        suffix[..p].copy_from_slice(keys::CHUNK_PREFIX.as_bytes());
        suffix[p..p + digits.len()].copy_from_slice(digits);
        self.key_name(&suffix[..p + digits.len()])
    }

    /// Replicates what the command wrote and announces it; nothing when nothing changed.
    pub fn finish(mut self, event: &std::ffi::CStr) {
        queue_core::engine::close_log(&mut self);
        let fx = std::mem::take(&mut self.fx);
        if !fx.is_empty() {
            fx.replicate(self.srv);
            self.srv.notify(event, self.name);
        }
    }

    /// The config hash was just written: its settings are read again next time.
    pub fn forget_settings(&self) {
        self.stored.set(None);
    }

    /// The stored settings, read from the config hash the first time (a field that
    /// is absent or does not fit is None).
    fn stored(&self) -> Stored {
        if let Some(s) = self.stored.get() {
            return s;
        }
        let key = self.key(Part::Config);
        let mut s = Stored { values: [None; FIELDS.len()], entry: EntryMode::Open, lanes: Lanes::default() };
        if key.kind() == Kind::Hash {
            for (slot, f) in s.values.iter_mut().zip(FIELDS.iter()) {
                *slot = key
                    .hget(self.srv.static_str(f.name))
                    .and_then(|v| queue_core::config::check_value(f, v.bytes()).ok());
            }
            s.entry = key
                .hget(self.srv.static_str(queue_core::config::ENTRY))
                .and_then(|v| EntryMode::parse(v.bytes()).ok())
                .unwrap_or_default();
            s.lanes = key
                .hget(self.srv.static_str(queue_core::lanes::LANES))
                .and_then(|v| Lanes::parse(v.bytes()).ok())
                .unwrap_or_default();
        }
        self.stored.set(Some(s));
        s
    }
}

impl Drop for Queue<'_> {
    /// Keeps what this command knows of the queue for the next one (`cache`).
    fn drop(&mut self) {
        let known = cache::Known {
            config: self.stored.get(),
            stats: std::mem::take(self.stats_seen.get_mut()),
            checked: self.checked.get(),
            layout: self.layout.get(),
        };
        cache::save(self.db, self.queue_name(), known, self.generation);
    }
}

impl Store for Queue<'_> {
    type User = Str;
    type Text = Str;

    /// Keys found of their type stay so until something else writes them (which
    /// drops what is kept, `cache`): this module never gives a key another type.
    fn check(&self, parts: &[Part]) -> Result<(), QueueError> {
        for &p in parts {
            let (key, kind) = match p {
                Part::Watched => (self.watched_key(), Kind::Hash),
                Part::Instances => (self.instances_key(), Kind::Zset),
                _ => (None, Kind::Empty),
            };
            if p == Part::Claimed || p == Part::Codes {
                let aux = if p == Part::Claimed { Aux::Claimed } else { Aux::Codes };
                let kind = self.small_key(aux).kind();
                if kind != Kind::Empty && kind != Kind::Hash {
                    return Err(QueueError::WrongType);
                }
                continue;
            }
            if let Some(key) = key {
                if key.kind() != Kind::Empty && key.kind() != kind {
                    return Err(QueueError::WrongType);
                }
                continue;
            }
            let bit = 1u8 << p as u8;
            if self.checked.get() & bit != 0 {
                continue;
            }
            let k = self.key(p).kind();
            if k != Kind::Empty && k != PARTS[p as usize].2 {
                return Err(QueueError::WrongType);
            }
            self.checked.set(self.checked.get() | bit);
        }
        Ok(())
    }

    /// The server's clock, or with the test clock (see `defaults::TEST_CLOCK`) the
    /// value of `queue:{Q}:clock` when it is set.
    fn now(&self) -> i64 {
        if defaults::test_clock() {
            if let Some(t) = self.srv.get_i64(self.key_name(keys::CLOCK.as_bytes())) {
                return t;
            }
        }
        self.srv.now_ms()
    }

    /// The queue's config hash, else the module default; stored values that do not
    /// fit are ignored.
    fn setting(&self, i: usize) -> i64 {
        self.stored().values[i].unwrap_or_else(|| defaults::get(i))
    }

    fn entry_mode(&self) -> EntryMode {
        self.stored().entry
    }

    fn lanes(&self) -> Lanes {
        self.stored().lanes
    }

    fn stat_opt(&self, field: &'static str) -> Option<i64> {
        if let Some(&(_, v)) = self.stats_seen.borrow().iter().find(|(f, _)| *f == field) {
            return v;
        }
        let v = self.stats().hget(self.srv.static_str(field)).and_then(Str::parse_i64);
        self.stats_seen.borrow_mut().push((field, v));
        v
    }

    fn set_stat(&mut self, field: &'static str, v: i64) {
        {
            let mut seen = self.stats_seen.borrow_mut();
            match seen.iter_mut().find(|(f, _)| *f == field) {
                Some(slot) => slot.1 = Some(v),
                None => seen.push((field, Some(v))),
            }
        }
        let (f, v) = (self.srv.static_str(field), self.srv.int_str(v));
        self.stats().hset(f, v);
        self.fx.hset(self.name_of(Part::Stats), f, v);
    }

    fn stat_named(&self, field: &[u8]) -> Option<i64> {
        self.stats().hget(self.srv.str(field)).and_then(Str::parse_i64)
    }

    fn set_stat_named(&mut self, field: &[u8], v: i64) {
        let (f, v) = (self.srv.str(field), self.srv.int_str(v));
        self.stats().hset(f, v);
        self.fx.hset(self.name_of(Part::Stats), f, v);
    }

    fn new_secret(&mut self) -> [u8; SECRET_LEN] {
        crate::ids::next_secret()
    }

    fn count(&self, event: Event, n: i64) {
        let c = match event {
            Event::Entered => &counters::ENTERED,
            Event::Promoted => &counters::PROMOTED,
            Event::Claimed => &counters::CLAIMED,
            Event::TicketsExpired => &counters::EXPIRED,
            Event::Dropped => &counters::DROPPED,
            Event::Left => &counters::LEFT,
            Event::Ended => &counters::ENDED,
            Event::LeasesExpired => &counters::LAPSED,
        };
        counters::add(c, n);
    }

    fn announce(&mut self, promoted: i64, waiting: i64, at_ms: i64) {
        let queue = std::str::from_utf8(self.queue_name()).unwrap_or_default();
        let payload = queue_core::engine::announcement(queue, promoted, waiting, at_ms);
        self.srv.publish(self.key_name(keys::PROMOTED.as_bytes()), self.srv.str(payload.as_bytes()));
    }

    fn layout_known(&self) -> bool {
        self.layout.get()
    }
    fn note_layout(&self) {
        self.layout.set(true);
    }

    fn waiting_len(&self) -> i64 {
        self.waiting().len()
    }
    fn waiting_score(&self, user: &Str) -> Option<i64> {
        self.waiting().zscore(*user).map(|s| s as i64)
    }
    fn waiting_rank(&self, user: &Str) -> Option<(i64, i64)> {
        if self.waiting().kind() != Kind::Zset {
            return None;
        }
        self.srv.zrank_with_score(self.name_of(Part::Waiting), *user)
    }
    fn waiting_max(&self) -> Option<i64> {
        self.waiting().zmax_score().map(|s| s as i64)
    }
    fn waiting_max_in(&self, min: i64, max: i64) -> Option<i64> {
        self.waiting().zmax_in(score(min), score(max)).map(|s| s as i64)
    }
    fn waiting_count_in(&self, min: i64, max: i64) -> i64 {
        // ZCOUNT: O(log n) in the server's skiplist, where the key API would walk.
        let (lo, hi) = (self.srv.int_str(min), self.srv.int_str(max));
        match self.srv.call(c"ZCOUNT", &[self.name_of(Part::Waiting), lo, hi]) {
            Reply::Int(n) => n,
            _ => 0,
        }
    }
    fn waiting_scan<F: FnMut(Str, i64) -> bool>(&self, min: i64, max: i64, mut f: F) {
        self.waiting().zscan(score(min), score(max), |u, s| f(u, s as i64));
    }
    fn waiting_add(&mut self, user: &Str, seq: i64) {
        self.waiting().zadd(*user, seq as f64);
        self.fx.zadd(self.name_of(Part::Waiting), self.int(seq), *user);
    }
    fn waiting_add_new(&mut self, user: &Str, seq: i64) -> bool {
        if !self.waiting().zadd_nx(*user, seq as f64) {
            return false;
        }
        self.fx.zadd(self.name_of(Part::Waiting), self.int(seq), *user);
        true
    }
    fn waiting_remove(&mut self, user: &Str) {
        self.waiting().zrem(*user);
        self.fx.zrem(self.name_of(Part::Waiting), *user);
    }

    fn record(&self, seq: i64) -> Option<Str> {
        self.srv.open(self.chunk_key(seq), false).hget(self.int(seq))
    }
    fn put_record(&mut self, seq: i64, value: &[u8]) {
        let (k, f, v) = (self.chunk_key(seq), self.int(seq), self.srv.str(value));
        self.srv.open(k, true).hset(f, v);
        self.fx.hset(k, f, v);
    }
    fn delete_record(&mut self, seq: i64) {
        let (k, f) = (self.chunk_key(seq), self.int(seq));
        self.srv.open(k, true).hdel(f);
        self.fx.hdel(k, f);
    }

    fn sessions_len(&self) -> i64 {
        self.sessions().len()
    }
    fn session_expiry(&self, user: &Str) -> Option<i64> {
        self.sessions().zscore(*user).map(|s| s as i64)
    }
    fn sessions_ended_by(&self, now: i64) -> Vec<Str> {
        self.sessions().zrange(f64::NEG_INFINITY, now as f64, usize::MAX).into_iter().map(|(u, _)| u).collect()
    }
    fn set_lease(&mut self, user: &Str, until: i64) {
        self.sessions().zadd(*user, until as f64);
        self.fx.zadd(self.name_of(Part::Sessions), self.srv.int_str(until), *user);
    }
    fn active_nickname(&self, user: &Str) -> Option<Str> {
        self.active().hget(*user)
    }
    fn set_active(&mut self, user: &Str, nickname: &[u8]) {
        let n = self.srv.str(nickname);
        self.active().hset(*user, n);
        self.fx.hset(self.name_of(Part::Active), *user, n);
    }
    fn close_session(&mut self, user: &Str) {
        self.sessions().zrem(*user);
        self.fx.zrem(self.name_of(Part::Sessions), *user);
        self.active().hdel(*user);
        self.fx.hdel(self.name_of(Part::Active), *user);
    }

    // The opening's keys go through nested calls: they are small, or read once.
    fn message(&self) -> Vec<u8> {
        let key = self.key(Part::Config);
        if key.kind() != Kind::Hash {
            return Vec::new();
        }
        key.hget(self.srv.static_str(queue_core::config::MESSAGE)).map(|v| v.bytes().to_vec()).unwrap_or_default()
    }
    fn aux_hget(&self, key: Aux, field: &[u8]) -> Option<Vec<u8>> {
        if small_hash(key) {
            return self.small_key(key).hget(self.field_str(field)).map(|v| v.bytes().to_vec());
        }
        match self.srv.call(c"HGET", &[self.aux_name(key), self.srv.str(field)]) {
            Reply::Bulk(v) => Some(v),
            _ => None,
        }
    }
    fn aux_hset(&mut self, key: Aux, field: &[u8], value: &[u8]) {
        if small_hash(key) {
            let (name, f, v) = (self.small_name(key), self.field_str(field), self.srv.str(value));
            let k = self.small_key(key);
            if matches!(k.kind(), Kind::Empty | Kind::Hash) {
                k.hset(f, v);
                self.fx.hset(name, f, v);
            }
            return;
        }
        let (k, f, v) = (self.aux_name(key), self.srv.str(field), self.srv.str(value));
        self.srv.call(c"HSET", &[k, f, v]);
        self.fx.hset(k, f, v);
    }
    fn aux_hdel(&mut self, key: Aux, field: &[u8]) -> bool {
        if small_hash(key) {
            let (name, f) = (self.aux_name(key), self.srv.str(field));
            let k = self.small_key(key);
            let there = k.hget(f).is_some();
            if there {
                k.hdel(f);
                self.fx.hdel(name, f);
            }
            return there;
        }
        let (k, f) = (self.aux_name(key), self.srv.str(field));
        let gone = matches!(self.srv.call(c"HDEL", &[k, f]), Reply::Int(1));
        if gone {
            self.fx.hdel(k, f);
        }
        gone
    }
    fn aux_hlen(&self, key: Aux) -> i64 {
        match self.srv.call(c"HLEN", &[self.aux_name(key)]) {
            Reply::Int(n) => n,
            _ => 0,
        }
    }
    fn aux_hgetall(&self, key: Aux) -> Vec<(Vec<u8>, Vec<u8>)> {
        match self.srv.call(c"HGETALL", &[self.aux_name(key)]) {
            Reply::Array(v) => {
                let mut it = v.into_iter();
                let mut out = Vec::new();
                while let (Some(f), Some(x)) = (it.next(), it.next()) {
                    out.push((f, x));
                }
                out
            }
            _ => Vec::new(),
        }
    }
    fn aux_del(&mut self, key: Aux) {
        let k = self.aux_name(key);
        if matches!(self.srv.call(c"DEL", &[k]), Reply::Int(n) if n > 0) {
            self.fx.del(k);
        }
    }
    fn proof_push(&mut self, items: &[Vec<u8>]) {
        let k = self.aux_name(Aux::Proof);
        for page in items.chunks(4096) {
            let mut argv = vec![k];
            argv.extend(page.iter().map(|i| self.srv.str(i)));
            self.srv.call(c"RPUSH", &argv);
            self.fx.rpush(k, &argv[1..]);
        }
    }
    fn proof_len(&self) -> i64 {
        match self.srv.call(c"LLEN", &[self.aux_name(Aux::Proof)]) {
            Reply::Int(n) => n,
            _ => 0,
        }
    }
    fn proof_range(&self, start: i64, count: i64) -> Vec<Vec<u8>> {
        let (a, b) = (self.srv.int_str(start), self.srv.int_str(start + count - 1));
        match self.srv.call(c"LRANGE", &[self.aux_name(Aux::Proof), a, b]) {
            Reply::Array(v) => v,
            _ => Vec::new(),
        }
    }
    fn user_of(&self, id: &[u8]) -> Str {
        self.srv.str(id)
    }
    fn random_seed(&mut self) -> [u8; 32] {
        crate::ids::random_seed()
    }

    fn log_draft(&mut self) -> &mut LogDraft {
        &mut self.draft
    }
    /// XADD with an id the server picks, replicated with that id, then published on
    /// the queue's changes channel (id, fields and values, space-separated) so that
    /// push instances learn of it without reading the log.
    fn log_append(&mut self, fields: &[(&'static str, Vec<u8>)]) {
        let key = self.key_name(keys::LOG.as_bytes());
        let max = self.srv.int_str(keys::LOG_MAX);
        let mut argv =
            vec![key, self.srv.static_str("MAXLEN"), self.srv.static_str("~"), max, self.srv.static_str("*")];
        for (f, v) in fields {
            argv.push(self.srv.static_str(f));
            argv.push(self.srv.str(v));
        }
        if let Reply::Bulk(id) = self.srv.call(c"XADD", &argv) {
            argv[4] = self.srv.str(&id);
            self.srv.replicate(c"XADD", &argv);
            let mut message = id;
            for (f, v) in fields {
                message.push(b' ');
                message.extend_from_slice(f.as_bytes());
                message.push(b' ');
                message.extend_from_slice(v);
            }
            self.srv.publish(self.key_name(keys::CHANGES.as_bytes()), self.srv.str(&message));
        }
    }
    fn watcher(&self, user: &Str) -> Option<Vec<u8>> {
        Some(self.watched_key()?.hget(*user)?.bytes().to_vec())
    }
    fn set_watcher(&mut self, user: &Str, instance: &[u8]) {
        let Some(key) = self.watched_key() else { return };
        let v = self.srv.str(instance);
        key.hset(*user, v);
        self.fx.hset(self.key_name(keys::WATCHED.as_bytes()), *user, v);
    }
    fn remove_watcher(&mut self, user: &Str) {
        let Some(key) = self.watched_key() else { return };
        if key.kind() == Kind::Hash && key.hget(*user).is_some() {
            key.hdel(*user);
            self.fx.hdel(self.key_name(keys::WATCHED.as_bytes()), *user);
        }
    }
    fn instance_lease(&self, instance: &[u8]) -> Option<i64> {
        self.instances_key()?.zscore(self.srv.str(instance)).map(|v| v as i64)
    }
    fn set_instance_lease(&mut self, instance: &[u8], until: i64) {
        let Some(key) = self.instances_key() else { return };
        let member = self.srv.str(instance);
        key.zadd(member, score(until));
        self.fx.zadd(self.key_name(keys::INSTANCES.as_bytes()), self.srv.int_str(until), member);
    }
    fn instances_ended_before(&self, before: i64, limit: i64) -> Vec<Vec<u8>> {
        let Some(key) = self.instances_key() else { return Vec::new() };
        // `before` excluded: the range's upper end is the score just below it.
        key.zrange(f64::NEG_INFINITY, (before - 1) as f64, limit.max(0) as usize)
            .into_iter()
            .map(|(i, _)| i.bytes().to_vec())
            .collect()
    }
    fn remove_instance(&mut self, instance: &[u8]) {
        let Some(key) = self.instances_key() else { return };
        let member = self.srv.str(instance);
        if key.zrem(member) {
            self.fx.zrem(self.key_name(keys::INSTANCES.as_bytes()), member);
        }
    }
}

/// The hashes read and written one field at a time through the key API (the claims
/// and the access codes: on ENTER with a code, CLAIM and SESSION.END, where a nested
/// call would cost more than the rest of the command), by one handle kept for the
/// command. Nothing else writes them in a command (QUEUE.CODES COUNTS only reads), so
/// no other handle or nested call can delete the key under it.
fn small_hash(key: Aux) -> bool {
    matches!(key, Aux::Claimed | Aux::Codes)
}

impl Queue<'_> {
    /// `watched`, opened on first use; None in a read-only command when it does not exist.
    fn watched_key(&self) -> Option<&Key> {
        let k = self.watched.get_or_init(|| self.srv.open(self.key_name(keys::WATCHED.as_bytes()), self.write));
        (k.kind() != Kind::Empty || self.write).then_some(k)
    }
    fn instances_key(&self) -> Option<&Key> {
        let k = self.instances.get_or_init(|| self.srv.open(self.key_name(keys::INSTANCES.as_bytes()), self.write));
        (k.kind() != Kind::Empty || self.write).then_some(k)
    }

    /// `claimed` or `codes`, opened on first use.
    /// A small hash's name (`codes`'s made once per command).
    fn small_name(&self, key: Aux) -> Str {
        if key == Aux::Codes {
            return *self.codes_name.get_or_init(|| self.aux_name(key));
        }
        self.aux_name(key)
    }

    /// `field` as a server string: the last one made again when it is the same.
    fn field_str(&self, field: &[u8]) -> Str {
        let mut last = self.last_field.borrow_mut();
        match *last {
            Some(f) if f.bytes() == field => f,
            _ => {
                let f = self.srv.str(field);
                *last = Some(f);
                f
            }
        }
    }

    fn small_key(&self, key: Aux) -> &Key {
        let cell = if key == Aux::Claimed { &self.claimed } else { &self.codes };
        cell.get_or_init(|| self.srv.open(self.small_name(key), self.write))
    }

    fn aux_name(&self, key: Aux) -> Str {
        self.key_name(key.suffix().as_bytes())
    }
}
