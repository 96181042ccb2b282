//! Names: what a queue, user or ticket may be called, and the keys a queue lives in.
//!
//! Every key of queue `Q` carries the hash tag `{Q}`, so a queue is one cluster slot
//! and the slot equals the slot of the bare name `Q` (the command's declared key).
//! That is why names may not contain braces.

use crate::error::{QueueError, MAX_NAME_LEN, MAX_NICKNAME_LEN};

/// Waiting users' records are grouped by their sequence number into hashes of this
/// many entries, small enough to stay in Valkey's compact listpack encoding (128 by
/// default), which is what keeps a waiting user under 200 bytes.
pub const CHUNK: u64 = 64;

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

/// The keys of one queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueKeys {
    prefix: String,
}

impl QueueKeys {
    pub fn new(queue: &str) -> Self {
        QueueKeys { prefix: format!("queue:{{{queue}}}:") }
    }
    fn key(&self, suffix: &str) -> String {
        format!("{}{suffix}", self.prefix)
    }
    /// zset: userId -> sequence number at entry (FIFO order).
    pub fn waiting(&self) -> String {
        self.key("waiting")
    }
    /// hash: sequence number -> "lastSeenMs:nickname", for the chunk holding `seq`.
    pub fn chunk(&self, seq: u64) -> String {
        self.key(&format!("w:{}", seq / CHUNK))
    }
    /// zset: ticketId -> expiry (ms).
    pub fn tickets(&self) -> String {
        self.key("tickets")
    }
    /// hash: ticketId -> "userId|nickname".
    pub fn ticket(&self) -> String {
        self.key("ticket")
    }
    /// hash: userId -> ticketId, for promoted users.
    pub fn promoted(&self) -> String {
        self.key("promoted")
    }
    /// zset: userId -> lease expiry (ms), the users inside.
    pub fn sessions(&self) -> String {
        self.key("sessions")
    }
    /// hash: userId -> nickname, the users inside.
    pub fn active(&self) -> String {
        self.key("active")
    }
    /// hash: the operator's settings; absent fields take the defaults.
    pub fn config(&self) -> String {
        self.key("config")
    }
    /// hash: sequence counter, token bucket, rate window, sweep cursor and counters.
    pub fn stats(&self) -> String {
        self.key("stats")
    }
}

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
        for bad in [&b""[..], b"a\nb", b"\x7f", &[b'x'; 65][..]] {
            assert_eq!(check_nickname(bad), Err(QueueError::InvalidNickname));
        }
    }

    #[test]
    fn keys_share_the_tag() {
        let k = QueueKeys::new("default");
        assert_eq!(k.waiting(), "queue:{default}:waiting");
        assert_eq!(k.chunk(0), "queue:{default}:w:0");
        assert_eq!(k.chunk(63), "queue:{default}:w:0");
        assert_eq!(k.chunk(64), "queue:{default}:w:1");
        assert_eq!(k.stats(), "queue:{default}:stats");
    }
}
