//! `/metrics` in the Prometheus text format, with seed 000's queue-manager names.
//!
//! The queue figures are read from `QUEUE.INFO` at scrape time, so they are the
//! store's own: the `_total` counters are the queue's cumulative counters, exact
//! across manager restarts and failovers, and every replica (leader or not) reports
//! the same values. Aggregate across replicas with `max by (queue)`, not `sum`.
//! Each scrape fills a fresh registry, so a queue's series show only while its
//! figures could be read.

use crate::policy::Admission;
use queue_client::QueueInfo;
use service_kit::metrics::Registry;

pub use service_kit::metrics::CONTENT_TYPE;

/// What one scrape shows.
#[derive(Debug, Default)]
pub struct Snapshot {
    /// Whether this replica holds the lease.
    pub leader: bool,
    /// Whether the store answered the last call.
    pub valkey_up: bool,
    /// Each known queue with its `QUEUE.INFO`, in name order.
    pub queues: Vec<(String, QueueInfo)>,
    /// The adaptive allowance per queue, when adaptive admission is on.
    pub admissions: Vec<(String, Admission)>,
}

type Field = fn(&QueueInfo) -> u64;

/// Per-queue series: name, whether a counter (else a gauge), help, value.
const QUEUE_SERIES: [(&str, bool, &str, Field); 9] = [
    ("queue_waiting_users", false, "Users waiting in line.", |i| i.waiting),
    ("queue_joining_users", false, "Users holding a ticket they have not used yet.", |i| i.joining),
    ("queue_current_users", false, "Users inside the downstream server (live session leases).", |i| i.active),
    ("queue_soft_cap", false, "Sessions plus unclaimed tickets that admission fills up to.", |i| {
        i.config.soft_cap() as u64
    }),
    ("queue_available_slots", false, "Slots left under the soft cap.", |i| i.available_slots),
    ("queue_tickets_issued_total", true, "Tickets issued.", |i| i.promoted),
    ("queue_tickets_expired_total", true, "Tickets that expired unclaimed.", |i| i.expired),
    ("queue_dropped_users_total", true, "Waiting users dropped for going silent.", |i| i.dropped),
    (
        "queue_slot_wait_milliseconds_total",
        true,
        "Milliseconds slots freed by an expiry stood empty until a promotion filled them, summed over slots.",
        |i| i.slot_wait_ms,
    ),
];

/// Renders a scrape.
pub fn render(s: &Snapshot) -> String {
    let r = Registry::default();
    let flag = |b: bool| f64::from(u8::from(b));
    r.gauge("queue_manager_is_leader", "1 if this replica holds the leader lease and promotes.").set(flag(s.leader));
    r.gauge("queue_manager_valkey_up", "1 if Valkey answered the last call.").set(flag(s.valkey_up));
    r.gauge("queue_manager_known_queues", "Queues this replica serves.").set(s.queues.len() as f64);
    for (name, counter, help, value) in QUEUE_SERIES {
        for (queue, info) in &s.queues {
            let labels = [("queue", queue.as_str())];
            if counter {
                r.counter_with(name, help, &labels).absolute(value(info));
            } else {
                r.gauge_with(name, help, &labels).set(value(info) as f64);
            }
        }
    }
    for (queue, a) in &s.admissions {
        r.gauge_with(
            "queue_admission_limit",
            "Adaptive admission: users per tick, -1 unrestricted.",
            &[("queue", queue)],
        )
        .set(a.as_gauge() as f64);
    }
    r.render_series()
}

/// A label value: backslash, double quote and newline escaped.
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// Reads one value from a rendered scrape: `value(text, "queue_soft_cap", Some("q"))`.
pub fn value(text: &str, name: &str, queue: Option<&str>) -> Option<f64> {
    let series = match queue {
        Some(q) => format!("{name}{{queue=\"{}\"}}", escape(q)),
        None => name.to_string(),
    };
    text.lines().find_map(|l| l.strip_prefix(&series)?.strip_prefix(' ')?.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use queue_client::QueueConfig;

    fn info(waiting: u64) -> QueueInfo {
        QueueInfo {
            waiting,
            joining: 2,
            active: 3,
            available_slots: 5,
            tokens: None,
            admission_rate_per_min: 0,
            config: {
                let mut c = QueueConfig::default();
                c.0.values[queue_core::config::SOFT_CAP] = 10;
                c
            },
            promoted: 7,
            claimed: 4,
            expired: 1,
            dropped: 6,
            left: 0,
            ended: 0,
            lapsed: 0,
            slot_wait_ms: 1500,
            lane_counts: Vec::new(),
            closed: false,
            inventory: None,
            outstanding: 0,
            sold_out: false,
            message: String::new(),
        }
    }

    #[test]
    fn renders_every_series_per_queue() {
        let s = Snapshot {
            leader: true,
            valkey_up: true,
            queues: vec![("a".into(), info(9)), ("b".into(), info(0))],
            admissions: vec![("a".into(), Admission::Limited(4)), ("b".into(), Admission::Unrestricted)],
        };
        let text = render(&s);
        assert_eq!(value(&text, "queue_manager_is_leader", None), Some(1.0));
        assert_eq!(value(&text, "queue_manager_known_queues", None), Some(2.0));
        let want = [
            ("queue_waiting_users", 9.0),
            ("queue_joining_users", 2.0),
            ("queue_current_users", 3.0),
            ("queue_soft_cap", 10.0),
            ("queue_available_slots", 5.0),
            ("queue_tickets_issued_total", 7.0),
            ("queue_tickets_expired_total", 1.0),
            ("queue_dropped_users_total", 6.0),
            ("queue_slot_wait_milliseconds_total", 1500.0),
        ];
        for (name, v) in want {
            assert_eq!(value(&text, name, Some("a")), Some(v), "{name}");
            assert_eq!(text.matches(&format!("# TYPE {name} ")).count(), 1, "{name}");
        }
        assert_eq!(value(&text, "queue_waiting_users", Some("b")), Some(0.0));
        assert_eq!(value(&text, "queue_admission_limit", Some("a")), Some(4.0));
        assert_eq!(value(&text, "queue_admission_limit", Some("b")), Some(-1.0));
        assert!(text.contains("# TYPE queue_tickets_issued_total counter"));
        assert!(text.ends_with('\n'));
    }

    #[test]
    fn a_standby_without_queues_still_reports_itself() {
        let text = render(&Snapshot::default());
        assert_eq!(value(&text, "queue_manager_is_leader", None), Some(0.0));
        assert_eq!(value(&text, "queue_manager_valkey_up", None), Some(0.0));
        assert!(!text.contains("queue_waiting_users"));
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape(r#"a"b\c"#), r#"a\"b\\c"#);
    }
}
