//! Every error a client can see, with its exact text. The Lua fallback returns the
//! same strings; tests assert them verbatim.

use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QueueError {
    /// Wrong number of arguments; carries the lowercase command name.
    Arity(&'static str),
    Syntax,
    NotInteger,
    /// A number outside its allowed range: (what, min, max).
    OutOfRange(&'static str, i64, i64),
    InvalidQueue,
    InvalidUserId,
    /// QUEUE.WATCH / QUEUE.UNWATCH: a push instance's id.
    InvalidInstance,
    InvalidNickname,
    InvalidTicketId,
    UnknownConfigField(String),
    WrongType,
    /// TICKET.CLAIM: no such ticket (never issued, already used, or revoked).
    NoTicket,
    /// TICKET.CLAIM: the ticket's lifetime is over.
    TicketExpired,
    /// TICKET.CLAIM: the ticket's user already holds a session.
    AlreadyInside,
    /// TICKET.CLAIM: the queue's hard cap of sessions is reached.
    HardCap,
    /// QUEUE.ENTER: `max_waiting` people already wait; a newcomer may try again later.
    LineFull,
    /// TICKET.CLAIM: a `HOLDER` outside the allowed set.
    InvalidHolder,
    /// QUEUE.CONFIG: a value of `entry` other than its modes.
    InvalidEntry,
    /// QUEUE.ENTER in a queue whose `entry` is `invite`, without an invitation.
    Invite,
    /// QUEUE.CONFIG: a value of `lanes` that is not a list of lane names.
    InvalidLanes,
    /// QUEUE.CONFIG: `lanes` changed while people wait (their numbers name lanes).
    LanesBusy,
    /// No longer returned: lanes and an opening (`opens_at`) combine (each lane opens
    /// in the seeded order). Kept so that code naming it still builds.
    LanesWithOpening,
    /// LANE or CODE (QUEUE.ENTER, QUEUE.CODES) in a queue without lanes.
    NoLanes,
    /// A lane the queue does not have (its name, printable).
    UnknownLane(String),
    /// QUEUE.ENTER CODE: no such code, or its uses are all consumed.
    NoCode,
    /// QUEUE.ENTER CODE with a LANE other than the code's.
    CodeLane,
    /// A code's hash that is not 64 lowercase hex digits.
    InvalidCode,
    /// QUEUE.CODES: more codes in one call than `lanes::MAX_CODES_PER_CALL`.
    TooManyCodes,
    /// QUEUE.ENTER after the queue's `closes_at`.
    Closed,
    /// QUEUE.ENTER while the queue's `inventory` is 0.
    SoldOut,
    /// QUEUE.CONFIG: a `message` longer than 500 bytes or with control characters.
    InvalidMessage,
}

pub const MAX_NAME_LEN: usize = 64;
/// Bytes (UTF-8): ten Hangul syllables fit.
pub const MAX_NICKNAME_LEN: usize = 32;

impl fmt::Display for QueueError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use QueueError::*;
        match self {
            Arity(cmd) => write!(f, "ERR wrong number of arguments for '{cmd}' command"),
            Syntax => f.write_str("ERR syntax error"),
            NotInteger => f.write_str("ERR value is not an integer or out of range"),
            OutOfRange(what, min, max) => {
                write!(f, "ERR {what} must be an integer from {min} to {max}")
            }
            InvalidQueue => f.write_str("ERR invalid queue name: 1 to 64 characters from A-Z a-z 0-9 . _ : -"),
            InvalidUserId => f.write_str("ERR invalid userId: 1 to 64 characters from A-Z a-z 0-9 . _ : @ -"),
            InvalidInstance => f.write_str("ERR invalid instance: 1 to 64 characters from A-Z a-z 0-9 . _ : @ -"),
            InvalidNickname => f.write_str("ERR invalid nickname: 1 to 32 bytes, no control characters"),
            InvalidTicketId => f.write_str("ERR invalid ticketId: 1 to 64 characters from A-Z a-z 0-9 . _ : @ -"),
            UnknownConfigField(name) => write!(f, "ERR unknown config field '{name}'"),
            WrongType => f.write_str("WRONGTYPE Operation against a key holding the wrong kind of value"),
            NoTicket => f.write_str("NOTICKET unknown or already used ticket"),
            TicketExpired => f.write_str("EXPIRED ticket has expired"),
            AlreadyInside => f.write_str("INSIDE user is already inside"),
            HardCap => f.write_str("FULL hard cap reached"),
            LineFull => f.write_str("LINEFULL the line is full, try again later"),
            InvalidHolder => f.write_str("ERR invalid holder: 1 to 64 characters from A-Z a-z 0-9 . _ : @ -"),
            InvalidEntry => f.write_str("ERR entry must be one of open, identified, invite"),
            Invite => f.write_str("INVITE this queue admits by invitation only"),
            InvalidLanes => f.write_str(
                "ERR lanes must be up to 8 distinct names of 1 to 32 characters from A-Z a-z 0-9 _ -, separated by commas",
            ),
            LanesBusy => f.write_str("ERR lanes can change only while nobody waits"),
            LanesWithOpening => f.write_str("ERR lanes and opens_at cannot be combined yet"),
            NoLanes => f.write_str("ERR this queue has no lanes"),
            UnknownLane(name) => write!(f, "ERR unknown lane '{name}'"),
            NoCode => f.write_str("NOCODE unknown or used-up access code"),
            CodeLane => f.write_str("WRONGLANE the access code is for another lane"),
            InvalidCode => f.write_str("ERR invalid code: 64 hex digits 0-9 a-f (its SHA-256)"),
            TooManyCodes => f.write_str("ERR at most 1000 codes per call"),
            Closed => f.write_str("CLOSED this queue is closed to new entries"),
            SoldOut => f.write_str("SOLDOUT sold out"),
            InvalidMessage => f.write_str("ERR message must be at most 500 bytes, no control characters"),
        }
    }
}

