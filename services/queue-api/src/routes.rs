//! The handlers of the public queue API (a push stream's state and events are in
//! hub/stream.rs and hub/wire.rs).

use crate::error::ApiError;
use crate::extract::{EntryRequest, Field, JsonBody};
use crate::hub::Polled;
use crate::AppState;
use axum::extract::{FromRequestParts, Query, State};
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures_util::Stream;
use queue_client::{Standing, Status};
use serde::Deserialize;
use serde_json::{json, Value};
use std::net::IpAddr;
use std::sync::Arc;

type St = State<Arc<AppState>>;

/// The queue of seed 000's contract, used when a request names none.
pub const DEFAULT_QUEUE: &str = "default";

/// The client's address: the peer's, or behind the proxies the operator names what
/// they say (`service_kit::client_addr`, one reading for every service).
pub use service_kit::ClientAddr as ClientIp;

/// Takes a token for the client's address.
fn rate_limit(state: &AppState, ClientIp(ip): &ClientIp) -> Result<IpAddr, ApiError> {
    state.limiter.check(*ip).map_err(|secs| {
        state.metrics.rate_limited.increment(1);
        ApiError::TooManyRequests(secs)
    })?;
    Ok(*ip)
}

pub(crate) fn queue_name(q: Option<&str>) -> Result<String, ApiError> {
    let q = q.unwrap_or(DEFAULT_QUEUE);
    queue_core::keys::check_queue(q.as_bytes()).map(str::to_string).map_err(|e| ApiError::BadRequest(strip(e)))
}

fn user_id(u: Option<&str>) -> Result<String, ApiError> {
    let u = u.ok_or_else(|| ApiError::BadRequest("the userId query parameter is required".into()))?;
    queue_core::keys::check_user(u.as_bytes()).map(str::to_string).map_err(|e| ApiError::BadRequest(strip(e)))
}

fn strip(e: queue_core::QueueError) -> String {
    e.to_string().trim_start_matches("ERR ").to_string()
}

/// A standing as the REST contract shows it, with the queue's name added and, while
/// waiting with an estimate, how sure the estimate is (`estimatedWaitRange`: wide near
/// the head of the line, narrow far back). Serialized straight from the standing.
#[derive(serde::Serialize)]
pub(crate) struct StandingBody<'a> {
    #[serde(flatten)]
    standing: &'a Standing,
    queue: &'a str,
    #[serde(rename = "estimatedWaitRange", skip_serializing_if = "Option::is_none")]
    range: Option<WaitRange>,
}

#[derive(serde::Serialize)]
struct WaitRange {
    low: i64,
    high: i64,
}

impl<'a> StandingBody<'a> {
    pub(crate) fn new(s: &'a Standing, queue: &'a str) -> StandingBody<'a> {
        let range = match (s.status, s.estimated_wait_seconds) {
            (Status::Waiting, Some(eta)) => {
                let (low, high) = queue_core::admission::wait_range(eta as i64, s.rank as i64);
                Some(WaitRange { low, high })
            }
            _ => None,
        };
        StandingBody { standing: s, queue, range }
    }
}

