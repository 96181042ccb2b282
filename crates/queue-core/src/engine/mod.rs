//! The admission engine, written once: enter, standing, leave, promote (reaping and
//! the abandonment sweep), claim, heartbeat, end and the counts INFO shows, over a
//! small [`Store`] of sorted-set and hash operations and a clock. The Valkey module
//! implements the store over the queue's keys (static dispatch: every function here
//! is generic); [`crate::memory::MemoryStore`] implements it in memory with a clock
//! the tests set, so every rule is tested without a server.
//!
//! The files, in layers: each uses only those above it in this list, so the imports
//! form no circle (a test below checks it).
//!
//! 1. [`store`]: the trait and its vocabulary (parts, events, stats fields, the
//!    opening's keys, the change-log entry being written), at the bottom: it uses no
//!    sibling.
//! 2. [`layout`]: the one-time layout repair.
//! 3. [`members`]: who is in line, by number; putting users in line and taking them out.
//! 4. [`opening`]: the pre-queue and the fair opening.
//! 5. [`standing`]: where a user stands, read without writing.
//! 6. [`changelog`]: closing the change log's entry; the watchers (QUEUE.WATCH,
//!    QUEUE.UNWATCH) and who counts as heard from.
//! 7. [`sale`]: the closing time, the inventory and QUEUE.SOLD, the `state` entry.
//! 8. this file: the rules (enter, leave, promote, claim, heartbeat, end, info), the
//!    only user of all the others; and [`pass`] (QUEUE.PASS: enter and claim in one
//!    command), which uses this file's rules.
//!
//! What the commands reply is in [`crate::replies`].
//!
//! The layout (docs/commands.md, "Key layout"): `waiting` is a sorted set of userId ->
//! sequence number in entry order; each number's record (`crate::record`) says
//! whether its user waits or holds a ticket. Ticket holders keep their place until
//! their ticket is used, withdrawn or expires, and every holder is numbered below
//! every waiting user (newcomers are numbered after `p_max`, the highest number
//! holding a ticket), so the holders are always the first `joining` members and a
//! waiting user's rank is its rank in `waiting` minus `joining`.

pub mod changelog;
mod layout;
mod members;
pub mod opening;
mod pass;
pub mod sale;
mod standing;
mod store;

pub use crate::replies::{Claimed, Info, LaneCount, Line, Promotion, Standing};
pub use changelog::{close_log, unwatch, watch, Watched};
pub use layout::ensure_layout;
pub use members::{config, is_promoted, joining, next_seq, p_max, record, waiting_count, Rec};
pub use pass::{pass, passes, Passed};
pub use standing::standing;
pub use store::{stat, Aux, Event, LogDraft, Part, Store, ALL_PARTS};

use crate::admission::{self, Bucket, RateWindow, SWEEP_BUDGET};
use crate::error::QueueError;
use crate::lanes::{band_start, Code, CodeUse, Lanes, BAND, CODE_RECORD_MAX, MAX_LANES};
use crate::record;
use crate::ticket;
use layout::mark_layout;
use members::{add_waiter, lane_next_seq, remove, take_out, touch};
use store::add_stat;

/// The token bucket refilled to `now` (full the first time it is seen).
pub fn bucket<S: Store>(s: &S, now: i64) -> Bucket {
    let cfg = config(s);
    match s.stat_opt(stat::TOKENS) {
        Some(milli) => {
            Bucket { milli_tokens: milli, at_ms: stat(s, stat::TOKENS_AT) }.refill(now, cfg.rate(), cfg.bucket_size())
        }
        None => Bucket::full(cfg.bucket_size(), now),
    }
}

fn save_bucket<S: Store>(s: &mut S, b: Bucket) {
    s.set_stat(stat::TOKENS, b.milli_tokens);
    s.set_stat(stat::TOKENS_AT, b.at_ms);
}

fn rate_window<S: Store>(s: &S) -> RateWindow {
    RateWindow {
        at_ms: stat(s, stat::RATE_AT),
        count: stat(s, stat::RATE_COUNT),
        per_minute: stat(s, stat::RATE_PER_MIN),
    }
}

/// The admissions per minute wait estimates use now.
fn admissions_per_minute<S: Store>(s: &S, now: i64) -> i64 {
    admission::admissions_per_minute(rate_window(s), now, s.setting(crate::config::RATE))
}

/// Counts admissions from the line (PROMOTE and slots filled as they free; not
/// someone let in at once on entry) in the measured window.
fn record_admissions<S: Store>(s: &mut S, now: i64, admitted: i64) {
    let old = rate_window(s);
    let new = old.record(now, admitted);
    if new.at_ms != old.at_ms {
        s.set_stat(stat::RATE_AT, new.at_ms);
    }
    if new.count != old.count {
        s.set_stat(stat::RATE_COUNT, new.count);
    }
    if new.per_minute != old.per_minute {
        s.set_stat(stat::RATE_PER_MIN, new.per_minute);
    }
}

/// Gives the user numbered `seq` a ticket claimable until now + ticket_ttl: its
/// record becomes the ticket. Returns the ticket id.
fn promote_user<S: Store>(s: &mut S, seq: i64, nickname: &[u8], now: i64) -> Vec<u8> {
    let secret = s.new_secret();
    let expiry = now + s.setting(crate::config::TICKET_TTL);
    s.put_record(seq, &record::encode_promoted(expiry, &secret, nickname));
    ticket::ticket_id(seq, &secret)
}

/// Counts `n` promotions up to number `p_max` (kept apart so a batch writes once).
fn note_promoted<S: Store>(s: &mut S, n: i64, p_max: i64) {
    if n > 0 {
        let j = joining(s) + n;
        s.set_stat(stat::JOINING, j);
        s.set_stat(stat::P_MAX, p_max);
    }
}

/// The user in line with number `seq`.
fn user_at<S: Store>(s: &S, seq: i64) -> Option<S::User> {
    let mut found = None;
    s.waiting_scan(seq, seq, |u, _| {
        found = Some(u);
        false
    });
    found
}

