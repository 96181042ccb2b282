//! QUEUE.ENTER, QUEUE.PASS, QUEUE.STATUS, QUEUE.RANKS, QUEUE.LINE, QUEUE.LEAVE, QUEUE.PROMOTE,
//! QUEUE.INFO, QUEUE.OPENING: arguments and replies; the rules are in
//! `queue_core::engine`.

use crate::server::{Server, Str, Val};
use crate::state::Queue;
use queue_core::admission::MAX_PROMOTE;
use queue_core::engine::{self, Invitation, Standing, Store};
use queue_core::keys::{check_nickname, check_user};
use queue_core::lanes::{check_code, Lanes};
use queue_core::replies;
use queue_core::QueueError;

pub fn arity(ok: bool, cmd: &'static str) -> Result<(), QueueError> {
    if ok {
        Ok(())
    } else {
        Err(QueueError::Arity(cmd))
    }
}

/// The reply describing where a user stands (the seed's JSON fields, and in a queue
/// with lanes `lane`: the lane a waiting user waits in, else nil).
pub fn reply_standing(srv: &Server, user: Str, standing: &Standing, eta: Option<i64>, lanes: &Lanes) {
    // In the order of `replies::STANDING` (room for `lane`, without growing).
    let mut fields = Vec::with_capacity(replies::STANDING_LANE.len());
    fields.extend([
        ("nickname", Val::opt_bulk(standing.nickname())),
        ("ticketId", Val::opt_bulk(standing.ticket())),
        ("status", Val::Bulk(standing.status().as_bytes())),
        ("estimatedWaitSeconds", Val::opt_int(eta)),
        ("userId", Val::Bulk(user.bytes())),
        ("rank", Val::Int(standing.rank())),
        ("opensAt", Val::opt_int(standing.opens_at())),
    ]);
    if !lanes.multi() {
        srv.reply_fields(&replies::STANDING, &fields);
        return;
    }
    let lane = match standing {
        Standing::Waiting { seq, .. } => lanes.lane_of(*seq).map(|i| lanes.name(i)),
        _ => None,
    };
    fields.push(("lane", Val::opt_bulk(lane)));
    srv.reply_fields(&replies::STANDING_LANE, &fields);
}

/// QUEUE.ENTER's options after the nickname: `LANE l` and `CODE h`, each at most once.
fn invitation(opts: &[Str]) -> Result<Invitation<'_>, QueueError> {
    let mut inv = Invitation::default();
    if !opts.len().is_multiple_of(2) {
        return Err(QueueError::Syntax);
    }
    for pair in opts.chunks(2) {
        let (word, v) = (pair[0].bytes(), pair[1].bytes());
        if word.eq_ignore_ascii_case(b"LANE") && inv.lane.is_none() {
            inv.lane = Some(v);
        } else if word.eq_ignore_ascii_case(b"CODE") && inv.code.is_none() {
            inv.code = Some(check_code(v)?);
        } else {
            return Err(QueueError::Syntax);
        }
    }
    Ok(inv)
}

/// QUEUE.ENTER <queue> <userId> <nickname> [LANE <lane>] [CODE <hash>]
pub fn enter(srv: &Server, args: &[Str]) -> Result<(), QueueError> {
    arity(args.len() >= 4, "queue.enter")?;
    let user = args[2];
    check_user(user.bytes())?;
    let nickname = check_nickname(args[3].bytes())?;
    let inv = invitation(&args[4..])?;
    let mut q = Queue::open(srv, args[1], true)?;
    // The code's hash is read and written as the codes hash's field: the argument
    // itself serves, rather than a copy made for it.
    if let Some(pair) = args[4..].chunks(2).find(|p| p[0].bytes().eq_ignore_ascii_case(b"CODE")) {
        q.offer_field(pair[1]);
    }
    let result = engine::enter_with(&mut q, &user, nickname, inv).map(|st| {
        let eta = engine::eta(&q, &st);
        (st, eta)
    });
    let lanes = q.lanes();
    q.finish(c"queue.enter");
    let (standing, eta) = result?;
    reply_standing(srv, user, &standing, eta, &lanes);
    Ok(())
}