/// `POST /api/queue/entry {nickname, queue?}` -> `{status, rank, userId, ...}`; the
/// nickname may be left out in a queue that asks none (`nickname` setting).
pub async fn entry(
    State(state): St,
    from: ClientIp,
    headers: axum::http::HeaderMap,
    body: Result<JsonBody<EntryRequest>, ApiError>,
) -> Result<Response, ApiError> {
    let ip = rate_limit(&state, &from)?;
    state.metrics.entry_requests.increment(1);
    let JsonBody(body) = body?;
    // Left out: taken only in a queue that asks no nickname (checked once the queue
    // is known to exist); the entry is then formless and its place bound (place.rs).
    let nickname = match &body.nickname {
        Field::Given(n) => Some(n.trim()),
        Field::Absent => None,
        Field::Null | Field::WrongType => return Err(ApiError::Invalid("nickname must be a string".into())),
    };
    if let Some(n) = nickname {
        queue_core::keys::check_nickname(n.as_bytes()).map_err(|e| ApiError::Invalid(strip(e)))?;
    }
    let formless = nickname.is_none();
    let queue = match &body.queue {
        Field::Absent | Field::Null => queue_name(None)?,
        Field::Given(q) => queue_name(Some(q))?,
        Field::WrongType => return Err(ApiError::BadRequest("queue must be a string".into())),
    };
    // With the app's login, the place is the account's: a token refused is a 401
    // before anything is read or written.
    let who = identity_of(&state, &headers, &queue).await?;
    // CSRF: a browser sends the login cookie with requests other sites make too. Those
    // can only be text/plain, forms or multipart without a preflight (which is never
    // granted with credentials), so an identity taken from the cookie enters only
    // with a JSON request (the page sends one); a Bearer header needs no such check.
    if who.is_some() && crate::identity::bearer_of(&headers).is_none() && !crate::identity::json_content_type(&headers)
    {
        return Err(ApiError::JsonRequired);
    }
    // A re-entry names the userId issued before (the page keeps it): that person
    // moves to the back of the line, as QUEUE.ENTER does, instead of entering twice.
    // Only ids this service issues (UUIDs) are taken; the id is the person's secret.
    // With an identity, the only userId is the one the token gives; naming it is an
    // explicit re-entry (to the back), leaving it out finds the place held.
    // A formless entry's new person is bound to the secret its place cookie will hold.
    let mut secret = None;
    let mut new_user = |formless: bool| {
        if formless {
            let (user, s) = crate::place::new_bound();
            secret = Some(s);
            user
        } else {
            uuid::Uuid::new_v4().to_string()
        }
    };
    let (user, again) = match (&who, &body.user_id) {
        (_, Field::WrongType) => return Err(ApiError::BadRequest("userId must be a string".into())),
        (Some(id), Field::Absent | Field::Null) => (id.user_id.clone(), false),
        (Some(id), Field::Given(u)) if *u == id.user_id => (id.user_id.clone(), true),
        (Some(_), Field::Given(_)) => {
            return Err(ApiError::BadRequest(
                "userId must be the one the identity token gives (or left out) when a token is sent".into(),
            ))
        }
        (None, Field::Absent | Field::Null) => (new_user(formless), false),
        (None, Field::Given(u)) if crate::identity::is_identity_id(u) => return Err(ApiError::IdentityRequired),
        // A bound id named without its place cookie (a copied id), or a formless entry
        // naming an id not bound: a new person, bound; nobody else moves.
        (None, Field::Given(u))
            if !crate::place::may_name(&headers, &queue, u, crate::place::over_https(&state, &headers))
                || (formless && !crate::place::is_bound(u)) =>
        {
            (new_user(formless), false)
        }
        (None, Field::Given(u)) => match uuid::Uuid::parse_str(u) {
            Ok(id) => (id.hyphenated().to_string(), true),
            Err(_) => return Err(ApiError::BadRequest("userId must be the id this service gave".into())),
        },
    };
    // An access code: the code's lane (checked by the queue, one use consumed by
    // the entry itself). A code that cannot exist is refused as an unknown one.
    let code = match &body.code {
        Field::Absent | Field::Null => None,
        Field::Given(c) if c.trim().is_empty() => None,
        Field::Given(c) => Some(crate::codes::check_code(c).map_err(|_| ApiError::CodeInvalid)?.to_string()),
        Field::WrongType => return Err(ApiError::BadRequest("code must be a string".into())),
    };
    let client = state.valkey.client().await?;
    state.declared.check(&client, &queue).await?;
    if formless
        && crate::identity::NicknameMode::of(&state, &client, &queue).await? == crate::identity::NicknameMode::Ask
    {
        return Err(ApiError::Invalid("nickname is required".into()));
    }
    let nickname = nickname.unwrap_or(crate::identity::NEUTRAL_NICKNAME);
    if who.is_none() && state.entry_modes.get(&client, &queue).await?.entry_needs_identity(code.is_some()) {
        return Err(ApiError::IdentityRequired);
    }
    if who.is_some() {
        // One place per person: an account still waiting, holding a ticket or inside
        // gets that standing back, from any tab or device.
        if !again {
            let standing = state.statuses.status(&client, &queue, user.clone()).await?;
            if standing.status != Status::Unknown {
                state.metrics.promoted(&standing);
                return Ok(Json(StandingBody::new(&standing, &queue)).into_response());
            }
        }
    } else if let Some(held) = crate::place::held(&state, &client, &queue, &headers).await? {
        // A browser whose place cookie names someone still here gets that place back
        // (Back after admission, a second tab): one person per browser (place.rs).
        state.metrics.promoted(&held);
        return Ok(placed(&state, &headers, &held, &queue, None));
    }
    let addr = ip.to_string();
    crate::pow::admit(&state, &client, &queue, &addr, &body.pow).await?;
    // The lane: the code's, else the first of the queue's lanes the identity's lane
    // claim names, else none (the queue's last lane). Never one the body names.
    let options = match (&code, &who) {
        (Some(c), _) => queue_client::EntryOptions { lane: None, code_hash: Some(queue_client::code_hash(c)) },
        (None, Some(id)) if !id.lanes.is_empty() => {
            let lanes = crate::codes::queue_lanes(&client, &queue).await?;
            queue_client::EntryOptions { lane: id.lane_in(&lanes).cloned(), code_hash: None }
        }
        _ => queue_client::EntryOptions::default(),
    };
    // What the follower was told of this person before the entry (hub/mod.rs, `Hub::moves`).
    let moves = if state.config.status_from_follower { state.hub.moves(&queue, &user) } else { None };
    let standing = client.enter_with(&queue, &user, nickname, &options).await.map_err(|e| {
        if matches!(e, queue_client::ClientError::Refused(queue_client::QueueError::NoCode)) {
            state.metrics.code_refused.increment(1);
        }
        if matches!(e, queue_client::ClientError::Refused(queue_client::QueueError::LineFull)) {
            state.metrics.line_full.increment(1);
        }
        ApiError::from(e)
    })?;
    state.metrics.promoted(&standing);
    if state.config.status_from_follower && standing.status == Status::Waiting {
        // Known to this instance's follower from here on: registered with everyone
        // else who entered or was asked within its gathering, so that their polls
        // are answered from it, the first one too (hub/mod.rs, `Hub::entered`).
        state.hub.entered(&queue, &user, moves, &standing);
    }
    if who.is_some() {
        // The identity is the place: no place cookie.
        return Ok(Json(StandingBody::new(&standing, &queue)).into_response());
    }
    Ok(placed(&state, &headers, &standing, &queue, secret.as_deref()))
}

