//! Forward auth (`/gate/auth`) for a proxy already in front of the app, in each
//! proxy's convention:
//!
//! - nginx `auth_request`: the original URI in `X-Original-URI`; a refusal is 401
//!   with `Location` (nginx treats any 3xx from the auth call as an error;
//!   `auth_request_set` + `error_page 401` make the redirect);
//! - Traefik ForwardAuth, Caddy `forward_auth`: `X-Forwarded-Uri/-Host/-Proto`; a
//!   refusal is the 302 itself, which they return to the client as is;
//! - Envoy `ext_authz` (HTTP service with `path_prefix: /gate/auth`): the original
//!   path after the prefix, the original method and Host; a refusal is the 302.
//!
//! An admission is 200 with `X-Queue-User` and `X-Queue-Name` (and `Set-Cookie`
//! when the token was renewed) for the proxy to copy upstream; with
//! `--renew-redirect`, a browser's GET whose token is due for renewal is instead
//! sent (in the refusal's convention) through `/gate/renew`, which sets the cookie
//! and comes back, for proxies that drop the 200's cookies. Also the JWKS and the
//! health check.

use crate::answer::{self, Convention};
use crate::config::AuthConvention;
use crate::decide::{Decision, Incoming};
use crate::i18n::Msg;
use crate::proxy::{QUEUE_NAME, QUEUE_USER};
use crate::{now_ms, Gate};
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use std::net::SocketAddr;
use std::sync::Arc;

/// Tells the proxy (and tests) what the gate decided.
pub const DECISION_HEADER: &str = "x-queue-decision";

/// The decision header's value for a visitor let straight in.
pub const STRAIGHT: &str = "straight_through";

/// The router's `/gate/auth` (and `/gate/auth/<path>`): [`forward_auth`].
pub async fn auth(State(gate): State<Arc<Gate>>, ConnectInfo(peer): ConnectInfo<SocketAddr>, req: Request) -> Response {
    let uri = req.uri();
    forward_auth(&gate, req.method(), uri.path(), uri.query(), req.headers(), peer).await
}

/// Whether `path` is answered by [`forward_auth`], as the router routes it:
/// `/gate/auth` itself or `/gate/auth/<something>` (Envoy's convention).
pub fn is_auth_path(path: &str) -> bool {
    path.strip_prefix("/gate/auth").is_some_and(|rest| rest.is_empty() || (rest.starts_with('/') && rest.len() > 1))
}

