//! QUEUE.ENTER, QUEUE.STATUS, QUEUE.RANKS, QUEUE.LEAVE, QUEUE.PROMOTE, QUEUE.INFO.

use crate::counters;
use crate::server::{Server, Str, Val};
use crate::state::{Part, Queue, Rec, Standing, ALL_PARTS};
use queue_core::admission::{self, estimated_wait_seconds, free_slots, is_abandoned, promote_count};
use queue_core::config::FIELDS;
use queue_core::keys::{check_nickname, check_user};
use queue_core::replies;
use queue_core::QueueError;

/// Most MAX a PROMOTE accepts (the same as the largest batch_max). MAX 0 does the
/// housekeeping (expired tickets and leases, silent waiters) and admits no one.
pub const MAX_PROMOTE: i64 = 100_000;
/// Waiters a PROMOTE examines beyond the head to drop those who left without a word.
pub const SWEEP_BUDGET: usize = 256;

pub fn arity(ok: bool, cmd: &'static str) -> Result<(), QueueError> {
    if ok {
        Ok(())
    } else {
        Err(QueueError::Arity(cmd))
    }
}

/// The reply describing where a user stands (the seed's JSON fields).
pub fn reply_standing(srv: &Server, user: Str, standing: &Standing, eta: Option<i64>) {
    let (status, rank, nickname, ticket): (&str, i64, Option<&[u8]>, Option<&[u8]>) = match standing {
        Standing::Waiting { rank, nickname, .. } => ("WAITING", *rank, Some(nickname), None),
        Standing::Promoted { ticket, nickname } => ("PROMOTED", 0, Some(nickname), Some(ticket)),
        Standing::Active { nickname } => ("ACTIVE", 0, nickname.map(Str::bytes), None),
        Standing::Unknown => ("UNKNOWN", 0, None, None),
    };
    srv.reply_fields(
        &replies::STANDING,
        &[
            ("status", Val::Bulk(status.as_bytes())),
            ("rank", Val::Int(rank)),
            ("userId", Val::Bulk(user.bytes())),
            ("nickname", Val::opt_bulk(nickname)),
            ("ticketId", Val::opt_bulk(ticket)),
            ("estimatedWaitSeconds", Val::opt_int(eta)),
        ],
    );
}

fn eta_for(q: &Queue, standing: &Standing) -> Option<i64> {
    match standing {
        Standing::Waiting { rank, .. } => {
            let measured = q.stat("rate_per_min");
            estimated_wait_seconds(*rank, measured, if measured > 0 { 0 } else { q.rate() })
        }
        _ => None,
    }
}

/// QUEUE.ENTER <queue> <userId> <nickname>
///
/// A user who is inside may queue again (say, from a second device); claiming the
/// new ticket fails with INSIDE while the first session lives.
pub fn enter(srv: &Server, args: &[Str]) -> Result<(), QueueError> {
    arity(args.len() == 4, "queue.enter")?;
    let user = args[2];
    check_user(user.bytes())?;
    let nickname = check_nickname(args[3].bytes())?;
    let mut q = Queue::open(srv, args[1], true)?;
    q.check(&[Part::Waiting, Part::Stats])?;
    q.ensure_layout()?;
    let now = q.now();

    // Re-entry goes to the back: give up the old place and any unclaimed ticket.
    let old = q.waiting().zscore(user).map(|s| s as i64);
    let may_admit_now = q.waiting_count() == i64::from(old.is_some_and(|seq| !q.is_promoted(seq))) && q.soft_cap() > 0;
    if may_admit_now {
        q.check(&ALL_PARTS)?;
    }
    if let Some(seq) = old {
        let was_promoted = q.is_promoted(seq);
        q.remove(user, seq, was_promoted);
    }
    // The next number in line: after everyone in it and every ticket holder (numbers
    // of people who left are never needed again, so no counter is written per entry).
    let seq = q.next_seq();
    counters::add(&counters::ENTERED, 1);

    // Nobody waits: let the user in at once if there is room (and a token).
    if may_admit_now {
        q.reap(now);
        let free = free_slots(q.soft_cap(), q.sessions().len(), q.joining());
        let bucket = (q.rate() > 0).then(|| q.bucket(now));
        if free > 0 && bucket.is_none_or(|b| b.whole() >= 1) {
            q.add_waiter(user, seq, now, nickname);
            let ticket = q.promote_user(seq, nickname, now);
            q.note_promoted(1, seq);
            if let Some(b) = bucket {
                q.save_bucket(b.take(1));
            }
            let w = q.rate_window();
            q.save_rate_window(w, w.record(now, 1));
            q.add_stat("promoted", 1);
            counters::add(&counters::PROMOTED, 1);
            let standing = Standing::Promoted { ticket, nickname: nickname.to_vec() };
            reply_standing(srv, user, &standing, None);
            q.finish(c"queue.enter");
            return Ok(());
        }
    }
    q.add_waiter(user, seq, now, nickname);
    let rank = q.waiting_count();
    let standing = Standing::Waiting { seq, rank, seen: now, nickname: nickname.to_vec() };
    let eta = eta_for(&q, &standing);
    reply_standing(srv, user, &standing, eta);
    q.finish(c"queue.enter");
    Ok(())
}

