//! How a queued user is written into its chunk hash (field: its sequence number).
//!
//! A waiting user costs as little as possible: `"<lastSeenMs>:<nickname>"`. When the
//! user is promoted the same field is rewritten in place (no key or member is added)
//! to `"P<expiryMs>|<secret>|<nickname>"` (secrets have no '|'). Both stay within 64
//! bytes, so chunks keep Valkey's compact listpack encoding; the userId is the
//! waiting zset's member with that sequence number.

/// The first byte of a ticket holder's record.
pub const PROMOTED_MARK: u8 = b'P';
/// Between a waiting user's last-seen time and its nickname.
pub const SEEN_SEP: u8 = b':';
/// Between a ticket holder's expiry, secret and nickname.
pub const FIELD_SEP: u8 = b'|';

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record<'a> {
    Waiting { seen: i64, nickname: &'a [u8] },
    Promoted { expiry: i64, secret: &'a [u8], nickname: &'a [u8] },
}

pub fn encode_waiting(seen_ms: i64, nickname: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(20 + nickname.len());
    v.extend_from_slice(seen_ms.to_string().as_bytes());
    v.push(SEEN_SEP);
    v.extend_from_slice(nickname);
    v
}

pub fn encode_promoted(expiry_ms: i64, secret: &[u8], nickname: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(24 + secret.len() + nickname.len());
    v.push(PROMOTED_MARK);
    v.extend_from_slice(expiry_ms.to_string().as_bytes());
    for part in [secret, nickname] {
        v.push(FIELD_SEP);
        v.extend_from_slice(part);
    }
    v
}

pub fn decode(v: &[u8]) -> Option<Record<'_>> {
    if let Some(rest) = v.strip_prefix(&[PROMOTED_MARK]) {
        let mut parts = rest.splitn(3, |&b| b == FIELD_SEP);
        let expiry = crate::args::parse_i64(parts.next()?)?;
        let (secret, nickname) = (parts.next()?, parts.next()?);
        return Some(Record::Promoted { expiry, secret, nickname });
    }
    let colon = v.iter().position(|&b| b == SEEN_SEP)?;
    let seen = crate::args::parse_i64(&v[..colon])?;
    Some(Record::Waiting { seen, nickname: &v[colon + 1..] })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        let w = encode_waiting(1_732_230_000_123, "라이언:x".as_bytes());
        assert_eq!(w, "1732230000123:라이언:x".as_bytes());
        assert_eq!(decode(&w), Some(Record::Waiting { seen: 1_732_230_000_123, nickname: "라이언:x".as_bytes() }));
        let p = encode_promoted(99, b"abc", b"a|b");
        assert_eq!(p, b"P99|abc|a|b");
        assert_eq!(decode(&p), Some(Record::Promoted { expiry: 99, secret: b"abc", nickname: b"a|b" }));
        // The longest records still fit a listpack entry (64 bytes).
        let nick = [b'n'; crate::error::MAX_NICKNAME_LEN];
        assert!(encode_promoted(9_999_999_999_999, &[b's'; crate::ticket::SECRET_LEN], &nick).len() <= 64);
        assert!(encode_waiting(9_999_999_999_999, &nick).len() <= 64);
        for bad in [&b"garbage"[..], b"Pxx|a|b", b"P1|a", b":nick"] {
            assert_eq!(decode(bad), None, "{bad:?}");
        }
    }
}
