//! `/gate/claim`: a promoted person's ticket is claimed once (TICKET.CLAIM, which
//! opens the session lease), the admission token is set as a cookie, and the person
//! goes back to the same-site page they came from. `/gate/leave`: the session ends at
//! once (SESSION.END, which promotes the next person in the same command) and the
//! cookie loses the queue's token. `/gate/renew`: a token near its expiry renewed by
//! a redirect (forward auth through proxies that drop the auth answer's cookies).
//!
//! A page of another site must not be able to end someone's session or claim a
//! ticket in their browser: see [`initiator`] for what each endpoint accepts.

use crate::answer::{self, wants_html};
use crate::i18n::{self, Msg};
use crate::lease::end_one;
use crate::proxy::Origin;
use crate::returns::return_or_root;
use crate::sessions::State as SessionState;
use crate::token::{Claims, ISSUER};
use crate::{now_ms, EndReason, EndRequest, Gate};
use axum::extract::{ConnectInfo, Query, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use queue_client::{ClientError, QueueError};
use serde::Deserialize;
use std::net::SocketAddr;
use std::sync::Arc;

/// Seconds a client is told to wait before trying again while Valkey is away.
pub const RETRY_AFTER_S: u32 = 2;

/// Seconds a browser waits before retrying a claim its replicas did not confirm in
/// time (durable claims).
pub const NOT_DURABLE_RETRY_AFTER_S: u32 = 1;

/// How long the holder cookie lives: long enough for the retries of one claim.
pub const HOLDER_MAX_AGE_S: u64 = 600;

/// The cookie that names this browser as the holder of its claims (durable claims:
/// the retry of a claim not confirmed in time must come from the same holder), next
/// to the admission cookie: `<cookie-name>_holder`.
pub fn holder_cookie_name(cookie_name: &str) -> String {
    format!("{cookie_name}_holder")
}

/// The holder the request's cookie names, when it is one the queue accepts.
fn holder_of(headers: &HeaderMap, cookie_name: &str) -> Option<String> {
    crate::cookie::cookie(headers, &holder_cookie_name(cookie_name))
        .filter(|h| h.len() <= 64 && queue_core::keys::check_ticket(h.as_bytes()).is_ok())
        .map(str::to_string)
}

/// Set-Cookie for the holder: only /gate/ reads it, never a script.
fn holder_cookie(cookie_name: &str, holder: &str, secure: bool) -> HeaderValue {
    let mut c = format!(
        "{}={holder}; Max-Age={HOLDER_MAX_AGE_S}; Path=/gate/; HttpOnly; SameSite=Lax",
        holder_cookie_name(cookie_name)
    );
    if secure {
        c.push_str("; Secure");
    }
    HeaderValue::from_str(&c).expect("cookie of name characters")
}

/// The answer to a durable claim the replicas did not confirm in time: 503 with
/// Retry-After; browsers get a page that retries by itself (the holder cookie makes
/// the retry the same holder, which gets the same admission).
fn not_durable(headers: &HeaderMap, retry: &str) -> Response {
    let message = "Your admission is being saved; this page tries again in a moment.";
    let mut resp = if wants_html(headers) {
        let mut r =
            answer::error_with_link(StatusCode::SERVICE_UNAVAILABLE, Msg::NotDurable, retry, Msg::TryAgainNow, headers);
        r.headers_mut()
            .insert(header::REFRESH, HeaderValue::from_str(&format!("{NOT_DURABLE_RETRY_AFTER_S}")).expect("digits"));
        r
    } else {
        answer::error(StatusCode::SERVICE_UNAVAILABLE, "not_durable", message, Msg::NotDurable, headers)
    };
    resp.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(NOT_DURABLE_RETRY_AFTER_S));
    answer::no_store(&mut resp);
    resp
}

#[derive(Deserialize)]
pub struct ClaimQuery {
    queue: Option<String>,
    #[serde(rename = "ticketId")]
    ticket_id: Option<String>,
    #[serde(rename = "return")]
    back: Option<String>,
}

#[derive(Deserialize)]
pub struct LeaveQuery {
    queue: Option<String>,
    #[serde(rename = "return")]
    back: Option<String>,
}