/// Tickets for up to `n` of the head of the waiting users (right after the holders),
/// in line order; waiters not heard from within `abandon_after` are dropped on the
/// way. Counts them in `joining`/`p_max`; returns (promoted, dropped, the number of
/// the last ticket holder).
fn admit_head<S: Store>(s: &mut S, n: i64, abandon_after: i64, now: i64) -> (i64, i64, i64) {
    let (mut promoted, mut dropped, mut top) = (0i64, 0i64, p_max(s));
    if n <= 0 {
        return (0, 0, top);
    }
    let mut head = Vec::new();
    let limit = n as usize + SWEEP_BUDGET;
    s.waiting_scan(top + 1, i64::MAX, |u, seq| {
        head.push((u, seq));
        head.len() < limit
    });
    // With lanes, a promoted user is renumbered into the holders' band, below every
    // lane, after the last holder: holders stay the first members in issue order.
    let lane_set = s.lanes();
    let lanes = lane_set.multi();
    // Promotions per lane, written once per lane after the batch.
    let mut from_lane = [0i64; MAX_LANES];
    for (user, seq) in head {
        if promoted == n {
            break;
        }
        match record(s, seq) {
            Some(Rec::Waiting { seen, nickname }) if !changelog::abandoned(s, &user, seen, now, abandon_after) => {
                let to = if lanes { top + 1 } else { seq };
                if lanes {
                    s.waiting_add(&user, to);
                    s.delete_record(seq);
                }
                let ticket = promote_user(s, to, &nickname, now);
                changelog::note_ticket(s, &user, &ticket, lanes.then_some(seq));
                if let Some(i) = lane_set.lane_of(seq) {
                    from_lane[i] += 1;
                }
                promoted += 1;
                top = to;
            }
            _ => {
                take_out(s, &user, seq, false);
                dropped += 1;
            }
        }
        s.log_draft().note_head(seq);
    }
    note_promoted(s, promoted, top);
    for (i, n) in from_lane.iter().enumerate().take(lane_set.len()) {
        add_admitted(s, lane_set.name(i), *n);
    }
    (promoted, dropped, top)
}

/// The stats field counting the people promoted from lane `name`: `admitted:<name>`.
pub fn admitted_field(name: &[u8]) -> Vec<u8> {
    let mut f = stat::ADMITTED_PREFIX.as_bytes().to_vec();
    f.extend_from_slice(name);
    f
}

/// Adds `n` to lane `name`'s admissions counter (writing nothing when it is 0).
fn add_admitted<S: Store>(s: &mut S, name: &[u8], n: i64) {
    if n != 0 {
        let f = admitted_field(name);
        let v = s.stat_named(&f).unwrap_or(0) + n;
        s.set_stat_named(&f, v);
    }
}

/// A slot was just freed inside a command (a session ended, a ticket holder left or
/// re-entered, a claim found its ticket expired): the head of the line gets the
/// free tickets now, within the soft cap, the token bucket and batch_max, exactly as
/// the next PROMOTE would give them, and the promotion is announced at once. The
/// time-based work (expiries, the abandonment sweep) stays with PROMOTE. Does
/// nothing when nobody waits or the line's keys are not of their types. Returns how
/// many were promoted.
pub fn fill_freed<S: Store>(s: &mut S, now: i64, freed_at: &[i64]) -> i64 {
    if s.check(&ALL_PARTS).is_err()
        || ensure_layout(s).is_err()
        || waiting_count(s) <= 0
        || opening::before_opening(s, now)
    {
        return 0;
    }
    let cfg = config(s);
    let free = admission::free_slots(cfg.soft_cap(), s.sessions_len(), joining(s));
    if free <= 0 {
        return 0;
    }
    let bucket = (cfg.rate() > 0).then(|| bucket(s, now));
    let mut n = admission::promote_count(free, bucket.map(|b| b.whole()), None, cfg.batch_max());
    if let Some(room) = sale::room(s, s.sessions_len()) {
        n = n.min(room);
    }
    let (promoted, dropped, _) = admit_head(s, n, cfg.abandon_after(), now);
    if let Some(b) = bucket.filter(|_| promoted > 0) {
        save_bucket(s, b.take(promoted));
    }
    if promoted > 0 {
        record_admissions(s, now, promoted);
        note_slot_wait(s, freed_at, promoted, now);
    }
    add_stat(s, stat::PROMOTED, promoted);
    add_stat(s, stat::DROPPED, dropped);
    s.count(Event::Promoted, promoted);
    s.count(Event::Dropped, dropped);
    if promoted + dropped > 0 {
        let waiting = waiting_count(s);
        s.announce(promoted, waiting, now);
    }
    promoted
}

