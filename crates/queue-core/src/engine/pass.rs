//! QUEUE.PASS Q userId nickname [HOLDER h]: enter and claim in one command, for a
//! gate that lets a visitor straight through while there is room (docs/commands.md,
//! "Passing straight in").
//!
//! The pass happens exactly when QUEUE.ENTER would let the user in at once and the
//! claim of that ticket would succeed; it is then that entry followed by that claim
//! ([`super::enter`], [`super::claim_held`]), so counters, the change log and the
//! inventory see an instant entry and a claim. Otherwise nothing is written: the
//! decision is made first, read only, from what housekeeping would leave (expired
//! tickets and leases as [`super::reap`] would drop them).

use super::{
    bucket, claim_held, config, ensure_layout, enter, expired_tickets, joining, live_sessions, opening, room_at_once,
    sale, stat, waiting_count, Aux, Claimed, Part, Standing, Store, ALL_PARTS,
};
use crate::config::{EntryMode, HARD_CAP};
use crate::error::QueueError;

/// What a pass replies: the ticket it used and the claim.
pub type Passed<U> = (Vec<u8>, Claimed<U>);

/// QUEUE.PASS: the ticket and the claim's reply when `user` is let in at once, entered
/// and claimed (with `holder` as TICKET.CLAIM's HOLDER); None, and nothing written,
/// otherwise.
pub fn pass<S: Store>(
    s: &mut S,
    user: &S::User,
    nickname: &[u8],
    holder: Option<&[u8]>,
) -> Result<Option<Passed<S::User>>, QueueError> {
    s.check(&ALL_PARTS)?;
    if holder.is_some() {
        s.check(&[Part::Claimed])?;
    }
    // Data numbered by an older release is repaired first, as by every line command.
    ensure_layout(s)?;
    let now = s.now();
    if !passes(s, user, now) {
        return Ok(None);
    }
    let Standing::Promoted { ticket, .. } = enter(s, user, nickname)? else {
        // `passes` said ENTER lets the user in at once: it does (tests hold them to it).
        debug_assert!(false, "QUEUE.PASS: ENTER did not let the user in at once");
        return Ok(None);
    };
    claim_held(s, &ticket, holder).map(|c| Some((ticket, c)))
}

/// Whether QUEUE.PASS lets `user` in at `now`, read without writing: the queue is open
/// to plain entries (entry `open`, not closed, not sold out, no proof of work asked,
/// no opening scheduled or due), nobody waits, the user neither waits, holds a ticket nor has a live session,
/// the hard cap leaves room for one more session, and ENTER's own decision
/// ([`room_at_once`]: a free slot, a unit to sell, a rate token) holds for the counts
/// housekeeping would leave.
pub fn passes<S: Store>(s: &S, user: &S::User, now: i64) -> bool {
    if s.entry_mode() != EntryMode::Open || sale::closed(s, now) || sale::sold_out(s) {
        return false;
    }
    // A queue that asks for proof of work asks it of everyone: an entry through the
    // API pays it, so nobody is let straight past it.
    if config(s).pow_difficulty() > 0 {
        return false;
    }
    if opening::pending(s) || opening::before_opening(s, now) {
        return false;
    }
    if waiting_count(s) > 0 || s.waiting_score(user).is_some() {
        return false;
    }
    if s.session_expiry(user).is_some_and(|exp| exp > now) {
        return false;
    }
    let hard_cap = s.setting(HARD_CAP);
    if hard_cap > 0 && live_sessions(s, now) >= hard_cap {
        return false;
    }
    // What reaping leaves: expired tickets and lapsed leases gone, and those lapsed
    // sessions no longer counted as bought.
    let lapsed = s.sessions_ended_by(now);
    let sessions = s.sessions_len() - lapsed.len() as i64;
    let joining = joining(s) - expired_tickets(s, now).len() as i64;
    let mut bought = stat(s, stat::BOUGHT);
    for u in &lapsed {
        if bought > 0 && s.aux_hget(Aux::Bought, u.as_ref()).is_some() {
            bought -= 1;
        }
    }
    let outstanding = (joining + sessions - bought).max(0);
    let bucket = (config(s).rate() > 0).then(|| bucket(s, now));
    room_at_once(s, sessions, joining, outstanding, bucket)
}
