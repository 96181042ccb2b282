//! What the module keeps of each queue between commands: its key names, its stored
//! settings, the stats fields read so far, which keys were found of their types, and
//! whether the layout marker was seen (`queue_core::engine::ensure_layout`), so that a
//! command reads the config and stats hashes only after something else changed them.
//!
//! Commands of this module update what is kept as they write (their key API writes
//! raise no keyspace events). Changes made by commands raise one: the Lua library's,
//! replicated writes on a replica, an operator's HSET or DEL, expiry, eviction,
//! RESTORE, RENAME, slot migration; any event on a key `queue:{Q}:...` drops what is
//! kept of queue Q in that database, also when it fires in the middle of one of this
//! module's commands (a key found expired when opened). FLUSHALL/FLUSHDB, loading an
//! RDB or AOF (and a replica's full sync) and SWAPDB drop everything. Not covered:
//! another module writing these keys through its own key API, which raises no event.
//! Commands, events and server events all run on the main thread, which owns it.

use crate::server::KeyNames;
use queue_core::config::{EntryMode, FIELDS};
use queue_core::keys;
use queue_core::lanes::Lanes;
use redis_module::raw;
use redis_module::server_events::{FlushSubevent, LoadingSubevent};
use redis_module::Context;
use redis_module_macros::{flush_event_handler, loading_event_handler};
use std::cell::RefCell;
use std::collections::HashMap;

/// A queue's stored settings: the numeric ones (None: the field is not set or does
/// not fit), `entry` (open when not set or not a mode) and `lanes` (one lane when
/// not set or not a list of lanes).
#[derive(Clone, Copy)]
pub struct Stored {
    pub values: [Option<i64>; FIELDS.len()],
    pub entry: EntryMode,
    pub lanes: Lanes,
}
/// Stats fields read or written, with their values (None: absent).
pub type Stats = Vec<(&'static str, Option<i64>)>;

/// What a command starts from and leaves behind.
#[derive(Default)]
pub struct Known {
    /// The stored settings, once read.
    pub config: Option<Stored>,
    /// Stats fields read or written.
    pub stats: Stats,
    /// Parts (bit `1 << engine::Part`) found empty or of their type.
    pub checked: u8,
    /// The layout marker was seen (see `queue_core::engine::ensure_layout`).
    pub layout: bool,
}

struct Kept {
    names: KeyNames,
    known: Known,
    /// Bumped by every [`forget`]: what a command took out before is stale.
    generation: u64,
}

/// Queues kept at most; past that the cache starts over.
const MAX_QUEUES: usize = 4096;

/// Per queue name, per database.
type Queues = HashMap<Vec<u8>, Vec<(i32, Kept)>>;

thread_local! {
    static QUEUES: RefCell<Queues> = RefCell::new(HashMap::new());
}

/// What is kept of queue `queue` in database `db`, taken out until [`save`] puts it
/// back: its key names (made from `prefix`, `queue:{Q}:`, the first time), what
/// earlier commands learnt, and the generation to give [`save`].
pub fn load(db: i32, queue: &[u8], prefix: &[u8]) -> (KeyNames, Known, u64) {
    QUEUES.with(|q| {
        let mut q = q.borrow_mut();
        if let Some(k) = q.get_mut(queue).and_then(|dbs| dbs.iter_mut().find(|(d, _)| *d == db)) {
            return (k.1.names, std::mem::take(&mut k.1.known), k.1.generation);
        }
        if q.len() >= MAX_QUEUES {
            for (_, dbs) in q.drain() {
                for (_, k) in dbs {
                    k.names.free();
                }
            }
        }
        let names = KeyNames::new(prefix);
        q.entry(queue.to_vec()).or_default().push((db, Kept { names, known: Known::default(), generation: 0 }));
        (names, Known::default(), 0)
    })
}

fn with_kept(db: i32, queue: &[u8], f: impl FnOnce(&mut Kept)) {
    QUEUES.with(|q| {
        if let Some(k) = q.borrow_mut().get_mut(queue).and_then(|dbs| dbs.iter_mut().find(|(d, _)| *d == db)) {
            f(&mut k.1);
        }
    });
}

/// Keeps what a command knows of the queue when it ends, unless the queue's keys
/// changed behind it meanwhile (an event during the command, say a key found expired
/// when opened): then nothing is kept and the next command reads again.
pub fn save(db: i32, queue: &[u8], known: Known, generation: u64) {
    with_kept(db, queue, |k| {
        if k.generation == generation {
            k.known = known;
        }
    });
}

/// Forgets what is known of queue `queue` in database `db` (its key names stay).
pub fn forget(db: i32, queue: &[u8]) {
    with_kept(db, queue, |k| {
        k.known = Known::default();
        k.generation += 1;
    });
}

/// Forgets what is known of every queue.
pub fn forget_all() {
    QUEUES.with(|q| {
        for (_, k) in q.borrow_mut().values_mut().flatten() {
            k.known = Known::default();
            k.generation += 1;
        }
    });
}

#[flush_event_handler]
fn on_flush(_ctx: &Context, _event: FlushSubevent) {
    forget_all();
}

#[loading_event_handler]
fn on_loading(_ctx: &Context, _event: LoadingSubevent) {
    forget_all();
}

/// A key changed in database `db` (a keyspace event, from `server.rs`): forgets what is
/// kept of the queue it belongs to.
pub fn key_changed(db: i32, key: &[u8]) {
    // The change log, the watchers' keys, the claims and the codes: nothing of them is kept.
    let unkept = [keys::LOG, keys::WATCHED, keys::INSTANCES, keys::CLAIMED, keys::CODES]
        .iter()
        .any(|s| key.strip_suffix(s.as_bytes()).is_some_and(|k| k.ends_with(keys::KEY_CLOSE.as_bytes())));
    if unkept {
        return;
    }
    if let Some(queue) = keys::owner_queue(key) {
        forget(db, queue);
    }
}

/// Subscribes to the events that make what is kept stale (module load): keyspace
/// events reach [`key_changed`], SWAPDB [`forget_all`] (the callbacks are in
/// `server.rs`).
pub fn subscribe(ctx: *mut raw::RedisModuleCtx) -> Result<(), String> {
    crate::server::subscribe_cache(ctx)
}
