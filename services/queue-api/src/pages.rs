//! The pages people see and what they load: the waiting room (`/`, rendered from its
//! template in the visitor's language with the queue's branding), its script, styles,
//! proof-of-work worker and messages files, the per-queue brand stylesheet, a
//! replaced template's assets, and the back office (`/admin`). Every URL the pages use
//! is relative, so they work under a path prefix (the gate serves them under
//! `/gate/room/`). Every response carries a strict Content-Security-Policy: scripts,
//! styles, images and connections from this origin only, nothing inline.

use crate::brand::Brand;
use crate::error::ApiError;
use crate::i18n;
use crate::templates::{Pages, BUILT_IN_PAGES};
use crate::AppState;
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::sync::Arc;

type St = State<Arc<AppState>>;

/// What every page and asset is served with.
pub const CSP: &str =
    "default-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'; object-src 'none'";

/// `--admit-url QUEUE=URL`: where the page sends the people of QUEUE once admitted.
#[derive(Debug, Clone, PartialEq)]
pub struct AdmitUrl {
    pub queue: String,
    pub url: String,
}

impl AdmitUrl {
    pub fn parse(s: &str) -> Result<AdmitUrl, String> {
        let (queue, url) = s.split_once('=').ok_or("expected QUEUE=URL")?;
        queue_core::keys::check_queue(queue.as_bytes()).map_err(|e| format!("{queue}: {e}"))?;
        let url = url.trim();
        if url.is_empty() || url.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(format!("{queue}: the URL must be non-empty, without spaces"));
        }
        Ok(AdmitUrl { queue: queue.to_string(), url: url.to_string() })
    }
}

/// The admit URL of `queue`: its `--admit-url`, else `--chat-url`.
pub fn admit_url<'a>(state: &'a AppState, queue: &str) -> &'a str {
    state.config.admit_url.iter().find(|a| a.queue == queue).map_or(state.config.chat_url.as_str(), |a| &a.url)
}

/// Whether `queue` has an `--admit-url` of its own (its people go on to an app, such
/// as the gate's `/gate/claim`, not to the chat).
pub fn has_admit_url(state: &AppState, queue: &str) -> bool {
    state.config.admit_url.iter().any(|a| a.queue == queue)
}

/// From this many people waiting, the page's default text says there is a crowd;
/// below it (the first visitor to an empty room) it only says what happens next.
pub const CROWD: u64 = 20;

fn pages(state: &AppState) -> &Pages {
    state.config.templates.as_ref().unwrap_or(&BUILT_IN_PAGES)
}

fn secured(mut resp: Response, content_type: &'static str, cache: &'static str) -> Response {
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("same-origin"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static(cache));
    resp
}

const HTML: &str = "text/html; charset=utf-8";
/// The header that keeps the waiting room out of search engines' indexes.
const ROBOTS: &str = "x-robots-tag";
const NO_STORE: &str = "no-store";
/// The page's own scripts and styles change only with a new release; a short cache
/// keeps a deployment from serving old ones for long.
const SHORT: &str = "public, max-age=300";

/// `?queue=&lang=`.
#[derive(Deserialize)]
pub struct PageQuery {
    queue: Option<String>,
    lang: Option<String>,
}

/// The queue a page is for, checked like the API checks it.
fn page_queue(q: Option<&str>) -> Result<String, ApiError> {
    let q = q.filter(|q| !q.is_empty()).unwrap_or(crate::routes::DEFAULT_QUEUE);
    queue_core::keys::check_queue(q.as_bytes())
        .map(str::to_string)
        .map_err(|e| ApiError::BadRequest(e.to_string().trim_start_matches("ERR ").to_string()))
}

