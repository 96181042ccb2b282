//! The one error type of the client: the queue's own refusals, bad arguments, and a
//! store that cannot be reached (which services answer with HTTP 503).

use redis::{ErrorKind, RedisError};
use std::fmt;

pub use queue_core::QueueError;

/// Why a queue call failed: the queue's own refusal (queue-core's vocabulary, the
/// same the module and the Lua library answer with), arguments the server refused,
/// or a store that cannot serve the call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientError {
    /// The queue refused: `NOTICKET` (never issued, already used or withdrawn),
    /// `EXPIRED` (past `ticket_ttl`), `INSIDE` (the user holds a live session; the
    /// ticket stays valid), `FULL` (the hard cap; the ticket stays valid) or
    /// `WRONGTYPE` (a key of the queue holds another type).
    Refused(QueueError),
    /// An `ERR` reply: a name, number, option or setting the server refused. Carries the
    /// server's full text, e.g. `ERR invalid userId: ...`.
    InvalidArgument(String),
    /// The store could not be reached or could not serve the call: connection refused
    /// or lost, no reply in time, loading, cluster down, no permission, or the queue
    /// commands missing on the server. Usually transient; services answer 503.
    Unavailable(String),
    /// A reply that does not have the shape the queue commands promise.
    Protocol(String),
    /// A durable claim ([`QueueClient::claim_as`](crate::QueueClient::claim_as) with a
    /// [`Durability`](crate::Durability)) that the replicas did not confirm in time.
    /// The claim stands on the primary but a failover now could lose it: do not
    /// admit yet; the same holder retrying gets the same claim and waits again.
    /// Services answer 503 with `Retry-After`.
    NotDurable(String),
}

impl ClientError {
    /// True for [`ClientError::Unavailable`]: the call may succeed later, the caller
    /// did nothing wrong.
    pub fn is_unavailable(&self) -> bool {
        matches!(self, ClientError::Unavailable(_))
    }

    /// The permission Valkey refused, when this is such a refusal (`NOPERM`, or a
    /// function's inner command refused by the ACL): the server's text, naming the
    /// command, and the key or channel where the server's own text does not.
    pub fn refused_permission(&self) -> Option<&str> {
        match self {
            ClientError::Unavailable(text) if is_permission_text(text) => Some(text),
            _ => None,
        }
    }

    pub(crate) fn protocol(what: impl Into<String>) -> Self {
        ClientError::Protocol(what.into())
    }
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientError::Refused(e) => e.fmt(f),
            ClientError::InvalidArgument(text) => f.write_str(text),
            ClientError::Unavailable(why) if is_permission_text(why) => write!(f, "Valkey refused a permission: {why}"),
            ClientError::Unavailable(why) => write!(f, "queue store unavailable: {why}"),
            ClientError::Protocol(what) => write!(f, "unexpected reply from the queue store: {what}"),
            ClientError::NotDurable(why) => write!(f, "claim not durable yet: {why}"),
        }
    }
}

impl std::error::Error for ClientError {}

impl From<QueueError> for ClientError {
    fn from(e: QueueError) -> Self {
        ClientError::Refused(e)
    }
}

/// The server's text of an error reply, e.g. `NOTICKET unknown or already used ticket`.
pub(crate) fn server_text(e: &RedisError) -> String {
    match (e.code(), e.detail()) {
        (Some(code), Some(detail)) => format!("{code} {detail}"),
        (Some(code), None) => code.to_string(),
        _ => e.to_string(),
    }
}

/// Whether an error text is Valkey refusing a permission to this user.
pub(crate) fn is_permission_text(text: &str) -> bool {
    text.starts_with("NOPERM") || text.contains("ACL failure") || text.contains("no permissions")
}