/// Whether the client asks for JSON explicitly (an app, not a browser navigation).
fn wants_json(headers: &HeaderMap) -> bool {
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).unwrap_or("");
    accept.contains("application/json") && !accept.contains("text/html")
}

/// 503: Valkey away during a claim; the ticket is kept.
fn unavailable(headers: &HeaderMap) -> Response {
    let mut resp = answer::error(
        StatusCode::SERVICE_UNAVAILABLE,
        "unavailable",
        "Your ticket is kept. The waiting room's store is unreachable; please try again in a moment.",
        Msg::StoreAway,
        headers,
    );
    resp.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_S));
    resp
}

/// A new session id: 128 random bits.
pub fn new_session_id() -> String {
    let mut bytes = [0u8; 16];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut bytes).expect("system randomness");
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// Where a browser says a request comes from: `Sec-Fetch-Site` (every current
/// browser sends it), else `Origin` compared with the request's host (ports aside,
/// as for cookies), else unknown (an app, a command-line client, an old browser).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Initiator {
    /// This site's own pages, or the person (typed, bookmarked).
    SameOrigin,
    /// Another host of the same site (e.g. a waiting room on a sibling host).
    SameSite,
    CrossSite,
    Unknown,
}

pub fn initiator(headers: &HeaderMap, host: &str) -> Initiator {
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(str::trim);
    match text("sec-fetch-site") {
        Some(v) if v.eq_ignore_ascii_case("same-origin") || v.eq_ignore_ascii_case("none") => {
            return Initiator::SameOrigin
        }
        Some(v) if v.eq_ignore_ascii_case("same-site") => return Initiator::SameSite,
        Some(_) => return Initiator::CrossSite,
        None => {}
    }
    let Some(origin) = text("origin") else { return Initiator::Unknown };
    let hostname = |authority: &str| -> String {
        let authority = authority.rsplit('@').next().unwrap_or(authority);
        let name = if authority.starts_with('[') {
            authority.split_inclusive(']').next().unwrap_or(authority)
        } else {
            authority.split(':').next().unwrap_or(authority)
        };
        name.to_ascii_lowercase()
    };
    let origin_host = origin.split_once("://").map(|(_, rest)| rest.split('/').next().unwrap_or(rest));
    match origin_host {
        Some(o) if !host.is_empty() && hostname(o) == hostname(host) => Initiator::SameOrigin,
        _ => Initiator::CrossSite,
    }
}

