//! The engine's [`Store`] in memory, with a clock the caller sets: the admission
//! rules run without a server, so tests move time instead of sleeping. It keeps the
//! same data as the Valkey keys (docs/commands.md, "Key layout"): the line as userId ->
//! number, records by number, sessions, active users, stats and settings, and can
//! show them in that shape for comparison with a server's.

use crate::config::{check_value, field, FIELDS};
use crate::engine::{Aux, Part, Store};
use crate::error::QueueError;
use crate::ticket::{Secrets, SECRET_LEN};
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// A key's content, as [`MemoryStore::keys`] shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Content {
    Zset(Vec<(String, i64)>),
    Hash(BTreeMap<String, String>),
    List(Vec<String>),
    /// A stream's entries (their fields in order; ids are the server's clock).
    Stream(Vec<Vec<(String, String)>>),
}

pub struct MemoryStore {
    /// The time every command reads.
    pub now: i64,
    waiting: BTreeSet<(i64, Vec<u8>)>,
    numbers: HashMap<Vec<u8>, i64>,
    records: BTreeMap<i64, Vec<u8>>,
    sessions: HashMap<Vec<u8>, i64>,
    active: HashMap<Vec<u8>, Vec<u8>>,
    stats: BTreeMap<String, i64>,
    settings: [Option<i64>; FIELDS.len()],
    secrets: Secrets,
    pre: BTreeMap<Vec<u8>, Vec<u8>>,
    opening: BTreeMap<Vec<u8>, Vec<u8>>,
    claimed: BTreeMap<Vec<u8>, Vec<u8>>,
    entry: Option<crate::config::EntryMode>,
    lanes: Option<crate::lanes::Lanes>,
    codes: BTreeMap<Vec<u8>, Vec<u8>>,
    bought: BTreeMap<Vec<u8>, Vec<u8>>,
    message: Option<Vec<u8>>,
    proof: Vec<Vec<u8>>,
    /// What commands announced, oldest first: (promoted, waiting, at_ms).
    pub announcements: Vec<(i64, i64, i64)>,
    draft: crate::engine::LogDraft,
    /// The change log's entries, oldest first.
    pub log: Vec<Vec<(&'static str, Vec<u8>)>>,
    watched: BTreeMap<Vec<u8>, Vec<u8>>,
    instances: BTreeMap<Vec<u8>, i64>,
}

impl MemoryStore {
    /// An empty queue at time `now`; ticket secrets from `seed` (deterministic).
    pub fn new(now: i64, seed: u8) -> Self {
        MemoryStore {
            now,
            waiting: BTreeSet::new(),
            numbers: HashMap::new(),
            records: BTreeMap::new(),
            sessions: HashMap::new(),
            active: HashMap::new(),
            stats: BTreeMap::new(),
            settings: [None; FIELDS.len()],
            secrets: Secrets::from_seed([seed; 32]),
            pre: BTreeMap::new(),
            opening: BTreeMap::new(),
            claimed: BTreeMap::new(),
            entry: None,
            lanes: None,
            codes: BTreeMap::new(),
            bought: BTreeMap::new(),
            message: None,
            proof: Vec::new(),
            announcements: Vec::new(),
            draft: Default::default(),
            log: Vec::new(),
            watched: BTreeMap::new(),
            instances: BTreeMap::new(),
        }
    }

    /// QUEUE.CONFIG SET: every pair checked before any is applied.
    pub fn configure(&mut self, pairs: &[(&str, i64)]) -> Result<(), QueueError> {
        let mut checked = Vec::new();
        for (name, v) in pairs {
            let f = field(name.as_bytes())?;
            checked.push((
                FIELDS.iter().position(|x| x.name == f.name).unwrap(),
                check_value(f, v.to_string().as_bytes())?,
            ));
        }
        for (i, v) in checked {
            self.settings[i] = Some(v);
        }
        Ok(())
    }

