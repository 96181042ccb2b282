//! What push instances read and write (docs/commands.md, "The change log and
//! watchers"): `QUEUE.WATCH` / `QUEUE.UNWATCH`, and the change log `queue:{Q}:log`
//! as published on `queue:{Q}:changes` ([`crate::events::subscribe_changes`]), read with
//! XRANGE after the last entry applied, and its last entry (XREVRANGE).

use crate::reply::{array, int, text};
use crate::{ClientError, Op, QueueClient, Standing};
use queue_core::keys::{self, LOG};
use redis::Value;

/// `QUEUE.WATCH`'s reply: the checkpoint a watcher starts from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    /// The change log's number as of the reply.
    pub log: u64,
    /// Users waiting in line.
    pub waiting: u64,
    /// Per user asked: its number in line (0 unless waiting in line) and standing.
    pub users: Vec<(u64, Standing)>,
}

/// One entry of the change log.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LogEntry {
    /// The stream id (read on from it).
    pub id: String,
    /// The entry's number: one more than the previous entry's.
    pub n: u64,
    /// Every waiting user numbered at or below `.0` left the waiting part, `.1` of them.
    pub head: Option<(u64, u64)>,
    /// The tickets of those taken from the head who were promoted while a push
    /// instance had them registered, in the order promoted: (the number they waited
    /// under, the ticket). A ticket is `<number>.<secret>`; in a queue with lanes the
    /// promoted are numbered anew, and the log lists `<old number>=<ticket>`: the
    /// number here is the old one either way, the one a watcher knows them by.
    pub tickets: Vec<(u64, String)>,
    /// Numbers of other waiting users who left.
    pub left: Vec<u64>,
    /// Those of `left` still in the queue after the command: they entered again
    /// (under a new number, or into the pre-queue), or are inside (a session).
    pub again: Vec<u64>,
    /// Of `again`, those who wait again in line with the nickname and lane they had:
    /// (the number they left, their new number, their rank after the command).
    pub moved: Vec<Moved>,
    /// Numbers or ranks changed in a way the entry does not list: ask again.
    pub reset: bool,
    /// Users waiting after the command.
    pub waiting: u64,
    /// Numbers of people who joined a lane ahead of others waiting in a later lane (a
    /// queue with lanes), in the order they joined: each is one more ahead of everyone
    /// waiting under a higher number.
    pub ahead: Vec<u64>,
    /// The queue's state, when it changed in this entry (closed, sold out, message:
    /// docs/commands.md, "A sale's end"). Such an entry changes nobody's rank.
    pub state: Option<QueueState>,
}

/// One person of a log entry's `moved`: they entered again and wait in line under a
/// new number, with the nickname and lane they had.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Moved {
    /// The number they left (listed in `left` and `again`).
    pub old: u64,
    /// Their new number.
    pub new: u64,
    /// Their rank after the command.
    pub rank: u64,
}

/// A `state` entry's fields: what every waiting page is to show at once.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct QueueState {
    /// The queue's `closes_at` has passed: entries are refused.
    pub closed: bool,
    /// The inventory is 0: entries are refused, nobody more is promoted.
    pub sold_out: bool,
    /// The operator's message (empty: none).
    pub message: String,
}