pub async fn claim(
    State(gate): State<Arc<Gate>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    uri: Uri,
    headers: HeaderMap,
    query: Result<Query<ClaimQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let Ok(Query(q)) = query else {
        return answer::error(
            StatusCode::BAD_REQUEST,
            "bad_query",
            "The query string cannot be read.",
            Msg::BadLink,
            &headers,
        );
    };
    let (Some(queue), Some(ticket)) = (q.queue.as_deref(), q.ticket_id.as_deref()) else {
        gate.metrics.claim("bad_request");
        return answer::error(
            StatusCode::BAD_REQUEST,
            "bad_request",
            "queue and ticketId are required.",
            Msg::BadLink,
            &headers,
        );
    };
    if queue_core::keys::check_queue(queue.as_bytes()).is_err()
        || queue_core::keys::check_ticket(ticket.as_bytes()).is_err()
    {
        gate.metrics.claim("bad_request");
        return answer::error(
            StatusCode::BAD_REQUEST,
            "bad_request",
            "queue or ticketId is not a valid name.",
            Msg::BadLink,
            &headers,
        );
    }
    let back = return_or_root(q.back.as_deref());
    let origin = Origin::of(&headers, &uri, peer, &gate.config.client_addrs);
    // A page of another site may not claim a ticket in someone's browser (it would
    // replace their admission with the ticket's person); a sibling host's waiting
    // room is the same site. The ticket is kept; the link claims it from here.
    if initiator(&headers, &origin.host) == Initiator::CrossSite {
        gate.metrics.claim("bad_request");
        let here = format!("claim?{}", uri.query().unwrap_or(""));
        let message = "This ticket was sent here from another site; it is kept.";
        let mut resp = if wants_html(&headers) {
            answer::error_with_link(StatusCode::FORBIDDEN, Msg::CrossSiteClaim, &here, Msg::ClaimHere, &headers)
        } else {
            answer::error(StatusCode::FORBIDDEN, "cross_site", message, Msg::CrossSiteClaim, &headers)
        };
        answer::no_store(&mut resp);
        return resp;
    }
    let Some(client) = gate.store.client().await else {
        gate.metrics.claim("unavailable");
        gate.health.down(now_ms(), &"not connected yet");
        return unavailable(&headers);
    };
    // Durable claims: claimed by this browser's holder (kept in a cookie), so that the
    // retry of a claim not confirmed in time gets the same admission, and nobody else
    // holding the ticket id does.
    let durable = client.durability().is_on();
    let holder = durable.then(|| holder_of(&headers, &gate.config.cookie_name).unwrap_or_else(new_session_id));
    let claimed = match &holder {
        Some(h) => client.claim_as(queue, ticket, h).await,
        None => client.claim(queue, ticket).await,
    };
    let keep_holder = |mut resp: Response| {
        if let Some(h) = &holder {
            resp.headers_mut().append(header::SET_COOKIE, holder_cookie(&gate.config.cookie_name, h, origin.https));
        }
        resp
    };
    let now = now_ms();
    let refusal = |status: StatusCode, code: &'static str, message: &str, msg: Msg| {
        gate.metrics.claim(code);
        if wants_html(&headers) {
            let room = gate.waiting_room_url(queue, &back);
            answer::error_with_link(status, msg, &room, Msg::BackToRoom, &headers)
        } else {
            answer::error(status, code, message, msg, &headers)
        }
    };
    // A used ticket (a second tab, a page kept by Back) from a browser already admitted
    // to the queue: back to the app on that admission rather than an error page.
    if let Err(ClientError::Refused(why @ (QueueError::NoTicket | QueueError::AlreadyInside))) = &claimed {
        if wants_html(&headers) && gate.admission_for(&headers, queue, now).is_some() {
            gate.metrics.claim(if matches!(why, QueueError::NoTicket) { "invalid_ticket" } else { "already_inside" });
            let mut resp = answer::see_other(&back);
            answer::no_store(&mut resp);
            return resp;
        }
    }
    let claim = match claimed {
        Ok(c) => c,
        Err(ClientError::Refused(QueueError::NoTicket)) => {
            return refusal(
                StatusCode::UNAUTHORIZED,
                "invalid_ticket",
                "This ticket is unknown or was already used.",
                Msg::InvalidTicket,
            )
        }
        Err(ClientError::Refused(QueueError::TicketExpired)) => {
            return refusal(
                StatusCode::UNAUTHORIZED,
                "expired_ticket",
                "This ticket has expired; please queue again.",
                Msg::ExpiredTicket,
            )
        }
        Err(ClientError::Refused(QueueError::AlreadyInside)) => {
            return refusal(
                StatusCode::CONFLICT,
                "already_inside",
                "You are already inside (in another tab or device).",
                Msg::AlreadyInside,
            )
        }
        Err(ClientError::Refused(QueueError::HardCap)) => {
            let mut resp = refusal(
                StatusCode::SERVICE_UNAVAILABLE,
                "full",
                "It is full right now; your ticket is kept, try again shortly.",
                Msg::Full,
            );
            resp.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_S));
            return resp;
        }
        Err(ClientError::NotDurable(why)) => {
            gate.metrics.claim("not_durable");
            tracing::warn!(queue, why, "claim not confirmed by the replicas in time; the browser retries");
            let retry = format!("claim?{}", uri.query().unwrap_or(""));
            return keep_holder(not_durable(&headers, &retry));
        }
        Err(e) if e.is_unavailable() => {
            gate.metrics.claim("unavailable");
            gate.health.down(now, &e);
            tracing::warn!(queue, error = %e, "claim refused: Valkey unreachable");
            return keep_holder(unavailable(&headers));
        }
        Err(e) => {
            tracing::warn!(queue, error = %e, "claim failed");
            return refusal(StatusCode::BAD_REQUEST, "bad_request", &e.to_string(), Msg::TicketRefused);
        }
    };
    gate.health.up();
    gate.metrics.claim("ok");
    let (token, exp, cookie) = gate.admit(queue, &claim.user_id, &headers, origin.https, now);
    tracing::info!(queue, user = claim.user_id, "ticket claimed; admitted");
    let mut resp = if wants_json(&headers) {
        axum::Json(serde_json::json!({
            "queue": queue,
            "userId": claim.user_id,
            "token": token,
            "expiresAt": exp,
            "return": back,
        }))
        .into_response()
    } else {
        answer::see_other(&back)
    };
    resp.headers_mut().insert(header::SET_COOKIE, cookie);
    answer::no_store(&mut resp);
    resp
}

