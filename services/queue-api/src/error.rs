//! Every failure as a JSON body with the right status; no internals leak out.

use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use queue_client::ClientError;
use serde_json::json;

#[derive(Debug)]
pub enum ApiError {
    /// 400: the request cannot be read (malformed JSON, bad query, bad queue name).
    BadRequest(String),
    /// 422: well-formed but invalid (missing or bad nickname).
    Invalid(String),
    /// 401: admin without the right bearer token.
    Unauthorized,
    /// 403: admin is disabled (no token configured).
    AdminDisabled,
    /// 404: unknown user (or route).
    NotFound(String),
    /// 413: a body over the size limit.
    TooLarge,
    /// 429: too many requests from this address; seconds until the next is allowed.
    TooManyRequests(u64),
    /// 503: Valkey is unreachable (recovers by itself).
    Unavailable,
    /// 428: the queue asks a proof of work (why none was taken, a fresh challenge).
    ProofRequired(&'static str, serde_json::Value),
    /// 409: this solved challenge was used already.
    ProofUsed,
    /// 503: this instance holds its most push streams (`--max-streams`).
    TooManyStreams,
    /// 429: this client address holds its most push streams (`--max-streams-per-addr`).
    TooManyStreamsFromAddress,
    /// 503: the queue holds its `max_waiting` people; a newcomer may try again later.
    LineFull,
    /// 400 or 422 about one field of a body (named in the reply's `field`, so that a
    /// form shows the message at that field).
    AtField(StatusCode, String, String),
    /// 409: the request does not fit the state (resuming a queue not paused).
    Conflict(String),
    /// 404: no operator declared this queue (see `declared`); the queue's name.
    UnknownQueue(String),
    /// 409: a queue someone waits in, holds a ticket of or is inside cannot be deleted.
    QueueInUse(String),
    /// 401: this queue (or this userId, one derived from an identity) needs the app's
    /// identity token.
    IdentityRequired,
    /// 415: an entry whose identity came from the login cookie, not sent as
    /// `Content-Type: application/json` (what another site's page could send: CSRF).
    JsonRequired,
    /// 401: the identity token was refused (why: the reply's `reason`).
    IdentityInvalid(crate::identity::Refusal),
    /// 403: the queue admits by invitation only.
    InviteOnly,
    /// 403: an access code unknown or used up (one answer for both, so that codes
    /// cannot be probed for which exist).
    CodeInvalid,
    /// 400: an access code (or codes added) for a queue without lanes.
    NoLanes,
    /// 400: a CSV upload with bad lines (the message names them; the detail lists
    /// them with their reasons).
    BadLines(String, serde_json::Value),
    /// 413: an upload over its bounds (what and how much in the message).
    TooMany(String),
    /// 410: the queue's closing time has passed: the sale has ended, nobody new gets
    /// in (Gone: trying again does not help, unless an operator reopens it).
    Closed,
    /// 409: nothing is left to sell (`inventory` 0): nobody new gets in (Conflict
    /// with the queue's state: more stock from the operator ends it).
    SoldOut,
}

/// Seconds a newcomer refused by a full line is asked to wait.
pub const LINE_FULL_RETRY_AFTER: u64 = 30;

/// Seconds a client refused for a stream limit is asked to wait.
pub const STREAM_RETRY_AFTER: u64 = 5;

impl ApiError {
    fn parts(&self) -> (StatusCode, &'static str, String) {
        match self {
            ApiError::BadRequest(m) => (StatusCode::BAD_REQUEST, "bad_request", m.clone()),
            ApiError::Invalid(m) => (StatusCode::UNPROCESSABLE_ENTITY, "invalid", m.clone()),
            ApiError::Unauthorized => {
                (StatusCode::UNAUTHORIZED, "unauthorized", "a valid bearer token is required".into())
            }
            ApiError::AdminDisabled => (
                StatusCode::FORBIDDEN,
                "admin_disabled",
                "the back office is disabled (no admin token configured)".into(),
            ),
            ApiError::NotFound(m) => (StatusCode::NOT_FOUND, "not_found", m.clone()),
            ApiError::TooLarge => (
                StatusCode::PAYLOAD_TOO_LARGE,
                "too_large",
                format!("the body must be at most {} bytes", crate::BODY_LIMIT),
            ),
            ApiError::TooManyRequests(s) => {
                (StatusCode::TOO_MANY_REQUESTS, "rate_limited", format!("too many requests; retry in {s} s"))
            }
            ApiError::Unavailable => {
                (StatusCode::SERVICE_UNAVAILABLE, "unavailable", "the queue store is unreachable; retry shortly".into())
            }
            ApiError::ProofRequired(why, _) => (
                StatusCode::PRECONDITION_REQUIRED,
                "proof_required",
                format!("this queue asks a proof of work ({why}): solve the challenge given and send it as pow"),
            ),
            ApiError::ProofUsed => {
                (StatusCode::CONFLICT, "proof_used", "this proof of work was used already; ask a new challenge".into())
            }
            ApiError::TooManyStreams => (
                StatusCode::SERVICE_UNAVAILABLE,
                "too_many_streams",
                format!("this server holds its most push streams; retry in {STREAM_RETRY_AFTER} s or poll the status"),
            ),
            ApiError::TooManyStreamsFromAddress => (
                StatusCode::TOO_MANY_REQUESTS,
                "too_many_streams",
                format!("this address holds its most push streams; retry in {STREAM_RETRY_AFTER} s or poll the status"),
            ),
            ApiError::LineFull => (
                StatusCode::SERVICE_UNAVAILABLE,
                "line_full",
                format!("the line is full; retry in {LINE_FULL_RETRY_AFTER} s"),
            ),
            ApiError::AtField(status, _, m) => {
                let code = if *status == StatusCode::UNPROCESSABLE_ENTITY { "invalid" } else { "bad_request" };
                (*status, code, m.clone())
            }
            ApiError::Conflict(m) => (StatusCode::CONFLICT, "conflict", m.clone()),
            ApiError::UnknownQueue(q) => (
                StatusCode::NOT_FOUND,
                "unknown_queue",
                format!(
                    "there is no queue named {q}: queues are made by an operator (the back office or QUEUE.CONFIG)"
                ),
            ),
            ApiError::QueueInUse(m) => (StatusCode::CONFLICT, "queue_in_use", m.clone()),
            ApiError::IdentityRequired => (
                StatusCode::UNAUTHORIZED,
                "identity_required",
                "this place is read, followed and left only with the app's login (its identity token)".into(),
            ),
            ApiError::IdentityInvalid(r) => (StatusCode::UNAUTHORIZED, "identity_invalid", r.message().into()),
            ApiError::JsonRequired => (
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "json_required",
                "with the login cookie, an entry must be sent with Content-Type: application/json".into(),
            ),
            ApiError::InviteOnly => {
                (StatusCode::FORBIDDEN, "invite_only", "this queue admits by invitation only".into())
            }
            ApiError::CodeInvalid => {
                (StatusCode::FORBIDDEN, "code_invalid", "this access code is not valid (unknown or used up)".into())
            }
            ApiError::NoLanes => {
                (StatusCode::BAD_REQUEST, "no_lanes", "this queue has no lanes, so it takes no access codes".into())
            }
            ApiError::BadLines(m, _) => (StatusCode::BAD_REQUEST, "bad_lines", m.clone()),
            ApiError::TooMany(m) => (StatusCode::PAYLOAD_TOO_LARGE, "too_large", m.clone()),
            ApiError::Closed => {
                (StatusCode::GONE, "closed", "the sale has ended: this queue takes no new entries".into())
            }
            ApiError::SoldOut => (
                StatusCode::CONFLICT,
                "sold_out",
                "sold out: nothing is left, so this queue takes no new entries".into(),
            ),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, code, message) = self.parts();
        let mut body = json!({ "error": code, "message": message });
        if let ApiError::ProofRequired(_, challenge) = &self {
            body["challenge"] = challenge.clone();
        }
        if let ApiError::AtField(_, field, _) = &self {
            body["field"] = json!(field);
        }
        if let ApiError::IdentityInvalid(r) = &self {
            body["reason"] = json!(r.as_str());
        }
        if let ApiError::BadLines(_, detail) = &self {
            body["lines"] = detail["lines"].clone();
            body["badLines"] = detail["badLines"].clone();
        }
        let mut resp = (status, Json(body)).into_response();
        match self {
            ApiError::TooManyRequests(s) => {
                resp.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(s));
            }
            ApiError::Unavailable => {
                resp.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            }
            ApiError::TooManyStreams | ApiError::TooManyStreamsFromAddress => {
                resp.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(STREAM_RETRY_AFTER));
            }
            ApiError::LineFull => {
                resp.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(LINE_FULL_RETRY_AFTER));
            }
            ApiError::IdentityRequired => {
                resp.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            }
            ApiError::IdentityInvalid(_) => {
                resp.headers_mut()
                    .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer error=\"invalid_token\""));
            }
            _ => {}
        }
        resp
    }
}

