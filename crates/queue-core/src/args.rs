//! A cursor over a command's arguments: read them in order, match options
//! case-insensitively, check numbers against named bounds, reject leftovers.

use crate::error::QueueError;

pub struct Args<'a> {
    items: &'a [&'a [u8]],
    pos: usize,
}

/// Parses a decimal i64 the way Valkey does: optional '-', digits, no spaces, no '+'.
pub fn parse_i64(s: &[u8]) -> Option<i64> {
    let (neg, digits) = match s.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, s),
    };
    if digits.is_empty() || digits.len() > 19 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    if digits.len() > 1 && digits[0] == b'0' {
        return None;
    }
    let mut v: i64 = 0;
    for &d in digits {
        v = v.checked_mul(10)?;
        v = if neg { v.checked_sub((d - b'0') as i64)? } else { v.checked_add((d - b'0') as i64)? };
    }
    if neg && v == 0 {
        return None;
    }
    Some(v)
}

impl<'a> Args<'a> {
    pub fn new(items: &'a [&'a [u8]]) -> Self {
        Args { items, pos: 0 }
    }
    pub fn remaining(&self) -> usize {
        self.items.len() - self.pos
    }
    pub fn is_done(&self) -> bool {
        self.remaining() == 0
    }
    pub fn next_bytes(&mut self) -> Result<&'a [u8], QueueError> {
        let item = self.items.get(self.pos).ok_or(QueueError::Syntax)?;
        self.pos += 1;
        Ok(item)
    }
    pub fn next_i64(&mut self) -> Result<i64, QueueError> {
        parse_i64(self.next_bytes()?).ok_or(QueueError::NotInteger)
    }
    /// An integer within `[min, max]`; `what` names it in the error.
    pub fn next_in_range(&mut self, what: &'static str, min: i64, max: i64) -> Result<i64, QueueError> {
        let v = self.next_i64()?;
        if v < min || v > max {
            return Err(QueueError::OutOfRange(what, min, max));
        }
        Ok(v)
    }
    /// True (and consumed) when the next argument is `word`, case-insensitively.
    pub fn eat_keyword(&mut self, word: &str) -> bool {
        match self.items.get(self.pos) {
            Some(item) if item.eq_ignore_ascii_case(word.as_bytes()) => {
                self.pos += 1;
                true
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_like_valkey() {
        let cases: &[(&str, Option<i64>)] = &[
            ("0", Some(0)),
            ("42", Some(42)),
            ("-7", Some(-7)),
            ("9223372036854775807", Some(i64::MAX)),
            ("-9223372036854775808", Some(i64::MIN)),
            ("9223372036854775808", None),
            ("", None),
            ("-", None),
            ("-0", None),
            ("+1", None),
            ("01", None),
            (" 1", None),
            ("1.5", None),
            ("1e3", None),
        ];
        for (s, want) in cases {
            assert_eq!(parse_i64(s.as_bytes()), *want, "{s}");
        }
    }

    #[test]
    fn cursor() {
        let raw: Vec<&[u8]> = vec![b"max", b"10", b"extra"];
        let mut a = Args::new(&raw);
        assert!(!a.eat_keyword("LIMIT"));
        assert!(a.eat_keyword("MAX"));
        assert_eq!(a.next_in_range("MAX", 1, 5), Err(QueueError::OutOfRange("MAX", 1, 5)));
        assert!(!a.is_done());
        a.next_bytes().unwrap();
        assert!(a.is_done());
        assert_eq!(a.next_bytes(), Err(QueueError::Syntax));
    }
}