impl std::error::Error for QueueError {}

impl QueueError {
    /// The refusal a server error reply's first word names, for the errors that carry
    /// no argument: `NOTICKET`, `EXPIRED`, `INSIDE`, `FULL`, `LINEFULL`, `INVITE`, `NOCODE`,
    /// `WRONGLANE`, `CLOSED`, `SOLDOUT` and `WRONGTYPE`. (`ERR`
    /// replies carry the text of one of the others and are kept as text by clients.)
    pub fn from_code(code: &str) -> Option<QueueError> {
        Some(match code {
            "NOTICKET" => QueueError::NoTicket,
            "EXPIRED" => QueueError::TicketExpired,
            "INSIDE" => QueueError::AlreadyInside,
            "FULL" => QueueError::HardCap,
            "LINEFULL" => QueueError::LineFull,
            "INVITE" => QueueError::Invite,
            "NOCODE" => QueueError::NoCode,
            "WRONGLANE" => QueueError::CodeLane,
            "CLOSED" => QueueError::Closed,
            "SOLDOUT" => QueueError::SoldOut,
            "WRONGTYPE" => QueueError::WrongType,
            _ => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn texts_carry_their_prefix() {
        let cases: &[(QueueError, &str)] = &[
            (QueueError::Arity("queue.enter"), "ERR wrong number of arguments for 'queue.enter' command"),
            (QueueError::NoTicket, "NOTICKET unknown or already used ticket"),
            (QueueError::TicketExpired, "EXPIRED ticket has expired"),
            (QueueError::AlreadyInside, "INSIDE user is already inside"),
            (QueueError::HardCap, "FULL hard cap reached"),
            (QueueError::OutOfRange("MAX", 0, 100000), "ERR MAX must be an integer from 0 to 100000"),
            (QueueError::UnknownConfigField("x".into()), "ERR unknown config field 'x'"),
        ];
        for (e, text) in cases {
            assert_eq!(e.to_string(), *text);
        }
        for e in [
            QueueError::NoTicket,
            QueueError::TicketExpired,
            QueueError::AlreadyInside,
            QueueError::HardCap,
            QueueError::Invite,
            QueueError::NoCode,
            QueueError::Closed,
            QueueError::SoldOut,
            QueueError::CodeLane,
            QueueError::WrongType,
        ] {
            let code = e.to_string().split(' ').next().unwrap().to_string();
            assert_eq!(QueueError::from_code(&code), Some(e));
        }
        assert_eq!(QueueError::from_code("ERR"), None);
    }
}
