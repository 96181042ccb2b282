//! What virtual users saw while services were failing: with an [`OutageLog`] in its
//! config, a swarm's users retry on clear errors (queue-api unreachable or 5xx, a
//! broken push stream, chat-server unreachable or 503) instead of giving up, re-enter
//! the line when a session or ticket was lost with a dying server, and note each such
//! event here with its time, so a chaos run can say what people saw per fault.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A kind of trouble a user met and got past (or, for re-entries, started over from).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Outage {
    /// An entry got no answer or a 5xx: sent again (with the same userId).
    EntryRetried,
    /// The push stream could not be opened or broke: polled, then opened again.
    StreamLost,
    /// A status poll got no answer or a 5xx.
    PollFailed,
    /// The chat handshake got no answer, a 503 or 1013: tried again with the ticket.
    ClaimRetried,
    /// The ticket was gone when the handshake finally went through (used by a session
    /// that died with its server, or expired while chat-server was down).
    TicketLost,
    /// The chat session was closed by a dying chat-server.
    SessionLost,
    /// The line no longer knew the user (dropped).
    Dropped,
    /// Leaving the line failed (the page was closed instead).
    LeaveFailed,
    /// Started the journey over with a fresh userId after one of the above.
    Reentered,
}

impl Outage {
    pub const ALL: [Outage; 9] = [
        Outage::EntryRetried,
        Outage::StreamLost,
        Outage::PollFailed,
        Outage::ClaimRetried,
        Outage::TicketLost,
        Outage::SessionLost,
        Outage::Dropped,
        Outage::LeaveFailed,
        Outage::Reentered,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Outage::EntryRetried => "entry retried",
            Outage::StreamLost => "stream lost",
            Outage::PollFailed => "poll failed",
            Outage::ClaimRetried => "claim retried",
            Outage::TicketLost => "ticket lost",
            Outage::SessionLost => "session lost",
            Outage::Dropped => "dropped",
            Outage::LeaveFailed => "leave failed",
            Outage::Reentered => "re-entered",
        }
    }
}

/// Timestamped outage events, shared by every user of a swarm.
#[derive(Debug)]
pub struct OutageLog {
    events: Mutex<Vec<(Instant, usize, Outage)>>,
    /// How long a promoted user keeps trying to claim its ticket (the ticket's TTL).
    pub claim_for: Duration,
    /// Journeys a user may start over before giving up with an error.
    pub max_attempts: u32,
}

impl OutageLog {
    pub fn new(claim_for: Duration, max_attempts: u32) -> OutageLog {
        OutageLog { events: Mutex::new(Vec::new()), claim_for, max_attempts }
    }

    /// Notes that user number `who` met `what`.
    pub fn note(&self, who: usize, what: Outage) {
        self.events.lock().unwrap().push((Instant::now(), who, what));
    }

    /// (when, which user, what), in the order noted.
    pub fn events(&self) -> Vec<(Instant, usize, Outage)> {
        self.events.lock().unwrap().clone()
    }
}

/// A random version-4 UUID in its hyphenated form (the form queue-api issues).
pub fn random_user_id(rng: &mut impl rand::Rng) -> String {
    let mut b: [u8; 16] = rng.random();
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!("{}-{}-{}-{}-{}", &h[0..8], &h[8..12], &h[12..16], &h[16..20], &h[20..32])
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn user_ids_are_v4_uuids() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        let id = random_user_id(&mut rng);
        assert_eq!(id.len(), 36);
        let parts: Vec<&str> = id.split('-').collect();
        assert_eq!(parts.iter().map(|p| p.len()).collect::<Vec<_>>(), vec![8, 4, 4, 4, 12]);
        assert!(parts[2].starts_with('4'));
        assert!(matches!(parts[3].as_bytes()[0], b'8' | b'9' | b'a' | b'b'));
        assert_ne!(id, random_user_id(&mut rng));
    }
}
