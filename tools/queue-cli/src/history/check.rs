//! The checker: pure code over a history (see `record.rs`), reporting every
//! violation of five rules. An operation whose outcome is unknown may or may not
//! have happened: no violation is reported that such an operation could explain.
//!
//! - `double-admission`: no ticket admits two sessions (two ok claims of one ticket
//!   by different holders, or naming different users or sessions).
//! - `lost-entry`: every acknowledged entry ends accounted for: seen promoted, left,
//!   re-entered, dropped by a documented rule (abandonment, or a ticket that lapsed
//!   unseen: the user went unheard longer than `min(ticket_ttl, abandon_after)`), or
//!   still waiting; never seen UNKNOWN otherwise (the final read included).
//! - `overtaken`: FIFO: if A's entry was acknowledged before B's entry was invoked,
//!   B is not seen promoted while A is later seen still waiting on that entry.
//! - `over-cap`: never more sessions certainly live at once than the hard cap.
//! - `stale-ticket`: a ticket never works after its session ended (SESSION.END
//!   acknowledged, or a heartbeat found the lease gone) nor when its claim was invoked
//!   later than the ticket's first sighting plus `ticket_ttl` (a repeat by a holder
//!   whose claim may have worked in time excepted: claims are idempotent for their
//!   holder).

use super::record::{Meta, Op, Outcome, Record, F};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap, HashSet};

/// The rules, in the order the report lists them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Rule {
    DoubleAdmission,
    LostEntry,
    Overtaken,
    OverCap,
    StaleTicket,
}

impl Rule {
    pub const ALL: [Rule; 5] =
        [Rule::DoubleAdmission, Rule::LostEntry, Rule::Overtaken, Rule::OverCap, Rule::StaleTicket];

    pub fn name(self) -> &'static str {
        match self {
            Rule::DoubleAdmission => "double-admission",
            Rule::LostEntry => "lost-entry",
            Rule::Overtaken => "overtaken",
            Rule::OverCap => "over-cap",
            Rule::StaleTicket => "stale-ticket",
        }
    }
}

/// One violation, with the evidence in words.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Violation {
    pub rule: Rule,
    pub what: String,
}

/// The checker's verdict on a history.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Report {
    pub meta: Meta,
    pub ops: usize,
    pub ok: usize,
    pub fail: usize,
    pub unknown: usize,
    /// Claims acknowledged (ok).
    pub claims_ok: usize,
    pub violations: Vec<Violation>,
}

impl Report {
    pub fn count(&self, rule: Rule) -> usize {
        self.violations.iter().filter(|v| v.rule == rule).count()
    }
}

/// An operation with its invocation and its completion paired.
#[derive(Debug, Clone)]
pub struct Call {
    pub f: F,
    pub process: String,
    pub user: String,
    pub holder: Option<String>,
    /// A claim: the ticket asked for; a standing: the ticket seen.
    pub ticket: Option<String>,
    pub invoke: u64,
    /// None when no completion was recorded (then the outcome is unknown).
    pub complete: Option<u64>,
    pub outcome: Outcome,
    pub result: Op,
}

impl Call {
    /// The latest time the operation may have taken effect.
    fn end(&self) -> u64 {
        self.complete.unwrap_or(u64::MAX)
    }
    fn ok(&self) -> bool {
        self.outcome == Outcome::Ok
    }
    fn status(&self) -> Option<&str> {
        if self.ok() && matches!(self.f, F::Enter | F::Status | F::Read) {
            self.result.status.as_deref()
        } else {
            None
        }
    }
    /// Whether the call may have changed the user's place in line.
    fn moves_entry(&self) -> bool {
        matches!(self.f, F::Enter | F::Leave) && self.outcome != Outcome::Fail
    }
}

