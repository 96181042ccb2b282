//! Names: what a queue, user or ticket may be called, and the keys a queue lives in.
//!
//! Every key of queue `Q` carries the hash tag `{Q}`, so a queue is one cluster slot
//! and the slot equals the slot of the bare name `Q` (the command's declared key).
//! That is why names may not contain braces.

use crate::error::{QueueError, MAX_NAME_LEN, MAX_NICKNAME_LEN};

/// Waiting users' records are grouped by their sequence number into hashes of this
/// many entries, small enough to stay in Valkey's compact listpack encoding (128 by
/// default), which is what keeps a waiting user under 200 bytes.
pub const CHUNK: u64 = 32;

/// The stats field that marks a queue's data as written by a release that numbers
/// newcomers after every ticket holder, and its value. A queue without it that holds
/// anyone is repaired once by the first command that reads the line.
pub const LAYOUT_FIELD: &str = "layout";
pub const LAYOUT: i64 = 2;

fn is_name_byte(b: u8, allow_at: bool) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-') || (allow_at && b == b'@')
}

fn valid_name(s: &[u8], allow_at: bool) -> bool {
    !s.is_empty() && s.len() <= MAX_NAME_LEN && s.iter().all(|&b| is_name_byte(b, allow_at))
}

/// `s` as text when it is a valid name (`@` allowed or not), else `err`.
fn checked_name(s: &[u8], allow_at: bool, err: QueueError) -> Result<&str, QueueError> {
    if valid_name(s, allow_at) {
        Ok(std::str::from_utf8(s).expect("ascii"))
    } else {
        Err(err)
    }
}

pub fn check_queue(s: &[u8]) -> Result<&str, QueueError> {
    checked_name(s, false, QueueError::InvalidQueue)
}

pub fn check_user(s: &[u8]) -> Result<&str, QueueError> {
    checked_name(s, true, QueueError::InvalidUserId)
}

/// A push instance's id (QUEUE.WATCH): the characters of a userId.
pub fn check_instance(s: &[u8]) -> Result<&str, QueueError> {
    checked_name(s, true, QueueError::InvalidInstance)
}

pub fn check_ticket(s: &[u8]) -> Result<&str, QueueError> {
    checked_name(s, true, QueueError::InvalidTicketId)
}

/// TICKET.CLAIM's `HOLDER`: who claims (say, a hash of the browser's session), the
/// characters of a ticketId.
pub fn check_holder(s: &[u8]) -> Result<&str, QueueError> {
    checked_name(s, true, QueueError::InvalidHolder)
}

/// Nicknames are shown to people, so any UTF-8 text is welcome, but no control bytes
/// (they would break log lines and the record encodings).
pub fn check_nickname(s: &[u8]) -> Result<&[u8], QueueError> {
    if !s.is_empty() && s.len() <= MAX_NICKNAME_LEN && s.iter().all(|&b| b >= 0x20 && b != 0x7f) {
        Ok(s)
    } else {
        Err(QueueError::InvalidNickname)
    }
}

/// Every key of queue `Q` is `KEY_OPEN Q KEY_CLOSE <suffix>`: `queue:{Q}:<suffix>`.
pub const KEY_OPEN: &str = "queue:{";
pub const KEY_CLOSE: &str = "}:";

/// The key of queue `queue` with the given suffix: `queue:{<queue>}:<suffix>`.
pub fn key(queue: &str, suffix: &str) -> String {
    format!("{KEY_OPEN}{queue}{KEY_CLOSE}{suffix}")
}

/// zset: userId -> sequence number at entry (FIFO order). Promoted users keep
/// their place until their ticket is used, withdrawn or expires, so they are always
/// the first members.
pub const WAITING: &str = "waiting";
/// zset: userId -> lease expiry (ms), the users inside.
pub const SESSIONS: &str = "sessions";
/// hash: userId -> nickname, the users inside.
pub const ACTIVE: &str = "active";
/// hash: tickets out (`joining`), the highest promoted sequence number, token
/// bucket, rate window, sweep cursor and counters.
pub const STATS: &str = "stats";
/// hash: the operator's settings; absent fields take the defaults.
pub const CONFIG: &str = "config";

