//! The general path of proxy mode: hyper and the router. Every request the fast path
//! ([`super::fast`]) does not serve: upgrades (WebSockets, carried through), bodies
//! streamed both ways (never buffered), HTTP/1.0, unusual targets, and the waiting
//! room under `/gate/room/` from `--queue-api`. What a request gets is decided by the
//! phases ([`super::phases`]); this file moves its bytes.

use super::phases::{self, is_upgrade, Ctx, Failure, Origin, Step};
use crate::answer;
use crate::i18n::Msg;
use crate::sessions::Session;
use crate::{now_ms, Gate};
use axum::body::Body;
use axum::extract::{ConnectInfo, Request, State as AxumState};
use axum::http::{header, HeaderValue, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

/// The client the gate forwards with (a keep-alive pool per upstream).
pub type HttpClient = Client<HttpConnector, Body>;

pub fn client() -> HttpClient {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    connector.set_connect_timeout(Some(std::time::Duration::from_secs(5)));
    Client::builder(TokioExecutor::new())
        .pool_idle_timeout(std::time::Duration::from_secs(60))
        .pool_max_idle_per_host(1024)
        .build(connector)
}

/// The fallback route in proxy mode.
pub async fn forward(
    AxumState(gate): AxumState<Arc<Gate>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    req: Request,
) -> Response {
    let origin = Origin::of(req.headers(), req.uri(), peer, &gate.config.client_addrs);
    let target = req_path(req.uri());
    let upstream = gate.config.upstream.clone().expect("proxy mode has an upstream");
    match phases::request_filter(&gate, &origin, req.uri().path(), &target, req.headers()).await {
        Step::Answer(resp) => resp,
        Step::Forward(ctx) => send(&gate, req, &upstream, target, &origin, &ctx).await,
    }
}

fn req_path(uri: &Uri) -> String {
    uri.path_and_query().map_or("/", |p| p.as_str()).to_string()
}

/// `/gate/room/*`: the waiting room, from queue-api, same-origin.
pub async fn room(
    AxumState(gate): AxumState<Arc<Gate>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    req: Request,
) -> Response {
    let Some(api) = gate.config.queue_api.clone() else {
        return answer::error(
            StatusCode::NOT_FOUND,
            "no_waiting_room",
            "This gate serves no waiting room (start it with --queue-api).",
            Msg::Misconfigured,
            req.headers(),
        );
    };
    let rest = req.uri().path().strip_prefix("/gate/room").unwrap_or("/");
    if rest.is_empty() {
        let query = req.uri().query().map(|q| format!("?{q}")).unwrap_or_default();
        let to =
            HeaderValue::from_str(&format!("/gate/room/{query}")).unwrap_or(HeaderValue::from_static("/gate/room/"));
        return (StatusCode::MOVED_PERMANENTLY, [(header::LOCATION, to)]).into_response();
    }
    if !room_path(rest) {
        return answer::error(
            StatusCode::NOT_FOUND,
            "not_found",
            "No such page of the waiting room.",
            Msg::NotFound,
            req.headers(),
        );
    }
    // Someone still admitted to the queue goes back to the app, not into line again.
    if let Some(back) = crate::readmit::back_to_app(&gate, rest, &req) {
        return back;
    }
    let path = match req.uri().query() {
        Some(q) => format!("{rest}?{q}"),
        None => rest.to_string(),
    };
    let origin = Origin::of(req.headers(), req.uri(), peer, &gate.config.client_addrs);
    let ctx = Ctx::undecided(req.headers(), origin.https);
    send(&gate, req, &api, path, &origin, &ctx).await
}

/// The paths of queue-api that the waiting room needs (`rest`: the path after
/// `/gate/room`): its page, the page's script, styles, proof-of-work worker, brand,
/// messages and template assets, and the public queue API. queue-api's back office
/// (`/admin`, `/api/admin/...`), metrics, health and API document are not the
/// public's, and are 404 here. The path must be plain (no escapes, dot segments or
/// doubled slashes), so that queue-api reads the same path as this check.
pub fn room_path(rest: &str) -> bool {
    if crate::rules::normalize_path(rest).as_deref() != Some(rest) {
        return false;
    }
    matches!(rest, "/" | "/app.js" | "/app.css" | "/pow-worker.js" | "/brand.css")
        || ["/i18n/", "/assets/", "/api/queue/"].iter().any(|p| rest.len() > p.len() && rest.starts_with(p))
}

/// Forwards `req` to `base` + `path_and_query`, the phases of `ctx` applied.
async fn send(
    gate: &Gate,
    mut req: Request,
    base: &Uri,
    path_and_query: String,
    origin: &Origin,
    ctx: &Ctx,
) -> Response {
    let upgrade = is_upgrade(req.headers()).then(|| hyper::upgrade::on(&mut req));
    let Ok(target) = join(base, &path_and_query) else { return ctx.fail_to_proxy(gate, Failure::Unforwardable) };
    let original_host = req.headers().get(header::HOST).cloned();
    let (mut parts, body) = req.into_parts();
    ctx.upstream_request_filter(&mut parts.headers, upgrade.is_some(), origin, original_host);
    parts.uri = target;
    parts.version = axum::http::Version::HTTP_11;
    let outgoing = axum::http::Request::from_parts(parts, body);
    let started = Instant::now();
    let answered = tokio::time::timeout(gate.config.upstream_timeout, gate.http.request(outgoing)).await;
    gate.metrics.upstream.record(started.elapsed().as_secs_f64());
    let mut resp = match answered {
        Ok(Ok(resp)) => resp,
        Ok(Err(e)) => {
            // An answer hyper could not read is the app's fault, as on the fast path.
            if unreadable_answer(&e) {
                tracing::warn!(upstream = %base, error = %e, "upstream answer unreadable");
                return ctx.fail_to_proxy(gate, Failure::BadAnswer);
            }
            tracing::warn!(upstream = %base, error = %e, "upstream unreachable");
            return ctx.fail_to_proxy(gate, Failure::Unreachable);
        }
        Err(_) => {
            tracing::warn!(upstream = %base, timeout = ?gate.config.upstream_timeout, "upstream too slow");
            return ctx.fail_to_proxy(gate, Failure::Timeout);
        }
    };
    let switched = resp.status() == StatusCode::SWITCHING_PROTOCOLS;
    if switched {
        let Some(client_side) = upgrade else {
            tracing::warn!(upstream = %base, "upstream switched protocols unasked");
            return ctx.fail_to_proxy(gate, Failure::UnaskedUpgrade);
        };
        let upstream_side = hyper::upgrade::on(&mut resp);
        let session = ctx.session();
        let tick = gate.config.tick;
        tokio::spawn(async move {
            match tokio::try_join!(client_side, upstream_side) {
                Ok((c, u)) => tunnel(TokioIo::new(c), TokioIo::new(u), session, tick).await,
                Err(e) => tracing::debug!(error = %e, "upgrade not completed"),
            }
        });
    }
    let (mut parts, body) = resp.into_parts();
    ctx.response_filter(gate, &mut parts.headers, switched);
    Response::from_parts(parts, Body::new(body))
}

/// Whether the client's error `e` is an answer hyper could not read (its head or
/// framing), rather than an app that could not be reached.
fn unreadable_answer(e: &hyper_util::client::legacy::Error) -> bool {
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        if s.downcast_ref::<hyper::Error>().is_some_and(|h| h.is_parse() || h.is_parse_status()) {
            return true;
        }
        source = s.source();
    }
    false
}

