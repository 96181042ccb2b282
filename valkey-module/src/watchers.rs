//! QUEUE.WATCH and QUEUE.UNWATCH: push instances register the people they stream to,
//! and read the change log from the number WATCH replies (docs/commands.md, "The
//! change log and watchers"). The rules are in `queue_core::engine::changelog`.

use crate::queue::{arity, reply_standing};
use crate::server::{Server, Str};
use crate::state::Queue;
use queue_core::engine;
use queue_core::engine::Store;
use queue_core::keys::{check_instance, check_user, MAX_WATCH_LEASE_MS};
use queue_core::QueueError;

/// QUEUE.WATCH <queue> <instance> <leaseMs> [userId ...]
pub fn watch(srv: &Server, args: &[Str]) -> Result<(), QueueError> {
    arity(args.len() >= 4, "queue.watch")?;
    check_instance(args[2].bytes())?;
    let lease = queue_core::args::Args::new(&[args[3].bytes()]).next_in_range("leaseMs", 1, MAX_WATCH_LEASE_MS)?;
    for u in &args[4..] {
        check_user(u.bytes())?;
    }
    let mut q = Queue::open(srv, args[1], true)?;
    let result = engine::watch(&mut q, args[2].bytes(), lease, &args[4..]);
    let watched = match result {
        Ok(w) => w,
        Err(e) => {
            q.finish(c"queue.watch");
            return Err(e);
        }
    };
    srv.reply_array(3);
    srv.reply_int(watched.log);
    srv.reply_int(watched.waiting);
    srv.reply_array(watched.users.len());
    let lanes = q.lanes();
    for (&user, (seq, st)) in args[4..].iter().zip(&watched.users) {
        srv.reply_array(2);
        srv.reply_int(*seq);
        let eta = engine::eta(&q, st);
        reply_standing(srv, user, st, eta, &lanes);
    }
    q.finish(c"queue.watch");
    Ok(())
}

/// QUEUE.UNWATCH <queue> <instance> <userId> [userId ...]
pub fn unwatch(srv: &Server, args: &[Str]) -> Result<(), QueueError> {
    arity(args.len() >= 4, "queue.unwatch")?;
    check_instance(args[2].bytes())?;
    for u in &args[3..] {
        check_user(u.bytes())?;
    }
    let mut q = Queue::open(srv, args[1], true)?;
    let result = engine::unwatch(&mut q, args[2].bytes(), &args[3..]);
    q.finish(c"queue.unwatch");
    srv.reply_int(result?);
    Ok(())
}