impl Gate {
    /// The admission of `user`, whose entry to `queue` was just claimed (TICKET.CLAIM
    /// at `/gate/claim`, or QUEUE.PASS straight through) at `now`: a new session (its
    /// id, the claim time now) kept in the table, so renewed each tick from now on;
    /// its token, the token's expiry, and the Set-Cookie that holds it next to the
    /// request's tokens for other queues.
    pub fn admit(
        &self,
        queue: &str,
        user: &str,
        headers: &HeaderMap,
        https: bool,
        now: u64,
    ) -> (String, u64, HeaderValue) {
        let now_s = now / 1000;
        let exp = self.token_exp(queue, now_s, now);
        let claims = Claims {
            iss: ISSUER.to_string(),
            aud: queue.to_string(),
            sub: user.to_string(),
            sid: new_session_id(),
            iat: now_s,
            exp,
            auth_time: now_s,
        };
        let token = self.config.keys.sign(&claims);
        self.table.session_for(&claims, now);
        let cookie = self.cookie_with(headers, queue, Some((token.clone(), exp)), https, now_s);
        (token, exp, cookie)
    }
}

/// `/gate/leave`, GET or POST. Only this site's own pages (or the person, typing it)
/// end a session: a browser request from another site or a sibling host
/// (`Sec-Fetch-Site`, or `Origin` when that is absent) never does. A browser's GET
/// that does not say it comes from this site gets a page with a button (a POST from
/// here) instead; other requests from elsewhere a 403. Clients that send neither
/// header (apps, command-line clients) leave with either method.
pub async fn leave(
    State(gate): State<Arc<Gate>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    query: Result<Query<LeaveQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let Ok(Query(q)) = query else {
        return answer::error(
            StatusCode::BAD_REQUEST,
            "bad_query",
            "The query string cannot be read.",
            Msg::BadLink,
            &headers,
        );
    };
    let origin = Origin::of(&headers, &uri, peer, &gate.config.client_addrs);
    let from = initiator(&headers, &origin.host);
    let navigation = method == Method::GET && wants_html(&headers);
    if from != Initiator::SameOrigin && (navigation || from != Initiator::Unknown) {
        let mut resp = if navigation {
            let action = service_kit::html::escape(&format!("leave?{}", uri.query().unwrap_or("")));
            let lang = i18n::choose(&headers);
            let body = format!(
                "{}</p><form method=\"post\" action=\"{action}\"><button type=\"submit\">{}</button></form><p>",
                answer::html_escape(lang.text(Msg::LeaveQuestion)),
                answer::html_escape(lang.text(Msg::LeaveButton)),
            );
            answer::page(lang, lang.text(Msg::LeaveTitle), &body)
        } else {
            answer::error(
                StatusCode::FORBIDDEN,
                "cross_site",
                "A session ends only from this site's own pages.",
                Msg::CrossSiteLeave,
                &headers,
            )
        };
        answer::no_store(&mut resp);
        return resp;
    }
    let now = now_ms();
    let mut left = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for token in crate::cookie::tokens(&headers, &gate.config.cookie_name) {
        let Ok(v) = gate.table.lookup(token, &gate.config.keys, now) else { continue };
        if q.queue.as_deref().is_some_and(|queue| queue != v.claims.aud) || !seen.insert(v.claims.sid.clone()) {
            continue;
        }
        if v.claims.exp > now / 1000 && v.session.finish(SessionState::Ended) {
            gate.metrics.ended(EndReason::Leave);
            let req = EndRequest { queue: v.claims.aud.clone(), user: v.claims.sub.clone(), reason: EndReason::Leave };
            // Valkey away: the ender keeps it and sends it once Valkey is back.
            if !end_one(&gate, &req).await {
                let _ = gate.ends.send(req);
            }
            left.push(v.claims.aud.clone());
        }
    }
    let cookie = match q.queue.as_deref() {
        Some(queue) => gate.cookie_with(&headers, queue, None, origin.https, now / 1000),
        None => gate.cookie.set(&[], 0, origin.https),
    };
    let back = return_or_root(q.back.as_deref());
    let mut resp = if wants_html(&headers) {
        answer::see_other(&back)
    } else {
        axum::Json(serde_json::json!({ "left": !left.is_empty(), "queues": left, "return": back })).into_response()
    };
    resp.headers_mut().insert(header::SET_COOKIE, cookie);
    answer::no_store(&mut resp);
    resp
}