    /// QUEUE.CONFIG SET closes_at, inventory and message as a server does it: the
    /// settings checked, written, and the `state` log entry when the state changed.
    pub fn configure_sale(
        &mut self,
        closes_at: Option<i64>,
        inventory: Option<i64>,
        message: Option<&[u8]>,
    ) -> Result<(), QueueError> {
        if let Some(m) = message {
            crate::config::check_message(m)?;
        }
        if let Some(v) = inventory {
            crate::config::check_inventory(v.to_string().as_bytes())?;
        }
        if let Some(at) = closes_at {
            self.configure(&[("closes_at", at)])?;
        }
        let now = self.now;
        if let Some(v) = inventory {
            crate::engine::sale::set_inventory(self, v, now);
        }
        match message {
            Some(m) => {
                self.message = Some(m.to_vec());
                crate::engine::sale::note_message(self, now);
            }
            None => crate::engine::sale::note_state(self, now),
        }
        crate::engine::close_log(self);
        Ok(())
    }

    /// QUEUE.CONFIG SET entry: the text setting `entry` (a mode's name).
    pub fn set_entry(&mut self, raw: &[u8]) -> Result<(), QueueError> {
        self.entry = Some(crate::config::EntryMode::parse(raw)?);
        Ok(())
    }

    /// QUEUE.CONFIG SET lanes: the text setting `lanes`, checked as a server checks it.
    pub fn set_lanes(&mut self, raw: &[u8]) -> Result<(), QueueError> {
        let lanes = crate::lanes::Lanes::parse(raw)?;
        crate::engine::check_lanes_change(self, lanes)?;
        self.lanes = Some(lanes);
        Ok(())
    }

    /// The line as stored: (userId, number, record), lowest number first.
    pub fn line(&self) -> Vec<(String, i64, String)> {
        self.waiting
            .iter()
            .map(|(seq, u)| {
                let rec = self.records.get(seq).map(|r| String::from_utf8_lossy(r).into_owned()).unwrap_or_default();
                (String::from_utf8_lossy(u).into_owned(), *seq, rec)
            })
            .collect()
    }

    /// A stats field as stored.
    pub fn stat(&self, field: &str) -> Option<i64> {
        self.stats.get(field).copied()
    }

