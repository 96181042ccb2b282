//! Lowercase hex, the one text form of bytes in replies, keys and challenges (ticket
//! secrets, opening seeds and commitments, proof-of-work challenges).

/// `bytes` as lowercase hex.
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[(b >> 4) as usize] as char);
        s.push(DIGITS[(b & 15) as usize] as char);
    }
    s
}

/// Fills `out` from lowercase hex `s` of exactly twice its length; false if `s` is
/// not that.
pub fn unhex(s: &str, out: &mut [u8]) -> bool {
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    let s = s.as_bytes();
    if s.len() != out.len() * 2 {
        return false;
    }
    for (i, pair) in s.chunks(2).enumerate() {
        match (digit(pair[0]), digit(pair[1])) {
            (Some(h), Some(l)) => out[i] = (h << 4) | l,
            _ => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        assert_eq!(hex(&[0, 15, 255]), "000fff");
        let mut out = [0u8; 3];
        assert!(unhex("000fff", &mut out));
        assert_eq!(out, [0, 15, 255]);
        assert!(!unhex("000FFF", &mut out), "lowercase only");
        assert!(!unhex("000ff", &mut out), "exact length");
    }
}