#[derive(Deserialize)]
pub struct RenewQuery {
    queue: Option<String>,
    #[serde(rename = "return")]
    back: Option<String>,
}

/// `/gate/renew?queue=&return=`: the request's token for `queue`, when due for renewal
/// (a tenth of its life gone, Valkey answering), is reissued as a new cookie; then
/// 303 to `return` (same-site paths only). Forward auth sends browsers here with
/// `--renew-redirect`: every proxy passes `/gate/` answers through whole, cookies
/// included, which some do not do for the auth call's 200. A token that cannot be
/// renewed is left as it is (the next decision says what it opens).
pub async fn renew(
    State(gate): State<Arc<Gate>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    uri: Uri,
    headers: HeaderMap,
    query: Result<Query<RenewQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let Ok(Query(q)) = query else {
        return answer::error(
            StatusCode::BAD_REQUEST,
            "bad_query",
            "The query string cannot be read.",
            Msg::BadLink,
            &headers,
        );
    };
    let back = return_or_root(q.back.as_deref());
    let mut resp = answer::see_other(&back);
    let now = now_ms();
    let origin = Origin::of(&headers, &uri, peer, &gate.config.client_addrs);
    if let Some(queue) = q.queue.as_deref() {
        let ours = crate::cookie::tokens(&headers, &gate.config.cookie_name)
            .filter_map(|t| gate.table.lookup(t, &gate.config.keys, now).ok())
            .find(|v| v.claims.aud == queue && v.claims.exp > now / 1000 && v.session.state() == SessionState::Live);
        if let Some(v) = ours.filter(|v| gate.renewal_due(v, now)) {
            v.session.touch(now);
            let fresh = gate.renewed_token(&v, now);
            let cookie = gate.cookie_with(&headers, queue, Some(fresh), origin.https, now / 1000);
            resp.headers_mut().insert(header::SET_COOKIE, cookie);
        }
    }
    answer::no_store(&mut resp);
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn initiators() {
        let h = |pairs: &[(&'static str, &'static str)]| {
            let mut h = HeaderMap::new();
            for (k, v) in pairs {
                h.insert(*k, HeaderValue::from_static(v));
            }
            h
        };
        let host = "shop.test:8080";
        assert_eq!(initiator(&h(&[("sec-fetch-site", "same-origin")]), host), Initiator::SameOrigin);
        assert_eq!(initiator(&h(&[("sec-fetch-site", "none")]), host), Initiator::SameOrigin);
        assert_eq!(initiator(&h(&[("sec-fetch-site", "same-site")]), host), Initiator::SameSite);
        let spoofed_origin = h(&[("sec-fetch-site", "cross-site"), ("origin", "http://shop.test")]);
        assert_eq!(initiator(&spoofed_origin, host), Initiator::CrossSite);
        assert_eq!(initiator(&h(&[("origin", "https://SHOP.test")]), host), Initiator::SameOrigin);
        assert_eq!(initiator(&h(&[("origin", "https://shop.test.evil")]), host), Initiator::CrossSite);
        assert_eq!(initiator(&h(&[("origin", "null")]), host), Initiator::CrossSite);
        assert_eq!(initiator(&h(&[("origin", "http://[::1]:9")]), "[::1]:8080"), Initiator::SameOrigin);
        assert_eq!(initiator(&h(&[]), host), Initiator::Unknown);
    }
}
