//! How a queued user is written into its chunk hash (field: its sequence number).
//!
//! A waiting user costs as little as possible: `"<lastSeenMs>:<nickname>"`. When the
//! user is promoted the same field is rewritten in place (no key or member is added)
//! to `"P<expiryMs>|<secret>|<userId>|<nickname>"`; userIds and secrets have no '|'.

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record<'a> {
    Waiting { seen: i64, nickname: &'a [u8] },
    Promoted { expiry: i64, secret: &'a [u8], user: &'a [u8], nickname: &'a [u8] },
}

pub fn encode_waiting(seen_ms: i64, nickname: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(20 + nickname.len());
    v.extend_from_slice(itoa_i64(seen_ms).as_bytes());
    v.push(b':');
    v.extend_from_slice(nickname);
    v
}

pub fn encode_promoted(expiry_ms: i64, secret: &[u8], user: &[u8], nickname: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(24 + secret.len() + user.len() + nickname.len());
    v.push(b'P');
    v.extend_from_slice(itoa_i64(expiry_ms).as_bytes());
    for part in [secret, user, nickname] {
        v.push(b'|');
        v.extend_from_slice(part);
    }
    v
}

fn itoa_i64(v: i64) -> String {
    v.to_string()
}

pub fn decode(v: &[u8]) -> Option<Record<'_>> {
    if let Some(rest) = v.strip_prefix(b"P") {
        let mut parts = rest.splitn(4, |&b| b == b'|');
        let expiry = crate::args::parse_i64(parts.next()?)?;
        let (secret, user, nickname) = (parts.next()?, parts.next()?, parts.next()?);
        return Some(Record::Promoted { expiry, secret, user, nickname });
    }
    let colon = v.iter().position(|&b| b == b':')?;
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
        let p = encode_promoted(99, b"abc", b"u:1", b"a|b");
        assert_eq!(p, b"P99|abc|u:1|a|b");
        assert_eq!(decode(&p), Some(Record::Promoted { expiry: 99, secret: b"abc", user: b"u:1", nickname: b"a|b" }));
        for bad in [&b"garbage"[..], b"Pxx|a|b|c", b"P1|a|b", b":nick"] {
            assert_eq!(decode(bad), None, "{bad:?}");
        }
    }
}