/// QUEUE.PASS <queue> <userId> <nickname> [HOLDER <holder>]
pub fn pass(srv: &Server, args: &[Str]) -> Result<(), QueueError> {
    arity(args.len() == 4 || args.len() == 6, "queue.pass")?;
    let user = args[2];
    check_user(user.bytes())?;
    let nickname = check_nickname(args[3].bytes())?;
    let holder = crate::ticket::holder_option(args.get(4..6))?;
    let mut q = Queue::open(srv, args[1], true)?;
    let result = engine::pass(&mut q, &user, nickname, holder);
    q.finish(c"queue.pass");
    match result? {
        Some((ticket, c)) => srv.reply_fields(
            &replies::CLAIM,
            &[
                ("userId", Val::Bulk(c.user.bytes())),
                ("nickname", Val::Bulk(&c.nickname)),
                ("ticketId", Val::Bulk(&ticket)),
                ("leaseMs", Val::Int(c.lease_ms)),
            ],
        ),
        None => srv.reply_null(),
    }
    Ok(())
}

/// QUEUE.STATUS <queue> <userId>
pub fn status(srv: &Server, args: &[Str]) -> Result<(), QueueError> {
    arity(args.len() == 3, "queue.status")?;
    let user = args[2];
    check_user(user.bytes())?;
    let mut q = Queue::open(srv, args[1], true)?;
    let result = engine::begin_observing(&mut q).map(|now| {
        let st = engine::observe(&mut q, &user, now);
        let eta = engine::eta(&q, &st);
        (st, eta)
    });
    let lanes = q.lanes();
    q.finish(c"queue.seen");
    let (standing, eta) = result?;
    reply_standing(srv, user, &standing, eta, &lanes);
    Ok(())
}

/// QUEUE.RANKS <queue> <userId> [userId ...]
pub fn ranks(srv: &Server, args: &[Str]) -> Result<(), QueueError> {
    arity(args.len() >= 3, "queue.ranks")?;
    for u in &args[2..] {
        check_user(u.bytes())?;
    }
    let mut q = Queue::open(srv, args[1], true)?;
    let now = match engine::begin_observing(&mut q) {
        Ok(now) => now,
        Err(e) => {
            q.finish(c"queue.seen");
            return Err(e);
        }
    };
    let lanes = q.lanes();
    srv.reply_array(args.len() - 2);
    for &user in &args[2..] {
        let st = engine::observe(&mut q, &user, now);
        let eta = engine::eta(&q, &st);
        reply_standing(srv, user, &st, eta, &lanes);
    }
    q.finish(c"queue.seen");
    Ok(())
}