/// The identity the request's token gives for `queue` (`Authorization: Bearer`, or
/// the `--identity-cookie`); None without a token or with identity off; a token
/// refused is a 401 `identity_invalid` with the reason.
async fn identity_of(
    state: &AppState,
    headers: &axum::http::HeaderMap,
    queue: &str,
) -> Result<Option<crate::identity::Identity>, ApiError> {
    let Some(verifier) = &state.identity else { return Ok(None) };
    let refused = |r: crate::identity::Refusal| {
        state.metrics.identity_refused(r.as_str()).increment(1);
        ApiError::IdentityInvalid(r)
    };
    let Some(token) = crate::identity::token_of(headers, state.config.identity.cookie.as_deref()).map_err(refused)?
    else {
        return Ok(None);
    };
    verifier.verify_fresh(token, queue).await.map(Some).map_err(refused)
}

/// An entry's answer: the standing, and the place cookie naming its person (for a
/// bound person, the secret: `secret` for a new one, else the request's own).
fn placed(
    state: &AppState,
    headers: &axum::http::HeaderMap,
    s: &Standing,
    queue: &str,
    secret: Option<&str>,
) -> Response {
    let mut resp = Json(StandingBody::new(s, queue)).into_response();
    if let Some(cookie) = crate::place::set_cookie(state, headers, queue, &s.user_id, secret) {
        resp.headers_mut().insert(axum::http::header::SET_COOKIE, cookie);
    }
    resp
}

/// `?queue=`.
#[derive(Deserialize, FromRequestParts)]
#[from_request(via(Query), rejection(ApiError))]
pub struct QueueQuery {
    queue: Option<String>,
}

/// `GET /api/queue/challenge?queue=`: a proof-of-work challenge for this client
/// address (`{difficulty, challenge, expiresAt}`; difficulty 0 and no challenge when
/// the queue asks none).
pub async fn challenge(State(state): St, from: ClientIp, q: QueueQuery) -> Result<Json<Value>, ApiError> {
    let ip = rate_limit(&state, &from)?;
    let queue = queue_name(q.queue.as_deref())?;
    let client = state.valkey.client().await?;
    state.declared.check(&client, &queue).await?;
    let difficulty = state.pow.difficulty(&client, &queue).await?;
    if difficulty == 0 {
        return Ok(Json(crate::pow::challenge_json(&queue, None)));
    }
    state.metrics.pow_challenges.increment(1);
    let addr = ip.to_string();
    Ok(Json(crate::pow::challenge_json(&queue, Some(&state.pow.issue(&queue, &addr, difficulty)))))
}