/// Pairs invocations with completions, in invocation order; the run's settings.
pub fn calls(records: &[Record]) -> Result<(Meta, Vec<Call>), String> {
    let mut meta = None;
    let mut open: HashMap<u64, usize> = HashMap::new();
    let mut out: Vec<Call> = Vec::new();
    for r in records {
        match r {
            Record::Meta(m) => meta = Some(m.clone()),
            Record::Note(_) => {}
            Record::Invoke(op) => {
                let f = op.f.ok_or_else(|| format!("invoke {} has no f", op.id))?;
                if open.insert(op.id, out.len()).is_some() {
                    return Err(format!("operation {} invoked twice", op.id));
                }
                out.push(Call {
                    f,
                    process: op.process.clone(),
                    user: op.user.clone().unwrap_or_default(),
                    holder: op.holder.clone(),
                    ticket: op.ticket.clone(),
                    invoke: op.time,
                    complete: None,
                    outcome: Outcome::Unknown,
                    result: Op::default(),
                });
            }
            Record::Ok(op) | Record::Fail(op) | Record::Unknown(op) => {
                let i =
                    open.remove(&op.id).ok_or_else(|| format!("operation {} completed but never invoked", op.id))?;
                let call = &mut out[i];
                call.outcome = match r {
                    Record::Ok(_) => Outcome::Ok,
                    Record::Fail(_) => Outcome::Fail,
                    _ => Outcome::Unknown,
                };
                // An unknown outcome may have taken effect at any later time.
                call.complete = (call.outcome != Outcome::Unknown).then_some(op.time);
                if call.f != F::Claim && op.ticket.is_some() {
                    call.ticket = op.ticket.clone();
                }
                call.result = op.clone();
            }
        }
    }
    let meta = meta.ok_or("the history has no meta line")?;
    Ok((meta, out))
}

/// Checks a history's records against every rule.
pub fn check(records: &[Record]) -> Result<Report, String> {
    let (meta, calls) = calls(records)?;
    let mut report = Report {
        ops: calls.len(),
        ok: calls.iter().filter(|c| c.outcome == Outcome::Ok).count(),
        fail: calls.iter().filter(|c| c.outcome == Outcome::Fail).count(),
        unknown: calls.iter().filter(|c| c.outcome == Outcome::Unknown).count(),
        claims_ok: calls.iter().filter(|c| c.f == F::Claim && c.ok()).count(),
        ..Report::default()
    };
    let mut v = Vec::new();
    double_admission(&calls, &mut v);
    lost_entries(&meta, &calls, &mut v);
    overtaken(&calls, &mut v);
    over_cap(&meta, &calls, &mut v);
    stale_tickets(&meta, &calls, &mut v);
    report.violations = v;
    report.meta = meta;
    Ok(report)
}

fn ms(us: u64) -> String {
    format!("{:.1}s", us as f64 / 1e6)
}

/// Every user's calls, in invocation order.
fn by_user(calls: &[Call]) -> BTreeMap<&str, Vec<&Call>> {
    let mut m: BTreeMap<&str, Vec<&Call>> = BTreeMap::new();
    for c in calls.iter().filter(|c| !c.user.is_empty()) {
        m.entry(c.user.as_str()).or_default().push(c);
    }
    for list in m.values_mut() {
        list.sort_by_key(|c| c.invoke);
    }
    m
}

fn double_admission(calls: &[Call], v: &mut Vec<Violation>) {
    let mut by_ticket: BTreeMap<&str, Vec<&Call>> = BTreeMap::new();
    for c in calls.iter().filter(|c| c.f == F::Claim && c.ok()) {
        if let Some(t) = &c.ticket {
            by_ticket.entry(t).or_default().push(c);
        }
    }
    for (ticket, claims) in by_ticket {
        let distinct = |f: &dyn Fn(&Call) -> Option<String>| -> Vec<String> {
            let set: HashSet<String> = claims.iter().filter_map(|c| f(c)).collect();
            let mut l: Vec<String> = set.into_iter().collect();
            l.sort();
            l
        };
        let holders = distinct(&|c| c.holder.clone());
        let users = distinct(&|c| c.result.claim_user.clone());
        let sessions = distinct(&|c| c.result.session.clone());
        for (what, list) in [("holders", holders), ("users", users), ("sessions", sessions)] {
            if list.len() > 1 {
                let times: Vec<String> = claims.iter().map(|c| format!("{}@{}", c.process, ms(c.invoke))).collect();
                v.push(Violation {
                    rule: Rule::DoubleAdmission,
                    what: format!(
                        "ticket {ticket} admitted {} {what} {list:?} (ok claims: {})",
                        list.len(),
                        times.join(", ")
                    ),
                });
                break;
            }
        }
    }
}