/// Looks up one user for STATUS/RANKS, noting that a waiting user was heard from.
fn observe(q: &mut Queue, user: Str, now: i64) -> Standing {
    let standing = q.standing(user, now);
    if let Standing::Waiting { seq, seen, nickname, .. } = &standing {
        if let Some(every) = admission::seen_refresh_ms(q.abandon_after()) {
            if now - seen >= every {
                q.touch(*seq, now, nickname);
            }
        }
    }
    standing
}

/// QUEUE.STATUS <queue> <userId>
pub fn status(srv: &Server, args: &[Str]) -> Result<(), QueueError> {
    arity(args.len() == 3, "queue.status")?;
    let user = args[2];
    check_user(user.bytes())?;
    let mut q = Queue::open(srv, args[1], true)?;
    // Only records are written (last-seen times); other keys are read defensively.
    q.check(&[Part::Waiting])?;
    q.ensure_layout()?;
    let now = q.now();
    let standing = observe(&mut q, user, now);
    let eta = eta_for(&q, &standing);
    reply_standing(srv, user, &standing, eta);
    q.finish(c"queue.seen");
    Ok(())
}

/// QUEUE.RANKS <queue> <userId> [userId ...]
pub fn ranks(srv: &Server, args: &[Str]) -> Result<(), QueueError> {
    arity(args.len() >= 3, "queue.ranks")?;
    for u in &args[2..] {
        check_user(u.bytes())?;
    }
    let mut q = Queue::open(srv, args[1], true)?;
    // Only records are written (last-seen times); other keys are read defensively.
    q.check(&[Part::Waiting])?;
    q.ensure_layout()?;
    let now = q.now();
    srv.reply_array(args.len() - 2);
    for &user in &args[2..] {
        let standing = observe(&mut q, user, now);
        let eta = eta_for(&q, &standing);
        reply_standing(srv, user, &standing, eta);
    }
    q.finish(c"queue.seen");
    Ok(())
}

/// QUEUE.LEAVE <queue> <userId>
pub fn leave(srv: &Server, args: &[Str]) -> Result<(), QueueError> {
    arity(args.len() == 3, "queue.leave")?;
    let user = args[2];
    check_user(user.bytes())?;
    let mut q = Queue::open(srv, args[1], true)?;
    q.check(&[Part::Waiting, Part::Stats])?;
    q.ensure_layout()?;
    let seq = q.waiting().zscore(user).map(|s| s as i64);
    if let Some(seq) = seq {
        let was_promoted = q.is_promoted(seq);
        q.remove(user, seq, was_promoted);
        q.add_stat("left", 1);
        counters::add(&counters::LEFT, 1);
    }
    srv.reply_int(i64::from(seq.is_some()));
    q.finish(c"queue.leave");
    Ok(())
}