/// `?userId=&queue=`; an unreadable query string is a 400 like any other.
#[derive(Deserialize, FromRequestParts)]
#[from_request(via(Query), rejection(ApiError))]
pub struct WhoQuery {
    #[serde(rename = "userId")]
    user_id: Option<String>,
    queue: Option<String>,
}

/// A userId named without an identity token: checked, and never one derived from an
/// identity (those are computable from the account, so never enough alone: 401
/// `identity_required`), whether identity is on here or not. Every place read,
/// followed, left or re-entered by its userId alone goes through here.
fn named_alone(u: &str) -> Result<String, ApiError> {
    if crate::identity::is_identity_id(u) {
        return Err(ApiError::IdentityRequired);
    }
    user_id(Some(u))
}

/// Whose place a status read, stream or leave is about, with a client to the store
/// (the queue checked as declared). With an identity token (identity on): the
/// token's person (a userId named too must be theirs). Without one (or with identity
/// off here): the userId named, as seed 000 has it, but never in a queue whose entry
/// needs an identity, and never a userId derived from an identity: 401
/// `identity_required`.
async fn who(
    state: &AppState,
    headers: &axum::http::HeaderMap,
    q: &WhoQuery,
) -> Result<(String, String, queue_client::QueueClient), ApiError> {
    let queue = queue_name(q.queue.as_deref())?;
    let identity = identity_of(state, headers, &queue).await?;
    let named = match (&identity, q.user_id.as_deref()) {
        (_, None) => None,
        (Some(_), Some(u)) => Some(user_id(Some(u))?),
        (None, Some(u)) => {
            Some(crate::place::named(headers, &queue, named_alone(u)?, crate::place::over_https(state, headers))?)
        }
    };
    let client = state.valkey.client().await?;
    state.declared.check(&client, &queue).await?;
    let user = match (identity, named) {
        (Some(id), Some(named)) if named != id.user_id => {
            return Err(ApiError::BadRequest("userId is not the one the identity token gives".into()))
        }
        (Some(id), _) => id.user_id,
        (None, named) => {
            // Identity off here does not open an identified queue to a userId alone.
            if state.entry_modes.get(&client, &queue).await?.needs_identity() {
                return Err(ApiError::IdentityRequired);
            }
            named.ok_or_else(|| ApiError::BadRequest("the userId query parameter is required".into()))?
        }
    };
    Ok((user, queue, client))
}

async fn lookup(
    state: &AppState,
    headers: &axum::http::HeaderMap,
    q: &WhoQuery,
) -> Result<(String, Standing), ApiError> {
    let (user, queue, client) = who(state, headers, q).await?;
    let standing = state.statuses.status(&client, &queue, user).await?;
    if standing.status == Status::Unknown {
        return Err(ApiError::NotFound("unknown user: not waiting, promoted or inside".into()));
    }
    Ok((queue, standing))
}

/// `GET /api/queue/status?userId=&queue=` -> `{status, rank, ticketId, ...}`.
pub async fn status(
    State(state): St,
    from: ClientIp,
    headers: axum::http::HeaderMap,
    q: WhoQuery,
) -> Result<Response, ApiError> {
    rate_limit(&state, &from)?;
    state.metrics.status_requests.increment(1);
    let (user, queue, client) = who(&state, &headers, &q).await?;
    // From the push follower when it knows the person and is current (hub/mod.rs,
    // `Hub::poll`); else the batched read, after which a waiting person is
    // registered with the follower for their next polls.
    // A person known here but not current is held for the follower's next
    // registration (`--poll-hold`) rather than read now and registered after. Off,
    // every poll is read and nobody registered (as if asked already).
    let polled =
        if state.config.status_from_follower { state.hub.poll_held(&queue, &user).await } else { Polled::Asked };
    let standing = match polled {
        Polled::Answer(standing) => {
            state.metrics.status_from_follower.increment(1);
            standing
        }
        asked @ (Polled::Asked | Polled::Unknown) => {
            state.metrics.status_from_valkey.increment(1);
            if matches!(asked, Polled::Asked) {
                state.metrics.status_held_read.increment(1);
            }
            let standing = state.statuses.status(&client, &queue, user.clone()).await?;
            // (One held was asked again already.)
            if matches!(asked, Polled::Unknown) && standing.status == Status::Waiting {
                state.hub.watch_poller(&queue, &user);
            }
            standing
        }
    };
    if standing.status == Status::Unknown {
        return Err(ApiError::NotFound("unknown user: not waiting, promoted or inside".into()));
    }
    state.metrics.promoted(&standing);
    Ok(Json(StandingBody::new(&standing, &queue)).into_response())
}

