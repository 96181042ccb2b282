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

pub fn check_queue(s: &[u8]) -> Result<&str, QueueError> {
    if valid_name(s, false) {
        Ok(std::str::from_utf8(s).expect("ascii"))
    } else {
        Err(QueueError::InvalidQueue)
    }
}

pub fn check_user(s: &[u8]) -> Result<&str, QueueError> {
    if valid_name(s, true) {
        Ok(std::str::from_utf8(s).expect("ascii"))
    } else {
        Err(QueueError::InvalidUserId)
    }
}

pub fn check_ticket(s: &[u8]) -> Result<&str, QueueError> {
    if valid_name(s, true) {
        Ok(std::str::from_utf8(s).expect("ascii"))
    } else {
        Err(QueueError::InvalidTicketId)
    }
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
/// string: a queue's test clock in ms, read only by servers loaded for tests.
pub const CLOCK: &str = "clock";

#[cfg(test)]
mod tests {
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
    }
}
