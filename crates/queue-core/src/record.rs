//! How small records are written into hash values.

/// A waiting user's record, the value of its sequence number in its chunk hash:
/// `"<lastSeenMs>:<nickname>"`.
pub fn encode_waiting(seen_ms: i64, nickname: &[u8]) -> Vec<u8> {
    let mut v = seen_ms.to_string().into_bytes();
    v.push(b':');
    v.extend_from_slice(nickname);
    v
}

pub fn decode_waiting(v: &[u8]) -> Option<(i64, &[u8])> {
    let colon = v.iter().position(|&b| b == b':')?;
    let seen = crate::args::parse_i64(&v[..colon])?;
    Some((seen, &v[colon + 1..]))
}

/// A ticket's value in the ticket hash: `"<userId>|<nickname>"` (userIds have no '|').
pub fn encode_ticket(user: &[u8], nickname: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(user.len() + 1 + nickname.len());
    v.extend_from_slice(user);
    v.push(b'|');
    v.extend_from_slice(nickname);
    v
}

pub fn decode_ticket(v: &[u8]) -> Option<(&[u8], &[u8])> {
    let bar = v.iter().position(|&b| b == b'|')?;
    Some((&v[..bar], &v[bar + 1..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        let w = encode_waiting(1_732_230_000_123, "라이언:x".as_bytes());
        assert_eq!(w, "1732230000123:라이언:x".as_bytes());
        assert_eq!(decode_waiting(&w), Some((1_732_230_000_123, "라이언:x".as_bytes())));
        assert_eq!(decode_waiting(b"garbage"), None);
        let t = encode_ticket(b"u-1", b"a|b");
        assert_eq!(decode_ticket(&t), Some((&b"u-1"[..], &b"a|b"[..])));
    }
}
