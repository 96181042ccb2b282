//! A sale's life (docs/commands.md, "A sale's end"): the closing time (`closes_at`),
//! the inventory left and who counts against it, QUEUE.SOLD, and the one change-log
//! entry (`state`) that tells every push follower when the queue closes, sells out
//! or gets a new message.
//!
//! Who counts against the inventory (`outstanding`): everyone holding a ticket or a
//! session, less the people inside reported as having bought (hash `bought`). A ticket
//! that expires or is given back, and a session that ends, stop counting by
//! themselves.

use super::members::joining;
use super::store::{add_stat, stat, Aux, Part, Store};
use crate::error::QueueError;

/// Whether the queue is closed at `now` (`closes_at` set and passed).
pub fn closed<S: Store>(s: &S, now: i64) -> bool {
    let at = s.setting(crate::config::CLOSES_AT);
    at > 0 && now >= at
}

/// Units left to sell; None: no limit.
pub fn inventory<S: Store>(s: &S) -> Option<i64> {
    s.stat_opt(stat::INVENTORY).filter(|v| *v >= 0)
}

/// Sold out: an inventory of 0.
pub fn sold_out<S: Store>(s: &S) -> bool {
    inventory(s) == Some(0)
}

/// People holding a ticket or one of `sessions` sessions, not reported as having bought.
pub fn outstanding<S: Store>(s: &S, sessions: i64) -> i64 {
    (joining(s) + sessions - stat(s, stat::BOUGHT)).max(0)
}

/// How many more may be promoted within the inventory (None: no limit).
pub fn room<S: Store>(s: &S, sessions: i64) -> Option<i64> {
    inventory(s).map(|i| (i - outstanding(s, sessions)).max(0))
}

/// Notes a `state` entry in the change log when closed or sold out is not what was
/// last announced (the first command to see `closes_at` pass writes it, once).
pub fn note_state<S: Store>(s: &mut S, now: i64) {
    let c = i64::from(closed(s, now));
    let o = i64::from(sold_out(s));
    let mut changed = false;
    if stat(s, stat::CLOSED) != c {
        s.set_stat(stat::CLOSED, c);
        changed = true;
    }
    if stat(s, stat::SOLD_OUT) != o {
        s.set_stat(stat::SOLD_OUT, o);
        changed = true;
    }
    if changed {
        s.log_draft().state = true;
    }
}

/// The message changed: the next log entry says the state, message included.
pub fn note_message<S: Store>(s: &mut S, now: i64) {
    note_state(s, now);
    s.log_draft().state = true;
}

/// QUEUE.ENTER's refusal, if any: CLOSED after `closes_at`, SOLDOUT at inventory 0.
pub fn refuse_entry<S: Store>(s: &mut S, now: i64) -> Result<(), QueueError> {
    note_state(s, now);
    if closed(s, now) {
        return Err(QueueError::Closed);
    }
    if sold_out(s) {
        return Err(QueueError::SoldOut);
    }
    Ok(())
}

/// QUEUE.CONFIG SET inventory: units left (-1: no limit).
pub fn set_inventory<S: Store>(s: &mut S, v: i64, now: i64) {
    if s.stat_opt(stat::INVENTORY) != Some(v) {
        s.set_stat(stat::INVENTORY, v);
    }
    note_state(s, now);
}

/// The most the counter `sold` reaches: it stops there (2^53 - 1, exact in the Lua
/// library's numbers), never wrapping and never refusing a sale.
pub const MAX_SOLD: i64 = (1 << 53) - 1;

/// QUEUE.SOLD Q n [USER u]: `n` units sold: the inventory (if any) goes down by `n`,
/// never below 0; with a user who is inside, that person no longer counts against it
/// (`n` must then be at least 1: a report of nothing sold frees no unit). Returns the
/// inventory left (None: no limit).
pub fn sold<S: Store>(s: &mut S, n: i64, user: Option<&S::User>) -> Result<Option<i64>, QueueError> {
    if user.is_some() && n < 1 {
        return Err(QueueError::OutOfRange("n", 1, crate::config::MAX_INVENTORY));
    }
    s.check(&[Part::Stats, Part::Sessions])?;
    let now = s.now();
    if let Some(i) = inventory(s) {
        let left = (i - n).max(0);
        if left != i {
            s.set_stat(stat::INVENTORY, left);
        }
    }
    let counted = stat(s, stat::SOLD);
    if n > 0 && counted < MAX_SOLD {
        s.set_stat(stat::SOLD, counted.saturating_add(n).min(MAX_SOLD));
    }
    if let Some(u) = user {
        let inside = s.session_expiry(u).is_some_and(|exp| exp > now);
        if inside && s.aux_hget(Aux::Bought, u.as_ref()).is_none() {
            s.aux_hset(Aux::Bought, u.as_ref(), b"1");
            add_stat(s, stat::BOUGHT, 1);
        }
    }
    note_state(s, now);
    Ok(inventory(s))
}

/// `user`'s session ended (or a new one opens): it no longer counts as bought.
pub fn forget_bought<S: Store>(s: &mut S, user: &S::User) {
    if stat(s, stat::BOUGHT) > 0 && s.aux_hdel(Aux::Bought, user.as_ref()) {
        add_stat(s, stat::BOUGHT, -1);
    }
}
