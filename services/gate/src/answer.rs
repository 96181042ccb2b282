//! What the gate answers instead of the app: the way to the waiting room (a redirect
//! in each proxy's convention, or JSON for clients that do not take HTML), and its
//! own error pages.

use crate::decide::Outcome;
use crate::Gate;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use percent_encoding::{utf8_percent_encode, NON_ALPHANUMERIC};
pub use service_kit::html::escape as html_escape;

/// How a refusal is told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Convention {
    /// The gate's own proxy, Traefik, Caddy, Envoy: 302 with Location.
    Redirect,
    /// nginx auth_request: 401 with Location (any 3xx would be an error there).
    Nginx,
}

/// Whether the client takes HTML (a browser); others get JSON.
pub fn wants_html(headers: &HeaderMap) -> bool {
    headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).is_some_and(|a| a.contains("text/html"))
}

fn enc(s: &str) -> String {
    utf8_percent_encode(s, NON_ALPHANUMERIC).to_string()
}

impl Gate {
    /// The waiting room's URL for `queue`, coming back to `return_path`.
    pub fn waiting_room_url(&self, queue: &str, return_path: &str) -> String {
        let room = &self.config.waiting_room;
        let sep = if room.contains('?') { '&' } else { '?' };
        format!("{room}{sep}queue={}&return={}", enc(queue), enc(return_path))
    }

    /// `/gate/renew` for `queue`, coming back to `return_path`.
    pub fn renew_url(&self, queue: &str, return_path: &str) -> String {
        format!("/gate/renew?queue={}&return={}", enc(queue), enc(return_path))
    }

    /// A redirect to `url` in `convention` (nginx: 401 with Location, which its
    /// `error_page 401` turns into the redirect).
    pub fn redirect(&self, url: &str, convention: Convention) -> Response {
        let status = match convention {
            Convention::Redirect => StatusCode::FOUND,
            Convention::Nginx => StatusCode::UNAUTHORIZED,
        };
        let location = HeaderValue::from_str(url).unwrap_or_else(|_| HeaderValue::from_static("/"));
        let page = page("Moved", &format!("<a href=\"{}\">Continue</a>.", html_escape(url)));
        let mut resp = (status, page).into_response();
        resp.headers_mut().insert(header::LOCATION, location);
        resp
    }

    /// The base of the waiting room's API (queue-api's `/api/queue/...`).
    fn api_base(&self) -> String {
        let room = self.config.waiting_room.split(['?', '#']).next().unwrap_or("/");
        let base = room.rsplit_once('/').map_or(room, |(b, _)| b);
        format!("{base}/api/queue")
    }

    /// The answer that sends a refused request to the waiting room of `queue`.
    pub fn to_waiting_room(
        &self,
        queue: &str,
        outcome: Outcome,
        return_path: &str,
        headers: &HeaderMap,
        convention: Convention,
    ) -> Response {
        let url = self.waiting_room_url(queue, return_path);
        let location = HeaderValue::from_str(&url).unwrap_or_else(|_| HeaderValue::from_static("/"));
        if !wants_html(headers) {
            let api = self.api_base();
            let q = enc(queue);
            let body = serde_json::json!({
                "queue": queue,
                "status": outcome.as_str(),
                "waitingRoom": url,
                "api": {
                    "entry": format!("{api}/entry"),
                    "status": format!("{api}/status?queue={q}&userId="),
                    "stream": format!("{api}/stream?queue={q}&userId="),
                },
                "claim": format!("/gate/claim?queue={q}&ticketId="),
            });
            let mut resp = (StatusCode::UNAUTHORIZED, axum::Json(body)).into_response();
            let challenge = format!("Bearer realm=\"queue\", error=\"{}\"", outcome.as_str());
            resp.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_str(&challenge).expect("ascii"));
            resp.headers_mut().insert(header::LOCATION, location);
            no_store(&mut resp);
            return resp;
        }
        let status = match convention {
            Convention::Redirect => StatusCode::FOUND,
            Convention::Nginx => StatusCode::UNAUTHORIZED,
        };
        let page = page(
            "To the waiting room",
            &format!("This page has a waiting room. <a href=\"{}\">Go to the waiting room</a>.", html_escape(&url)),
        );
        let mut resp = (status, page).into_response();
        resp.headers_mut().insert(header::LOCATION, location);
        no_store(&mut resp);
        resp
    }
}

/// 303 to `to` (a path the caller checked; `/` when it cannot be a header).
pub fn see_other(to: &str) -> Response {
    let location = HeaderValue::from_str(to).unwrap_or(HeaderValue::from_static("/"));
    (StatusCode::SEE_OTHER, [(header::LOCATION, location)]).into_response()
}

/// Marks an answer as not to be cached (it depends on the person).
pub fn no_store(resp: &mut Response) {
    resp.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
}

/// The gate's own error answer: an HTML page for browsers, JSON otherwise.
pub fn error(status: StatusCode, code: &str, message: &str, headers: &HeaderMap) -> Response {
    let mut resp = if wants_html(headers) {
        (status, page(status.canonical_reason().unwrap_or("Error"), &html_escape(message))).into_response()
    } else {
        (status, axum::Json(serde_json::json!({ "error": code, "message": message }))).into_response()
    };
    no_store(&mut resp);
    resp
}

/// A small HTML page.
pub fn page(title: &str, body_html: &str) -> axum::response::Html<String> {
    axum::response::Html(format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width\">\
         <title>{t}</title><style>body{{font-family:system-ui,sans-serif;max-width:36rem;margin:4rem auto;padding:0 1rem;line-height:1.5}}</style>\
         </head><body><h1>{t}</h1><p>{body_html}</p></body></html>",
        t = html_escape(title)
    ))
}

/// An HTML error page with a link (back to the waiting room).
pub fn error_with_link(status: StatusCode, message: &str, href: &str, link_text: &str) -> Response {
    let body = format!("{} <a href=\"{}\">{}</a>.", html_escape(message), html_escape(href), html_escape(link_text));
    let mut resp = (status, page(status.canonical_reason().unwrap_or("Error"), &body)).into_response();
    no_store(&mut resp);
    resp
}