/// hash: sequence number -> the user's record (see `record`): the records of numbers
/// CHUNK*n to CHUNK*n+CHUNK-1 live in the key with suffix `CHUNK_PREFIX` n.
pub const CHUNK_PREFIX: &str = "w:";
/// hash: userId -> nickname, the pre-queue: who entered before the opening (order
/// is irrelevant: the opening shuffles them).
pub const PRE: &str = "pre";
/// hash: the opening: `seed` (secret until `opened_at` is set), `commitment` (hex
/// SHA-256 of the seed), `opened_at`, `entrants`.
pub const OPENING: &str = "opening";
/// list: the proof, the idHashes (hex SHA-1 of each userId) in placed order.
pub const PROOF: &str = "proof";
/// string: a queue's test clock in ms, read only by servers loaded for tests.
pub const CLOCK: &str = "clock";
/// stream: the change log, one entry per command that took waiting users out of the
/// line (docs/commands.md, "The change log and watchers").
pub const LOG: &str = "log";
/// hash: userId -> the push instance watching it.
pub const WATCHED: &str = "watched";
/// zset: push instance -> its lease expiry (ms).
pub const INSTANCES: &str = "instances";
/// hash: the claims made with `HOLDER` whose session is live: ticketId ->
/// `holder|leaseMs|userId`, and `#userId` -> that ticketId (so that ending the session
/// finds the entry). See `engine::claim_held`.
pub const CLAIMED: &str = "claimed";
/// hash: access code hash (hex SHA-256) -> `lane|uses|used` (see `lanes::Code`).
pub const CODES: &str = "codes";
/// Hash userId -> 1: people inside (a live session) reported as having bought
/// (QUEUE.SOLD ... USER), who no longer count against `inventory`.
pub const BOUGHT: &str = "bought";
/// The prefix of a `claimed` field naming a user (never in a ticketId).
pub const CLAIMED_USER_MARK: &str = "#";
/// About how many entries the change log keeps (`XADD ... MAXLEN ~`).
pub const LOG_MAX: i64 = 10_000;
/// The longest lease QUEUE.WATCH gives an instance, in ms.
pub const MAX_WATCH_LEASE_MS: i64 = 600_000;
/// How long after its lease ended a push instance stays in `instances`, in ms: the
/// longest `abandon_after` a queue can have (a day), so that no setting, now or later,
/// still counts anyone as heard from through a lease that ended longer ago. QUEUE.WATCH
/// removes older ones.
pub const INSTANCE_KEEP_MS: i64 = 86_400_000;
/// The most ended instances one QUEUE.WATCH removes (the rest go with the next ones).
pub const INSTANCE_PRUNE_MAX: i64 = 64;

/// string: `queue:{Q}:pow:<id>`, a solved proof-of-work challenge's id, set (NX, with
/// the challenge's expiry) when it is used, so that it works once.
pub const POW_USED_PREFIX: &str = "pow:";

/// hash: server instance id -> its latest health reading (JSON with its own expiry),
/// written by chat-server, read by queue-manager.
pub const HEALTH: &str = "health";
/// Pub/sub channel suffix: a queue's promotion announcements, `queue:{Q}:promoted`.
pub const PROMOTED: &str = "promoted";
/// The pattern matching every queue's promotion channel.
pub const PROMOTED_PATTERN: &str = "queue:{*}:promoted";
/// Pub/sub channel suffix: a queue's change log, entry by entry, as the command that
/// wrote an entry publishes it, `queue:{Q}:changes` (docs/commands.md, "The change log
/// and watchers"): the entry's id, then its fields and values, separated by spaces.
pub const CHANGES: &str = "changes";
/// The pattern matching every queue's changes channel.
pub const CHANGES_PATTERN: &str = "queue:{*}:changes";
/// The pattern matching every key of every queue (discovery's SCAN).
pub const ANY_KEY_PATTERN: &str = "queue:{*}:*";

/// set: the queues queue-api serves, read by queue-manager's discovery. No hash tag.
pub const REGISTRY: &str = "queue-registry";
/// string: the queue-manager leader's lease (its token, with a PX expiry). No hash tag.
pub const LEADER: &str = "queue-manager:leader";

/// The queue whose `waiting` or `sessions` zset `key` is, if its name is valid:
/// `queue:{launch}:waiting` -> `launch` (what discovery looks for).
pub fn queue_of(key: &str) -> Option<&str> {
    let (name, suffix) = key.strip_prefix(KEY_OPEN)?.rsplit_once(KEY_CLOSE)?;
    if suffix != WAITING && suffix != SESSIONS {
        return None;
    }
    check_queue(name.as_bytes()).ok()
}

/// The queue any of whose keys `key` is: Q of `queue:{Q}:<anything>` (Q holds no
/// `}`), without checking Q.
pub fn owner_queue(key: &[u8]) -> Option<&[u8]> {
    let rest = key.strip_prefix(KEY_OPEN.as_bytes())?;
    let close = KEY_CLOSE.as_bytes();
    let end = rest.windows(close.len()).position(|w| w == close)?;
    Some(&rest[..end])
}

