//! The one-time layout repair: data written by releases that numbered newcomers
//! after the last one in line (a waiting user could then be numbered among the
//! ticket holders) is renumbered once, and the queue marked as numbered by the
//! current rule (`keys::LAYOUT_FIELD`); docs/commands.md, "Layout repair".

use super::store::{stat, Part, Store};
use crate::error::QueueError;
use crate::keys;
use crate::record::{self, Record};

/// Repairs, once, data written by releases that numbered newcomers after the last
/// one in line (see [`super::members::next_seq`]): such a waiting user, numbered at or below `p_max`,
/// was taken for a ticket holder. Every command that reads or changes the line calls
/// this first; with the layout marker set it costs one read of a stats field, or
/// nothing once the store remembers the queue as marked ([`Store::layout_known`]).
/// Writes nothing for a queue nobody is in. Returns whether it repaired.
pub fn ensure_layout<S: Store>(s: &mut S) -> Result<bool, QueueError> {
    if s.layout_known() {
        return Ok(false);
    }
    if s.stat_opt(keys::LAYOUT_FIELD) == Some(keys::LAYOUT) {
        s.note_layout();
        return Ok(false);
    }
    if s.waiting_len() == 0 && stat(s, stat::JOINING) == 0 && stat(s, stat::P_MAX) == 0 {
        return Ok(false);
    }
    s.check(&[Part::Waiting, Part::Stats])?;
    repair(s);
    s.set_stat(keys::LAYOUT_FIELD, keys::LAYOUT);
    s.note_layout();
    Ok(true)
}

/// Recounts `joining` and `p_max` from the records at the head of the line, and
/// renumbers waiting users found among the ticket holders, in their order, after the
/// last holder; later waiting users move up only as far as needed to keep the order
/// (nobody's place changes, only numbers, which waiting users never see).
fn repair<S: Store>(s: &mut S) {
    let stored_p_max = stat(s, stat::P_MAX);
    struct Member<U, T> {
        user: U,
        seq: i64,
        value: Option<T>,
        holds: bool,
    }
    // The head: every member numbered up to the stored p_max, and any ticket holder
    // right after it.
    let mut head: Vec<Member<S::User, S::Text>> = Vec::new();
    s.waiting_scan(i64::MIN, i64::MAX, |user, seq| {
        let value = s.record(seq);
        let holds = value.as_ref().is_some_and(|v| matches!(record::decode(v.as_ref()), Some(Record::Promoted { .. })));
        if seq > stored_p_max && !holds {
            return false;
        }
        head.push(Member { user, seq, value, holds });
        true
    });
    let holders = head.iter().filter(|m| m.holds).count() as i64;
    let last_holder = head.iter().filter(|m| m.holds).map(|m| m.seq).max().unwrap_or(0);
    // Waiting users numbered below the last holder move after it, then the users
    // after them as far as needed.
    // (user, old number, record, new number)
    type Move<U, T> = (U, i64, Option<T>, i64);
    let mut moves: Vec<Move<S::User, S::Text>> = Vec::new();
    let mut next = last_holder + 1;
    let mut all_moved = true;
    let after_head = head.last().map(|m| m.seq);
    for m in head {
        if m.holds {
            continue;
        }
        let new = m.seq.max(next);
        if new == m.seq {
            all_moved = false;
            break;
        }
        next = new + 1;
        moves.push((m.user, m.seq, m.value, new));
    }
    if !moves.is_empty() && all_moved {
        let start = after_head.map_or(i64::MIN, |s| s + 1);
        let mut more = Vec::new();
        s.waiting_scan(start, i64::MAX, |user, seq| {
            let new = seq.max(next);
            if new == seq {
                return false;
            }
            more.push((user, seq, s.record(seq), new));
            next = new + 1;
            true
        });
        moves.extend(more);
    }
    // Only numbers nobody moves to are deleted: a store may replicate one write per
    // field and command.
    let taken: std::collections::HashSet<i64> = moves.iter().map(|m| m.3).collect();
    for (_, seq, value, _) in &moves {
        if value.is_some() && !taken.contains(seq) {
            s.delete_record(*seq);
        }
    }
    if !moves.is_empty() {
        s.log_draft().note_reset();
    }
    for (user, _, value, new) in &moves {
        s.waiting_add(user, *new);
        if let Some(v) = value {
            s.put_record(*new, v.as_ref());
        }
    }
    s.set_stat(stat::JOINING, holders);
    s.set_stat(stat::P_MAX, last_holder);
}

/// Marks the queue's data as numbered by the current rule (before its first entry).
pub(super) fn mark_layout<S: Store>(s: &mut S) {
    if !s.layout_known() && s.stat_opt(keys::LAYOUT_FIELD) != Some(keys::LAYOUT) {
        s.set_stat(keys::LAYOUT_FIELD, keys::LAYOUT);
        s.note_layout();
    }
}
