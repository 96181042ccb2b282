//! What the commands reply: the values ([`types`]) and, here, the field order of
//! every map reply.
//!
//! Both backends must reply byte for byte alike. The Lua fallback can only build a
//! map from a Lua table, whose iteration order is Lua 5.1's hash order, so that order
//! is the canonical one and the module emits fields in it. The differential test
//! compares the two backends' bytes and catches any drift.

mod types;

pub use types::*;

pub const STANDING: [&str; 7] = ["nickname", "ticketId", "opensAt", "status", "estimatedWaitSeconds", "userId", "rank"];

/// The standing map of a queue with lanes: `lane` besides.
pub const STANDING_LANE: [&str; 8] =
    ["nickname", "ticketId", "opensAt", "lane", "status", "estimatedWaitSeconds", "userId", "rank"];

pub const PROMOTE: [&str; 8] =
    ["promoted", "dropped", "available_slots", "waiting", "active", "joining", "tickets_expired", "leases_expired"];

pub const CLAIM: [&str; 4] = ["nickname", "ticketId", "userId", "leaseMs"];

pub const CONFIG: [&str; 14] = [
    "batch_max",
    "ticket_ttl",
    "closes_at",
    "hard_cap",
    "rate",
    "abandon_after",
    "entry",
    "max_waiting",
    "pow_difficulty",
    "lanes",
    "session_lease",
    "soft_cap",
    "burst",
    "opens_at",
];

/// QUEUE.INFO's field holding the per-lane counts (an array, not a number).
pub const LANE_COUNTS: &str = "lane_counts";

pub const INFO: [&str; 34] = [
    "inventory",
    "session_lease",
    "closes_at",
    "tokens",
    "burst",
    "expired",
    "hard_cap",
    "rate",
    "abandon_after",
    "message",
    "joining",
    "opens_at",
    "batch_max",
    "lane_counts",
    "ticket_ttl",
    "active",
    "entry",
    "left",
    "max_waiting",
    "lanes",
    "dropped",
    "waiting",
    "sold_out",
    "admission_rate_per_min",
    "outstanding",
    "closed",
    "promoted",
    "available_slots",
    "pow_difficulty",
    "slot_wait_ms",
    "lapsed",
    "ended",
    "claimed",
    "soft_cap",
];

/// QUEUE.OPENING's map.
pub const OPENING: [&str; 6] = ["state", "openedAt", "seed", "entrants", "commitment", "opensAt"];

/// QUEUE.OPENING's map in a queue with lanes (scheduled or open): `lanes` besides.
pub const OPENING_LANES: [&str; 7] = ["state", "openedAt", "seed", "lanes", "entrants", "commitment", "opensAt"];

/// Counters QUEUE.INFO shows (stats hash fields of the same names). `slot_wait_ms`:
/// the milliseconds slots freed by an expiry (a ticket's or a lease's) stayed empty
/// before a promotion filled them, summed over the slots filled.
pub const COUNTERS: [&str; 8] =
    ["promoted", "claimed", "expired", "dropped", "left", "ended", "lapsed", "slot_wait_ms"];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::FIELDS;
    use std::collections::HashSet;

    fn distinct(names: &[&str]) -> HashSet<String> {
        let set: HashSet<String> = names.iter().map(|s| s.to_string()).collect();
        assert_eq!(set.len(), names.len(), "duplicate field in {names:?}");
        set
    }

    #[test]
    fn orders_name_every_field_once() {
        distinct(&STANDING);
        distinct(&PROMOTE);
        distinct(&CLAIM);
        distinct(&OPENING);
        distinct(&OPENING_LANES);
        let config = distinct(&CONFIG);
        let info = distinct(&INFO);
        for f in FIELDS {
            assert!(config.contains(f.name) && info.contains(f.name), "{}", f.name);
        }
        for c in COUNTERS {
            assert!(info.contains(c), "{c}");
        }
        for f in [
            "waiting",
            "joining",
            "active",
            "available_slots",
            "tokens",
            "admission_rate_per_min",
            "closed",
            "inventory",
            "outstanding",
            "sold_out",
            "message",
        ] {
            assert!(info.contains(f), "{f}");
        }
        assert!(config.contains(crate::config::ENTRY) && info.contains(crate::config::ENTRY));
        assert_eq!(CONFIG.len(), FIELDS.len() + 2);
        assert_eq!(INFO.len(), FIELDS.len() + COUNTERS.len() + 14);
        assert!(info.contains(LANE_COUNTS));
        distinct(&STANDING_LANE);
    }
}
