//! SESSION.HEARTBEAT and SESSION.END: a session holds its slot through a lease, so
//! a server that dies frees its users' slots when their leases run out.

use crate::queue::arity;
use crate::server::{Server, Str};
use crate::state::Queue;
use queue_core::engine;
use queue_core::keys::check_user;
use queue_core::QueueError;

/// SESSION.HEARTBEAT <queue> <userId> [userId ...]
///
/// Replies one integer per user: 1 when its lease was extended, 0 when it holds no
/// live lease (its server should disconnect it).
pub fn heartbeat(srv: &Server, args: &[Str]) -> Result<(), QueueError> {
    arity(args.len() >= 3, "session.heartbeat")?;
    for u in &args[2..] {
        check_user(u.bytes())?;
    }
    let mut q = Queue::open(srv, args[1], true)?;
    let live = engine::heartbeat(&mut q, &args[2..])?;
    srv.reply_array(live.len());
    for l in live {
        srv.reply_int(i64::from(l));
    }
    q.finish(c"session.heartbeat");
    Ok(())
}

/// SESSION.END <queue> <userId>
pub fn end(srv: &Server, args: &[Str]) -> Result<(), QueueError> {
    arity(args.len() == 3, "session.end")?;
    let user = args[2];
    check_user(user.bytes())?;
    let mut q = Queue::open(srv, args[1], true)?;
    let ended = engine::end(&mut q, &user)?;
    srv.reply_int(i64::from(ended));
    q.finish(c"session.end");
    Ok(())
}