impl From<ClientError> for ApiError {
    fn from(e: ClientError) -> Self {
        if crate::identity::is_invite_refusal(&e) {
            return ApiError::InviteOnly;
        }
        match e {
            ClientError::Refused(queue_core::QueueError::NoCode | queue_core::QueueError::CodeLane) => {
                ApiError::CodeInvalid
            }
            ClientError::InvalidArgument(m) if m.contains("this queue has no lanes") => ApiError::NoLanes,
            ClientError::InvalidArgument(m) => ApiError::BadRequest(m.trim_start_matches("ERR ").to_string()),
            ClientError::Refused(queue_core::QueueError::LineFull) => ApiError::LineFull,
            ClientError::Refused(queue_core::QueueError::Closed) => ApiError::Closed,
            ClientError::Refused(queue_core::QueueError::SoldOut) => ApiError::SoldOut,
            e if e.is_unavailable() => ApiError::Unavailable,
            e => {
                tracing::error!(error = %e, "unexpected reply from the queue store");
                ApiError::Unavailable
            }
        }
    }
}

/// The body could not be read: too large (413), or cut off (400).
impl From<BytesRejection> for ApiError {
    fn from(e: BytesRejection) -> Self {
        if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::TooLarge
        } else {
            ApiError::BadRequest(e.body_text())
        }
    }
}

/// The query string could not be read (a parameter given twice, bad encoding).
impl From<QueryRejection> for ApiError {
    fn from(e: QueryRejection) -> Self {
        ApiError::BadRequest(e.body_text())
    }
}
