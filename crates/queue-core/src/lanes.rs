//! Lanes and access codes (docs/commands.md, "Lanes and access codes"): the text
//! setting `lanes`, how a lane's people are numbered, and an access code's record.
//!
//! A queue with two or more lanes numbers its waiting people by lane: lane `i`
//! (0-based, in the configured order) uses the numbers `(i + 1) * BAND + 1` and up, so
//! the one `waiting` sorted set orders by (lane, entry order), and ticket holders,
//! renumbered below `BAND` when promoted, stay its first members. A queue with one
//! lane (the setting unset) numbers exactly as before.

use crate::error::QueueError;

/// The text setting naming a queue's lanes, in admission order, comma-separated.
pub const LANES: &str = "lanes";
/// Most lanes a queue may have.
pub const MAX_LANES: usize = 8;
/// Longest lane name.
pub const MAX_LANE_LEN: usize = 32;
/// The numbers of one lane: lane `i` waits at `(i + 1) * BAND` and up; holders
/// (promoted users of a queue with lanes) below it. 2^40: a lane would need a
/// trillion entries to overflow into the next, and nine bands stay far below 2^53,
/// exact in Lua's doubles.
pub const BAND: i64 = 1 << 40;
/// Most codes one `QUEUE.CODES ADD` or `REMOVE` takes.
pub const MAX_CODES_PER_CALL: usize = 1000;
/// Most uses one code may have.
pub const MAX_CODE_USES: i64 = 1_000_000;
/// A code's hash: hex SHA-256.
pub const CODE_LEN: usize = 64;

/// A queue's lanes (none: one lane, the queue as it always was). Fixed-size, so a
/// store can keep it with the other settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Lanes {
    n: u8,
    lens: [u8; MAX_LANES],
    names: [[u8; MAX_LANE_LEN]; MAX_LANES],
}

fn lane_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'-'
}

impl Lanes {
    /// The setting's value, checked: empty (one lane), or 2 to 8 distinct names
    /// (a single name means one lane, as unset).
    pub fn parse(raw: &[u8]) -> Result<Lanes, QueueError> {
        let mut l = Lanes::default();
        if raw.is_empty() {
            return Ok(l);
        }
        for name in raw.split(|&b| b == b',') {
            let ok = !name.is_empty() && name.len() <= MAX_LANE_LEN && name.iter().all(|&b| lane_byte(b));
            if !ok || l.n as usize == MAX_LANES || l.index(name).is_some() {
                return Err(QueueError::InvalidLanes);
            }
            let i = l.n as usize;
            l.names[i][..name.len()].copy_from_slice(name);
            l.lens[i] = name.len() as u8;
            l.n += 1;
        }
        if l.n == 1 {
            return Ok(Lanes::default());
        }
        Ok(l)
    }

    /// Whether the queue has lanes (two or more).
    pub fn multi(&self) -> bool {
        self.n >= 2
    }

    pub fn len(&self) -> usize {
        self.n as usize
    }

    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    pub fn name(&self, i: usize) -> &[u8] {
        &self.names[i][..self.lens[i] as usize]
    }

    pub fn index(&self, name: &[u8]) -> Option<usize> {
        (0..self.len()).find(|&i| self.name(i) == name)
    }

    /// The stored text: names joined by commas (empty for one lane).
    pub fn text(&self) -> Vec<u8> {
        (0..self.len()).map(|i| self.name(i)).collect::<Vec<_>>().join(&b","[..])
    }

    /// The lane a waiting number belongs to (None for a holder's number, or without lanes).
    pub fn lane_of(&self, seq: i64) -> Option<usize> {
        let i = seq / BAND - 1;
        (self.multi() && seq >= BAND && (i as usize) < self.len()).then_some(i as usize)
    }
}

/// The first number of lane `i`'s band (its people are numbered above it).
pub fn band_start(i: usize) -> i64 {
    (i as i64 + 1) * BAND
}

/// An access code's hash as given (64 lowercase hex digits), else `InvalidCode`.
pub fn check_code(h: &[u8]) -> Result<&[u8], QueueError> {
    if h.len() == CODE_LEN && h.iter().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b)) {
        Ok(h)
    } else {
        Err(QueueError::InvalidCode)
    }
}

/// An access code's record in `queue:{Q}:codes`: `lane|uses|used`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Code {
    pub lane: Vec<u8>,
    pub uses: i64,
    pub used: i64,
}

impl Code {
    /// `lane|uses|used`, written into one buffer (no formatting machinery: an entry
    /// with a code encodes one on every call).
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.lane.len() + 2 + 2 * 20);
        v.extend_from_slice(&self.lane);
        v.push(b'|');
        push_int(&mut v, self.uses);
        v.push(b'|');
        push_int(&mut v, self.used);
        v
    }

    pub fn decode(v: &[u8]) -> Option<Code> {
        let mut parts = v.splitn(3, |&b| b == b'|');
        let (lane, uses, used) = (parts.next()?, parts.next()?, parts.next()?);
        Some(Code { lane: lane.to_vec(), uses: crate::args::parse_i64(uses)?, used: crate::args::parse_i64(used)? })
    }

    pub fn left(&self) -> i64 {
        (self.uses - self.used).max(0)
    }
}

/// Appends the decimal digits of `n` (with a `-` when negative).
pub fn push_int(v: &mut Vec<u8>, n: i64) {
    let mut buf = [0u8; 20];
    let mut at = buf.len();
    let mut m = n.unsigned_abs();
    loop {
        at -= 1;
        buf[at] = b'0' + (m % 10) as u8;
        m /= 10;
        if m == 0 {
            break;
        }
    }
    if n < 0 {
        v.push(b'-');
    }
    v.extend_from_slice(&buf[at..]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lanes_parse() {
        assert!(!Lanes::parse(b"").unwrap().multi());
        assert!(!Lanes::parse(b"general").unwrap().multi());
        let l = Lanes::parse(b"presale,general").unwrap();
        assert!(l.multi());
        assert_eq!((l.len(), l.name(0), l.name(1)), (2, &b"presale"[..], &b"general"[..]));
        assert_eq!(l.index(b"general"), Some(1));
        assert_eq!(l.text(), b"presale,general");
        assert_eq!(l.lane_of(band_start(1) + 5), Some(1));
        assert_eq!(l.lane_of(17), None);
        for bad in [&b"a,a"[..], b"a,", b",a", b"a b,c", b"a,b,c,d,e,f,g,h,i", b"a|b,c"] {
            assert_eq!(Lanes::parse(bad), Err(QueueError::InvalidLanes), "{bad:?}");
        }
        assert!(Lanes::parse(&[b'x'; 33]).is_err());
    }

    #[test]
    fn codes() {
        assert!(check_code(&[b'a'; 64]).is_ok());
        assert!(check_code(&[b'A'; 64]).is_err());
        assert!(check_code(&[b'a'; 63]).is_err());
        let c = Code { lane: b"presale".to_vec(), uses: 3, used: 1 };
        assert_eq!(c.encode(), b"presale|3|1");
        assert_eq!(Code::decode(b"presale|3|1"), Some(c));
        assert_eq!(Code::decode(b"presale|3"), None);
        for n in [0, 7, 10, 999_999, -42, i64::MAX, i64::MIN] {
            let mut v = Vec::new();
            push_int(&mut v, n);
            assert_eq!(v, n.to_string().into_bytes());
        }
    }
}