fn lost_entries(meta: &Meta, calls: &[Call], v: &mut Vec<Violation>) {
    let excuse = meta.ticket_ttl_ms.min(if meta.abandon_after_ms == 0 { u64::MAX } else { meta.abandon_after_ms });
    let excuse_us = excuse.saturating_mul(1000);
    for (user, list) in by_user(calls) {
        for (i, entry) in list.iter().enumerate() {
            if entry.f != F::Enter || !entry.ok() {
                continue;
            }
            if matches!(entry.status(), Some("PROMOTED" | "ACTIVE")) {
                continue;
            }
            // The server heard from the user last at this time, at the earliest.
            let mut heard = entry.invoke;
            for c in &list[i + 1..] {
                if c.moves_entry() || matches!(c.f, F::End) && c.outcome != Outcome::Fail {
                    break;
                }
                if c.f == F::Claim && c.outcome != Outcome::Fail {
                    break;
                }
                match c.status() {
                    Some("PROMOTED" | "ACTIVE") => break,
                    Some("WAITING") => heard = c.invoke,
                    Some("UNKNOWN") => {
                        let gap = c.end().saturating_sub(heard);
                        if gap <= excuse_us && c.invoke > entry.end() {
                            v.push(Violation {
                                rule: Rule::LostEntry,
                                what: format!(
                                    "{user}: entry acknowledged at {}, last heard {}, UNKNOWN at {} ({}){}",
                                    ms(entry.end()),
                                    ms(heard),
                                    ms(c.invoke),
                                    if c.f == F::Read { "final read" } else { "status" },
                                    ""
                                ),
                            });
                        }
                        break;
                    }
                    _ => {}
                }
            }
        }
    }
}

fn overtaken(calls: &[Call], v: &mut Vec<Violation>) {
    struct Entry<'a> {
        user: &'a str,
        invoke: u64,
        acked: Option<u64>,
        /// The latest time the user was seen still waiting on this entry (read's invoke).
        last_waiting: Option<u64>,
        /// The earliest completion of a read that saw this entry promoted.
        first_promoted: Option<u64>,
    }
    let mut entries: Vec<Entry> = Vec::new();
    for (user, list) in by_user(calls) {
        // Tickets this user was seen with, so an old ticket is not taken for a new promotion.
        let mut seen_tickets: HashSet<&str> = HashSet::new();
        for (i, entry) in list.iter().enumerate() {
            if entry.f != F::Enter || entry.outcome == Outcome::Fail {
                if let Some(t) = entry.ticket.as_deref().filter(|_| entry.status().is_some()) {
                    seen_tickets.insert(t);
                }
                continue;
            }
            let mut e = Entry {
                user,
                invoke: entry.invoke,
                acked: entry.ok().then(|| entry.end()),
                last_waiting: None,
                first_promoted: None,
            };
            let before: HashSet<&str> = seen_tickets.clone();
            for c in &list[i + 1..] {
                if c.moves_entry() {
                    break;
                }
                match c.status() {
                    Some("WAITING") => e.last_waiting = Some(c.invoke),
                    Some("PROMOTED") => {
                        let fresh = c.ticket.as_deref().is_some_and(|t| !before.contains(t));
                        if fresh && e.first_promoted.is_none() {
                            e.first_promoted = Some(c.end());
                        }
                    }
                    _ => {}
                }
            }
            if let Some(t) = entry.ticket.as_deref().filter(|_| entry.status().is_some()) {
                seen_tickets.insert(t);
            }
            entries.push(e);
        }
    }
    for b in &entries {
        let Some(promoted) = b.first_promoted else { continue };
        for a in &entries {
            if a.user == b.user {
                continue;
            }
            let (Some(acked), Some(waiting)) = (a.acked, a.last_waiting) else { continue };
            if acked < b.invoke && waiting > promoted {
                v.push(Violation {
                    rule: Rule::Overtaken,
                    what: format!(
                        "{} (entered at {}, acknowledged at {}) still waiting at {} after {} (entered at {}) was seen promoted at {}",
                        a.user,
                        ms(a.invoke),
                        ms(acked),
                        ms(waiting),
                        b.user,
                        ms(b.invoke),
                        ms(promoted)
                    ),
                });
                break;
            }
        }
    }
}