/// One forward-auth call (`path` and `query` of the request target), answered the same
/// whichever way it came: through the router ([`auth`]) or proxy mode's and forward-auth
/// mode's fast path (`proxy::fast`), which reads the head itself and writes this answer.
pub async fn forward_auth(
    gate: &Gate,
    req_method: &Method,
    req_path: &str,
    req_query: Option<&str>,
    headers: &HeaderMap,
    peer: SocketAddr,
) -> Response {
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let envoy_path = req_path.strip_prefix("/gate/auth").filter(|p| p.starts_with('/'));
    let nginx = headers.contains_key("x-original-uri");
    let forwarded = headers.contains_key("x-forwarded-uri");
    let convention = match gate.config.auth_convention {
        AuthConvention::Auto if usize::from(nginx) + usize::from(forwarded) + usize::from(envoy_path.is_some()) > 1 => {
            // Caddy and Traefik pass the client's own headers to the auth call: a
            // client adding X-Original-URI would choose the path decided on.
            gate.metrics.decided(crate::decide::Outcome::BadPath);
            let mut resp = answer::error(
                StatusCode::FORBIDDEN,
                "ambiguous_original",
                "The request names its original URI in more than one way (X-Original-URI, X-Forwarded-Uri, /gate/auth/<path>); the proxy must drop the others, or start the gate with --auth-convention.",
                Msg::Misconfigured,
                headers,
            );
            resp.headers_mut().insert(DECISION_HEADER, HeaderValue::from_static("bad_path"));
            return resp;
        }
        AuthConvention::Auto if nginx => AuthConvention::Nginx,
        AuthConvention::Auto if forwarded => AuthConvention::Forwarded,
        AuthConvention::Auto => AuthConvention::Envoy,
        c => c,
    };
    let found = match convention {
        AuthConvention::Nginx => text("x-original-uri").map(|u| (u.to_string(), Convention::Nginx)),
        AuthConvention::Forwarded => text("x-forwarded-uri").map(|u| (u.to_string(), Convention::Redirect)),
        _ => envoy_path.map(|p| {
            let q = req_query.map(|q| format!("?{q}")).unwrap_or_default();
            (format!("{p}{q}"), Convention::Redirect)
        }),
    };
    let Some((original, convention)) = found else {
        return answer::error(
            StatusCode::BAD_REQUEST,
            "no_original_uri",
            "Forward auth needs the original request: X-Original-URI (nginx), X-Forwarded-Uri (Traefik, Caddy) or the path after /gate/auth (Envoy), as --auth-convention says.",
            Msg::Misconfigured,
            headers,
        );
    };
    let host = text("x-forwarded-host").or_else(|| text("host")).unwrap_or("");
    let https = text("x-forwarded-proto").is_some_and(|p| p.eq_ignore_ascii_case("https"));
    // The proxy in front appends the address it saw to X-Forwarded-For: the rightmost
    // entry that is not a proxy of ours is the client (every caller of /gate/auth is
    // a trusted proxy). Not the peer (the proxy itself) when it says nothing.
    let client = gate.config.client_addrs.client(headers, peer.ip());
    let path = original.split(['?', '#']).next().unwrap_or("/");
    // A browser's GET may be sent through /gate/renew for a fresh cookie (see
    // --renew-redirect); anything else gets it on the 200.
    let method = text("x-forwarded-method").or_else(|| text("x-original-method")).unwrap_or(req_method.as_str());
    let navigation = method.eq_ignore_ascii_case("GET") && answer::wants_html(headers);
    let by_redirect = gate.config.renew_redirect && navigation;
    let incoming = Incoming { host, path, headers, client, https, renew: !by_redirect };
    let now = now_ms();
    let decision = gate.decide(&incoming, now);
    let outcome = decision.outcome();
    let mut resp = match decision {
        Decision::Admit { verified, .. } if by_redirect && gate.renewal_due(&verified, now) => {
            let to = gate.renew_url(&verified.claims.aud, &original);
            let mut resp = gate.redirect(&to, convention, headers);
            resp.headers_mut().insert(DECISION_HEADER, HeaderValue::from_static("renew"));
            answer::no_store(&mut resp);
            return resp;
        }
        Decision::Admit { verified, renewed, .. } => {
            let mut resp = StatusCode::OK.into_response();
            let h = resp.headers_mut();
            if let (Ok(u), Ok(q)) =
                (HeaderValue::from_str(&verified.claims.sub), HeaderValue::from_str(&verified.claims.aud))
            {
                h.insert(QUEUE_USER, u);
                h.insert(QUEUE_NAME, q);
            }
            if let Some(cookie) = renewed {
                h.insert(header::SET_COOKIE, cookie);
            }
            resp
        }
        Decision::Pass(_) => StatusCode::OK.into_response(),
        Decision::Refuse { queue, outcome, hosted } => {
            // Straight in when there is room: the admission on this 200 (the proxy
            // copies X-Queue-User upstream and the Set-Cookie to the client). Through
            // a proxy that drops the 200's cookies (--renew-redirect), a GET or HEAD
            // is sent once to its own URL with the cookie set on that redirect, and
            // other methods queue (a redirect would lose their body).
            let bodiless = method.eq_ignore_ascii_case("GET") || method.eq_ignore_ascii_case("HEAD");
            let passed = if gate.config.renew_redirect && !bodiless {
                None
            } else {
                gate.straight_through(&queue, outcome, headers, client, https).await
            };
            match passed {
                Some(p) if gate.config.renew_redirect => {
                    // Back to the page asked for, as a same-site path only: the proxy's
                    // original URI may be `//other.example/...`, which a browser reads
                    // as another site.
                    let back = crate::returns::return_or_root(Some(&original));
                    let mut resp = gate.redirect(&back, convention, headers);
                    resp.headers_mut().insert(header::SET_COOKIE, p.cookie);
                    resp.headers_mut().insert(DECISION_HEADER, HeaderValue::from_static(STRAIGHT));
                    answer::no_store(&mut resp);
                    return resp;
                }
                Some(p) => {
                    let mut resp = StatusCode::OK.into_response();
                    let h = resp.headers_mut();
                    let claims = &p.verified.claims;
                    if let (Ok(u), Ok(q)) = (HeaderValue::from_str(&claims.sub), HeaderValue::from_str(&claims.aud)) {
                        h.insert(QUEUE_USER, u);
                        h.insert(QUEUE_NAME, q);
                    }
                    h.insert(header::SET_COOKIE, p.cookie);
                    h.insert(DECISION_HEADER, HeaderValue::from_static(STRAIGHT));
                    answer::no_store(&mut resp);
                    return resp;
                }
                None => gate.to_waiting_room(&queue, outcome, &original, headers, convention, hosted),
            }
        }
        // nginx turns any answer but 2xx, 401 and 403 into a 500.
        Decision::BadPath => {
            let status = if convention == Convention::Nginx { StatusCode::FORBIDDEN } else { StatusCode::BAD_REQUEST };
            answer::error(status, "bad_path", "This path cannot be read.", Msg::BadPath, headers)
        }
    };
    resp.headers_mut().insert(DECISION_HEADER, HeaderValue::from_static(outcome.as_str()));
    answer::no_store(&mut resp);
    resp
}

/// `/.well-known/jwks.json`: the public keys, for apps that verify tokens themselves.
pub async fn jwks(State(gate): State<Arc<Gate>>) -> Response {
    (
        [
            (header::CONTENT_TYPE, HeaderValue::from_static("application/jwk-set+json")),
            (header::CACHE_CONTROL, HeaderValue::from_static("public, max-age=300")),
        ],
        gate.config.keys.jwks().to_string(),
    )
        .into_response()
}

/// Health: 200 while Valkey answers, 503 otherwise (the gate still decides for
/// admitted people then; the body says so).
pub async fn healthz(State(gate): State<Arc<Gate>>) -> Response {
    let up = gate.health.is_up();
    let fail_open = gate.health.fail_open(now_ms());
    let body = serde_json::json!({ "status": if up { "ok" } else { "degraded" }, "valkey": up, "failOpen": fail_open });
    let status = if up { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    (status, axum::Json(body)).into_response()
}

/// Any other path under `/gate/`.
pub async fn not_found(req: Request) -> Response {
    answer::error(
        StatusCode::NOT_FOUND,
        "not_found",
        "No such page of the waiting room's gate.",
        Msg::NotFound,
        req.headers(),
    )
}