/// QUEUE.PROMOTE <queue> [MAX n]
pub fn promote(srv: &Server, args: &[Str]) -> Result<(), QueueError> {
    arity(args.len() == 2 || args.len() == 4, "queue.promote")?;
    let rest: Vec<&[u8]> = args[2..].iter().map(|s| s.bytes()).collect();
    let mut opts = queue_core::args::Args::new(&rest);
    let mut max = None;
    while !opts.is_done() {
        if opts.eat_keyword("MAX") {
            max = Some(opts.next_in_range("MAX", 0, MAX_PROMOTE)?);
        } else {
            return Err(QueueError::Syntax);
        }
    }
    let mut q = Queue::open(srv, args[1], true)?;
    q.check(&ALL_PARTS)?;
    q.ensure_layout()?;
    let cfg = q.config();
    let now = q.now();

    let (tickets_expired, leases_expired) = q.reap(now);
    let free = free_slots(cfg.soft_cap(), q.sessions().len(), q.joining());
    let bucket = (cfg.rate() > 0).then(|| q.bucket(now));
    let n = promote_count(free, bucket.map(|b| b.whole()), max, cfg.batch_max());

    // Issue tickets to the head of the waiting users (right after the promoted
    // ones); those who left without a word are dropped on the way, never promoted.
    let mut promoted = 0i64;
    let mut dropped = 0i64;
    let mut p_max = q.p_max();
    if n > 0 {
        let head = q.waiting().zrange(p_max as f64 + 1.0, f64::INFINITY, n as usize + SWEEP_BUDGET);
        for (user, seq) in head {
            if promoted == n {
                break;
            }
            let seq = seq as i64;
            match q.record(seq) {
                Some(Rec::Waiting { seen, nickname }) if !is_abandoned(seen, now, cfg.abandon_after()) => {
                    q.promote_user(seq, &nickname, now);
                    promoted += 1;
                    p_max = seq;
                }
                _ => {
                    q.remove(user, seq, false);
                    dropped += 1;
                }
            }
        }
    }
    q.note_promoted(promoted, p_max);
    dropped += sweep(&mut q, cfg.abandon_after(), now, p_max);

    if let Some(b) = bucket {
        q.save_bucket(b.take(promoted));
    }
    let w = q.rate_window();
    q.save_rate_window(w, w.record(now, promoted));
    q.add_stat("promoted", promoted);
    q.add_stat("dropped", dropped);
    counters::add(&counters::PROMOTED, promoted);
    counters::add(&counters::DROPPED, dropped);

    let (active, joining) = (q.sessions().len(), q.joining());
    srv.reply_fields(
        &replies::PROMOTE,
        &[
            ("promoted", Val::Int(promoted)),
            ("tickets_expired", Val::Int(tickets_expired)),
            ("leases_expired", Val::Int(leases_expired)),
            ("dropped", Val::Int(dropped)),
            ("waiting", Val::Int(q.waiting_count())),
            ("joining", Val::Int(joining)),
            ("active", Val::Int(active)),
            ("available_slots", Val::Int(free_slots(cfg.soft_cap(), active, joining))),
        ],
    );
    q.finish(c"queue.promote");
    Ok(())
}

/// Examines up to SWEEP_BUDGET waiters after the sweep cursor and drops those not
/// heard from within abandon_after, so that ranks stay honest; wraps at the end.
fn sweep(q: &mut Queue, abandon_after: i64, now: i64, p_max: i64) -> i64 {
    if abandon_after <= 0 || q.waiting_count() == 0 {
        return 0;
    }
    let cursor = q.stat("sweep").max(p_max);
    let batch = q.waiting().zrange(cursor as f64 + 1.0, f64::INFINITY, SWEEP_BUDGET);
    let next = if batch.len() < SWEEP_BUDGET { 0 } else { batch.last().map_or(0, |&(_, s)| s as i64) };
    let mut dropped = 0;
    for (user, seq) in batch {
        let seq = seq as i64;
        let abandoned = match q.record(seq) {
            Some(Rec::Waiting { seen, .. }) => is_abandoned(seen, now, abandon_after),
            Some(Rec::Promoted { .. }) => false,
            None => true,
        };
        if abandoned {
            q.remove(user, seq, false);
            dropped += 1;
        }
    }
    if next != cursor {
        q.set_stat("sweep", next);
    }
    dropped
}

/// QUEUE.INFO <queue>
pub fn info(srv: &Server, args: &[Str]) -> Result<(), QueueError> {
    arity(args.len() == 2, "queue.info")?;
    let q = Queue::open(srv, args[1], false)?;
    q.check(&[Part::Waiting, Part::Sessions, Part::Stats, Part::Config])?;
    let cfg = q.config();
    let now = q.now();
    let (active, joining) = (q.live_sessions(now), q.joining());
    let tokens = if cfg.rate() > 0 { q.bucket(now).whole() } else { -1 };
    let mut fields = vec![
        ("waiting", Val::Int(q.waiting_count())),
        ("joining", Val::Int(joining)),
        ("active", Val::Int(active)),
        ("available_slots", Val::Int(free_slots(cfg.soft_cap(), active, joining))),
        ("tokens", Val::Int(tokens)),
        ("admission_rate_per_min", Val::Int(q.stat("rate_per_min"))),
    ];
    fields.extend(FIELDS.iter().zip(cfg.values).map(|(f, v)| (f.name, Val::Int(v))));
    fields.extend(replies::COUNTERS.iter().map(|&c| (c, Val::Int(q.stat(c)))));
    srv.reply_fields(&replies::INFO, &fields);
    Ok(())
}