/// Carries a WebSocket both ways. For an admitted person the tunnel lives as long as
/// their session: it is closed (both connections dropped) as soon as the session
/// ends here (the app's `Queue-Session: end`, `/gate/leave`, a lapsed lease found by
/// the tick, the longest session), and while it is open the person counts as seen
/// (their lease is renewed each tick, as chat-server holds it for its sockets).
async fn tunnel<C, U>(mut c: C, mut u: U, session: Option<Arc<Session>>, tick: std::time::Duration)
where
    C: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    U: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let copy = tokio::io::copy_bidirectional(&mut c, &mut u);
    let Some(session) = session else {
        let _ = copy.await;
        return;
    };
    tokio::pin!(copy);
    let mut every = tokio::time::interval(tick);
    loop {
        tokio::select! {
            _ = &mut copy => return,
            _ = session.until_finished() => {
                tracing::info!(queue = session.queue, user = session.user, "session over; WebSocket closed");
                return;
            }
            _ = every.tick() => session.hold(now_ms()),
        }
    }
}

/// `base` (scheme, authority, maybe a path) joined with the request's path and query.
fn join(base: &Uri, path_and_query: &str) -> Result<Uri, axum::http::Error> {
    let prefix = base.path().trim_end_matches('/');
    Uri::builder()
        .scheme(base.scheme_str().unwrap_or("http"))
        .authority(base.authority().map_or("", |a| a.as_str()))
        .path_and_query(format!("{prefix}{path_and_query}"))
        .build()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn joins_base_and_path() {
        let base: Uri = "http://127.0.0.1:3000/app/".parse().unwrap();
        assert_eq!(join(&base, "/x?y=1").unwrap().to_string(), "http://127.0.0.1:3000/app/x?y=1");
        let root: Uri = "http://127.0.0.1:3000".parse().unwrap();
        assert_eq!(join(&root, "/").unwrap().to_string(), "http://127.0.0.1:3000/");
    }
}