/// The message of a `state` entry: hex of its bytes (a published entry is words
/// separated by spaces).
fn unhex_message(h: &str) -> Result<String, ClientError> {
    let bad = || protocol(&format!("message: not hex: {h}"));
    if !h.len().is_multiple_of(2) {
        return Err(bad());
    }
    let mut bytes = vec![0u8; h.len() / 2];
    if !queue_core::hex::unhex(h, &mut bytes) {
        return Err(bad());
    }
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

fn protocol(what: &str) -> ClientError {
    ClientError::protocol(format!("change log: {what}"))
}

fn nonneg(v: &Value, what: &str) -> Result<u64, ClientError> {
    int(v).and_then(|v| u64::try_from(v).ok()).ok_or_else(|| protocol(what))
}

/// One ticket of `tickets`: `<number>.<secret>`, or `<old number>=<ticket>` in a
/// queue with lanes; (the number the holder waited under, the ticket).
fn listed_ticket(t: &str) -> Result<(u64, String), ClientError> {
    let bad = || protocol(&format!("tickets: not <number>.<secret> or <number>=<ticket>: {t}"));
    let (old, ticket) = match t.split_once('=') {
        Some((old, ticket)) => (Some(old), ticket),
        None => (None, t),
    };
    let (own, secret) = ticket.split_once('.').ok_or_else(bad)?;
    let own: u64 = own.parse().map_err(|_| bad())?;
    if secret.is_empty() {
        return Err(bad());
    }
    let number = match old {
        Some(old) => old.parse().map_err(|_| bad())?,
        None => own,
    };
    Ok((number, ticket.to_string()))
}

impl LogEntry {
    /// A message of the queue's changes channel: the entry's id, then its fields and
    /// values, separated by spaces (as the command that wrote it published it).
    pub fn from_message(payload: &[u8]) -> Result<LogEntry, ClientError> {
        let text = std::str::from_utf8(payload).map_err(|_| protocol("a change that is not text"))?;
        let mut words = text.split(' ').map(|w| Value::BulkString(w.as_bytes().to_vec()));
        let id = words.next().ok_or_else(|| protocol("an empty change"))?;
        LogEntry::from_value(Value::Array(vec![id, Value::Array(words.collect())]))
    }

    /// An XRANGE item: `[id, [field, value, ...]]`.
    fn from_value(v: Value) -> Result<LogEntry, ClientError> {
        let mut item = array(v, "log entry")?;
        if item.len() != 2 {
            return Err(protocol("an entry is not [id, fields]"));
        }
        let fields = array(item.pop().unwrap_or(Value::Nil), "log entry fields")?;
        let id = text(&item[0]).ok_or_else(|| protocol("an entry without an id"))?;
        let mut e = LogEntry { id, ..LogEntry::default() };
        let mut head = None;
        let mut gone = None;
        for pair in fields.chunks(2) {
            let [f, v] = pair else { return Err(protocol("odd fields")) };
            let (f, v) = (text(f).unwrap_or_default(), text(v).unwrap_or_default());
            let number = |s: &str| s.parse::<u64>().map_err(|_| protocol(&format!("{f} is not a number: {s}")));
            match f.as_str() {
                "n" => e.n = number(&v)?,
                "head" => head = Some(number(&v)?),
                "gone" => gone = Some(number(&v)?),
                "tickets" => e.tickets = v.split(',').map(listed_ticket).collect::<Result<_, _>>()?,
                "left" => e.left = v.split(',').map(number).collect::<Result<_, _>>()?,
                "again" => e.again = v.split(',').map(number).collect::<Result<_, _>>()?,
                "moved" => {
                    e.moved = v
                        .split(',')
                        .map(|m| match m.split(':').map(number).collect::<Result<Vec<_>, _>>()?[..] {
                            [old, new, rank] => Ok(Moved { old, new, rank }),
                            _ => Err(protocol(&format!("moved is not old:new:rank: {m}"))),
                        })
                        .collect::<Result<_, _>>()?
                }
                "reset" => e.reset = v == "1",
                "waiting" => e.waiting = number(&v)?,
                "ahead" => e.ahead = v.split(',').map(number).collect::<Result<_, _>>()?,
                "closed" => e.state.get_or_insert_with(QueueState::default).closed = v == "1",
                "sold_out" => e.state.get_or_insert_with(QueueState::default).sold_out = v == "1",
                "message" => e.state.get_or_insert_with(QueueState::default).message = unhex_message(&v)?,
                _ => {}
            }
        }
        if e.n == 0 {
            return Err(protocol("an entry without its number"));
        }
        e.head = head.map(|h| (h, gone.unwrap_or(0)));
        Ok(e)
    }

    /// Where the person who left numbered `seq` waits again, if this entry tells it.
    pub fn moved_of(&self, seq: u64) -> Option<Moved> {
        self.moved.iter().find(|m| m.old == seq).copied()
    }

    /// The ticket this entry lists for the person who waited numbered `seq`, if any.
    pub fn ticket_of(&self, seq: u64) -> Option<&str> {
        self.tickets.iter().find(|(n, _)| *n == seq).map(|(_, t)| t.as_str())
    }
}

impl QueueClient {
    /// `QUEUE.WATCH Q instance leaseMs users...`: registers the waiting users under
    /// `instance` and extends its lease; the checkpoint to read the log from. With no
    /// users it only extends the lease.
    pub async fn watch<S: AsRef<str>>(
        &self,
        queue: &str,
        instance: &str,
        lease_ms: u64,
        user_ids: &[S],
    ) -> Result<Checkpoint, ClientError> {
        let lease = lease_ms.to_string();
        let mut args: Vec<&str> = vec![instance, &lease];
        args.extend(user_ids.iter().map(AsRef::as_ref));
        let mut items = array(self.run(Op::Watch, queue, &args).await?, "watch")?;
        if items.len() != 3 {
            return Err(ClientError::protocol(format!("watch: {} items, want 3", items.len())));
        }
        let users = array(items.pop().unwrap_or(Value::Nil), "watch users")?;
        if users.len() != user_ids.len() {
            return Err(ClientError::protocol(format!("watch: {} users for {}", users.len(), user_ids.len())));
        }
        let users = users
            .into_iter()
            .map(|u| {
                let mut pair = array(u, "watch user")?;
                if pair.len() != 2 {
                    return Err(ClientError::protocol("watch: a user is not [number, standing]"));
                }
                let standing = Standing::from_value(pair.pop().unwrap_or(Value::Nil))?;
                Ok((nonneg(&pair[0], "watch: a number")?, standing))
            })
            .collect::<Result<_, ClientError>>()?;
        Ok(Checkpoint {
            log: nonneg(&items[0], "watch: the log number")?,
            waiting: nonneg(&items[1], "watch: waiting")?,
            users,
        })
    }

    /// `QUEUE.UNWATCH Q instance users...`: the registrations removed (their waiting
    /// users count as heard from now). An empty list asks nothing.
    pub async fn unwatch<S: AsRef<str>>(
        &self,
        queue: &str,
        instance: &str,
        user_ids: &[S],
    ) -> Result<u64, ClientError> {
        if user_ids.is_empty() {
            return Ok(0);
        }
        let mut args: Vec<&str> = vec![instance];
        args.extend(user_ids.iter().map(AsRef::as_ref));
        nonneg(&self.run(Op::Unwatch, queue, &args).await?, "unwatch")
    }

    /// At most `count` entries after stream id `after` (XRANGE from it, exclusive),
    /// without waiting: what a watcher missed on the changes channel.
    pub async fn log_after(&self, queue: &str, after: &str, count: usize) -> Result<Vec<LogEntry>, ClientError> {
        let mut cmd = redis::cmd("XRANGE");
        let from = if after == "0-0" { "-".to_string() } else { format!("({after}") };
        cmd.arg(keys::key(queue, LOG)).arg(from).arg("+").arg("COUNT").arg(count);
        array(self.raw(&cmd).await?, "XRANGE log")?.into_iter().map(LogEntry::from_value).collect()
    }

    /// The change log's last entry, if any.
    pub async fn log_last(&self, queue: &str) -> Result<Option<LogEntry>, ClientError> {
        let mut cmd = redis::cmd("XREVRANGE");
        cmd.arg(keys::key(queue, LOG)).arg("+").arg("-").arg("COUNT").arg(1);
        array(self.raw(&cmd).await?, "XREVRANGE log")?.into_iter().next().map(LogEntry::from_value).transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(payload: &str) -> Result<LogEntry, ClientError> {
        LogEntry::from_message(payload.as_bytes())
    }

    /// A queue with lanes lists a promoted person's ticket under the number they
    /// waited with (`old=ticket`), and newcomers ahead of later lanes under `ahead`.
    #[test]
    fn lanes_entries_read_old_numbers_and_ahead() {
        let e = message("9-0 n 4 head 1099511627777 gone 2 tickets 1099511627776=3.ab,1099511627777=4.cd ahead 1099511627778,1099511627779 waiting 5").unwrap();
        assert_eq!(e.tickets, [(1_099_511_627_776, "3.ab".to_string()), (1_099_511_627_777, "4.cd".to_string())]);
        assert_eq!(e.ticket_of(1_099_511_627_777), Some("4.cd"));
        assert_eq!(e.ticket_of(4), None, "the ticket's own number is not the one waited under");
        assert_eq!(e.ahead, [1_099_511_627_778, 1_099_511_627_779]);
        let plain = message("1-0 n 1 head 7 gone 1 tickets 7.x waiting 0").unwrap();
        assert_eq!((plain.tickets.as_slice(), plain.ahead.as_slice()), (&[(7, "7.x".to_string())][..], &[][..]));
    }

    /// A `state` entry (closed, sold out, message in hex) reads as the queue's state
    /// and lists nobody; an entry without those fields has no state.
    #[test]
    fn state_entries_read_the_sale() {
        let e = message("5-0 n 3 closed 1 sold_out 0 message 646f6f727320636c6f7365 waiting 4").unwrap();
        let want = QueueState { closed: true, sold_out: false, message: "doors close".into() };
        assert_eq!(e.state, Some(want));
        assert_eq!((e.head, e.left.len(), e.ahead.len(), e.reset, e.waiting), (None, 0, 0, false, 4));
        let cleared = message("6-0 n 4 closed 0 sold_out 1 message  waiting 4").unwrap();
        assert_eq!(cleared.state, Some(QueueState { closed: false, sold_out: true, message: String::new() }));
        assert_eq!(message("1-0 n 1 left 2 waiting 1").unwrap().state, None);
        for bad in
            ["1-0 n 1 closed 1 sold_out 0 message 6 waiting 0", "1-0 n 1 closed 1 sold_out 0 message zz waiting 0"]
        {
            assert!(matches!(message(bad), Err(ClientError::Protocol(_))), "{bad}");
        }
    }

    /// A re-entry's `moved` reads as (old number, new number, rank); a number of
    /// `again` not in it is not moved.
    #[test]
    fn moved_entries_read_the_new_place() {
        let e = message("4-0 n 2 left 3,5 again 3,5 moved 5:12:7 waiting 8").unwrap();
        assert_eq!(e.moved, [Moved { old: 5, new: 12, rank: 7 }]);
        assert_eq!(e.moved_of(5), Some(Moved { old: 5, new: 12, rank: 7 }));
        assert_eq!(e.moved_of(3), None, "in again, entered again with another nickname or into the pre-queue");
        assert!(message("1-0 n 1 left 2 waiting 1").unwrap().moved.is_empty());
    }

    #[test]
    fn malformed_tickets_and_ahead_are_protocol_errors() {
        for bad in [
            "1-0 n 1 tickets 7 waiting 0",
            "1-0 n 1 tickets x.ab waiting 0",
            "1-0 n 1 tickets 7. waiting 0",
            "1-0 n 1 tickets x=7.ab waiting 0",
            "1-0 n 1 tickets 9=7 waiting 0",
            "1-0 n 1 ahead 3,x waiting 0",
            "1-0 n 1 ahead  waiting 0",
            "1-0 n 1 left 3 again 3 moved 3:9 waiting 1",
            "1-0 n 1 left 3 again 3 moved 3:9:1:2 waiting 1",
            "1-0 n 1 left 3 again 3 moved 3:x:1 waiting 1",
            "1-0 n 1 left 3 again 3 moved  waiting 1",
        ] {
            assert!(matches!(message(bad), Err(ClientError::Protocol(_))), "{bad}");
        }
    }
}