    /// Every key this queue would have on a server, named as there, with its content
    /// (sorted sets as (member, score) lowest first, hashes as field -> value);
    /// empty collections are absent, as a server deletes them.
    pub fn keys(&self, queue: &str) -> BTreeMap<String, Content> {
        let key = |suffix: &str| crate::keys::key(queue, suffix);
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        let mut out = BTreeMap::new();
        let waiting: Vec<(String, i64)> = self.waiting.iter().map(|(s, u)| (text(u), *s)).collect();
        if !waiting.is_empty() {
            out.insert(key(crate::keys::WAITING), Content::Zset(waiting));
        }
        let mut chunks: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
        for (seq, rec) in &self.records {
            let chunk = format!("{}{}", crate::keys::CHUNK_PREFIX, *seq as u64 / crate::keys::CHUNK);
            chunks.entry(key(&chunk)).or_default().insert(seq.to_string(), text(rec));
        }
        out.extend(chunks.into_iter().map(|(k, h)| (k, Content::Hash(h))));
        let mut sessions: Vec<(String, i64)> = self.sessions.iter().map(|(u, e)| (text(u), *e)).collect();
        sessions.sort_by(|a, b| (a.1, &a.0).cmp(&(b.1, &b.0)));
        if !sessions.is_empty() {
            out.insert(key(crate::keys::SESSIONS), Content::Zset(sessions));
        }
        let active: BTreeMap<String, String> = self.active.iter().map(|(u, n)| (text(u), text(n))).collect();
        if !active.is_empty() {
            out.insert(key(crate::keys::ACTIVE), Content::Hash(active));
        }
        let stats: BTreeMap<String, String> = self.stats.iter().map(|(f, v)| (f.to_string(), v.to_string())).collect();
        if !stats.is_empty() {
            out.insert(key(crate::keys::STATS), Content::Hash(stats));
        }
        let mut config: BTreeMap<String, String> =
            FIELDS.iter().zip(self.settings).filter_map(|(f, v)| Some((f.name.to_string(), v?.to_string()))).collect();
        if let Some(mode) = self.entry {
            config.insert(crate::config::ENTRY.to_string(), mode.as_str().to_string());
        }
        if let Some(l) = self.lanes {
            config.insert(crate::lanes::LANES.to_string(), text(&l.text()));
        }
        if let Some(m) = &self.message {
            config.insert(crate::config::MESSAGE.to_string(), text(m));
        }
        if !config.is_empty() {
            out.insert(key(crate::keys::CONFIG), Content::Hash(config));
        }
        for (suffix, h) in [
            (crate::keys::PRE, &self.pre),
            (crate::keys::OPENING, &self.opening),
            (crate::keys::CLAIMED, &self.claimed),
            (crate::keys::CODES, &self.codes),
            (crate::keys::BOUGHT, &self.bought),
        ] {
            if !h.is_empty() {
                out.insert(key(suffix), Content::Hash(h.iter().map(|(f, v)| (text(f), text(v))).collect()));
            }
        }
        if !self.proof.is_empty() {
            out.insert(key(crate::keys::PROOF), Content::List(self.proof.iter().map(|v| text(v)).collect()));
        }
        if !self.watched.is_empty() {
            out.insert(
                key(crate::keys::WATCHED),
                Content::Hash(self.watched.iter().map(|(u, i)| (text(u), text(i))).collect()),
            );
        }
        let mut instances: Vec<(String, i64)> = self.instances.iter().map(|(i, e)| (text(i), *e)).collect();
        instances.sort_by(|a, b| (a.1, &a.0).cmp(&(b.1, &b.0)));
        if !instances.is_empty() {
            out.insert(key(crate::keys::INSTANCES), Content::Zset(instances));
        }
        if !self.log.is_empty() {
            let entries = self.log.iter().map(|e| e.iter().map(|(f, v)| (f.to_string(), text(v))).collect()).collect();
            out.insert(key(crate::keys::LOG), Content::Stream(entries));
        }
        out
    }

    /// Sessions as stored: userId -> lease expiry.
    pub fn sessions(&self) -> BTreeMap<String, i64> {
        self.sessions.iter().map(|(u, e)| (String::from_utf8_lossy(u).into_owned(), *e)).collect()
    }
}

impl Store for MemoryStore {
    type User = Vec<u8>;
    type Text = Vec<u8>;

    fn check(&self, _parts: &[Part]) -> Result<(), QueueError> {
        Ok(())
    }
    fn now(&self) -> i64 {
        self.now
    }
    fn setting(&self, i: usize) -> i64 {
        self.settings[i].unwrap_or(FIELDS[i].default)
    }
    fn entry_mode(&self) -> crate::config::EntryMode {
        self.entry.unwrap_or_default()
    }
    fn lanes(&self) -> crate::lanes::Lanes {
        self.lanes.unwrap_or_default()
    }
    fn message(&self) -> Vec<u8> {
        self.message.clone().unwrap_or_default()
    }
    fn stat_opt(&self, field: &'static str) -> Option<i64> {
        self.stats.get(field).copied()
    }
    fn set_stat(&mut self, field: &'static str, v: i64) {
        self.stats.insert(field.to_string(), v);
    }
    fn stat_named(&self, field: &[u8]) -> Option<i64> {
        self.stats.get(String::from_utf8_lossy(field).as_ref()).copied()
    }
    fn set_stat_named(&mut self, field: &[u8], v: i64) {
        self.stats.insert(String::from_utf8_lossy(field).into_owned(), v);
    }
    fn new_secret(&mut self) -> [u8; SECRET_LEN] {
        self.secrets.next_secret()
    }
    fn announce(&mut self, promoted: i64, waiting: i64, at_ms: i64) {
        self.announcements.push((promoted, waiting, at_ms));
    }