/// QUEUE.LINE <queue> <cursor> <count>
pub fn line(srv: &Server, args: &[Str]) -> Result<(), QueueError> {
    arity(args.len() == 4, "queue.line")?;
    let cursor = queue_core::args::Args::new(&[args[2].bytes()]).next_in_range("cursor", 0, engine::MAX_CURSOR)?;
    let count = queue_core::args::Args::new(&[args[3].bytes()]).next_in_range("count", 1, engine::MAX_LINE_PAGE)?;
    let mut q = Queue::open(srv, args[1], true)?;
    let result = engine::begin_observing(&mut q).map(|_| engine::line(&q, cursor, count));
    let page = match result {
        Ok(page) => page,
        Err(e) => {
            q.finish(c"queue.seen");
            return Err(e);
        }
    };
    srv.reply_array(5);
    for v in [page.first_rank, page.cursor, page.measured_per_min, page.rate] {
        srv.reply_int(v);
    }
    srv.reply_array(page.users.len());
    for u in &page.users {
        srv.reply_bulk(u.bytes());
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
    let result = engine::leave(&mut q, &user);
    q.finish(c"queue.leave");
    srv.reply_int(i64::from(result?));
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
    let result = engine::promote(&mut q, max);
    q.finish(c"queue.promote");
    let fields = result?.fields().map(|(f, v)| (f, Val::Int(v)));
    srv.reply_fields(&replies::PROMOTE, &fields);
    Ok(())
}

/// QUEUE.INFO <queue>
pub fn info(srv: &Server, args: &[Str]) -> Result<(), QueueError> {
    arity(args.len() == 2, "queue.info")?;
    let q = Queue::open(srv, args[1], false)?;
    let info = engine::info(&q)?;
    let mut fields: Vec<(&str, Val)> = info.fields().into_iter().map(|(f, v)| (f, Val::Int(v))).collect();
    fields.push((queue_core::config::ENTRY, Val::Bulk(info.entry.as_str().as_bytes())));
    let lanes = q.lanes().text();
    fields.push((queue_core::lanes::LANES, Val::Bulk(&lanes)));
    fields.push((queue_core::config::INVENTORY, Val::opt_int(info.inventory)));
    fields.push((queue_core::config::MESSAGE, Val::Bulk(&info.message)));
    // `lane_counts`: an array of [lane, waiting, admitted], in its place in the order.
    srv.reply_map(replies::INFO.len());
    for name in replies::INFO {
        srv.reply_bulk(name.as_bytes());
        if name == replies::LANE_COUNTS {
            srv.reply_array(info.lane_counts.len());
            for l in &info.lane_counts {
                srv.reply_array(3);
                srv.reply_bulk(&l.lane);
                srv.reply_int(l.waiting);
                srv.reply_int(l.admitted);
            }
        } else {
            let (_, v) = fields.iter().find(|(f, _)| *f == name).expect("every ordered field is given");
            srv.reply_val(v);
        }
    }
    Ok(())
}

/// QUEUE.SOLD <queue> <n> [USER <userId>]
pub fn sold(srv: &Server, args: &[Str]) -> Result<(), QueueError> {
    arity(args.len() == 3 || args.len() == 5, "queue.sold")?;
    let n = queue_core::args::Args::new(&[args[2].bytes()]).next_in_range("n", 0, queue_core::config::MAX_INVENTORY)?;
    let user = if args.len() == 5 {
        if !args[3].bytes().eq_ignore_ascii_case(b"USER") {
            return Err(QueueError::Syntax);
        }
        check_user(args[4].bytes())?;
        // A report of nothing sold cannot free a unit for someone else.
        if n < 1 {
            return Err(QueueError::OutOfRange("n", 1, queue_core::config::MAX_INVENTORY));
        }
        Some(args[4])
    } else {
        None
    };
    let mut q = Queue::open(srv, args[1], true)?;
    let left = engine::sale::sold(&mut q, n, user.as_ref());
    q.finish(c"queue.sold");
    srv.reply_val(&Val::opt_int(left?));
    Ok(())
}

/// QUEUE.OPENING <queue> [PROOF start count]
pub fn opening(srv: &Server, args: &[Str]) -> Result<(), QueueError> {
    arity(args.len() == 2 || args.len() == 5, "queue.opening")?;
    let page = if args.len() == 5 {
        let rest: Vec<&[u8]> = args[2..].iter().map(|s| s.bytes()).collect();
        let mut opts = queue_core::args::Args::new(&rest);
        if !opts.eat_keyword("PROOF") {
            return Err(QueueError::Syntax);
        }
        let start = opts.next_in_range("start", 0, engine::MAX_CURSOR)?;
        let count = opts.next_in_range("count", 1, queue_core::opening::MAX_PROOF_PAGE)?;
        Some((start, count))
    } else {
        None
    };
    let q = Queue::open(srv, args[1], false)?;
    if let Some((start, count)) = page {
        let items = queue_core::opening::proof(&q, start, count);
        srv.reply_array(items.len());
        for i in &items {
            srv.reply_bulk(i);
        }
        return Ok(());
    }
    let o = queue_core::opening::info(&q);
    let fields = [
        ("opensAt", Val::Int(o.opens_at)),
        ("commitment", Val::opt_bulk(o.commitment.as_deref().map(str::as_bytes))),
        ("state", Val::Bulk(o.state.as_str().as_bytes())),
        ("seed", Val::opt_bulk(o.seed.as_deref().map(str::as_bytes))),
        ("openedAt", Val::opt_int(o.opened_at)),
        ("entrants", Val::Int(o.entrants)),
    ];
    if o.lanes.is_empty() {
        srv.reply_fields(&replies::OPENING, &fields);
        return Ok(());
    }
    // With lanes: `lanes`, an array of [name, entrants], in its place in the order.
    srv.reply_map(replies::OPENING_LANES.len());
    for name in replies::OPENING_LANES {
        srv.reply_bulk(name.as_bytes());
        if name == "lanes" {
            srv.reply_array(o.lanes.len());
            for (lane, n) in &o.lanes {
                srv.reply_array(2);
                srv.reply_bulk(lane);
                srv.reply_int(*n);
            }
        } else {
            let (_, v) = fields.iter().find(|(f, _)| *f == name).expect("every ordered field is given");
            srv.reply_val(v);
        }
    }
    Ok(())
}
