//! The one error type of the client: the queue's own refusals, bad arguments, and a
//! store that cannot be reached (which services answer with HTTP 503).

use redis::{ErrorKind, RedisError};
use std::fmt;

/// Why a queue call failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QueueError {
    /// `NOTICKET`: the ticket was never issued, is already used, or was withdrawn.
    NoTicket,
    /// `EXPIRED`: the ticket outlived the queue's `ticket_ttl`.
    TicketExpired,
    /// `INSIDE`: the ticket's user already holds a live session (the ticket stays valid).
    AlreadyInside,
    /// `FULL`: the queue's `hard_cap` of live sessions is reached (the ticket stays valid).
    HardCap,
    /// An `ERR` reply: a name, number, option or setting the server refused. Carries the
    /// server's full text, e.g. `ERR invalid userId: ...`.
    InvalidArgument(String),
    /// `WRONGTYPE`: a key of the queue holds another type of value.
    WrongType,
    /// The store could not be reached or could not serve the call: connection refused
    /// or lost, no reply in time, loading, cluster down, no permission, or the queue
    /// commands missing on the server. Usually transient; services answer 503.
    Unavailable(String),
    /// A reply that does not have the shape the queue commands promise.
    Protocol(String),
}

impl QueueError {
    /// True for [`QueueError::Unavailable`]: the call may succeed later, the caller
    /// did nothing wrong.
    pub fn is_unavailable(&self) -> bool {
        matches!(self, QueueError::Unavailable(_))
    }

    pub(crate) fn protocol(what: impl Into<String>) -> Self {
        QueueError::Protocol(what.into())
    }
}

impl fmt::Display for QueueError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            QueueError::NoTicket => f.write_str("NOTICKET unknown or already used ticket"),
            QueueError::TicketExpired => f.write_str("EXPIRED ticket has expired"),
            QueueError::AlreadyInside => f.write_str("INSIDE user is already inside"),
            QueueError::HardCap => f.write_str("FULL hard cap reached"),
            QueueError::InvalidArgument(text) => f.write_str(text),
            QueueError::WrongType => f.write_str("WRONGTYPE Operation against a key holding the wrong kind of value"),
            QueueError::Unavailable(why) => write!(f, "queue store unavailable: {why}"),
            QueueError::Protocol(what) => write!(f, "unexpected reply from the queue store: {what}"),
        }
    }
}

impl std::error::Error for QueueError {}

/// The server's text of an error reply, e.g. `NOTICKET unknown or already used ticket`.
pub(crate) fn server_text(e: &RedisError) -> String {
    match (e.code(), e.detail()) {
        (Some(code), Some(detail)) => format!("{code} {detail}"),
        (Some(code), None) => code.to_string(),
        _ => e.to_string(),
    }
}

/// An `ERR` reply that is about the deployment, not the arguments: a function's
/// inner command refused by the user's ACL.
fn is_deployment_error(e: &RedisError) -> bool {
    e.code() == Some("ERR") && e.detail().unwrap_or_default().starts_with("ACL failure")
}

/// An `ERR` reply saying that the queue command or function does not exist on the
/// server (module not loaded, library flushed).
pub(crate) fn is_missing_command(e: &RedisError) -> bool {
    if e.code() != Some("ERR") {
        return false;
    }
    let detail = e.detail().unwrap_or_default().to_ascii_lowercase();
    detail.starts_with("unknown command") || detail.starts_with("function not found")
}

/// Error codes about the server's state or the deployment (loading, failing over,
/// out of memory, no permission) rather than the call's arguments.
const UNAVAILABLE_CODES: &[&str] = &[
    "LOADING",
    "BUSY",
    "TRYAGAIN",
    "CLUSTERDOWN",
    "MASTERDOWN",
    "READONLY",
    "OOM",
    "NOPERM",
    "NOAUTH",
    "WRONGPASS",
    "NOSCRIPT",
];