/// `DELETE /api/queue/entry?userId=&queue=`: gives up a place in line (or a ticket
/// not yet used), so it goes to the next person at once instead of when the place
/// lapses. 404 when the user is neither waiting nor holding a ticket (already
/// inside: leaving is closing the chat connection).
pub async fn leave(
    State(state): St,
    from: ClientIp,
    headers: axum::http::HeaderMap,
    q: WhoQuery,
) -> Result<Json<Value>, ApiError> {
    rate_limit(&state, &from)?;
    state.metrics.leave_requests.increment(1);
    let (user, queue, client) = who(&state, &headers, &q).await?;
    if !client.leave(&queue, &user).await? {
        return Err(ApiError::NotFound("not waiting and holding no ticket: nothing to leave".into()));
    }
    // Open streams of this user here end with `unknown` now (the change log tells
    // other instances of a place in line; a pre-queue place only this one), and their
    // polls here are read from Valkey again at once.
    state.hub.left(&queue, &user);
    Ok(Json(json!({ "userId": user, "queue": queue, "left": true })))
}

/// `GET /api/queue/stream?userId=&queue=`: server-sent events. `position` whenever
/// rank or estimated wait change, or the queue's total (`totalWaiting`, in every
/// position event from the first) or pause (`admissionPaused`) changed noticeably,
/// a mere change of rank, estimate or total at most once per `--push-interval` (the
/// latest; hub/stream.rs); then `promoted` with the ticket (or `active` / `unknown`),
/// at once, after which the stream ends.
pub async fn stream(
    State(state): St,
    from: ClientIp,
    headers: axum::http::HeaderMap,
    q: WhoQuery,
) -> Result<Sse<impl Stream<Item = Result<Event, std::convert::Infallible>>>, ApiError> {
    let ip = rate_limit(&state, &from)?;
    // The stream's place is held until it ends (the permit lives in the stream).
    let permit = state.streams.acquire(ip).map_err(|why| {
        state.metrics.streams_refused.increment(1);
        match why {
            crate::conn_limit::Refusal::Full => ApiError::TooManyStreams,
            crate::conn_limit::Refusal::PerAddress => ApiError::TooManyStreamsFromAddress,
        }
    })?;
    let (queue, first) = lookup(&state, &headers, &q).await?;
    let sub = state.hub.subscribe(&queue, &first.user_id);
    if sub.total_waiting().is_none() || !sub.sale_known() {
        // The queue's first stream here: its follower has not read the total (nor
        // the sale's state) yet.
        if let Ok(Ok(info)) = async { Ok::<_, ApiError>(state.valkey.client().await?.info(&queue).await) }.await {
            sub.note(&info);
        }
    }
    let events = crate::hub::stream::events(sub, permit, first);
    // Kept alive by the hub's tick (`--stream-keep-alive`), not a timer per stream.
    Ok(Sse::new(events))
}

pub async fn openapi() -> Json<Value> {
    Json(crate::openapi::document())
}

pub async fn metrics(State(state): St) -> Response {
    state.metrics.registry().response()
}

/// Liveness with the store's state; 200 even while Valkey is down (the service
/// itself is fine and recovers by itself).
pub async fn healthz(State(state): St) -> Json<Value> {
    let client = state.valkey.client().await.ok();
    let (valkey, refused) = queue_client::QueueClient::health(client.as_ref()).await;
    let mut health = json!({ "status": "ok", "valkey": valkey });
    if let Some(refused) = refused {
        health["refused"] = refused.into();
    }
    Json(health)
}

pub async fn not_found() -> ApiError {
    ApiError::NotFound("no such route".into())
}