/// `GET /?queue=&lang=`: the waiting room; 404 with a page saying so for a queue
/// nobody declared ([`crate::declared`]). Valkey unreachable: the page still comes,
/// unbranded (it then waits for the API like before).
pub async fn room(
    State(state): St,
    headers: HeaderMap,
    q: Result<Query<PageQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(q) = q?;
    let queue = page_queue(q.queue.as_deref())?;
    let accept = headers.get(header::ACCEPT_LANGUAGE).and_then(|v| v.to_str().ok());
    let lang = i18n::choose(q.lang.as_deref(), accept);
    let (brand, ticket_ttl, waiting, sale) = match state.valkey.client().await {
        Ok(c) => {
            if let Ok(false) = state.declared.is_declared(&c, &queue).await {
                return Ok(no_such_queue(&queue, lang));
            }
            let (brand, info) = tokio::join!(c.brand(&queue), c.info(&queue));
            let info = info.ok();
            (
                brand.map(|b| Brand::from_stored(&b)).unwrap_or_default(),
                info.as_ref().map(|i| i.config.ticket_ttl()),
                info.as_ref().map(|i| i.waiting),
                info.map(|i| (sale_word(i.closed, i.sold_out), i.message)),
            )
        }
        Err(_) => (Brand::default(), None, None, None),
    };
    let (sale, notice) = sale.unwrap_or(("", String::new()));
    let msg = |k: &str| lang.messages.get(k).cloned().unwrap_or_default();
    let mut vars: BTreeMap<&str, String> = BTreeMap::new();
    vars.insert("lang", lang.tag.to_string());
    vars.insert("queue", queue.clone());
    vars.insert("title", brand.get("title").map_or_else(|| msg("title"), str::to_string));
    // No crowd claimed before there is one (unknown: the store unreachable, say so).
    let intro = if waiting.is_none_or(|w| w >= CROWD) { "intro" } else { "intro_quiet" };
    vars.insert("message", brand.get("message").map_or_else(|| msg(intro), str::to_string));
    let nickname = crate::identity::NicknameMode::effective(brand.get("nickname"), has_admit_url(&state, &queue));
    vars.insert("nickname", nickname.as_str().to_string());
    vars.insert("logo_url", brand.get("logo_url").unwrap_or("").to_string());
    vars.insert("accent", brand.get("accent").unwrap_or("").to_string());
    vars.insert("background", brand.get("background").unwrap_or("").to_string());
    vars.insert("brand_css", format!("brand.css?queue={}", urlencode(&queue)));
    vars.insert("messages_url", format!("i18n/{}.json", lang.tag));
    vars.insert("admit_url", admit_url(&state, &queue).to_string());
    vars.insert("ticket_ttl_seconds", ticket_ttl.map(|ms| (ms / 1000).max(1).to_string()).unwrap_or_default());
    // `cookie` when the browser carries the app login's token in a cookie: the page
    // then asks where the account stands before offering the form.
    let identity = state.identity.is_some() && state.config.identity.cookie.is_some();
    vars.insert("identity", if identity { "cookie" } else { "" }.to_string());
    // The sale's state as the page loads (`closed`, `sold_out` or empty) and the
    // operator's message; the push stream tells their changes.
    vars.insert("sale", sale.to_string());
    vars.insert("notice", notice);
    vars.insert("languages", i18n::languages().iter().map(|l| l.tag).collect::<Vec<_>>().join(" "));
    let html = pages(&state).room.render(&vars, &lang.messages);
    let mut resp = secured(html.into_response(), HTML, NO_STORE);
    // A waiting room is no page for a search engine (it enters whoever loads it when
    // it asks no nickname): kept out of indexes, whatever template is served.
    resp.headers_mut().insert(ROBOTS, HeaderValue::from_static("noindex"));
    resp.headers_mut().insert(header::CONTENT_LANGUAGE, HeaderValue::from_static(lang.tag));
    resp.headers_mut().insert(header::VARY, HeaderValue::from_static("Accept-Language"));
    Ok(resp)
}

/// The sale's state as a word for the page: closed wins over sold out (nobody gets
/// in either way; "the sale has ended" says it all).
fn sale_word(closed: bool, sold_out: bool) -> &'static str {
    if closed {
        "closed"
    } else if sold_out {
        "sold_out"
    } else {
        ""
    }
}

