//! Why a handshake is refused: a plain HTTP response with a JSON body
//! `{"error", "message"}` and the status seed 000 names, sent instead of the
//! upgrade (so the client sees it).

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use queue_client::ClientError;
use queue_client::QueueError;
use serde_json::json;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HandshakeError {
    /// 426: a plain HTTP request where a WebSocket upgrade was expected.
    NotWebSocket,
    /// 400: an upgrade this server cannot take (version, missing key, HTTP/2).
    BadUpgrade,
    /// 400: the query string cannot be read (a parameter given twice, bad encoding).
    BadQuery,
    /// 400: the queue name is not a valid name.
    BadQueue,
    /// 401: no ticketId.
    MissingTicket,
    /// 400: the holder is not 1-64 characters from the ticket id's.
    BadHolder,
    /// 401: the ticket was never issued, is already used or was withdrawn.
    UnknownTicket,
    /// 401: the ticket outlived the queue's ticket_ttl.
    ExpiredTicket,
    /// 409: the ticket's user is already connected.
    AlreadyConnected,
    /// 503: the queue's hard cap of live sessions is reached.
    Full,
    /// 503: Valkey cannot be reached.
    Unavailable,
    /// 503: durable claims, and the replicas did not confirm this claim in time; the
    /// same ticket and holder again get in (Retry-After).
    NotDurable,
    /// 503: this instance is shutting down.
    ShuttingDown,
    /// This instance holds its most sessions (`--max-sessions`): the upgrade is taken
    /// and closed with 1013 at once (503 when too many such closes are under way).
    TooManySessions,
    /// This client address holds its most sessions (`--max-sessions-per-addr`): as
    /// above.
    TooManyFromAddress,
    /// 429: this client address failed the ticket check too often
    /// (`--ticket-failures-per-minute`); Retry-After says when it may try again.
    TooManyTicketFailures,
}

/// Seconds a client refused for a session limit is asked to wait.
pub const LIMIT_RETRY_AFTER: u64 = 5;

impl HandshakeError {
    pub fn status(self) -> StatusCode {
        match self {
            HandshakeError::NotWebSocket => StatusCode::UPGRADE_REQUIRED,
            HandshakeError::BadUpgrade
            | HandshakeError::BadQuery
            | HandshakeError::BadQueue
            | HandshakeError::BadHolder => StatusCode::BAD_REQUEST,
            HandshakeError::MissingTicket | HandshakeError::UnknownTicket | HandshakeError::ExpiredTicket => {
                StatusCode::UNAUTHORIZED
            }
            HandshakeError::AlreadyConnected => StatusCode::CONFLICT,
            HandshakeError::TooManyTicketFailures => StatusCode::TOO_MANY_REQUESTS,
            HandshakeError::Full
            | HandshakeError::Unavailable
            | HandshakeError::NotDurable
            | HandshakeError::ShuttingDown
            | HandshakeError::TooManySessions
            | HandshakeError::TooManyFromAddress => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    /// The `error` field, also the `reason` label of the refusal metrics.
    pub fn code(self) -> &'static str {
        match self {
            HandshakeError::NotWebSocket => "upgrade_required",
            HandshakeError::BadUpgrade => "bad_upgrade",
            HandshakeError::BadQuery => "bad_query",
            HandshakeError::BadQueue => "bad_queue",
            HandshakeError::MissingTicket => "missing_ticket",
            HandshakeError::BadHolder => "bad_holder",
            HandshakeError::UnknownTicket => "invalid_ticket",
            HandshakeError::ExpiredTicket => "expired_ticket",
            HandshakeError::AlreadyConnected => "already_connected",
            HandshakeError::Full => "full",
            HandshakeError::Unavailable => "unavailable",
            HandshakeError::NotDurable => "not_durable",
            HandshakeError::ShuttingDown => "shutting_down",
            HandshakeError::TooManySessions => "too_many_sessions",
            HandshakeError::TooManyFromAddress => "too_many_from_address",
            HandshakeError::TooManyTicketFailures => "too_many_ticket_failures",
        }
    }

    pub fn message(self) -> &'static str {
        match self {
            HandshakeError::NotWebSocket => "this endpoint takes WebSocket connections only",
            HandshakeError::BadUpgrade => "unsupported WebSocket handshake (version 13 over HTTP/1.1 is required)",
            HandshakeError::BadQuery => "the query string cannot be read: give ticketId and queue once each",
            HandshakeError::BadQueue => "invalid queue name: 1-64 characters from A-Z a-z 0-9 . _ : - are allowed",
            HandshakeError::MissingTicket => "the ticketId query parameter is required",
            HandshakeError::BadHolder => "invalid holder: 1-64 characters from A-Z a-z 0-9 . _ : - @ are allowed",
            HandshakeError::UnknownTicket => "unknown or already used ticket",
            HandshakeError::ExpiredTicket => "the ticket has expired; join the queue again",
            HandshakeError::AlreadyConnected => "this user is already connected",
            HandshakeError::Full => "the room is full; try again shortly (the ticket stays valid)",
            HandshakeError::Unavailable => "the queue store is unreachable; try again shortly",
            HandshakeError::NotDurable => {
                "your admission is being saved; try again with the same ticketId and holder after Retry-After seconds"
            }
            HandshakeError::ShuttingDown => "this server is shutting down; try again",
            HandshakeError::TooManySessions => "this server holds its most sessions; try again later",
            HandshakeError::TooManyFromAddress => "this address holds its most sessions; try again later",
            HandshakeError::TooManyTicketFailures => {
                "too many unknown tickets from this address; try again after Retry-After seconds"
            }
        }
    }

