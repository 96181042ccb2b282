//! Proof of work at entry: an optional toll on bots (per-queue `pow_difficulty`,
//! 0 = off). queue-api hands a client a challenge bound to that client's address and
//! queue, valid for [`CHALLENGE_TTL_MS`]; the client finds a nonce such that
//! SHA-256(`challenge` ":" `nonce`) starts with `difficulty` zero bits (about
//! 2^difficulty hashes: 65,536 at the recommended 16) and sends both with its entry.
//! Checking costs the server one HMAC and one hash. The challenge carries no state
//! of the server's: it is `hex(expiry ms, 8 bytes | id, 12 random bytes | difficulty,
//! 1 byte | MAC, 16 bytes)`, the MAC (HMAC-SHA-256, truncated) covering those bytes,
//! the queue and the client's address. That a solved challenge works only once is
//! the caller's part: it records the challenge's id until the expiry (queue-client's
//! `use_challenge`, a `SET NX PX` in the queue's slot).

use crate::hex::{hex, unhex};
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// How long a challenge may be solved and used, in ms.
pub const CHALLENGE_TTL_MS: i64 = 120_000;
/// The hardest difficulty a queue may ask (bits); 2^32 hashes is minutes of a phone's time.
pub const MAX_DIFFICULTY: i64 = 32;
/// The difficulty docs/commands.md recommends ("Settings", pow_difficulty): 65,536
/// hashes expected, a fraction of a second in a browser, about a millisecond of a
/// bot's core per entry... times the entries it wants.
pub const RECOMMENDED_DIFFICULTY: u8 = 16;
/// The longest nonce accepted (a u64 in decimal).
pub const MAX_NONCE_LEN: usize = 20;

const ID_LEN: usize = 12;
const MAC_LEN: usize = 16;
const BODY_LEN: usize = 8 + ID_LEN + 1;
/// A challenge's length in hex characters.
pub const CHALLENGE_LEN: usize = 2 * (BODY_LEN + MAC_LEN);

/// A challenge as handed out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Challenge {
    pub challenge: String,
    pub difficulty: u8,
    pub expires_at_ms: i64,
}

/// A solution that checked out: the id to record as used until `expires_at_ms`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Solved {
    pub id: String,
    pub expires_at_ms: i64,
}

/// Why a solution was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Not a challenge of this form, or a nonce that is not a decimal number.
    Malformed,
    /// Not issued by this service for this queue and this client address.
    Forged,
    /// Past its expiry: ask for a new one.
    Expired,
    /// Issued at a lower difficulty than the queue now asks: ask for a new one.
    TooEasy,
    /// The hash does not start with enough zero bits.
    Unsolved,
}

impl Refusal {
    /// A new challenge fixes this one (the client did nothing wrong).
    pub fn wants_new_challenge(self) -> bool {
        matches!(self, Refusal::Expired | Refusal::TooEasy)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Refusal::Malformed => "malformed",
            Refusal::Forged => "forged",
            Refusal::Expired => "expired",
            Refusal::TooEasy => "too_easy",
            Refusal::Unsolved => "unsolved",
        }
    }
}

/// Issues and checks challenges under one secret key (every queue-api instance
/// behind one load balancer must share it).
#[derive(Clone)]
pub struct Challenger {
    key: [u8; 32],
}

impl std::fmt::Debug for Challenger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Challenger(..)")
    }
}

/// Whether `challenge` and `nonce` have the form challenges are given and solutions
/// sent in (whatever their worth): [`CHALLENGE_LEN`] lowercase hex characters, and
/// 1 to [`MAX_NONCE_LEN`] decimal digits.
pub fn well_formed(challenge: &str, nonce: &str) -> bool {
    challenge.len() == CHALLENGE_LEN
        && challenge.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
        && (1..=MAX_NONCE_LEN).contains(&nonce.len())
        && nonce.bytes().all(|b| b.is_ascii_digit())
}

impl Challenger {
    /// A challenger whose key is derived from `secret` (any length).
    pub fn new(secret: &[u8]) -> Challenger {
        Challenger { key: Sha256::digest(secret).into() }
    }

