//! Module-wide counters since load, shown by `INFO queue`.

use std::sync::atomic::{AtomicI64, Ordering};

pub static ENTERED: AtomicI64 = AtomicI64::new(0);
pub static PROMOTED: AtomicI64 = AtomicI64::new(0);
pub static CLAIMED: AtomicI64 = AtomicI64::new(0);
pub static EXPIRED: AtomicI64 = AtomicI64::new(0);
pub static DROPPED: AtomicI64 = AtomicI64::new(0);
pub static LEFT: AtomicI64 = AtomicI64::new(0);
pub static ENDED: AtomicI64 = AtomicI64::new(0);
pub static LAPSED: AtomicI64 = AtomicI64::new(0);

pub const ALL: [(&str, &AtomicI64); 8] = [
    ("entered", &ENTERED),
    ("promoted", &PROMOTED),
    ("claimed", &CLAIMED),
    ("tickets_expired", &EXPIRED),
    ("dropped", &DROPPED),
    ("left", &LEFT),
    ("sessions_ended", &ENDED),
    ("leases_expired", &LAPSED),
];

pub fn add(c: &AtomicI64, by: i64) {
    if by != 0 {
        c.fetch_add(by, Ordering::Relaxed);
    }
}