impl From<RedisError> for QueueError {
    fn from(e: RedisError) -> Self {
        match e.kind() {
            ErrorKind::IoError
            | ErrorKind::AuthenticationFailed
            | ErrorKind::ClusterConnectionNotFound
            | ErrorKind::BusyLoadingError
            | ErrorKind::TryAgain
            | ErrorKind::ClusterDown
            | ErrorKind::MasterDown
            | ErrorKind::ReadOnly => return QueueError::Unavailable(server_text(&e)),
            ErrorKind::ParseError => return QueueError::Protocol(e.to_string()),
            _ => {}
        }
        if is_missing_command(&e) {
            return QueueError::Unavailable(format!("the queue commands are not installed: {}", server_text(&e)));
        }
        if is_deployment_error(&e) {
            return QueueError::Unavailable(server_text(&e));
        }
        match e.code() {
            Some("NOTICKET") => QueueError::NoTicket,
            Some("EXPIRED") => QueueError::TicketExpired,
            Some("INSIDE") => QueueError::AlreadyInside,
            Some("FULL") => QueueError::HardCap,
            Some("WRONGTYPE") => QueueError::WrongType,
            Some("ERR") => QueueError::InvalidArgument(server_text(&e)),
            Some(code) if UNAVAILABLE_CODES.contains(&code) => QueueError::Unavailable(server_text(&e)),
            _ => QueueError::Protocol(server_text(&e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(code: &str, detail: &str) -> RedisError {
        redis::make_extension_error(code.to_string(), Some(detail.to_string()))
    }

    #[test]
    fn first_word_picks_the_variant() {
        let cases = [
            (server("NOTICKET", "unknown or already used ticket"), QueueError::NoTicket),
            (server("EXPIRED", "ticket has expired"), QueueError::TicketExpired),
            (server("INSIDE", "user is already inside"), QueueError::AlreadyInside),
            (server("FULL", "hard cap reached"), QueueError::HardCap),
            (server("WRONGTYPE", "Operation against a key holding the wrong kind of value"), QueueError::WrongType),
        ];
        for (e, want) in cases {
            assert_eq!(QueueError::from(e), want);
        }
    }

    #[test]
    fn texts_match_the_server() {
        assert_eq!(QueueError::NoTicket.to_string(), "NOTICKET unknown or already used ticket");
        assert_eq!(QueueError::TicketExpired.to_string(), "EXPIRED ticket has expired");
        assert_eq!(QueueError::AlreadyInside.to_string(), "INSIDE user is already inside");
        assert_eq!(QueueError::HardCap.to_string(), "FULL hard cap reached");
        assert_eq!(
            QueueError::WrongType.to_string(),
            "WRONGTYPE Operation against a key holding the wrong kind of value"
        );
    }

    #[test]
    fn io_errors_are_unavailable() {
        let e = RedisError::from(std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused"));
        let q = QueueError::from(e);
        assert!(q.is_unavailable(), "{q:?}");
        let e = RedisError::from(std::io::Error::new(std::io::ErrorKind::TimedOut, "slow"));
        assert!(QueueError::from(e).is_unavailable());
        assert!(QueueError::from(server("NOPERM", "no permissions")).is_unavailable());
        assert!(!QueueError::NoTicket.is_unavailable());
    }

    #[test]
    fn err_replies_are_invalid_arguments() {
        let err = |detail: &str| {
            RedisError::from((ErrorKind::ResponseError, "An error was signalled by the server", detail.to_string()))
        };
        assert_eq!(
            QueueError::from(err("unknown config field 'x'")),
            QueueError::InvalidArgument("ERR unknown config field 'x'".into())
        );
        let missing = QueueError::from(err("unknown command 'QUEUE.ENTER', with args beginning with: "));
        assert!(missing.is_unavailable(), "{missing:?}");
        assert!(QueueError::from(err("Function not found")).is_unavailable());
        assert!(QueueError::from(err("ACL failure in script: User svc has no permissions")).is_unavailable());
    }

    #[test]
    fn unknown_codes_are_protocol_errors() {
        assert_eq!(QueueError::from(server("WHAT", "is this")), QueueError::Protocol("WHAT is this".into()));
    }
}
