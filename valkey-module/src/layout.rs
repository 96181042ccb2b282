//! Queues whose data this process has seen marked with the current layout (see
//! `queue_core::engine::ensure_layout`), so that the one-time check for data written
//! by older releases costs a set lookup instead of a stats read per command. The set
//! is emptied whenever the dataset is replaced (FLUSHALL/FLUSHDB, loading an RDB or
//! AOF, a replica's full sync), which is how older data could come back. Commands
//! and server events run on the main thread, which owns the set.

use redis_module::server_events::{FlushSubevent, LoadingSubevent};
use redis_module::Context;
use redis_module_macros::{flush_event_handler, loading_event_handler};
use std::cell::RefCell;
use std::collections::HashSet;
use std::hash::{BuildHasherDefault, Hasher};

/// FNV-1a: queue names are short and chosen by operators, not attackers.
#[derive(Default)]
struct Fnv(u64);

impl Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        let mut h = if self.0 == 0 { 0xcbf2_9ce4_8422_2325 } else { self.0 };
        for &b in bytes {
            h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
        self.0 = h;
    }
}

thread_local! {
    static CHECKED: RefCell<HashSet<Vec<u8>, BuildHasherDefault<Fnv>>> = RefCell::default();
}

pub fn is_checked(queue: &[u8]) -> bool {
    CHECKED.with(|set| set.borrow().contains(queue))
}

pub fn mark_checked(queue: &[u8]) {
    CHECKED.with(|set| set.borrow_mut().insert(queue.to_vec()));
}

fn forget_all() {
    CHECKED.with(|set| set.borrow_mut().clear());
}

#[flush_event_handler]
fn on_flush(_ctx: &Context, _event: FlushSubevent) {
    forget_all();
    crate::cache::forget_all();
}

#[loading_event_handler]
fn on_loading(_ctx: &Context, _event: LoadingSubevent) {
    forget_all();
    crate::cache::forget_all();
}
