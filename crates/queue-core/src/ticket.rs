//! Ticket ids: random UUID v4 strings from a ChaCha stream seeded by the OS, so
//! issuing a thousand tickets costs no system calls and ids cannot be guessed.

use rand_chacha::ChaCha12Rng;
use rand_core::{RngCore, SeedableRng};

pub struct TicketIds {
    rng: ChaCha12Rng,
}

impl TicketIds {
    pub fn from_seed(seed: [u8; 32]) -> Self {
        TicketIds { rng: ChaCha12Rng::from_seed(seed) }
    }

    pub fn next_id(&mut self) -> String {
        let mut b = [0u8; 16];
        self.rng.fill_bytes(&mut b);
        format_uuid_v4(b)
    }
}

pub fn format_uuid_v4(mut b: [u8; 16]) -> String {
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let mut s = String::with_capacity(36);
    for (i, byte) in b.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            s.push('-');
        }
        s.push(char::from_digit((byte >> 4) as u32, 16).unwrap());
        s.push(char::from_digit((byte & 0xf) as u32, 16).unwrap());
    }
    s
}

/// True for the shape `format_uuid_v4` produces (tests compare random ids by shape).
pub fn is_uuid_v4(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 36
        && b.iter().enumerate().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => *c == b'-',
            14 => *c == b'4',
            19 => matches!(c, b'8' | b'9' | b'a' | b'b'),
            _ => c.is_ascii_hexdigit() && !c.is_ascii_uppercase(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_uuid_v4_and_distinct() {
        let mut g = TicketIds::from_seed([7; 32]);
        let ids: std::collections::HashSet<String> = (0..1000).map(|_| g.next_id()).collect();
        assert_eq!(ids.len(), 1000);
        assert!(ids.iter().all(|i| is_uuid_v4(i)), "{ids:?}");
        assert_eq!(format_uuid_v4([0; 16]), "00000000-0000-4000-8000-000000000000");
        assert!(!is_uuid_v4("00000000-0000-1000-8000-000000000000"));
    }
}
