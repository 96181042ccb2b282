//! TICKET.CLAIM: a ticket is good exactly once.

use crate::counters;
use crate::queue::arity;
use crate::server::{Server, Str, Val};
use crate::state::{Queue, Rec, ALL_PARTS};
use queue_core::keys::check_ticket;
use queue_core::ticket::{parse_ticket, same_secret};
use queue_core::QueueError;

/// TICKET.CLAIM <queue> <ticketId>
pub fn claim(srv: &Server, args: &[Str]) -> Result<(), QueueError> {
    arity(args.len() == 3, "ticket.claim")?;
    let ticket = args[2];
    check_ticket(ticket.bytes())?;
    let mut q = Queue::open(srv, args[1], true)?;
    q.check(&ALL_PARTS)?;
    q.ensure_layout()?;
    let now = q.now();

    let (seq, secret) = parse_ticket(ticket.bytes()).ok_or(QueueError::NoTicket)?;
    let Some(Rec::Promoted { expiry, secret: held, nickname }) = q.record(seq) else {
        return Err(QueueError::NoTicket);
    };
    if !same_secret(secret, &held) {
        return Err(QueueError::NoTicket);
    }
    if expiry <= now {
        return Err(QueueError::TicketExpired);
    }
    let user = q.user_at(seq).ok_or(QueueError::NoTicket)?;
    if q.sessions().zscore(user).is_some_and(|exp| exp as i64 > now) {
        return Err(QueueError::AlreadyInside);
    }
    if q.hard_cap() > 0 && q.live_sessions(now) >= q.hard_cap() {
        return Err(QueueError::HardCap);
    }

    q.remove(user, seq, true);
    let lease = q.session_lease();
    q.open_session(user, srv.str(&nickname), now + lease);
    q.add_stat("claimed", 1);
    counters::add(&counters::CLAIMED, 1);

    srv.reply_fields(
        &queue_core::replies::CLAIM,
        &[
            ("userId", Val::Bulk(user.bytes())),
            ("nickname", Val::Bulk(&nickname)),
            ("ticketId", Val::Bulk(ticket.bytes())),
            ("leaseMs", Val::Int(lease)),
        ],
    );
    q.finish(c"ticket.claim");
    Ok(())
}