/// Every chat room channel is `ROOM_OPEN Q ROOM_CLOSE`: `chat:{Q}:room`, in the
/// queue's slot (sharded pub/sub on a cluster).
pub const ROOM_OPEN: &str = "chat:{";
pub const ROOM_CLOSE: &str = "}:room";
/// The pattern matching every room's channel.
pub const ROOM_PATTERN: &str = "chat:{*}:room";

/// The channel of `queue`'s chat room.
pub fn room_channel(queue: &str) -> String {
    format!("{ROOM_OPEN}{queue}{ROOM_CLOSE}")
}

/// The queue of a room channel.
pub fn room_of(channel: &str) -> Option<&str> {
    channel.strip_prefix(ROOM_OPEN)?.strip_suffix(ROOM_CLOSE)
}

#[cfg(test)]
mod tests {
    #[test]
    fn owner_queue_of_any_key() {
        assert_eq!(owner_queue(b"queue:{a.b}:stats"), Some(&b"a.b"[..]));
        assert_eq!(owner_queue(b"queue:{q}:w:12"), Some(&b"q"[..]));
        assert_eq!(owner_queue(key("x", WAITING).as_bytes()), Some(&b"x"[..]));
        assert_eq!(owner_queue(b"queue-registry"), None);
        assert_eq!(owner_queue(b"q"), None);
        assert_eq!(owner_queue(b"queue:{q"), None);
    }

    use super::*;

    #[test]
    fn names() {
        assert!(check_queue(b"default").is_ok());
        assert!(check_queue(b"launch-2026.eu:1_a").is_ok());
        for bad in [&b""[..], b"a{b}", b"a b", b"a@b", &[b'a'; 65][..], "큐".as_bytes()] {
            assert_eq!(check_queue(bad), Err(QueueError::InvalidQueue), "{bad:?}");
        }
        assert!(check_user(b"550e8400-e29b-41d4-a716-446655440000").is_ok());
        assert!(check_user(b"alice@example.com").is_ok());
        assert_eq!(check_user(b"a|b"), Err(QueueError::InvalidUserId));
        assert_eq!(check_user(b""), Err(QueueError::InvalidUserId));
        assert!(check_nickname("라이언".as_bytes()).is_ok());
        assert!(check_nickname(b"with space and | pipe").is_ok());
        for bad in [&b""[..], b"a\nb", b"\x7f", &[b'x'; 33][..]] {
            assert_eq!(check_nickname(bad), Err(QueueError::InvalidNickname));
        }
    }

    #[test]
    fn keys_share_the_tag() {
        assert_eq!(key("default", WAITING), "queue:{default}:waiting");
        assert_eq!(key("default", CHUNK_PREFIX), "queue:{default}:w:");
        assert_eq!(key("default", PROMOTED), "queue:{default}:promoted");
        assert_eq!(key("*", PROMOTED), PROMOTED_PATTERN);
        assert_eq!(key("*", CHANGES), CHANGES_PATTERN);
        assert_eq!(key("*", "*"), ANY_KEY_PATTERN);
        assert_eq!(room_channel("*"), ROOM_PATTERN);
    }

    #[test]
    fn queue_names_from_keys() {
        let cases: [(&str, Option<&str>); 10] = [
            ("queue:{launch}:waiting", Some("launch")),
            ("queue:{launch}:sessions", Some("launch")),
            ("queue:{a.b_c:d-1}:waiting", Some("a.b_c:d-1")),
            ("queue:{launch}:w:3", None),
            ("queue:{launch}:stats", None),
            ("queue:{}:waiting", None),
            ("queue:{bad name}:waiting", None),
            ("queue:{a}:b}:waiting", None),
            ("other:{launch}:waiting", None),
            ("queue:launch:waiting", None),
        ];
        for (key, want) in cases {
            assert_eq!(queue_of(key), want, "{key}");
        }
        let long = format!("queue:{{{}}}:waiting", "q".repeat(65));
        assert_eq!(queue_of(&long), None);
    }

    #[test]
    fn channels_carry_the_queue_hash_tag() {
        assert_eq!(room_channel("launch-1"), "chat:{launch-1}:room");
        assert_eq!(room_of("chat:{launch-1}:room"), Some("launch-1"));
        assert_eq!(room_of("queue:{launch-1}:promoted"), None);
    }
}