/// The announcement's payload: `{"queue":..,"promoted":..,"waiting":..,"atMs":..}`,
/// the same JSON the queue-manager publishes after its PROMOTE (queue names need no
/// escaping: `keys::check_queue` allows none of `"` or `\`).
pub fn announcement(queue: &str, promoted: i64, waiting: i64, at_ms: i64) -> String {
    format!(r#"{{"queue":"{queue}","promoted":{promoted},"waiting":{waiting},"atMs":{at_ms}}}"#)
}

/// What housekeeping dropped: expired tickets and leases, and when the slots they
/// held became free (their deadlines, oldest first).
#[derive(Debug, Default)]
pub struct Reaped {
    pub tickets: i64,
    pub leases: i64,
    pub freed_at: Vec<i64>,
}

/// Drops expired tickets and leases.
///
/// Tickets are examined from the head of the line, in the order they were issued, up
/// to the first that is still good: after `ticket_ttl` was lowered a newer ticket may
/// expire first, and is then counted a little longer (never accepted: a claim checks
/// its own expiry).
pub fn reap<S: Store>(s: &mut S, now: i64) -> Reaped {
    let gone = expired_tickets(s, now);
    let mut freed_at: Vec<i64> = gone.iter().map(|g| g.2).collect();
    for (user, seq, _) in &gone {
        remove(s, user, *seq, true);
    }
    let expired = gone.len() as i64;
    let lapsed = s.sessions_ended_by(now);
    for u in &lapsed {
        freed_at.push(s.session_expiry(u).unwrap_or(now));
        close_session(s, u);
    }
    let lapsed = lapsed.len() as i64;
    add_stat(s, stat::TICKETS_EXPIRED, expired);
    add_stat(s, stat::LEASES_EXPIRED, lapsed);
    s.count(Event::TicketsExpired, expired);
    s.count(Event::LeasesExpired, lapsed);
    freed_at.sort_unstable();
    Reaped { tickets: expired, leases: lapsed, freed_at }
}

/// The tickets [`reap`] drops at `now` (user, number, expiry), read without writing:
/// from the head of the line, in issue order, up to the first that is still good.
pub(crate) fn expired_tickets<S: Store>(s: &S, now: i64) -> Vec<(S::User, i64, i64)> {
    let mut gone = Vec::new();
    let top = p_max(s);
    if top > 0 {
        s.waiting_scan(i64::MIN, top, |user, seq| match record(s, seq) {
            Some(Rec::Promoted { expiry, .. }) if expiry <= now => {
                gone.push((user, seq, expiry));
                true
            }
            _ => false,
        });
    }
    gone
}

/// Whether an entry is let in at once, nobody waiting (the caller's check), with
/// `sessions` sessions, `joining` ticket holders and `outstanding` people counting
/// against the inventory as housekeeping ([`reap`]) leaves them: a free slot under the
/// soft cap, a unit left to sell and, with a rate, a whole token in `bucket`. ENTER
/// decides with it after reaping; QUEUE.PASS with what reaping would leave.
pub(crate) fn room_at_once<S: Store>(
    s: &S,
    sessions: i64,
    joining: i64,
    outstanding: i64,
    bucket: Option<Bucket>,
) -> bool {
    let cfg = config(s);
    let free = admission::free_slots(cfg.soft_cap(), sessions, joining);
    let room = sale::inventory(s).is_none_or(|i| i - outstanding >= 1);
    free > 0 && room && bucket.is_none_or(|b| b.whole() >= 1)
}

/// Counts how long the slots `promoted` people just filled had been empty: the
/// oldest of `freed_at` (slots freed by an expiry) are filled first; a slot freed
/// inside the command itself waited nothing.
fn note_slot_wait<S: Store>(s: &mut S, freed_at: &[i64], promoted: i64, now: i64) {
    let waited: i64 = freed_at.iter().take(promoted.max(0) as usize).map(|t| (now - t).max(0)).sum();
    add_stat(s, stat::SLOT_WAIT_MS, waited);
}

/// Live sessions as of `now`, without writing.
pub fn live_sessions<S: Store>(s: &S, now: i64) -> i64 {
    s.sessions_len() - s.sessions_ended_by(now).len() as i64
}

/// The estimated wait of a waiting user, in whole seconds.
pub fn eta<S: Store>(s: &S, standing: &Standing) -> Option<i64> {
    match standing {
        Standing::Waiting { rank, .. } => admission::estimated_wait_seconds(*rank, admissions_per_minute(s, s.now())),
        _ => None,
    }
}

/// QUEUE.ENTER: to the back of the line; re-entry gives up the old place and any
/// unclaimed ticket; in at once when nobody waits and there is room (and a token).
/// A user who is inside may queue again (say, from a second device); claiming the
/// new ticket fails with INSIDE while the first session lives.
pub fn enter<S: Store>(s: &mut S, user: &S::User, nickname: &[u8]) -> Result<Standing, QueueError> {
    enter_with(s, user, nickname, Invitation::default())
}

/// QUEUE.ENTER's options: `LANE l`, `CODE h` (an access code's hash).
#[derive(Debug, Clone, Copy, Default)]
pub struct Invitation<'a> {
    pub lane: Option<&'a [u8]>,
    pub code: Option<&'a [u8]>,
}

