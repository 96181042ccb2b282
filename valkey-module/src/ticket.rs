//! TICKET.CLAIM: a ticket is good exactly once (rules in `queue_core::engine::claim`).

use crate::queue::arity;
use crate::server::{Server, Str, Val};
use crate::state::Queue;
use queue_core::engine;
use queue_core::keys::{check_holder, check_ticket};
use queue_core::QueueError;

/// The optional `HOLDER h` that ends TICKET.CLAIM and QUEUE.PASS: `rest` is the two
/// arguments after the required ones, when given (the arity is checked before).
pub(crate) fn holder_option(rest: Option<&[Str]>) -> Result<Option<&[u8]>, QueueError> {
    match rest {
        Some([option, holder]) => {
            if !option.bytes().eq_ignore_ascii_case(b"HOLDER") {
                return Err(QueueError::Syntax);
            }
            Ok(Some(check_holder(holder.bytes())?.as_bytes()))
        }
        _ => Ok(None),
    }
}

/// TICKET.CLAIM <queue> <ticketId> [HOLDER <holder>]
pub fn claim(srv: &Server, args: &[Str]) -> Result<(), QueueError> {
    arity(args.len() == 3 || args.len() == 5, "ticket.claim")?;
    let ticket = args[2];
    check_ticket(ticket.bytes())?;
    let holder = holder_option(args.get(3..5))?;
    let mut q = Queue::open(srv, args[1], true)?;
    let result = engine::claim_held(&mut q, ticket.bytes(), holder);
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