    fn waiting_len(&self) -> i64 {
        self.waiting.len() as i64
    }
    fn waiting_score(&self, user: &Vec<u8>) -> Option<i64> {
        self.numbers.get(user).copied()
    }
    fn waiting_rank(&self, user: &Vec<u8>) -> Option<(i64, i64)> {
        let seq = *self.numbers.get(user)?;
        let rank = self.waiting.range(..(seq, user.clone())).count() as i64;
        Some((rank, seq))
    }
    fn waiting_max(&self) -> Option<i64> {
        self.waiting.last().map(|m| m.0)
    }
    fn waiting_max_in(&self, min: i64, max: i64) -> Option<i64> {
        self.waiting.range((min, Vec::new())..).take_while(|m| m.0 <= max).last().map(|m| m.0)
    }
    fn waiting_count_in(&self, min: i64, max: i64) -> i64 {
        if min > max {
            return 0;
        }
        self.waiting.range((min, Vec::new())..).take_while(|m| m.0 <= max).count() as i64
    }
    fn waiting_scan<F: FnMut(Vec<u8>, i64) -> bool>(&self, min: i64, max: i64, mut f: F) {
        if min > max {
            return;
        }
        for (seq, u) in self.waiting.range((min, Vec::new())..) {
            if *seq > max || !f(u.clone(), *seq) {
                return;
            }
        }
    }
    fn waiting_add(&mut self, user: &Vec<u8>, seq: i64) {
        if let Some(old) = self.numbers.insert(user.clone(), seq) {
            self.waiting.remove(&(old, user.clone()));
        }
        self.waiting.insert((seq, user.clone()));
    }
    fn waiting_remove(&mut self, user: &Vec<u8>) {
        if let Some(old) = self.numbers.remove(user) {
            self.waiting.remove(&(old, user.clone()));
        }
    }

    fn record(&self, seq: i64) -> Option<Vec<u8>> {
        self.records.get(&seq).cloned()
    }
    fn put_record(&mut self, seq: i64, value: &[u8]) {
        self.records.insert(seq, value.to_vec());
    }
    fn delete_record(&mut self, seq: i64) {
        self.records.remove(&seq);
    }

    fn sessions_len(&self) -> i64 {
        self.sessions.len() as i64
    }
    fn session_expiry(&self, user: &Vec<u8>) -> Option<i64> {
        self.sessions.get(user).copied()
    }
    fn sessions_ended_by(&self, now: i64) -> Vec<Vec<u8>> {
        let mut ended: Vec<(i64, Vec<u8>)> =
            self.sessions.iter().filter(|(_, e)| **e <= now).map(|(u, e)| (*e, u.clone())).collect();
        ended.sort();
        ended.into_iter().map(|(_, u)| u).collect()
    }
    fn set_lease(&mut self, user: &Vec<u8>, until: i64) {
        self.sessions.insert(user.clone(), until);
    }
    fn active_nickname(&self, user: &Vec<u8>) -> Option<Vec<u8>> {
        self.active.get(user).cloned()
    }
    fn set_active(&mut self, user: &Vec<u8>, nickname: &[u8]) {
        self.active.insert(user.clone(), nickname.to_vec());
    }
    fn close_session(&mut self, user: &Vec<u8>) {
        self.sessions.remove(user);
        self.active.remove(user);
    }

