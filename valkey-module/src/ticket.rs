//! TICKET.CLAIM: a ticket is good exactly once (rules in `queue_core::engine::claim`).

use crate::queue::arity;
use crate::server::{Server, Str, Val};
use crate::state::Queue;
use queue_core::engine;
use queue_core::keys::check_ticket;
use queue_core::QueueError;

/// TICKET.CLAIM <queue> <ticketId>
pub fn claim(srv: &Server, args: &[Str]) -> Result<(), QueueError> {
    arity(args.len() == 3, "ticket.claim")?;
    let ticket = args[2];
    check_ticket(ticket.bytes())?;
    let mut q = Queue::open(srv, args[1], true)?;
    let result = engine::claim(&mut q, ticket.bytes());
    // A refused claim may still have repaired old data (engine::ensure_layout).
    q.finish(c"ticket.claim");
    let c = result?;
    srv.reply_fields(
        &queue_core::replies::CLAIM,
        &[
            ("userId", Val::Bulk(c.user.bytes())),
            ("nickname", Val::Bulk(&c.nickname)),
            ("ticketId", Val::Bulk(ticket.bytes())),
            ("leaseMs", Val::Int(c.lease_ms)),
        ],
    );
    Ok(())
}