/// A `NOPERM` reply that does not say what was refused (Valkey names the command it
/// refuses, not the key or channel) with the command and its first argument added:
/// `NOPERM No permissions to access a key (SET queue-manager:leader)`.
pub(crate) fn name_refusal(e: RedisError, cmd: &redis::Cmd) -> RedisError {
    let detail = e.detail().unwrap_or_default();
    if e.code() != Some("NOPERM") || !(detail.ends_with("a key") || detail.ends_with("a channel")) {
        return e;
    }
    let mut args = cmd.args_iter().filter_map(|a| match a {
        redis::Arg::Simple(b) => Some(String::from_utf8_lossy(b).into_owned()),
        redis::Arg::Cursor => None,
    });
    let name = args.next().unwrap_or_default().to_ascii_uppercase();
    let first = args.next().unwrap_or_default();
    redis::make_extension_error("NOPERM".to_string(), Some(format!("{detail} ({name} {first})")))
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

/// How an [`ClientError::Unavailable`] for missing queue commands begins.
pub(crate) const NOT_INSTALLED: &str = "the queue commands are not installed";

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

impl From<RedisError> for ClientError {
    fn from(e: RedisError) -> Self {
        match e.kind() {
            ErrorKind::IoError
            | ErrorKind::AuthenticationFailed
            | ErrorKind::ClusterConnectionNotFound
            | ErrorKind::BusyLoadingError
            | ErrorKind::TryAgain
            | ErrorKind::ClusterDown
            | ErrorKind::MasterDown
            | ErrorKind::ReadOnly => return ClientError::Unavailable(server_text(&e)),
            ErrorKind::ParseError => return ClientError::Protocol(e.to_string()),
            _ => {}
        }
        if is_missing_command(&e) {
            return ClientError::Unavailable(format!("{NOT_INSTALLED}: {}", server_text(&e)));
        }
        if is_deployment_error(&e) {
            return ClientError::Unavailable(server_text(&e));
        }
        if let Some(refused) = e.code().and_then(QueueError::from_code) {
            return ClientError::Refused(refused);
        }
        match e.code() {
            Some("ERR") => ClientError::InvalidArgument(server_text(&e)),
            Some(code) if UNAVAILABLE_CODES.contains(&code) => ClientError::Unavailable(server_text(&e)),
            _ => ClientError::Protocol(server_text(&e)),
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
            (server("NOTICKET", "unknown or already used ticket"), ClientError::Refused(QueueError::NoTicket)),
            (server("EXPIRED", "ticket has expired"), ClientError::Refused(QueueError::TicketExpired)),
            (server("INSIDE", "user is already inside"), ClientError::Refused(QueueError::AlreadyInside)),
            (server("FULL", "hard cap reached"), ClientError::Refused(QueueError::HardCap)),
            (server("LINEFULL", "the line is full, try again later"), ClientError::Refused(QueueError::LineFull)),
            (server("CLOSED", "this queue is closed to new entries"), ClientError::Refused(QueueError::Closed)),
            (server("SOLDOUT", "sold out"), ClientError::Refused(QueueError::SoldOut)),
            (
                server("WRONGTYPE", "Operation against a key holding the wrong kind of value"),
                ClientError::Refused(QueueError::WrongType),
            ),
        ];
        for (e, want) in cases {
            assert_eq!(ClientError::from(e), want);
        }
    }

    #[test]
    fn texts_match_the_server() {
        assert_eq!(ClientError::Refused(QueueError::NoTicket).to_string(), "NOTICKET unknown or already used ticket");
        assert_eq!(ClientError::Refused(QueueError::TicketExpired).to_string(), "EXPIRED ticket has expired");
        assert_eq!(ClientError::Refused(QueueError::AlreadyInside).to_string(), "INSIDE user is already inside");
        assert_eq!(ClientError::Refused(QueueError::HardCap).to_string(), "FULL hard cap reached");
        assert_eq!(ClientError::Refused(QueueError::Closed).to_string(), "CLOSED this queue is closed to new entries");
        assert_eq!(ClientError::Refused(QueueError::SoldOut).to_string(), "SOLDOUT sold out");
        assert_eq!(
            ClientError::Refused(QueueError::WrongType).to_string(),
            "WRONGTYPE Operation against a key holding the wrong kind of value"
        );
    }

    #[test]
    fn io_errors_are_unavailable() {
        let e = RedisError::from(std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused"));
        let q = ClientError::from(e);
        assert!(q.is_unavailable(), "{q:?}");
        let e = RedisError::from(std::io::Error::new(std::io::ErrorKind::TimedOut, "slow"));
        assert!(ClientError::from(e).is_unavailable());
        assert!(ClientError::from(server("NOPERM", "no permissions")).is_unavailable());
        assert!(!ClientError::Refused(QueueError::NoTicket).is_unavailable());
    }

    #[test]
    fn err_replies_are_invalid_arguments() {
        let err = |detail: &str| {
            RedisError::from((ErrorKind::ResponseError, "An error was signalled by the server", detail.to_string()))
        };
        assert_eq!(
            ClientError::from(err("unknown config field 'x'")),
            ClientError::InvalidArgument("ERR unknown config field 'x'".into())
        );
        let missing = ClientError::from(err("unknown command 'QUEUE.ENTER', with args beginning with: "));
        assert!(missing.is_unavailable(), "{missing:?}");
        assert!(ClientError::from(err("Function not found")).is_unavailable());
        assert!(ClientError::from(err("ACL failure in script: User svc has no permissions")).is_unavailable());
    }

    #[test]
    fn refused_permissions_are_named() {
        let e = ClientError::from(server("NOPERM", "User svc has no permissions to run the 'ping' command"));
        assert!(e.is_unavailable());
        assert_eq!(e.refused_permission(), Some("NOPERM User svc has no permissions to run the 'ping' command"));
        assert!(e.to_string().starts_with("Valkey refused a permission: NOPERM"), "{e}");
        let mut set = redis::cmd("SET");
        set.arg("queue-manager:leader").arg("x");
        let named = name_refusal(server("NOPERM", "No permissions to access a key"), &set);
        let e = ClientError::from(named);
        assert_eq!(e.refused_permission(), Some("NOPERM No permissions to access a key (SET queue-manager:leader)"));
        let script = ClientError::from(RedisError::from((
            ErrorKind::ResponseError,
            "An error was signalled by the server",
            "ACL failure in script: User svc has no permissions to run the 'zadd' command".to_string(),
        )));
        assert!(script.refused_permission().is_some_and(|t| t.contains("'zadd'")), "{script:?}");
        assert_eq!(ClientError::Unavailable("connection refused".into()).refused_permission(), None);
    }

    #[test]
    fn unknown_codes_are_protocol_errors() {
        assert_eq!(ClientError::from(server("WHAT", "is this")), ClientError::Protocol("WHAT is this".into()));
    }
}