    fn aux_hget(&self, key: Aux, field: &[u8]) -> Option<Vec<u8>> {
        self.aux(key)?.get(field).cloned()
    }
    fn aux_hset(&mut self, key: Aux, field: &[u8], value: &[u8]) {
        if let Some(h) = self.aux_mut(key) {
            h.insert(field.to_vec(), value.to_vec());
        }
    }
    fn aux_hdel(&mut self, key: Aux, field: &[u8]) -> bool {
        self.aux_mut(key).is_some_and(|h| h.remove(field).is_some())
    }
    fn aux_hlen(&self, key: Aux) -> i64 {
        self.aux(key).map_or(0, |h| h.len() as i64)
    }
    fn aux_hgetall(&self, key: Aux) -> Vec<(Vec<u8>, Vec<u8>)> {
        self.aux(key).map_or_else(Vec::new, |h| h.iter().map(|(f, v)| (f.clone(), v.clone())).collect())
    }
    fn aux_del(&mut self, key: Aux) {
        match key {
            Aux::Proof => self.proof.clear(),
            _ => self.aux_mut(key).expect("a hash").clear(),
        }
    }
    fn proof_push(&mut self, items: &[Vec<u8>]) {
        self.proof.extend_from_slice(items);
    }
    fn proof_len(&self) -> i64 {
        self.proof.len() as i64
    }
    fn proof_range(&self, start: i64, count: i64) -> Vec<Vec<u8>> {
        self.proof.iter().skip(start.max(0) as usize).take(count.max(0) as usize).cloned().collect()
    }
    fn user_of(&self, id: &[u8]) -> Vec<u8> {
        id.to_vec()
    }
    fn random_seed(&mut self) -> [u8; 32] {
        let mut seed = [0u8; 32];
        for chunk in seed.chunks_mut(SECRET_LEN) {
            let s = self.secrets.next_secret();
            chunk.copy_from_slice(&s[..chunk.len()]);
        }
        seed
    }

    fn log_draft(&mut self) -> &mut crate::engine::LogDraft {
        &mut self.draft
    }
    fn log_append(&mut self, fields: &[(&'static str, Vec<u8>)]) {
        self.log.push(fields.to_vec());
    }
    fn watcher(&self, user: &Vec<u8>) -> Option<Vec<u8>> {
        self.watched.get(user).cloned()
    }
    fn set_watcher(&mut self, user: &Vec<u8>, instance: &[u8]) {
        self.watched.insert(user.clone(), instance.to_vec());
    }
    fn remove_watcher(&mut self, user: &Vec<u8>) {
        self.watched.remove(user);
    }
    fn instance_lease(&self, instance: &[u8]) -> Option<i64> {
        self.instances.get(instance).copied()
    }
    fn set_instance_lease(&mut self, instance: &[u8], until: i64) {
        self.instances.insert(instance.to_vec(), until);
    }
    fn instances_ended_before(&self, before: i64, limit: i64) -> Vec<Vec<u8>> {
        let mut ended: Vec<(i64, &Vec<u8>)> =
            self.instances.iter().filter(|(_, e)| **e < before).map(|(i, e)| (*e, i)).collect();
        ended.sort();
        ended.into_iter().take(limit.max(0) as usize).map(|(_, i)| i.clone()).collect()
    }
    fn remove_instance(&mut self, instance: &[u8]) {
        self.instances.remove(instance);
    }
}

impl MemoryStore {
    fn aux(&self, key: Aux) -> Option<&BTreeMap<Vec<u8>, Vec<u8>>> {
        match key {
            Aux::Pre => Some(&self.pre),
            Aux::Opening => Some(&self.opening),
            Aux::Claimed => Some(&self.claimed),
            Aux::Codes => Some(&self.codes),
            Aux::Bought => Some(&self.bought),
            Aux::Proof => None,
        }
    }
    fn aux_mut(&mut self, key: Aux) -> Option<&mut BTreeMap<Vec<u8>, Vec<u8>>> {
        match key {
            Aux::Pre => Some(&mut self.pre),
            Aux::Opening => Some(&mut self.opening),
            Aux::Claimed => Some(&mut self.claimed),
            Aux::Codes => Some(&mut self.codes),
            Aux::Bought => Some(&mut self.bought),
            Aux::Proof => None,
        }
    }
}