/// QUEUE.ENTER Q userId nickname [LANE l] [CODE h]: [`enter`], into a lane of a queue
/// with lanes (the code's, else `l`, else the last); a code's use is consumed in the
/// same command, and only when the entry is not refused.
pub fn enter_with<S: Store>(
    s: &mut S,
    user: &S::User,
    nickname: &[u8],
    inv: Invitation,
) -> Result<Standing, QueueError> {
    s.check(&[Part::Waiting, Part::Stats])?;
    if inv.code.is_some() {
        s.check(&[Part::Codes])?;
    }
    let now = s.now();
    sale::refuse_entry(s, now)?;
    ensure_layout(s)?;
    let lanes = s.lanes();
    let into = invited_lane(s, &lanes, inv)?;
    // An invitation (an access code, a lane) is what admits into an `invite` queue:
    // a plain entry is refused before anything is written.
    if inv.lane.is_none() && inv.code.is_none() && s.entry_mode() == crate::config::EntryMode::Invite {
        return Err(QueueError::Invite);
    }
    refuse_if_line_full(s, user)?;
    opening::open_if_due(s, now)?;
    if opening::before_opening(s, now) {
        // Into the pre-queue of the lane (a queue with lanes): a code's use is
        // consumed as for an entry into the line (its key was checked above).
        let lane = into.as_ref().map(|(lane, _)| *lane);
        if let Some((_, Some((h, c)))) = into {
            consume_code(s, &lanes, h, c);
        }
        return opening::enter_pre(s, user, nickname, now, lane);
    }
    if let Some((lane, code)) = into {
        return enter_lane(s, user, nickname, &lanes, lane, code, now);
    }
    // The common case first: someone waits (so nobody is let in at once) and the user
    // is new. The add is the lookup: a user already in line falls through to the
    // general path, which then numbers exactly as if this had not been tried.
    if waiting_count(s) > 0 {
        let seq = next_seq(s);
        if s.waiting_add_new(user, seq) {
            mark_layout(s);
            touch(s, seq, now, nickname);
            s.count(Event::Entered, 1);
            return Ok(Standing::Waiting { seq, rank: waiting_count(s), seen: now, nickname: nickname.to_vec() });
        }
    }
    let old = s.waiting_score(user);
    let old_holds = old.is_some_and(|seq| is_promoted(s, seq));
    let old_waits = old.is_some() && !old_holds;
    let soft_cap = s.setting(crate::config::SOFT_CAP);
    let may_admit_now = waiting_count(s) == i64::from(old_waits) && soft_cap > 0;
    if may_admit_now || old_holds {
        s.check(&ALL_PARTS)?;
    }
    let reentry = old.filter(|_| old_waits).map(|seq| changelog::reentering(s, user, seq));
    if let Some(seq) = old {
        remove(s, user, seq, old_holds);
        if old_waits {
            s.log_draft().note_again(seq);
        }
    }
    // A ticket given back by re-entering goes to the head of the line at once.
    if old_holds {
        fill_freed(s, now, &[]);
    }
    let may_admit_now = waiting_count(s) == 0 && soft_cap > 0;
    let seq = next_seq(s);
    s.count(Event::Entered, 1);

    if may_admit_now {
        let reaped = reap(s, now);
        let bucket = (config(s).rate() > 0).then(|| bucket(s, now));
        let sessions = s.sessions_len();
        if room_at_once(s, sessions, joining(s), sale::outstanding(s, sessions), bucket) {
            add_waiter(s, user, seq, now, nickname);
            let ticket = promote_user(s, seq, nickname, now);
            note_promoted(s, 1, seq);
            if let Some(b) = bucket {
                save_bucket(s, b.take(1));
            }
            add_stat(s, stat::PROMOTED, 1);
            note_slot_wait(s, &reaped.freed_at, 1, now);
            s.count(Event::Promoted, 1);
            return Ok(Standing::Promoted { ticket, nickname: nickname.to_vec() });
        }
    }
    add_waiter(s, user, seq, now, nickname);
    let rank = waiting_count(s);
    if let Some(r) = reentry {
        changelog::reentered(s, user, r, seq, rank, nickname);
    }
    Ok(Standing::Waiting { seq, rank, seen: now, nickname: nickname.to_vec() })
}

