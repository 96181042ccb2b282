//! SESSION.HEARTBEAT and SESSION.END: a session holds its slot through a lease, so
//! a server that dies frees its users' slots when their leases run out.

use crate::counters;
use crate::queue::arity;
use crate::server::{Server, Str};
use crate::state::{Part, Queue};
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
    q.check(&[Part::Sessions])?;
    let now = q.now();
    let until = now + q.session_lease();
    srv.reply_array(args.len() - 2);
    for &user in &args[2..] {
        let live = q.sessions().zscore(user).is_some_and(|exp| exp as i64 > now);
        if live {
            q.extend_session(user, until);
        }
        srv.reply_int(i64::from(live));
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
    q.check(&[Part::Sessions, Part::Active, Part::Stats])?;
    let ended = q.sessions().zscore(user).is_some();
    if ended {
        q.close_session(user);
        q.add_stat("ended", 1);
        counters::add(&counters::ENDED, 1);
    }
    srv.reply_int(i64::from(ended));
    q.finish(c"session.end");
    Ok(())
}
