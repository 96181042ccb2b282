//! What the gate answers instead of the app: the way to the waiting room (a redirect
//! in each proxy's convention, or JSON for clients that do not take HTML), and its
//! own error pages, in the visitor's language ([`crate::i18n`]).

use crate::decide::Outcome;
use crate::i18n::{self, Language, Msg};
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
    /// `error_page 401` turns into the redirect), its page in the language of `headers`.
    pub fn redirect(&self, url: &str, convention: Convention, headers: &HeaderMap) -> Response {
        let status = match convention {
            Convention::Redirect => StatusCode::FOUND,
            Convention::Nginx => StatusCode::UNAUTHORIZED,
        };
        let location = HeaderValue::from_str(url).unwrap_or_else(|_| HeaderValue::from_static("/"));
        let lang = i18n::choose(headers);
        let link = format!("<a href=\"{}\">{}</a>", html_escape(url), html_escape(lang.text(Msg::Continue)));
        let page = page(lang, lang.text(Msg::Moved), &link);
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

    /// The waiting room's link for a refused request of `queue`: with `--public-url`,
    /// on that origin when the request's route names no host (`hosted` false) and the
    /// waiting room is a path; else [`Gate::waiting_room_url`].
    pub fn room_link(&self, queue: &str, return_path: &str, hosted: bool) -> String {
        let url = self.waiting_room_url(queue, return_path);
        match &self.config.public_url {
            Some(origin) if !hosted && url.starts_with('/') => format!("{origin}{url}"),
            _ => url,
        }
    }

    /// The answer that sends a refused request to the waiting room of `queue`
    /// (`hosted`: its route names a host, see [`Gate::room_link`]).
    pub fn to_waiting_room(
        &self,
        queue: &str,
        outcome: Outcome,
        return_path: &str,
        headers: &HeaderMap,
        convention: Convention,
        hosted: bool,
    ) -> Response {
        let url = self.room_link(queue, return_path, hosted);
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
        let lang = i18n::choose(headers);
        let body = format!(
            "{} <a href=\"{}\">{}</a>",
            html_escape(lang.text(Msg::ToWaitingRoom)),
            html_escape(&url),
            html_escape(lang.text(Msg::GoToWaitingRoom))
        );
        let page = page(lang, lang.text(Msg::ToWaitingRoomTitle), &body);
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

/// The gate's own error answer: an HTML page for browsers, `msg` in their language;
/// JSON otherwise, `{"error": code, "message": message}` (English, for programs).
pub fn error(status: StatusCode, code: &str, message: &str, msg: Msg, headers: &HeaderMap) -> Response {
    let mut resp = if wants_html(headers) {
        let lang = i18n::choose(headers);
        (status, page(lang, error_title(lang, status), &html_escape(lang.text(msg)))).into_response()
    } else {
        (status, axum::Json(serde_json::json!({ "error": code, "message": message }))).into_response()
    };
    no_store(&mut resp);
    resp
}

/// An error page's title: "one moment" for a 503 (it passes), else "something went wrong".
fn error_title(lang: &Language, status: StatusCode) -> &'static str {
    lang.text(if status == StatusCode::SERVICE_UNAVAILABLE { Msg::WaitTitle } else { Msg::ErrorTitle })
}

/// A small HTML page in `lang` (its `lang` attribute and `Content-Language`).
pub fn page(lang: &Language, title: &str, body_html: &str) -> Response {
    let html = axum::response::Html(format!(
        "<!doctype html><html lang=\"{tag}\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width\">\
         <title>{t}</title><style>body{{font-family:system-ui,sans-serif;max-width:36rem;margin:4rem auto;padding:0 1rem;line-height:1.5}}\
         :lang(ko) h1,:lang(ja) h1{{word-break:keep-all;overflow-wrap:anywhere}}</style>\
         </head><body><h1>{t}</h1><p>{body_html}</p></body></html>",
        tag = lang.tag,
        t = html_escape(title)
    ));
    ([(header::CONTENT_LANGUAGE, HeaderValue::from_static(lang.tag))], html).into_response()
}

/// An HTML error page in the language of `headers`, with a link (back to the
/// waiting room, or the same request again).
pub fn error_with_link(status: StatusCode, msg: Msg, href: &str, link: Msg, headers: &HeaderMap) -> Response {
    let lang = i18n::choose(headers);
    let body = format!(
        "{} <a href=\"{}\">{}</a>",
        html_escape(lang.text(msg)),
        html_escape(href),
        html_escape(lang.text(link))
    );
    let mut resp = (status, page(lang, error_title(lang, status), &body)).into_response();
    no_store(&mut resp);
    resp
}
