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
    if h.len() == CODE_LEN && h.chunks_exact(8).all(|w| hex8(u64::from_le_bytes(w.try_into().expect("8 bytes")))) {
        Ok(h)
    } else {
        Err(QueueError::InvalidCode)
    }
}

/// Whether the 8 bytes of `x` are all `0`-`9` or `a`-`f`, tested together (an entry
/// with a code checks one on every call): with every byte below 0x80, adding
/// `0x80 - c` to each byte sets its top bit exactly when the byte is >= c, and no
/// sum carries into the next byte.
fn hex8(x: u64) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const TOP: u64 = 0x8080_8080_8080_8080;
    let at_least = |c: u8| x.wrapping_add(ONES * u64::from(0x80 - c)) & TOP;
    let digit = at_least(b'0') & !at_least(b'9' + 1);
    let af = at_least(b'a') & !at_least(b'f' + 1);
    x & TOP == 0 && digit | af == TOP
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
        let (lane, uses, used) = code_parts(v)?;
        Some(Code { lane: lane.to_vec(), uses, used })
    }

    pub fn left(&self) -> i64 {
        (self.uses - self.used).max(0)
    }
}

/// An access code's record `lane|uses|used` read in place: (lane, uses, used).
pub fn code_parts(v: &[u8]) -> Option<(&[u8], i64, i64)> {
    let mut parts = v.splitn(3, |&b| b == b'|');
    let (lane, uses, used) = (parts.next()?, parts.next()?, parts.next()?);
    Some((lane, crate::args::parse_i64(uses)?, crate::args::parse_i64(used)?))
}

/// The longest record [`CodeUse::encode_used`] writes: a lane's name, two bars and
/// two numbers of up to 20 characters.
pub const CODE_RECORD_MAX: usize = MAX_LANE_LEN + 2 + 2 * 20;

/// The access code an entry uses, as the entry needs it: its lane as an index into
/// the queue's lanes, and its counts (nothing allocated: an entry with a code reads
/// and rewrites one on every call).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CodeUse {
    pub lane: usize,
    pub uses: i64,
    pub used: i64,
}

impl CodeUse {
    /// The stored record `v` of a code of one of `lanes` with a use left, else None
    /// (a record that does not parse, of a lane the queue does not have, or used up).
    pub fn read(v: &[u8], lanes: &Lanes) -> Option<CodeUse> {
        let (lane, uses, used) = code_parts(v)?;
        let c = CodeUse { lane: lanes.index(lane)?, uses, used };
        (c.uses.saturating_sub(c.used) > 0).then_some(c)
    }

    /// The record with `used` uses consumed, exactly as [`Code::encode`] writes it,
    /// in `buf`.
    pub fn encode_used<'b>(&self, lanes: &Lanes, used: i64, buf: &'b mut [u8; CODE_RECORD_MAX]) -> &'b [u8] {
        let lane = lanes.name(self.lane);
        let mut at = lane.len();
        buf[..at].copy_from_slice(lane);
        for n in [self.uses, used] {
            buf[at] = b'|';
            at += 1;
            let digits = Digits::of(n);
            let d = digits.as_slice();
            buf[at..at + d.len()].copy_from_slice(d);
            at += d.len();
        }
        &buf[..at]
    }
}

/// The decimal digits of `n`, on the stack.
struct Digits {
    buf: [u8; 20],
    at: usize,
}

impl Digits {
    fn as_slice(&self) -> &[u8] {
        &self.buf[self.at..]
    }

    fn of(n: i64) -> Digits {
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
            at -= 1;
            buf[at] = b'-';
        }
        Digits { buf, at }
    }
}

/// Appends the decimal digits of `n` (with a `-` when negative).
pub fn push_int(v: &mut Vec<u8>, n: i64) {
    v.extend_from_slice(Digits::of(n).as_slice());
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
        // Every byte next to the allowed ranges is refused, wherever it is.
        for bad in [b'/', b':', b'`', b'g', b'A', b'F', b' ', 0, 0x80, 0xff] {
            for at in [0, 31, 63] {
                let mut h = [b'0'; 64];
                h[at] = bad;
                assert_eq!(check_code(&h), Err(QueueError::InvalidCode), "{bad} at {at}");
            }
        }
        assert!(check_code(b"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef").is_ok());
        for n in [0, 7, 10, 999_999, -42, i64::MAX, i64::MIN] {
            let mut v = Vec::new();
            push_int(&mut v, n);
            assert_eq!(v, n.to_string().into_bytes());
        }
    }

    #[test]
    fn code_use_reads_and_rewrites_as_code_does() {
        let lanes = Lanes::parse(b"presale,general").unwrap();
        let c = CodeUse::read(b"general|3|1", &lanes).unwrap();
        assert_eq!(c, CodeUse { lane: 1, uses: 3, used: 1 });
        let mut buf = [0u8; CODE_RECORD_MAX];
        assert_eq!(c.encode_used(&lanes, 2, &mut buf), b"general|3|2");
        // Used up, of a lane the queue does not have, or not a record: None.
        for bad in [&b"general|3|3"[..], b"general|3|4", b"vip|3|1", b"general|3", b"general|x|1", b""] {
            assert_eq!(CodeUse::read(bad, &lanes), None, "{bad:?}");
        }
        // The longest record fits, byte for byte as `Code::encode` writes it.
        let long = Lanes::parse(&[&[b'x'; 32][..], b",y"].concat()).unwrap();
        let c = CodeUse { lane: 0, uses: i64::MAX, used: i64::MIN };
        let code = Code { lane: vec![b'x'; 32], uses: i64::MAX, used: i64::MIN };
        assert_eq!(c.encode_used(&long, i64::MIN, &mut buf), &code.encode()[..]);
        assert_eq!(code.encode().len(), CODE_RECORD_MAX - 1);
    }
}
