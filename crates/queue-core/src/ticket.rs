//! Tickets: `"<seq>.<secret>"`, the promoted user's sequence number (which finds its
//! record) and 96 random bits as 16 base64url characters (which make the ticket
//! unguessable for the minute it lives).
//! Secrets come from a ChaCha stream seeded by the OS, so issuing a thousand tickets
//! costs no system calls.

use rand_chacha::ChaCha12Rng;
use rand_core::{RngCore, SeedableRng};
use subtle::ConstantTimeEq;

pub const SECRET_LEN: usize = 16;

pub struct Secrets {
    rng: ChaCha12Rng,
}

impl Secrets {
    pub fn from_seed(seed: [u8; 32]) -> Self {
        Secrets { rng: ChaCha12Rng::from_seed(seed) }
    }

    pub fn next_secret(&mut self) -> [u8; SECRET_LEN] {
        let bits = u128::from(self.rng.next_u64()) << 32 | u128::from(self.rng.next_u32());
        let mut out = [0u8; SECRET_LEN];
        for (i, c) in out.iter_mut().enumerate() {
            *c = ALPHABET[((bits >> (6 * i)) & 63) as usize];
        }
        out
    }
}

pub const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

pub fn ticket_id(seq: i64, secret: &[u8]) -> Vec<u8> {
    let mut t = seq.to_string().into_bytes();
    t.push(b'.');
    t.extend_from_slice(secret);
    t
}

/// The (sequence number, secret) of a well-formed ticket.
pub fn parse_ticket(t: &[u8]) -> Option<(i64, &[u8])> {
    let dot = t.iter().position(|&b| b == b'.')?;
    let seq = crate::args::parse_i64(&t[..dot]).filter(|&s| s > 0)?;
    let secret = &t[dot + 1..];
    (secret.len() == SECRET_LEN && secret.iter().all(|c| ALPHABET.contains(c))).then_some((seq, secret))
}

/// True for the shape `ticket_id` produces (tests compare random ids by shape).
pub fn is_ticket_id(t: &str) -> bool {
    parse_ticket(t.as_bytes()).is_some()
}

/// Compares secrets in constant time (`subtle`: no early exit, and the result is
/// kept opaque to the optimizer); secrets of different lengths differ.
pub fn same_secret(a: &[u8], b: &[u8]) -> bool {
    a.ct_eq(b).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tickets_are_distinct_and_parse_back() {
        let mut g = Secrets::from_seed([7; 32]);
        let ids: std::collections::HashSet<Vec<u8>> = (1..=1000).map(|seq| ticket_id(seq, &g.next_secret())).collect();
        assert_eq!(ids.len(), 1000);
        for id in &ids {
            let (seq, secret) = parse_ticket(id).unwrap();
            assert!(seq >= 1 && secret.len() == SECRET_LEN);
        }
        assert_eq!(parse_ticket(b"12.Ab-_0123456789xy"), Some((12, &b"Ab-_0123456789xy"[..])));
        for bad in [
            &b"12"[..],
            b".Ab-_0123456789xy",
            b"0.Ab-_0123456789xy",
            b"1.0123",
            b"1.Ab-_0123456789x.",
            b"1.Ab-_0123456789xyz",
        ] {
            assert_eq!(parse_ticket(bad), None, "{bad:?}");
        }
        assert!(same_secret(b"ab", b"ab") && !same_secret(b"ab", b"ac") && !same_secret(b"ab", b"abc"));
    }
}