/// The lane an entry goes into in a queue with lanes (None without lanes), and the
/// access code it uses: refused for a lane or a code the queue does not have, a code
/// used up, or a code of another lane than `LANE`.
#[allow(clippy::type_complexity)]
fn invited_lane<'a, S: Store>(
    s: &S,
    lanes: &Lanes,
    inv: Invitation<'a>,
) -> Result<Option<(usize, Option<(&'a [u8], CodeUse)>)>, QueueError> {
    if inv.lane.is_none() && inv.code.is_none() {
        return Ok(lanes.multi().then(|| (lanes.len() - 1, None)));
    }
    if !lanes.multi() {
        return Err(QueueError::NoLanes);
    }
    let named = match inv.lane {
        Some(l) => Some(lanes.index(l).ok_or_else(|| QueueError::UnknownLane(crate::config::printable(l)))?),
        None => None,
    };
    let Some(h) = inv.code else {
        return Ok(named.map(|l| (l, None)));
    };
    let code = s.aux_hget_with(Aux::Codes, h, |v| CodeUse::read(v?, lanes)).ok_or(QueueError::NoCode)?;
    if named.is_some_and(|l| l != code.lane) {
        return Err(QueueError::CodeLane);
    }
    Ok(Some((code.lane, Some((h, code)))))
}

/// Consumes one use of the code `h` (read as `c`): its record rewritten with one
/// more use, built on the stack.
fn consume_code<S: Store>(s: &mut S, lanes: &Lanes, h: &[u8], c: CodeUse) {
    let mut buf = [0u8; CODE_RECORD_MAX];
    s.aux_hset(Aux::Codes, h, c.encode_used(lanes, c.used + 1, &mut buf));
}

/// ENTER into lane `lane` of a queue with lanes: consumes the code's use, then as
/// [`enter`] (re-entry gives up the old place and any ticket; in at once when nobody
/// waits and there is room), numbered at the back of the lane. An arrival ahead of
/// people waiting in a later lane goes into the change log (`ahead`).
fn enter_lane<S: Store>(
    s: &mut S,
    user: &S::User,
    nickname: &[u8],
    lanes: &Lanes,
    lane: usize,
    code: Option<(&[u8], CodeUse)>,
    now: i64,
) -> Result<Standing, QueueError> {
    s.check(&ALL_PARTS)?;
    if let Some((h, c)) = code {
        consume_code(s, lanes, h, c);
    }
    let start = band_start(lane);
    // The common case first, as in `enter`: someone waits and the user is new. The
    // last number in line answers both what the newcomer's number is and whether
    // anyone waits in a later lane, unless it is in a later lane itself.
    if waiting_count(s) > 0 {
        let top = s.waiting_max().unwrap_or(0);
        let later = top >= start + BAND;
        let seq =
            if later { s.waiting_max_in(start + 1, start + BAND - 1).unwrap_or(start) + 1 } else { top.max(start) + 1 };
        if s.waiting_add_new(user, seq) {
            mark_layout(s);
            touch(s, seq, now, nickname);
            s.count(Event::Entered, 1);
            let behind = later && lane + 1 < lanes.len();
            return Ok(placed(s, user, seq, now, nickname, behind));
        }
    }
    let old = s.waiting_score(user);
    let old_holds = old.is_some_and(|seq| is_promoted(s, seq));
    let reentry = old.filter(|_| !old_holds).map(|seq| changelog::reentering(s, user, seq));
    if let Some(seq) = old {
        remove(s, user, seq, old_holds);
        if !old_holds {
            s.log_draft().note_again(seq);
        }
    }
    if old_holds {
        fill_freed(s, now, &[]);
    }
    s.count(Event::Entered, 1);
    if waiting_count(s) == 0 && s.setting(crate::config::SOFT_CAP) > 0 {
        let reaped = reap(s, now);
        let bucket = (config(s).rate() > 0).then(|| bucket(s, now));
        let sessions = s.sessions_len();
        if room_at_once(s, sessions, joining(s), sale::outstanding(s, sessions), bucket) {
            // In at once: numbered as the next holder.
            let seq = p_max(s) + 1;
            add_waiter(s, user, seq, now, nickname);
            let ticket = promote_user(s, seq, nickname, now);
            note_promoted(s, 1, seq);
            if let Some(b) = bucket {
                save_bucket(s, b.take(1));
            }
            add_stat(s, stat::PROMOTED, 1);
            add_admitted(s, lanes.name(lane), 1);
            note_slot_wait(s, &reaped.freed_at, 1, now);
            s.count(Event::Promoted, 1);
            return Ok(Standing::Promoted { ticket, nickname: nickname.to_vec() });
        }
    }
    let seq = lane_next_seq(s, lane);
    add_waiter(s, user, seq, now, nickname);
    let standing = in_lane(s, user, lanes, lane, seq, now, nickname);
    if let (Some(r), Standing::Waiting { rank, .. }) = (reentry, &standing) {
        changelog::reentered(s, user, r, seq, *rank, nickname);
    }
    Ok(standing)
}

/// The standing of `user`, just put at the back of lane `lane` as number `seq`; an
/// arrival ahead of people waiting in a later lane goes into the change log. Without
/// anyone in a later lane the newcomer is the last one waiting: no rank lookup.
fn in_lane<S: Store>(
    s: &mut S,
    user: &S::User,
    lanes: &Lanes,
    lane: usize,
    seq: i64,
    now: i64,
    nickname: &[u8],
) -> Standing {
    let behind = lane + 1 < lanes.len() && s.waiting_max_in(band_start(lane + 1), i64::MAX).is_some();
    placed(s, user, seq, now, nickname, behind)
}

/// [`in_lane`], told whether anyone waits in a later lane.
fn placed<S: Store>(s: &mut S, user: &S::User, seq: i64, now: i64, nickname: &[u8], behind: bool) -> Standing {
    let rank = if behind {
        s.log_draft().note_ahead(seq);
        s.waiting_rank(user).map_or(0, |(r, _)| r + 1 - joining(s))
    } else {
        waiting_count(s)
    };
    Standing::Waiting { seq, rank, seen: now, nickname: nickname.to_vec() }
}

/// Whether the settings may become `lanes` (QUEUE.CONFIG SET lanes): a change only
/// while nobody waits (in line or in the pre-queue), since waiting people's numbers
/// name their lanes (and the pre-queue's entries theirs).
pub fn check_lanes_change<S: Store>(s: &S, lanes: Lanes) -> Result<(), QueueError> {
    check_lanes_with(s, lanes, s.setting(crate::config::OPENS_AT))
}

/// [`check_lanes_change`] with the `opens_at` the settings will have.
pub fn check_lanes_with<S: Store>(s: &S, lanes: Lanes, _opens_at: i64) -> Result<(), QueueError> {
    if lanes != s.lanes() && (waiting_count(s) > 0 || (opening::pending(s) && s.aux_hlen(Aux::Pre) > 0)) {
        return Err(QueueError::LanesBusy);
    }
    Ok(())
}

/// QUEUE.CODES Q ADD lane uses h...: adds access codes to `lane`, each good `uses`
/// times; a code already there moves to `lane` with `uses`, keeping the uses it has
/// consumed. Returns how many codes are new.
pub fn codes_add<S: Store>(s: &mut S, lane: &[u8], uses: i64, hashes: &[&[u8]]) -> Result<i64, QueueError> {
    s.check(&[Part::Codes])?;
    let lanes = s.lanes();
    if !lanes.multi() {
        return Err(QueueError::NoLanes);
    }
    if lanes.index(lane).is_none() {
        return Err(QueueError::UnknownLane(crate::config::printable(lane)));
    }
    let mut added = 0;
    for h in hashes {
        let old = s.aux_hget(Aux::Codes, h).and_then(|v| Code::decode(&v));
        added += i64::from(old.is_none());
        let code = Code { lane: lane.to_vec(), uses, used: old.map_or(0, |c| c.used) };
        s.aux_hset(Aux::Codes, h, &code.encode());
    }
    Ok(added)
}

/// QUEUE.CODES Q REMOVE h...: how many of these codes were there.
pub fn codes_remove<S: Store>(s: &mut S, hashes: &[&[u8]]) -> Result<i64, QueueError> {
    s.check(&[Part::Codes])?;
    Ok(hashes.iter().map(|h| i64::from(s.aux_hdel(Aux::Codes, h))).sum())
}

/// One lane's line of QUEUE.CODES COUNTS: its name, its codes, the uses consumed and
/// the uses left.
pub type LaneCodes = (Vec<u8>, i64, i64, i64);

/// QUEUE.CODES Q COUNTS: per lane, in order (codes of a lane the queue no longer has
/// are not counted).
pub fn codes_counts<S: Store>(s: &S) -> Result<Vec<LaneCodes>, QueueError> {
    s.check(&[Part::Codes])?;
    let lanes = s.lanes();
    let mut out: Vec<LaneCodes> = (0..lanes.len()).map(|i| (lanes.name(i).to_vec(), 0, 0, 0)).collect();
    for (_, v) in s.aux_hgetall(Aux::Codes) {
        if let Some((i, c)) = Code::decode(&v).and_then(|c| Some((lanes.index(&c.lane)?, c))) {
            out[i].1 += 1;
            out[i].2 += c.used.min(c.uses);
            out[i].3 += c.left();
        }
    }
    Ok(out)
}

/// `max_waiting`: a newcomer is refused while that many people wait, in line or in
/// the pre-queue (before anything is written, so the refusal changes nothing). Someone
/// already there may enter again: that moves them, it adds nobody.
fn refuse_if_line_full<S: Store>(s: &S, user: &S::User) -> Result<(), QueueError> {
    let max = s.setting(crate::config::MAX_WAITING);
    if max <= 0 {
        return Ok(());
    }
    let pre = if opening::pending(s) { s.aux_hlen(Aux::Pre) } else { 0 };
    if waiting_count(s) + pre < max || s.waiting_score(user).is_some() {
        return Ok(());
    }
    if pre > 0 && s.aux_hget(Aux::Pre, user.as_ref()).is_some() {
        return Ok(());
    }
    Err(QueueError::LineFull)
}

/// QUEUE.STATUS (and each user of QUEUE.RANKS): where `user` stands; a waiting user
/// counts as heard from (its stored time is refreshed at most every
/// `admission::seen_refresh_ms`, so that polling is not a write each time).
pub fn observe<S: Store>(s: &mut S, user: &S::User, now: i64) -> Standing {
    let st = standing(s, user, now);
    if let Standing::Waiting { seq, seen, nickname, .. } = &st {
        if let Some(every) = admission::seen_refresh_ms(s.setting(crate::config::ABANDON_AFTER)) {
            if now - seen >= every {
                touch(s, *seq, now, nickname);
            }
        }
    }
    st
}

/// Checks and repairs what STATUS and RANKS read (only records are written).
pub fn begin_observing<S: Store>(s: &mut S) -> Result<i64, QueueError> {
    s.check(&[Part::Waiting])?;
    ensure_layout(s)?;
    let now = s.now();
    opening::open_if_due(s, now)?;
    Ok(now)
}

/// Most users one QUEUE.LINE call lists.
pub const MAX_LINE_PAGE: i64 = 100_000;
/// The highest QUEUE.LINE cursor (numbers stay far below; 2^53 - 1 is exact in Lua).
pub const MAX_CURSOR: i64 = (1 << 53) - 1;

/// Up to `count` waiting users numbered after `cursor` (0: from the head), in line
/// order. Calls with consecutive cursors walk the whole line; each page's ranks are
/// exact when it is read.
pub fn line<S: Store>(s: &S, cursor: i64, count: i64) -> Line<S::User> {
    let mut users = Vec::with_capacity(count.clamp(0, 10_000) as usize);
    let mut last = 0;
    s.waiting_scan(cursor.max(p_max(s)) + 1, i64::MAX, |u, seq| {
        users.push(u);
        last = seq;
        (users.len() as i64) < count
    });
    let first_rank = users.first().and_then(|u| s.waiting_rank(u)).map_or(0, |(rank, _)| rank + 1 - joining(s));
    Line {
        first_rank,
        cursor: if users.len() as i64 == count { last } else { 0 },
        measured_per_min: admissions_per_minute(s, s.now()),
        rate: s.setting(crate::config::RATE),
        users,
    }
}

/// QUEUE.LEAVE: whether the user was in line (waiting or holding a ticket).
pub fn leave<S: Store>(s: &mut S, user: &S::User) -> Result<bool, QueueError> {
    s.check(&[Part::Waiting, Part::Stats])?;
    ensure_layout(s)?;
    let now = s.now();
    opening::open_if_due(s, now)?;
    if opening::leave_pre(s, user) {
        add_stat(s, stat::LEFT, 1);
        s.count(Event::Left, 1);
        return Ok(true);
    }
    let Some(seq) = s.waiting_score(user) else {
        return Ok(false);
    };
    let was_promoted = is_promoted(s, seq);
    remove(s, user, seq, was_promoted);
    add_stat(s, stat::LEFT, 1);
    s.count(Event::Left, 1);
    if was_promoted {
        let now = s.now();
        fill_freed(s, now, &[]);
    }
    Ok(true)
}

/// QUEUE.PROMOTE [MAX n]: housekeeping, then tickets for the head of the line within
/// the soft cap, the token bucket, MAX and batch_max; waiters not heard from within
/// abandon_after are dropped on the way, and a sweep drops silent ones further back.
pub fn promote<S: Store>(s: &mut S, max: Option<i64>) -> Result<Promotion, QueueError> {
    s.check(&ALL_PARTS)?;
    ensure_layout(s)?;
    let cfg = config(s);
    let now = s.now();
    opening::open_if_due(s, now)?;
    sale::note_state(s, now);

    let reaped = reap(s, now);
    let (tickets_expired, leases_expired) = (reaped.tickets, reaped.leases);
    let free = admission::free_slots(cfg.soft_cap(), s.sessions_len(), joining(s));
    let bucket = (cfg.rate() > 0).then(|| bucket(s, now));
    // Nobody is promoted before the opening.
    let max = if opening::before_opening(s, now) { Some(0) } else { max };
    let mut n = admission::promote_count(free, bucket.map(|b| b.whole()), max, cfg.batch_max());
    // Never more tickets and sessions outstanding than units left to sell.
    if let Some(room) = sale::room(s, s.sessions_len()) {
        n = n.min(room);
    }

    let (promoted, mut dropped, top) = admit_head(s, n, cfg.abandon_after(), now);
    dropped += sweep(s, cfg.abandon_after(), now, top);

    if let Some(b) = bucket {
        save_bucket(s, b.take(promoted));
    }
    record_admissions(s, now, promoted);
    note_slot_wait(s, &reaped.freed_at, promoted, now);
    add_stat(s, stat::PROMOTED, promoted);
    add_stat(s, stat::DROPPED, dropped);
    s.count(Event::Promoted, promoted);
    s.count(Event::Dropped, dropped);

    let (active, joining) = (s.sessions_len(), joining(s));
    Ok(Promotion {
        promoted,
        tickets_expired,
        leases_expired,
        dropped,
        waiting: waiting_count(s),
        joining,
        active,
        available_slots: admission::free_slots(cfg.soft_cap(), active, joining),
    })
}

/// Examines up to SWEEP_BUDGET waiters after the sweep cursor and drops those not
/// heard from within abandon_after, so that ranks stay honest; wraps at the end.
fn sweep<S: Store>(s: &mut S, abandon_after: i64, now: i64, top: i64) -> i64 {
    if abandon_after <= 0 || waiting_count(s) == 0 {
        return 0;
    }
    let cursor = stat(s, stat::SWEEP).max(top);
    let mut batch = Vec::new();
    s.waiting_scan(cursor + 1, i64::MAX, |u, seq| {
        batch.push((u, seq));
        batch.len() < SWEEP_BUDGET
    });
    let next = if batch.len() < SWEEP_BUDGET { 0 } else { batch.last().map_or(0, |b| b.1) };
    let mut dropped = 0;
    for (user, seq) in batch {
        let abandoned = match record(s, seq) {
            Some(Rec::Waiting { seen, .. }) => changelog::abandoned(s, &user, seen, now, abandon_after),
            Some(Rec::Promoted { .. }) => false,
            None => true,
        };
        if abandoned {
            remove(s, &user, seq, false);
            dropped += 1;
        }
    }
    if next != cursor {
        s.set_stat(stat::SWEEP, next);
    }
    dropped
}

/// TICKET.CLAIM: a ticket is good exactly once, before it expires, while its user is
/// not inside already and the hard cap allows; it opens a session lease.
pub fn claim<S: Store>(s: &mut S, ticket_id: &[u8]) -> Result<Claimed<S::User>, QueueError> {
    claim_held(s, ticket_id, None)
}

/// TICKET.CLAIM Q ticketId [HOLDER h]: [`claim`], and with a holder the claim is
/// remembered (hash `claimed`) while the session it opened lives, so that the same
/// ticket claimed again by the same holder (a page reloaded, a reply lost) answers
/// the same admission again and changes nothing. Any other repeat is `NOTICKET`.
pub fn claim_held<S: Store>(
    s: &mut S,
    ticket_id: &[u8],
    holder: Option<&[u8]>,
) -> Result<Claimed<S::User>, QueueError> {
    s.check(&ALL_PARTS)?;
    if holder.is_some() {
        s.check(&[Part::Claimed])?;
    }
    ensure_layout(s)?;
    let now = s.now();
    opening::open_if_due(s, now)?;
    let (seq, secret) = ticket::parse_ticket(ticket_id).ok_or(QueueError::NoTicket)?;
    let Some(Rec::Promoted { expiry, secret: held, nickname }) = record(s, seq) else {
        return claimed_before(s, ticket_id, holder, now);
    };
    if !ticket::same_secret(secret, &held) {
        return claimed_before(s, ticket_id, holder, now);
    }
    if expiry <= now {
        expire_claimed(s, seq, now);
        return Err(QueueError::TicketExpired);
    }
    let user = user_at(s, seq).ok_or(QueueError::NoTicket)?;
    if s.session_expiry(&user).is_some_and(|exp| exp > now) {
        return Err(QueueError::AlreadyInside);
    }
    let hard_cap = s.setting(crate::config::HARD_CAP);
    if hard_cap > 0 && live_sessions(s, now) >= hard_cap {
        return Err(QueueError::HardCap);
    }
    remove(s, &user, seq, true);
    let lease = s.setting(crate::config::SESSION_LEASE);
    s.set_lease(&user, now + lease);
    s.set_active(&user, &nickname);
    // A new session: an earlier claim of this user's (its lease ran out unreaped) is
    // no longer the one that is live.
    forget_claim(s, &user);
    sale::forget_bought(s, &user);
    if let Some(holder) = holder {
        let mut entry = holder.to_vec();
        entry.push(CLAIM_SEP);
        entry.extend_from_slice(lease.to_string().as_bytes());
        entry.push(CLAIM_SEP);
        entry.extend_from_slice(user.as_ref());
        s.aux_hset(Aux::Claimed, ticket_id, &entry);
        s.aux_hset(Aux::Claimed, &claim_user_field(&user), ticket_id);
    }
    add_stat(s, stat::CLAIMED, 1);
    s.count(Event::Claimed, 1);
    Ok(Claimed { user, nickname, lease_ms: lease })
}

/// Separates the parts of a `claimed` entry (`holder|leaseMs|userId`): in none of them.
const CLAIM_SEP: u8 = b'|';

/// The `claimed` field naming `user`: `#userId`, whose value is the ticket it claimed.
fn claim_user_field<U: AsRef<[u8]>>(user: &U) -> Vec<u8> {
    let mut f = crate::keys::CLAIMED_USER_MARK.as_bytes().to_vec();
    f.extend_from_slice(user.as_ref());
    f
}

/// A ticket no longer claimable: the same admission again when `holder` claimed it
/// and the session that claim opened still lives (read only: nothing changes), else
/// `NOTICKET`.
fn claimed_before<S: Store>(
    s: &S,
    ticket_id: &[u8],
    holder: Option<&[u8]>,
    now: i64,
) -> Result<Claimed<S::User>, QueueError> {
    let holder = holder.ok_or(QueueError::NoTicket)?;
    let entry = s.aux_hget(Aux::Claimed, ticket_id).ok_or(QueueError::NoTicket)?;
    let mut parts = entry.splitn(3, |&b| b == CLAIM_SEP);
    let (Some(h), Some(lease), Some(user)) = (parts.next(), parts.next(), parts.next()) else {
        return Err(QueueError::NoTicket);
    };
    let lease = crate::args::parse_i64(lease).ok_or(QueueError::NoTicket)?;
    if !ticket::same_secret(holder, h) {
        return Err(QueueError::NoTicket);
    }
    let user = s.user_of(user);
    if s.session_expiry(&user).is_none_or(|exp| exp <= now) {
        return Err(QueueError::NoTicket);
    }
    let nickname = s.active_nickname(&user).ok_or(QueueError::NoTicket)?.as_ref().to_vec();
    Ok(Claimed { user, nickname, lease_ms: lease })
}

/// Drops what `claimed` remembers of `user`'s claim, if anything.
fn forget_claim<S: Store>(s: &mut S, user: &S::User) {
    let field = claim_user_field(user);
    if let Some(ticket) = s.aux_hget(Aux::Claimed, &field) {
        s.aux_hdel(Aux::Claimed, &ticket);
        s.aux_hdel(Aux::Claimed, &field);
    }
}

/// Ends `user`'s session (ended, or its lease ran out): its slot and what `claimed`
/// remembers of the claim that opened it.
fn close_session<S: Store>(s: &mut S, user: &S::User) {
    s.close_session(user);
    forget_claim(s, user);
    sale::forget_bought(s, user);
}

/// A claim found ticket `seq` expired: expired tickets (this one too) and leases are
/// dropped now, as PROMOTE would, and the slots they held go to the head of the line.
fn expire_claimed<S: Store>(s: &mut S, seq: i64, now: i64) {
    let mut freed_at = reap(s, now).freed_at;
    // After ticket_ttl was lowered a newer ticket may expire before older ones, which
    // the reaper (in issue order) has not reached: this one goes all the same.
    if let Some(Rec::Promoted { expiry, .. }) = record(s, seq) {
        if let Some(user) = user_at(s, seq) {
            remove(s, &user, seq, true);
            add_stat(s, stat::TICKETS_EXPIRED, 1);
            s.count(Event::TicketsExpired, 1);
            freed_at.push(expiry);
            freed_at.sort_unstable();
        }
    }
    fill_freed(s, now, &freed_at);
}

/// SESSION.HEARTBEAT: extends each live lease (true), false where none is live.
pub fn heartbeat<S: Store>(s: &mut S, users: &[S::User]) -> Result<Vec<bool>, QueueError> {
    s.check(&[Part::Sessions])?;
    let now = s.now();
    let until = now + s.setting(crate::config::SESSION_LEASE);
    Ok(users
        .iter()
        .map(|u| {
            let live = s.session_expiry(u).is_some_and(|exp| exp > now);
            if live {
                s.set_lease(u, until);
            }
            live
        })
        .collect())
}

/// SESSION.END: whether the user had a session (even one whose lease ran out).
pub fn end<S: Store>(s: &mut S, user: &S::User) -> Result<bool, QueueError> {
    s.check(&[Part::Sessions, Part::Active, Part::Stats])?;
    let ended = s.session_expiry(user).is_some();
    if ended {
        close_session(s, user);
        add_stat(s, stat::ENDED, 1);
        s.count(Event::Ended, 1);
        let now = s.now();
        fill_freed(s, now, &[]);
    }
    Ok(ended)
}

/// QUEUE.INFO, without writing.
pub fn info<S: Store>(s: &S) -> Result<Info, QueueError> {
    s.check(&[Part::Waiting, Part::Sessions, Part::Stats, Part::Config])?;
    let cfg = config(s);
    let now = s.now();
    let (active, joining) = (live_sessions(s, now), joining(s));
    let inventory = sale::inventory(s);
    Ok(Info {
        closed: sale::closed(s, now),
        inventory,
        outstanding: sale::outstanding(s, s.sessions_len()),
        sold_out: inventory == Some(0),
        message: s.message(),
        waiting: waiting_count(s),
        joining,
        active,
        available_slots: admission::free_slots(cfg.soft_cap(), active, joining),
        tokens: if cfg.rate() > 0 { bucket(s, now).whole() } else { -1 },
        admission_rate_per_min: admissions_per_minute(s, now),
        config: cfg,
        entry: s.entry_mode(),
        // Each counter is the stats field of the same name.
        counters: crate::replies::COUNTERS.map(|c| stat(s, c)),
        lane_counts: lane_counts(s),
    })
}

/// QUEUE.INFO's `lane_counts`: per lane of a queue with lanes, in order, how many wait
/// in it now (a count of the lane's band of numbers; the pre-queue not included) and
/// how many were promoted from it; empty without lanes.
pub fn lane_counts<S: Store>(s: &S) -> Vec<LaneCount> {
    let lanes = s.lanes();
    if !lanes.multi() {
        return Vec::new();
    }
    (0..lanes.len())
        .map(|i| {
            let start = band_start(i);
            LaneCount {
                lane: lanes.name(i).to_vec(),
                waiting: s.waiting_count_in(start + 1, start + BAND - 1),
                admitted: s.stat_named(&admitted_field(lanes.name(i))).unwrap_or(0),
            }
        })
        .collect()
}

#[cfg(test)]
mod layering {
    /// The engine's files, bottom first (the order of the list in this module's doc).
    const LAYERS: [(&str, &str); 7] = [
        ("store", include_str!("store.rs")),
        ("layout", include_str!("layout.rs")),
        ("members", include_str!("members.rs")),
        ("opening", include_str!("opening.rs")),
        ("standing", include_str!("standing.rs")),
        ("changelog", include_str!("changelog.rs")),
        ("sale", include_str!("sale.rs")),
    ];

    /// Every `super::x` a file's code (not its comments, not its tests) names: `x`
    /// must be a file of a layer below it, never this module's own items.
    #[test]
    fn imports_only_run_down() {
        for (i, (name, src)) in LAYERS.iter().enumerate() {
            let code = src.split("#[cfg(test)]").next().unwrap_or("");
            for line in code.lines().filter(|l| !l.trim_start().starts_with("//")) {
                for (at, _) in line.match_indices("super::") {
                    let rest = &line[at + "super::".len()..];
                    let used: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                    assert!(
                        LAYERS[..i].iter().any(|(below, _)| *below == used),
                        "engine/{name}.rs uses super::{used}, which is not a file below it: {line}"
                    );
                }
            }
        }
    }
}
