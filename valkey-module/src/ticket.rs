//! TICKET.CLAIM: a ticket is good exactly once.

use crate::counters;
use crate::queue::arity;
use crate::server::{Server, Str};
use crate::state::{Part, Queue};
use queue_core::keys::check_ticket;
use queue_core::QueueError;

/// TICKET.CLAIM <queue> <ticketId>
pub fn claim(srv: &Server, args: &[Str]) -> Result<(), QueueError> {
    arity(args.len() == 3, "ticket.claim")?;
    let ticket = args[2];
    check_ticket(ticket.bytes())?;
    let mut q = Queue::open(srv, args[1], true)?;
    q.check(&[Part::Tickets, Part::Ticket, Part::Promoted, Part::Sessions, Part::Active, Part::Stats])?;
    let now = srv.now_ms();

    let expiry = q.tickets().zscore(ticket).ok_or(QueueError::NoTicket)? as i64;
    if expiry <= now {
        return Err(QueueError::TicketExpired);
    }
    let (user, nickname) = q.ticket_holder(ticket).ok_or(QueueError::NoTicket)?;
    if q.sessions().zscore(user).is_some_and(|exp| exp as i64 > now) {
        return Err(QueueError::AlreadyInside);
    }
    let (active, _) = q.live_counts(now);
    if q.hard_cap() > 0 && active >= q.hard_cap() {
        return Err(QueueError::HardCap);
    }

    q.remove_ticket(ticket, Some(user));
    let until = now + q.session_lease();
    q.open_session(user, nickname, until);
    q.add_stat("claimed", 1);
    counters::add(&counters::CLAIMED, 1);

    srv.reply_map(4);
    srv.field_bulk("userId", Some(user.bytes()));
    srv.field_bulk("nickname", Some(nickname.bytes()));
    srv.field_bulk("ticketId", Some(ticket.bytes()));
    srv.field_int("leaseMs", q.session_lease());
    q.finish(c"ticket.claim");
    Ok(())
}