    fn mac(&self, body: &[u8], queue: &str, client: &str) -> [u8; MAC_LEN] {
        let mut m = <Hmac<Sha256> as Mac>::new_from_slice(&self.key).expect("any key length");
        m.update(body);
        m.update(queue.as_bytes());
        m.update(&[0]);
        m.update(client.as_bytes());
        let full = m.finalize().into_bytes();
        let mut out = [0; MAC_LEN];
        out.copy_from_slice(&full[..MAC_LEN]);
        out
    }

    /// A challenge for `client` (its address as the service sees it) entering
    /// `queue`, with `id` fresh random bytes.
    pub fn issue(&self, queue: &str, client: &str, difficulty: u8, now_ms: i64, id: [u8; ID_LEN]) -> Challenge {
        let expires_at_ms = now_ms + CHALLENGE_TTL_MS;
        let mut raw = [0u8; BODY_LEN + MAC_LEN];
        raw[..8].copy_from_slice(&expires_at_ms.to_be_bytes());
        raw[8..8 + ID_LEN].copy_from_slice(&id);
        raw[BODY_LEN - 1] = difficulty;
        let mac = self.mac(&raw[..BODY_LEN], queue, client);
        raw[BODY_LEN..].copy_from_slice(&mac);
        Challenge { challenge: hex(&raw), difficulty, expires_at_ms }
    }

    /// Checks a solution sent by `client` entering `queue` while the queue asks
    /// `required` bits.
    pub fn check(
        &self,
        queue: &str,
        client: &str,
        challenge: &str,
        nonce: &str,
        required: u8,
        now_ms: i64,
    ) -> Result<Solved, Refusal> {
        let mut raw = [0u8; BODY_LEN + MAC_LEN];
        if !well_formed(challenge, nonce) || !unhex(challenge, &mut raw) {
            return Err(Refusal::Malformed);
        }
        let mac = self.mac(&raw[..BODY_LEN], queue, client);
        // Constant time (`subtle`): a forger learns nothing from how long the comparison took.
        if !bool::from(mac[..].ct_eq(&raw[BODY_LEN..])) {
            return Err(Refusal::Forged);
        }
        let expires_at_ms = i64::from_be_bytes(raw[..8].try_into().expect("8 bytes"));
        if expires_at_ms <= now_ms {
            return Err(Refusal::Expired);
        }
        let difficulty = raw[BODY_LEN - 1];
        if difficulty < required {
            return Err(Refusal::TooEasy);
        }
        if !solves(challenge, nonce, difficulty) {
            return Err(Refusal::Unsolved);
        }
        Ok(Solved { id: hex(&raw[8..8 + ID_LEN]), expires_at_ms })
    }
}

/// How many zero bits `hash` starts with.
pub fn leading_zero_bits(hash: &[u8]) -> u32 {
    let mut n = 0;
    for &b in hash {
        if b == 0 {
            n += 8;
        } else {
            return n + b.leading_zeros();
        }
    }
    n
}

/// Whether SHA-256(`challenge` ":" `nonce`) starts with `difficulty` zero bits.
pub fn solves(challenge: &str, nonce: &str, difficulty: u8) -> bool {
    let mut h = Sha256::new();
    h.update(challenge.as_bytes());
    h.update(b":");
    h.update(nonce.as_bytes());
    leading_zero_bits(&h.finalize()) >= u32::from(difficulty)
}

/// Finds a nonce (the first, counting from 0) that solves `challenge`.
pub fn solve(challenge: &str, difficulty: u8) -> String {
    let mut prefix = Sha256::new();
    prefix.update(challenge.as_bytes());
    prefix.update(b":");
    let mut buf = itoa_buf();
    for n in 0u64.. {
        let digits = itoa(n, &mut buf);
        let mut h = prefix.clone();
        h.update(digits);
        if leading_zero_bits(&h.finalize()) >= u32::from(difficulty) {
            return String::from_utf8(digits.to_vec()).expect("digits");
        }
    }
    unreachable!("some nonce below 2^64 solves any difficulty up to 32 bits")
}

fn itoa_buf() -> [u8; MAX_NONCE_LEN] {
    [0; MAX_NONCE_LEN]
}

