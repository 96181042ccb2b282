//! `/metrics` in the Prometheus text format, with seed 000's queue-manager names.
//!
//! The queue figures are read from `QUEUE.INFO` at scrape time, so they are the
//! store's own: the `_total` counters are the queue's cumulative counters, exact
//! across manager restarts and failovers, and every replica (leader or not) reports
//! the same values. Aggregate across replicas with `max by (queue)`, not `sum`.

use crate::policy::Admission;
use queue_client::QueueInfo;
use std::fmt::Write;

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

/// The content type of the text exposition format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

type Field = fn(&QueueInfo) -> u64;

/// Per-queue series: name, type, help, value.
const QUEUE_SERIES: [(&str, &str, &str, Field); 8] = [
    ("queue_waiting_users", "gauge", "Users waiting in line.", |i| i.waiting),
    ("queue_joining_users", "gauge", "Users holding a ticket they have not used yet.", |i| i.joining),
    ("queue_current_users", "gauge", "Users inside the downstream server (live session leases).", |i| i.active),
    ("queue_soft_cap", "gauge", "Sessions plus unclaimed tickets that admission fills up to.", |i| i.config.soft_cap),
    ("queue_available_slots", "gauge", "Slots left under the soft cap.", |i| i.available_slots),
    ("queue_tickets_issued_total", "counter", "Tickets issued.", |i| i.promoted),
    ("queue_tickets_expired_total", "counter", "Tickets that expired unclaimed.", |i| i.expired),
    ("queue_dropped_users_total", "counter", "Waiting users dropped for going silent.", |i| i.dropped),
];

/// Renders a scrape.
pub fn render(s: &Snapshot) -> String {
    let mut out = String::new();
    header(&mut out, "queue_manager_is_leader", "gauge", "1 if this replica holds the leader lease and promotes.");
    let _ = writeln!(out, "queue_manager_is_leader {}", u8::from(s.leader));
    header(&mut out, "queue_manager_valkey_up", "gauge", "1 if Valkey answered the last call.");
    let _ = writeln!(out, "queue_manager_valkey_up {}", u8::from(s.valkey_up));
    header(&mut out, "queue_manager_known_queues", "gauge", "Queues this replica serves.");
    let _ = writeln!(out, "queue_manager_known_queues {}", s.queues.len());
    for (name, kind, help, value) in QUEUE_SERIES {
        if s.queues.is_empty() {
            break;
        }
        header(&mut out, name, kind, help);
        for (queue, info) in &s.queues {
            let _ = writeln!(out, "{name}{{queue=\"{}\"}} {}", escape(queue), value(info));
        }
    }
    if !s.admissions.is_empty() {
        header(&mut out, "queue_admission_limit", "gauge", "Adaptive admission: users per tick, -1 unrestricted.");
        for (queue, a) in &s.admissions {
            let _ = writeln!(out, "queue_admission_limit{{queue=\"{}\"}} {}", escape(queue), a.as_gauge());
        }
    }
    out
}

fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
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
            config: QueueConfig {
                soft_cap: 10,
                hard_cap: 0,
                rate: 0,
                burst: 0,
                batch_max: 1000,
                ticket_ttl: 60000,
                session_lease: 30000,
                abandon_after: 60000,
            },
            promoted: 7,
            claimed: 4,
            expired: 1,
            dropped: 6,
            left: 0,
            ended: 0,
            lapsed: 0,
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
