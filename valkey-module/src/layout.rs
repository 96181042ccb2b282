//! Queues whose data this process has seen marked with the current layout (see
//! `queue_core::engine::ensure_layout`), so that the one-time check for data written
//! by older releases costs a set lookup instead of a stats read per command. The set
//! is emptied whenever the dataset is replaced (FLUSHALL/FLUSHDB, loading an RDB or
//! AOF, a replica's full sync), which is how older data could come back.

use redis_module::server_events::{FlushSubevent, LoadingSubevent};
use redis_module::Context;
use redis_module_macros::{flush_event_handler, loading_event_handler};
use std::collections::HashSet;
use std::sync::Mutex;

static CHECKED: Mutex<Option<HashSet<Vec<u8>>>> = Mutex::new(None);

pub fn is_checked(queue: &[u8]) -> bool {
    CHECKED.lock().is_ok_and(|set| set.as_ref().is_some_and(|s| s.contains(queue)))
}

pub fn mark_checked(queue: &[u8]) {
    if let Ok(mut set) = CHECKED.lock() {
        set.get_or_insert_with(HashSet::new).insert(queue.to_vec());
    }
}

fn forget_all() {
    if let Ok(mut set) = CHECKED.lock() {
        *set = None;
    }
}

#[flush_event_handler]
fn on_flush(_ctx: &Context, _event: FlushSubevent) {
    forget_all();
}

#[loading_event_handler]
fn on_loading(_ctx: &Context, _event: LoadingSubevent) {
    forget_all();
}