fn itoa(mut n: u64, buf: &mut [u8; MAX_NONCE_LEN]) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return &buf[i..];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: i64 = 1_800_000_000_000;

    #[test]
    fn a_solved_challenge_checks_out_for_its_client_and_queue_only() {
        let c = Challenger::new(b"secret");
        let ch = c.issue("launch", "10.0.0.1", 8, T, [7; ID_LEN]);
        assert_eq!(ch.challenge.len(), CHALLENGE_LEN);
        assert_eq!(ch.expires_at_ms, T + CHALLENGE_TTL_MS);
        let nonce = solve(&ch.challenge, 8);
        assert!(solves(&ch.challenge, &nonce, 8));
        let ok = c.check("launch", "10.0.0.1", &ch.challenge, &nonce, 8, T + 1).unwrap();
        assert_eq!(ok, Solved { id: "07".repeat(ID_LEN), expires_at_ms: T + CHALLENGE_TTL_MS });
        // Bound to the address, the queue and the key.
        assert_eq!(c.check("launch", "10.0.0.2", &ch.challenge, &nonce, 8, T), Err(Refusal::Forged));
        assert_eq!(c.check("other", "10.0.0.1", &ch.challenge, &nonce, 8, T), Err(Refusal::Forged));
        let other_key = Challenger::new(b"another");
        assert_eq!(other_key.check("launch", "10.0.0.1", &ch.challenge, &nonce, 8, T), Err(Refusal::Forged));
        // Expiry, a raised difficulty, a wrong nonce.
        assert_eq!(c.check("launch", "10.0.0.1", &ch.challenge, &nonce, 8, ch.expires_at_ms), Err(Refusal::Expired));
        assert_eq!(c.check("launch", "10.0.0.1", &ch.challenge, &nonce, 9, T), Err(Refusal::TooEasy));
        assert!(c.check("launch", "10.0.0.1", &ch.challenge, &nonce, 4, T).is_ok(), "a lowered one is fine");
        let wrong = (0u64..).map(|n| n.to_string()).find(|n| !solves(&ch.challenge, n, 8)).unwrap();
        assert_eq!(c.check("launch", "10.0.0.1", &ch.challenge, &wrong, 8, T), Err(Refusal::Unsolved));
    }

    #[test]
    fn tampering_is_refused() {
        let c = Challenger::new(b"secret");
        let ch = c.issue("q", "::1", 4, T, [1; ID_LEN]);
        let nonce = solve(&ch.challenge, 4);
        // A lower difficulty or a later expiry written into the challenge breaks the MAC.
        let mut easier = ch.challenge.clone();
        easier.replace_range(40..42, "00");
        assert_eq!(c.check("q", "::1", &easier, "0", 0, T), Err(Refusal::Forged));
        let mut later = ch.challenge.clone();
        later.replace_range(0..2, "7f");
        assert_eq!(c.check("q", "::1", &later, &nonce, 4, T), Err(Refusal::Forged));
        for bad in ["", "zz", &ch.challenge[2..], &ch.challenge.to_uppercase()] {
            assert_eq!(c.check("q", "::1", bad, &nonce, 4, T), Err(Refusal::Malformed), "{bad}");
        }
        for bad in ["", "-1", "1.5", "12345678901234567890123", "0x10"] {
            assert_eq!(c.check("q", "::1", &ch.challenge, bad, 4, T), Err(Refusal::Malformed), "{bad}");
        }
    }

    #[test]
    fn zero_bits_and_the_hash_agree_with_a_known_vector() {
        assert_eq!(leading_zero_bits(&[0, 0, 0x10, 0xff]), 19);
        assert_eq!(leading_zero_bits(&[0x80]), 0);
        assert_eq!(leading_zero_bits(&[0, 0]), 16);
        // SHA-256("abc") = ba7816bf...: what the page's own SHA-256 must also give.
        assert_eq!(hex(&Sha256::digest(b"abc"))[..8], *"ba7816bf");
        let mut buf = itoa_buf();
        assert_eq!(itoa(0, &mut buf), b"0");
        assert_eq!(itoa(u64::MAX, &mut buf), b"18446744073709551615");
    }
}
