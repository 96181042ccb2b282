//! QUEUE.CODES: a queue's access codes (rules in `queue_core::engine::codes_*`).

use crate::queue::arity;
use crate::server::{Server, Str};
use crate::state::Queue;
use queue_core::engine;
use queue_core::lanes::{check_code, MAX_CODES_PER_CALL, MAX_CODE_USES};
use queue_core::QueueError;

/// The code hashes of a call, checked: at most `MAX_CODES_PER_CALL`, each 64 hex digits.
fn hashes(args: &[Str]) -> Result<Vec<&[u8]>, QueueError> {
    if args.len() > MAX_CODES_PER_CALL {
        return Err(QueueError::TooManyCodes);
    }
    args.iter().map(|h| check_code(h.bytes())).collect()
}

/// QUEUE.CODES <queue> ADD <lane> <uses> <hash> [hash ...]
/// QUEUE.CODES <queue> REMOVE <hash> [hash ...]
/// QUEUE.CODES <queue> COUNTS
pub fn codes(srv: &Server, args: &[Str]) -> Result<(), QueueError> {
    arity(args.len() >= 3, "queue.codes")?;
    let sub = args[2].bytes();
    if sub.eq_ignore_ascii_case(b"ADD") {
        arity(args.len() >= 6, "queue.codes")?;
        let uses = queue_core::args::Args::new(&[args[4].bytes()]).next_in_range("uses", 1, MAX_CODE_USES)?;
        let hs = hashes(&args[5..])?;
        let mut q = Queue::open(srv, args[1], true)?;
        let added = engine::codes_add(&mut q, args[3].bytes(), uses, &hs);
        q.finish(c"queue.codes");
        srv.reply_int(added?);
    } else if sub.eq_ignore_ascii_case(b"REMOVE") {
        arity(args.len() >= 4, "queue.codes")?;
        let hs = hashes(&args[3..])?;
        let mut q = Queue::open(srv, args[1], true)?;
        let removed = engine::codes_remove(&mut q, &hs);
        q.finish(c"queue.codes");
        srv.reply_int(removed?);
    } else if sub.eq_ignore_ascii_case(b"COUNTS") {
        arity(args.len() == 3, "queue.codes")?;
        let q = Queue::open(srv, args[1], false)?;
        let counts = engine::codes_counts(&q)?;
        srv.reply_array(counts.len());
        for (lane, codes, used, left) in counts {
            srv.reply_array(4);
            srv.reply_bulk(&lane);
            srv.reply_int(codes);
            srv.reply_int(used);
            srv.reply_int(left);
        }
    } else {
        return Err(QueueError::Syntax);
    }
    Ok(())
}