/// Sessions certainly live: from an ok claim's completion to the invocation of the
/// last call that found the same session live (a heartbeat, an ACTIVE read).
fn certain_sessions(calls: &[Call]) -> Vec<(String, u64, u64)> {
    let mut out = Vec::new();
    for (user, list) in by_user(calls) {
        let mut current: Option<(u64, u64)> = None;
        let mut flush = |cur: &mut Option<(u64, u64)>| {
            if let Some((s, e)) = cur.take() {
                if e > s {
                    out.push((user.to_string(), s, e));
                }
            }
        };
        for c in list {
            let live = (c.f == F::Heartbeat && c.ok() && c.result.alive == Some(true)) || c.status() == Some("ACTIVE");
            if c.f == F::Claim && c.ok() {
                if current.is_none() {
                    current = Some((c.end(), c.end()));
                }
            } else if live {
                if let Some((_, e)) = current.as_mut() {
                    *e = (*e).max(c.invoke);
                }
            } else if matches!(c.f, F::End | F::Enter | F::Leave) && c.outcome != Outcome::Fail
                || c.f == F::Heartbeat && c.ok() && c.result.alive == Some(false)
            {
                flush(&mut current);
            }
        }
        flush(&mut current);
    }
    out
}

fn over_cap(meta: &Meta, calls: &[Call], v: &mut Vec<Violation>) {
    if meta.hard_cap == 0 {
        return;
    }
    let mut events: Vec<(u64, i32, String)> = Vec::new();
    for (user, s, e) in certain_sessions(calls) {
        events.push((s, 1, user.clone()));
        events.push((e, -1, user));
    }
    // Ends before starts at the same instant: only overlaps count.
    events.sort_by_key(|(t, d, _)| (*t, *d));
    let mut live: HashSet<String> = HashSet::new();
    let mut over = false;
    for (t, d, user) in events {
        if d > 0 {
            live.insert(user);
        } else {
            live.remove(&user);
        }
        let n = live.len() as u64;
        if n > meta.hard_cap && !over {
            let mut who: Vec<&String> = live.iter().collect();
            who.sort();
            v.push(Violation {
                rule: Rule::OverCap,
                what: format!("{n} sessions live at {} over a hard cap of {}: {who:?}", ms(t), meta.hard_cap),
            });
        }
        over = n > meta.hard_cap;
    }
}