/// The page for a queue nobody declared: 404, in the visitor's language, saying so.
fn no_such_queue(queue: &str, lang: &i18n::Language) -> Response {
    let msg = |k: &str| lang.messages.get(k).cloned().unwrap_or_default();
    let (mut title, mut text) = (String::new(), String::new());
    crate::templates::escape_into(&mut title, &msg("title"));
    crate::templates::escape_into(&mut text, &msg("no_such_queue").replace("{queue}", queue));
    let html = format!(
        "<!doctype html>\n<html lang=\"{tag}\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>{title}</title>\n\
         <link rel=\"stylesheet\" href=\"app.css\">\n</head>\n<body>\n<main>\n<h1>{title}</h1>\n\
         <p id=\"no-such-queue\">{text}</p>\n</main>\n</body>\n</html>\n",
        tag = lang.tag
    );
    let mut resp = secured((StatusCode::NOT_FOUND, html).into_response(), HTML, NO_STORE);
    resp.headers_mut().insert(header::CONTENT_LANGUAGE, HeaderValue::from_static(lang.tag));
    resp.headers_mut().insert(header::VARY, HeaderValue::from_static("Accept-Language"));
    resp
}

/// Query-string encoding of a checked queue name (letters, digits, `._:-`).
fn urlencode(s: &str) -> String {
    s.replace(':', "%3A")
}

/// `GET /brand.css?queue=`: the queue's brand colours.
pub async fn brand_css(State(state): St, Query(q): Query<PageQuery>) -> Result<Response, ApiError> {
    let queue = page_queue(q.queue.as_deref())?;
    let brand = match state.valkey.client().await {
        Ok(c) => c.brand(&queue).await.map(|b| Brand::from_stored(&b)).unwrap_or_default(),
        Err(_) => Brand::default(),
    };
    Ok(secured(brand.css().into_response(), "text/css; charset=utf-8", "public, max-age=10"))
}

/// `GET /i18n/{lang}.json`: a language's messages file.
pub async fn messages(Path(file): Path<String>) -> Result<Response, ApiError> {
    let lang = file.strip_suffix(".json").and_then(|t| i18n::languages().iter().find(|l| l.tag == t));
    let lang = lang.ok_or_else(|| ApiError::NotFound("no such language".into()))?;
    Ok(secured(lang.source.into_response(), "application/json", SHORT))
}

/// `GET /assets/{name}`: a file of the `--templates` directory.
pub async fn asset(State(state): St, Path(name): Path<String>) -> Result<Response, ApiError> {
    let (body, kind) = pages(&state).asset(&name).ok_or_else(|| ApiError::NotFound("no such asset".into()))?;
    Ok(secured(body.into_response(), kind, SHORT))
}

macro_rules! static_file {
    ($name:ident, $file:literal, $kind:expr) => {
        pub async fn $name() -> Response {
            secured(include_str!(concat!("../static/", $file)).into_response(), $kind, SHORT)
        }
    };
}

const JS: &str = "text/javascript; charset=utf-8";
const CSS: &str = "text/css; charset=utf-8";
static_file!(app_js, "app.js", JS);
static_file!(app_css, "app.css", CSS);
static_file!(pow_worker_js, "pow-worker.js", JS);
static_file!(admin_js, "admin.js", JS);
static_file!(admin_css, "admin.css", CSS);

/// `GET /admin`: the back office (it signs in with the admin token by itself).
pub async fn admin_page() -> Response {
    secured(include_str!("../static/admin.html").into_response(), HTML, NO_STORE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admit_urls_are_queue_equals_url() {
        assert_eq!(
            AdmitUrl::parse("launch=/gate/claim?x=1"),
            Ok(AdmitUrl { queue: "launch".into(), url: "/gate/claim?x=1".into() })
        );
        assert_eq!(AdmitUrl::parse("a=b=c").unwrap().url, "b=c");
        for bad in ["launch", "=/x", "bad queue=/x", "q=", "q=/a b"] {
            assert!(AdmitUrl::parse(bad).is_err(), "{bad}");
        }
    }
}