    /// A ticket the client got wrong (counted by chatserver_auth_failures_total),
    /// as opposed to a server that cannot take it now.
    pub fn is_auth_failure(self) -> bool {
        matches!(self.status(), StatusCode::UNAUTHORIZED | StatusCode::CONFLICT)
    }
}

impl IntoResponse for HandshakeError {
    fn into_response(self) -> Response {
        let mut resp =
            (self.status(), Json(json!({ "error": self.code(), "message": self.message() }))).into_response();
        let headers = resp.headers_mut();
        match self {
            HandshakeError::NotWebSocket => {
                headers.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
            }
            HandshakeError::Full => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
            }
            HandshakeError::TooManySessions | HandshakeError::TooManyFromAddress => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from(LIMIT_RETRY_AFTER));
            }
            HandshakeError::Unavailable | HandshakeError::ShuttingDown | HandshakeError::NotDurable => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            }
            _ => {}
        }
        resp
    }
}

impl From<ClientError> for HandshakeError {
    fn from(e: ClientError) -> Self {
        match e {
            ClientError::Refused(QueueError::NoTicket) => HandshakeError::UnknownTicket,
            ClientError::Refused(QueueError::TicketExpired) => HandshakeError::ExpiredTicket,
            ClientError::Refused(QueueError::AlreadyInside) => HandshakeError::AlreadyConnected,
            ClientError::Refused(QueueError::HardCap) => HandshakeError::Full,
            ClientError::NotDurable(_) => HandshakeError::NotDurable,
            // Names are checked before the claim; what the server still refuses is a
            // ticket id it does not know.
            ClientError::InvalidArgument(_) => HandshakeError::UnknownTicket,
            e if e.is_unavailable() => HandshakeError::Unavailable,
            e => {
                tracing::error!(error = %e, "unexpected reply to TICKET.CLAIM");
                HandshakeError::Unavailable
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claim_errors_map_to_seed_statuses() {
        let cases = [
            (ClientError::Refused(QueueError::NoTicket), 401),
            (ClientError::Refused(QueueError::TicketExpired), 401),
            (ClientError::Refused(QueueError::AlreadyInside), 409),
            (ClientError::Refused(QueueError::HardCap), 503),
            (ClientError::Unavailable("down".into()), 503),
            (ClientError::InvalidArgument("ERR invalid ticketId: x".into()), 401),
        ];
        for (e, status) in cases {
            assert_eq!(HandshakeError::from(e.clone()).status().as_u16(), status, "{e:?}");
        }
    }

    #[test]
    fn auth_failures_are_the_clients_mistakes() {
        assert!(HandshakeError::MissingTicket.is_auth_failure());
        assert!(HandshakeError::AlreadyConnected.is_auth_failure());
        assert!(!HandshakeError::Full.is_auth_failure());
        assert!(!HandshakeError::Unavailable.is_auth_failure());
    }
}
