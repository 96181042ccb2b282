//! The cross-origin policy, explicit: by default none (the waiting-room page is served
//! by this service, from its own origin, and needs none), so a page on another
//! origin cannot read any answer. `--cors-origins https://shop.example,...` (or `*`)
//! lets pages on those origins use the public queue API (`/api/queue/...`): entry,
//! status, leave, push stream, challenge and opening. Never the back office,
//! `/metrics` or `/healthz`, and never with credentials (a person is their userId; the
//! place cookie, place.rs, is for the page served from this origin only).
//!
//! Written here rather than with `tower_http::cors::CorsLayer`, which cannot say what
//! this policy says: the layer answers every `OPTIONS` as a preflight, always `200`,
//! and leaves a refusal to the browser (no `Access-Control-Allow-Origin`), where this
//! answers a preflight (an `OPTIONS` with `Access-Control-Request-Method`) `204`, and
//! refuses one from an origin not listed, or for a method the API does not take, with
//! `403` and a JSON error a developer can read; it joins the allowed methods with
//! `", "` (the layer with `","`), and names `Retry-After` as readable only in answers
//! to an allowed origin (the layer in every answer). Wrapping the layer to restore
//! these would write the origin and method checks again around it.

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Json;
use std::sync::Arc;

/// Which origins may call the public API from a browser.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Origins {
    /// Same origin only: no CORS headers at all.
    #[default]
    None,
    Any,
    List(Vec<String>),
}

/// Paths the policy opens (everything else stays same-origin).
const PUBLIC_PREFIX: &str = "/api/queue/";
/// How long a browser may keep a preflight's answer.
const PREFLIGHT_MAX_AGE: &str = "600";

impl Origins {
    /// `--cors-origins`: empty (none), `*`, or a comma-separated list of origins
    /// (`scheme://host[:port]`, no path).
    pub fn parse(s: &str) -> Result<Origins, String> {
        let items: Vec<&str> = s.split(',').map(str::trim).filter(|o| !o.is_empty()).collect();
        if items.is_empty() {
            return Ok(Origins::None);
        }
        if items == ["*"] {
            return Ok(Origins::Any);
        }
        let mut list = Vec::new();
        for o in items {
            let o = o.strip_suffix('/').unwrap_or(o);
            let rest = o.strip_prefix("https://").or_else(|| o.strip_prefix("http://"));
            match rest {
                Some(host) if !host.is_empty() && !host.contains('/') => list.push(o.to_ascii_lowercase()),
                _ => return Err(format!("{o:?} is not an origin (scheme://host[:port]) or *")),
            }
        }
        Ok(Origins::List(list))
    }

    /// The Access-Control-Allow-Origin value for a request from `origin`, if allowed.
    fn allow(&self, origin: &str) -> Option<HeaderValue> {
        match self {
            Origins::None => None,
            Origins::Any => Some(HeaderValue::from_static("*")),
            Origins::List(list) => {
                list.iter().any(|o| o.eq_ignore_ascii_case(origin)).then(|| HeaderValue::from_str(origin).ok())?
            }
        }
    }
}

fn origin(headers: &HeaderMap) -> Option<&str> {
    headers.get(header::ORIGIN).and_then(|v| v.to_str().ok())
}

/// The middleware: answers preflights of the public API and marks its answers.
pub async fn policy(State(state): State<Arc<crate::AppState>>, req: Request, next: Next) -> Response {
    let origins = &state.config.cors_origins;
    if !req.uri().path().starts_with(PUBLIC_PREFIX) || *origins == Origins::None {
        return next.run(req).await;
    }
    let from = origin(req.headers()).map(str::to_string);
    let allowed = from.as_deref().and_then(|o| origins.allow(o));
    let preflight =
        req.method() == Method::OPTIONS && req.headers().contains_key(header::ACCESS_CONTROL_REQUEST_METHOD);
    if preflight {
        let method_ok = req
            .headers()
            .get(header::ACCESS_CONTROL_REQUEST_METHOD)
            .is_some_and(|m| matches!(m.as_bytes(), b"GET" | b"POST" | b"DELETE"));
        let Some(allow) = allowed.filter(|_| method_ok) else {
            let body = serde_json::json!({
                "error": "cors_refused",
                "message": "this origin or method may not call the API from a browser (see --cors-origins)",
            });
            return (StatusCode::FORBIDDEN, Json(body)).into_response();
        };
        let mut resp = StatusCode::NO_CONTENT.into_response();
        let h = resp.headers_mut();
        h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, allow);
        h.insert(header::ACCESS_CONTROL_ALLOW_METHODS, HeaderValue::from_static("GET, POST, DELETE"));
        h.insert(header::ACCESS_CONTROL_ALLOW_HEADERS, HeaderValue::from_static("content-type"));
        h.insert(header::ACCESS_CONTROL_MAX_AGE, HeaderValue::from_static(PREFLIGHT_MAX_AGE));
        h.insert(header::VARY, HeaderValue::from_static("origin"));
        return resp;
    }
    let mut resp = next.run(req).await;
    let h = resp.headers_mut();
    h.append(header::VARY, HeaderValue::from_static("origin"));
    if let Some(allow) = allowed {
        h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, allow);
        h.insert(header::ACCESS_CONTROL_EXPOSE_HEADERS, HeaderValue::from_static("retry-after"));
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_parse() {
        assert_eq!(Origins::parse(""), Ok(Origins::None));
        assert_eq!(Origins::parse(" * "), Ok(Origins::Any));
        assert_eq!(
            Origins::parse("https://Shop.example, http://127.0.0.1:3000/"),
            Ok(Origins::List(vec!["https://shop.example".into(), "http://127.0.0.1:3000".into()]))
        );
        for bad in ["shop.example", "https://a.example/path", "*,https://a.example", "ftp://a"] {
            assert!(Origins::parse(bad).is_err(), "{bad}");
        }
        let list = Origins::parse("https://shop.example").unwrap();
        assert!(list.allow("https://shop.example").is_some());
        assert!(list.allow("https://shop.example.evil").is_none());
        assert!(Origins::None.allow("https://shop.example").is_none());
    }
}