fn stale_tickets(meta: &Meta, calls: &[Call], v: &mut Vec<Violation>) {
    let ttl_us = meta.ticket_ttl_ms.saturating_mul(1000);
    // Server clocks count whole milliseconds.
    let slack = 2_000;
    let mut first_seen: HashMap<&str, u64> = HashMap::new();
    for c in calls {
        if c.status().is_some() {
            if let (Some(t), Some(at)) = (c.ticket.as_deref(), c.complete) {
                let e = first_seen.entry(t).or_insert(at);
                *e = (*e).min(at);
            }
        }
    }
    let users = by_user(calls);
    let claims: Vec<&Call> = calls.iter().filter(|c| c.f == F::Claim).collect();
    for c in claims.iter().filter(|c| c.ok()) {
        let Some(ticket) = c.ticket.as_deref() else { continue };
        // Too late for the ticket's lifetime, unless the same holder's earlier claim may
        // have worked in time (then this is its idempotent repeat).
        if let Some(&seen) = first_seen.get(ticket) {
            let deadline = seen + ttl_us + slack;
            let earlier_in_time = claims.iter().any(|o| {
                o.ticket.as_deref() == Some(ticket)
                    && o.holder == c.holder
                    && o.outcome != Outcome::Fail
                    && o.invoke < c.invoke
                    && o.invoke <= deadline
            });
            if c.invoke > deadline && !earlier_in_time {
                v.push(Violation {
                    rule: Rule::StaleTicket,
                    what: format!(
                        "ticket {ticket} claimed ok by {} at {}, first seen at {} with a ttl of {} ms",
                        c.process,
                        ms(c.invoke),
                        ms(seen),
                        meta.ticket_ttl_ms
                    ),
                });
                continue;
            }
        }
        // After the session it opened ended.
        let owner = c.result.claim_user.clone().unwrap_or_else(|| c.user.clone());
        let Some(list) = users.get(owner.as_str()) else { continue };
        let opened = list.iter().find(|o| o.f == F::Claim && o.ticket.as_deref() == Some(ticket) && o.ok());
        let Some(opened) = opened else { continue };
        let ended = list.iter().find(|e| {
            e.ok()
                && e.invoke > opened.end()
                && e.end() < c.invoke
                && (e.f == F::End || e.f == F::Heartbeat && e.result.alive == Some(false))
        });
        if let Some(e) = ended {
            v.push(Violation {
                rule: Rule::StaleTicket,
                what: format!(
                    "ticket {ticket} claimed ok by {} at {} after {owner}'s session ended ({:?} acknowledged at {})",
                    c.process,
                    ms(c.invoke),
                    e.f,
                    ms(e.end())
                ),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A hand-made history: `(id, kind, time in ms, process, f, fields)`.
    struct H {
        records: Vec<Record>,
        next: u64,
    }

    fn meta() -> Meta {
        Meta {
            queue: "q".into(),
            backend: "module".into(),
            fault: "none".into(),
            hard_cap: 2,
            soft_cap: 2,
            ticket_ttl_ms: 5000,
            session_lease_ms: 3000,
            abandon_after_ms: 10_000,
            ..Meta::default()
        }
    }

    fn op(user: &str, f: F) -> Op {
        Op { process: user.into(), user: Some(user.into()), f: Some(f), ..Op::default() }
    }

    impl H {
        fn new() -> H {
            H { records: vec![Record::Meta(meta())], next: 1 }
        }
        /// An operation invoked at `at` ms and completed at `at + 5` ms as `outcome`
        /// (None: never completed) with `result`'s fields.
        fn call(&mut self, at: u64, invoke: Op, outcome: Option<Outcome>, result: Op) -> &mut H {
            let id = self.next;
            self.next += 1;
            self.records.push(Record::Invoke(Op { id, time: at * 1000, ..invoke.clone() }));
            let done = Op { id, time: at * 1000 + 5000, f: invoke.f, user: invoke.user, ..result };
            match outcome {
                Some(Outcome::Ok) => self.records.push(Record::Ok(done)),
                Some(Outcome::Fail) => self.records.push(Record::Fail(done)),
                Some(Outcome::Unknown) => self.records.push(Record::Unknown(done)),
                None => {}
            }
            self
        }
        fn enter(&mut self, at: u64, user: &str, status: &str, ticket: Option<&str>) -> &mut H {
            let r = Op { status: Some(status.into()), ticket: ticket.map(Into::into), ..Op::default() };
            self.call(at, op(user, F::Enter), Some(Outcome::Ok), r)
        }
        fn status(&mut self, at: u64, user: &str, status: &str, ticket: Option<&str>) -> &mut H {
            let r = Op { status: Some(status.into()), ticket: ticket.map(Into::into), ..Op::default() };
            self.call(at, op(user, F::Status), Some(Outcome::Ok), r)
        }
        fn read(&mut self, at: u64, user: &str, status: &str) -> &mut H {
            let r = Op { status: Some(status.into()), ..Op::default() };
            self.call(at, Op { process: "final".into(), ..op(user, F::Read) }, Some(Outcome::Ok), r)
        }
        fn claim(&mut self, at: u64, user: &str, holder: &str, ticket: &str, outcome: Option<Outcome>) -> &mut H {
            let inv = Op { holder: Some(holder.into()), ticket: Some(ticket.into()), ..op(user, F::Claim) };
            let r = Op { claim_user: Some(user.into()), ..Op::default() };
            self.call(at, inv, outcome, r)
        }
        fn heartbeat(&mut self, at: u64, user: &str, alive: bool) -> &mut H {
            let r = Op { alive: Some(alive), ..Op::default() };
            self.call(at, op(user, F::Heartbeat), Some(Outcome::Ok), r)
        }
        fn simple(&mut self, at: u64, user: &str, f: F, outcome: Option<Outcome>) -> &mut H {
            self.call(at, op(user, f), outcome, Op::default())
        }
        fn check(&self) -> Report {
            // Through the text form, as `history check` reads it.
            let text: String =
                self.records.iter().map(|r| serde_json::to_string(r).unwrap() + "\n").collect::<String>();
            check(&crate::history::record::parse(&text).unwrap()).unwrap()
        }
    }

    fn rules(r: &Report) -> Vec<Rule> {
        r.violations.iter().map(|v| v.rule).collect()
    }

    /// Two users through the whole journey, nothing wrong.
    fn clean() -> H {
        let mut h = H::new();
        h.enter(0, "a", "WAITING", None)
            .enter(10, "b", "WAITING", None)
            .status(100, "a", "PROMOTED", Some("ta"))
            .status(110, "b", "WAITING", None)
            .claim(200, "a", "ha", "ta", Some(Outcome::Ok))
            .status(300, "b", "PROMOTED", Some("tb"))
            .claim(310, "b", "hb", "tb", Some(Outcome::Ok))
            .claim(320, "b", "hb2", "tb", Some(Outcome::Fail))
            .heartbeat(1000, "a", true)
            .heartbeat(1000, "b", true)
            .simple(2000, "a", F::End, Some(Outcome::Ok))
            .simple(2000, "b", F::End, Some(Outcome::Ok))
            .claim(2100, "a", "ha2", "ta", Some(Outcome::Fail))
            .read(3000, "a", "UNKNOWN")
            .read(3000, "b", "UNKNOWN");
        h
    }

    #[test]
    fn a_clean_history_has_no_violation() {
        let r = clean().check();
        assert_eq!(r.violations, vec![], "{:#?}", r.violations);
        assert_eq!((r.ops, r.claims_ok, r.fail), (15, 2, 2));
    }

    #[test]
    fn an_idempotent_repeat_by_the_same_holder_is_no_double_admission() {
        let mut h = clean();
        h.claim(205, "a", "ha", "ta", Some(Outcome::Ok));
        assert_eq!(h.check().violations, vec![]);
    }

    #[test]
    fn two_holders_admitted_by_one_ticket_are_found() {
        let mut h = clean();
        h.claim(215, "a", "ha-tab", "ta", Some(Outcome::Ok));
        assert_eq!(rules(&h.check()), vec![Rule::DoubleAdmission]);
    }

    #[test]
    fn a_lost_entry_is_found_and_unknown_leaves_explain_it() {
        let mut h = H::new();
        h.enter(0, "a", "WAITING", None).status(500, "a", "WAITING", None).status(1000, "a", "UNKNOWN", None);
        assert_eq!(rules(&h.check()), vec![Rule::LostEntry]);
        // A leave whose outcome is unknown may have removed the entry.
        let mut h = H::new();
        h.enter(0, "a", "WAITING", None)
            .simple(400, "a", F::Leave, Some(Outcome::Unknown))
            .status(1000, "a", "UNKNOWN", None);
        assert_eq!(h.check().violations, vec![]);
        // So may a ticket that lapsed while nobody asked for longer than the ttl.
        let mut h = H::new();
        h.enter(0, "a", "WAITING", None).read(9000, "a", "UNKNOWN");
        assert_eq!(h.check().violations, vec![]);
        // The final read counts.
        let mut h = H::new();
        h.enter(0, "a", "WAITING", None).read(1000, "a", "UNKNOWN");
        assert_eq!(rules(&h.check()), vec![Rule::LostEntry]);
    }

    #[test]
    fn an_overtaken_user_is_found() {
        let mut h = H::new();
        h.enter(0, "a", "WAITING", None)
            .enter(100, "b", "WAITING", None)
            .status(200, "b", "PROMOTED", Some("tb"))
            .status(300, "a", "WAITING", None);
        assert_eq!(rules(&h.check()), vec![Rule::Overtaken]);
        // Not when A re-entered (even with an unknown outcome) before being seen waiting.
        let mut h = H::new();
        h.enter(0, "a", "WAITING", None)
            .enter(100, "b", "WAITING", None)
            .status(200, "b", "PROMOTED", Some("tb"))
            .simple(250, "a", F::Enter, Some(Outcome::Unknown))
            .status(300, "a", "WAITING", None);
        assert_eq!(h.check().violations, vec![]);
        // Nor when the two entries overlapped (B invoked before A's was acknowledged).
        let mut h = H::new();
        h.enter(0, "a", "WAITING", None)
            .enter(3, "b", "WAITING", None)
            .status(200, "b", "PROMOTED", Some("tb"))
            .status(300, "a", "WAITING", None);
        assert_eq!(h.check().violations, vec![]);
    }

    #[test]
    fn sessions_over_the_hard_cap_are_found() {
        let mut h = H::new();
        for (i, u) in ["a", "b", "c"].iter().enumerate() {
            let t = format!("t{u}");
            h.enter(i as u64, u, "PROMOTED", Some(&t)).claim(100 + i as u64, u, u, &t, Some(Outcome::Ok));
        }
        for u in ["a", "b", "c"] {
            h.heartbeat(1000, u, true);
        }
        assert_eq!(rules(&h.check()), vec![Rule::OverCap]);
        // Not when one of them may have lapsed before the others began (no heartbeat).
        let mut h = H::new();
        for (i, u) in ["a", "b", "c"].iter().enumerate() {
            let t = format!("t{u}");
            h.enter(i as u64, u, "PROMOTED", Some(&t)).claim(100 + i as u64, u, u, &t, Some(Outcome::Ok));
        }
        h.heartbeat(1000, "a", true).heartbeat(1000, "b", true);
        assert_eq!(h.check().violations, vec![]);
    }

    #[test]
    fn a_ticket_working_after_its_ttl_or_its_session_is_found() {
        let mut h = H::new();
        h.enter(0, "a", "PROMOTED", Some("ta")).claim(6000, "a", "ha", "ta", Some(Outcome::Ok));
        assert_eq!(rules(&h.check()), vec![Rule::StaleTicket]);
        // A repeat by the holder whose first claim may have worked in time is fine.
        let mut h = H::new();
        h.enter(0, "a", "PROMOTED", Some("ta")).claim(100, "a", "ha", "ta", None).claim(
            6000,
            "a",
            "ha",
            "ta",
            Some(Outcome::Ok),
        );
        assert_eq!(h.check().violations, vec![]);
        // After the session ended.
        let mut h = H::new();
        h.enter(0, "a", "PROMOTED", Some("ta"))
            .claim(100, "a", "ha", "ta", Some(Outcome::Ok))
            .simple(500, "a", F::End, Some(Outcome::Ok))
            .claim(600, "a", "ha", "ta", Some(Outcome::Ok));
        assert_eq!(rules(&h.check()), vec![Rule::StaleTicket]);
        // An end whose outcome is unknown explains nothing either way: no violation.
        let mut h = H::new();
        h.enter(0, "a", "PROMOTED", Some("ta"))
            .claim(100, "a", "ha", "ta", Some(Outcome::Ok))
            .simple(500, "a", F::End, Some(Outcome::Unknown))
            .claim(600, "a", "ha", "ta", Some(Outcome::Ok));
        assert_eq!(h.check().violations, vec![]);
    }

    #[test]
    fn bad_histories_are_refused_with_the_line() {
        assert!(crate::history::record::parse("{\"type\":\"meta\"").unwrap_err().starts_with("line 1:"));
        let r = vec![Record::Ok(Op { id: 7, ..Op::default() })];
        assert!(check(&r).unwrap_err().contains("never invoked"));
        assert!(check(&[]).unwrap_err().contains("no meta"));
    }
}
