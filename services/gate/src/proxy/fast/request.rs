//! The client's request head as the fast path reads it: owned, and only what the fast
//! path serves (a plain request); anything else is left for the general path.

use axum::http::{header, HeaderMap, HeaderName, HeaderValue, Method};

/// Headers a plain request may have; more go to the general path.
const MAX_HEADERS: usize = 64;
/// The largest request body read whole before forwarding (as nginx buffers small
/// bodies); larger ones are streamed by the general path.
pub const MAX_BODY: usize = 64 * 1024;

/// Who answers a plain request on the fast path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    /// Forwarded to the app (proxy mode).
    Proxy,
    /// A forward-auth call (`/gate/auth`, `/gate/auth/<path>`), answered by the gate.
    Auth,
}

/// A plain request's head, owned.
pub(super) struct Head {
    pub(super) kind: Kind,
    pub(super) method: Method,
    /// The request target as sent (origin form: path and query).
    pub(super) target: String,
    pub(super) headers: HeaderMap,
    /// Bytes of the head.
    pub(super) len: usize,
    /// Bytes of the body (Content-Length).
    pub(super) body: usize,
    /// Whether it came with a Content-Length (then the app gets one, of the body read).
    pub(super) length: bool,
    /// The client asked to close after this request.
    pub(super) close: bool,
}

pub(super) enum Parsed {
    Plain(Head),
    /// More bytes needed.
    Partial,
    /// For the general path.
    Other,
}

/// Whether `buf` may hold a whole head: an empty line (CRLF or a bare LF, as httparse
/// reads them) ending after `from`.
pub(super) fn head_ends(buf: &[u8], from: usize) -> bool {
    if buf.ends_with(b"\r\n\r\n") {
        return true; // the usual case: a head read whole, nothing after it
    }
    let rest = &buf[from.saturating_sub(3)..];
    memchr::memmem::find(rest, b"\n\r\n").is_some() || memchr::memmem::find(rest, b"\n\n").is_some()
}

/// Reads a request head from `buf`; `Plain` only for what the fast path serves: a
/// forward-auth call, or (when `proxy`, proxy mode) a request for the app.
pub(super) fn parse_request(buf: &[u8], proxy: bool) -> Parsed {
    if buf.is_empty() {
        return Parsed::Partial;
    }
    let mut slots = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut slots);
    let len = match req.parse(buf) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Parsed::Partial,
        Err(_) => return Parsed::Other,
    };
    let (Some(method), Some(target), Some(1)) = (req.method, req.path, req.version) else { return Parsed::Other };
    // A fragment is not sent (hyper drops it, and decides on the path before it).
    let own = target.starts_with("/gate") || target.starts_with("/.well-known/");
    let kind = if !own {
        Kind::Proxy
    } else if crate::auth::is_auth_path(target.split('?').next().unwrap_or("")) {
        Kind::Auth
    } else {
        return Parsed::Other;
    };
    if !target.starts_with('/') || target.contains('#') || (kind == Kind::Proxy && !proxy) {
        return Parsed::Other;
    }
    // The target as hyper would take it (its character rules), for the same answers.
    if target.parse::<axum::http::uri::PathAndQuery>().is_err() {
        return Parsed::Other;
    }
    let Ok(method) = Method::from_bytes(method.as_bytes()) else { return Parsed::Other };
    if method == Method::CONNECT {
        return Parsed::Other;
    }
    let mut headers = HeaderMap::with_capacity(req.headers.len());
    let mut body = None;
    let mut close = false;
    for h in req.headers.iter() {
        let Ok(name) = HeaderName::from_bytes(h.name.as_bytes()) else { return Parsed::Other };
        let Ok(value) = HeaderValue::from_bytes(h.value) else { return Parsed::Other };
        if name == header::TRANSFER_ENCODING || name == header::UPGRADE || name == header::EXPECT {
            return Parsed::Other;
        }
        if name == header::CONTENT_LENGTH {
            let digits = value.as_bytes();
            if body.is_some() || digits.is_empty() || digits.len() > 7 || !digits.iter().all(u8::is_ascii_digit) {
                return Parsed::Other;
            }
            let n: usize = std::str::from_utf8(digits).ok().and_then(|d| d.parse().ok()).unwrap_or(usize::MAX);
            if n > MAX_BODY {
                return Parsed::Other;
            }
            body = Some(n);
        }
        if name == header::CONNECTION {
            close |=
                value.to_str().map(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case("close"))).unwrap_or(false);
        }
        headers.append(name, value);
    }
    // A forward-auth call is answered without its body (the router never reads one):
    // one that says it has a body goes to the router, which answers at once, rather
    // than waiting here for bytes a proxy passing the client's Content-Length on a
    // bodiless call never sends.
    if kind == Kind::Auth && body.is_some_and(|n| n > 0) {
        return Parsed::Other;
    }
    let length = body.is_some();
    Parsed::Plain(Head {
        kind,
        method,
        target: target.to_string(),
        headers,
        len,
        body: body.unwrap_or(0),
        length,
        close,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_head_end_is_found_wherever_it_came() {
        let two = b"GET / HTTP/1.1\r\nHost: a\r\n\r\nGET /b HTTP/1.1\r\n";
        assert!(head_ends(two, 0));
        assert!(head_ends(b"GET / HTTP/1.1\n\n", 0), "bare LF, as httparse reads it");
        assert!(!head_ends(b"GET / HTTP/1.1\r\nHost: a\r\n", 0));
        // Read a byte at a time, each read scanned from where the last one ended.
        let head = b"GET / HTTP/1.1\r\nHost: a\r\n\r\n";
        let found = (1..=head.len()).find(|&n| head_ends(&head[..n], n - 1));
        assert_eq!(found, Some(head.len()));
    }

    #[test]
    fn only_plain_requests_are_served_here() {
        let plain = |r: &str| matches!(parse_request(r.as_bytes(), true), Parsed::Plain(_));
        assert!(plain("GET /checkout?x=1 HTTP/1.1\r\nHost: a\r\n\r\n"));
        assert!(plain("POST /buy HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabc"));
        for other in [
            "GET /gate/claim HTTP/1.1\r\nHost: a\r\n\r\n",
            "GET /.well-known/jwks.json HTTP/1.1\r\n\r\n",
            "GET / HTTP/1.0\r\n\r\n",
            "GET http://a/ HTTP/1.1\r\n\r\n",
            "GET /checkout#.css HTTP/1.1\r\n\r\n",
            "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
            "POST / HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc",
            "POST / HTTP/1.1\r\nContent-Length: +3\r\n\r\nabc",
            "POST / HTTP/1.1\r\nContent-Length: 1000000\r\n\r\n",
            "GET / HTTP/1.1\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\n",
            "GET / HTTP/1.1\r\nExpect: 100-continue\r\n\r\n",
            "CONNECT a:443 HTTP/1.1\r\n\r\n",
            "GET / HTTP/1.1\r\nBad Header: 1\r\n\r\n",
        ] {
            assert!(!plain(other), "{other:?}");
        }
        assert!(matches!(parse_request(b"GET / HTTP/1.1\r\nHost: a\r\n", true), Parsed::Partial));
        let Parsed::Plain(h) = parse_request(b"GET / HTTP/1.1\r\nConnection: keep-alive, Close\r\n\r\n", true) else {
            panic!("plain")
        };
        assert!(h.close);
    }

    #[test]
    fn forward_auth_calls_are_served_here_in_either_mode() {
        let kind = |r: &str, proxy: bool| match parse_request(r.as_bytes(), proxy) {
            Parsed::Plain(h) => Some(h.kind),
            _ => None,
        };
        for proxy in [true, false] {
            assert_eq!(kind("GET /gate/auth HTTP/1.1\r\nX-Original-URI: /a\r\n\r\n", proxy), Some(Kind::Auth));
            assert_eq!(kind("GET /gate/auth?x=1 HTTP/1.1\r\n\r\n", proxy), Some(Kind::Auth));
            assert_eq!(kind("GET /gate/auth/checkout?x=1 HTTP/1.1\r\n\r\n", proxy), Some(Kind::Auth));
            // As the router routes them: these are not forward-auth calls.
            for other in ["/gate/auth/", "/gate/authx", "/gate/healthz", "/gate/auth/a#b"] {
                assert_eq!(kind(&format!("GET {other} HTTP/1.1\r\n\r\n"), proxy), None, "{other}");
            }
        }
        assert_eq!(kind("GET /gate/auth HTTP/1.1\r\nContent-Length: 0\r\n\r\n", true), Some(Kind::Auth));
        assert_eq!(kind("GET /gate/auth HTTP/1.1\r\nContent-Length: 2\r\n\r\nab", true), None, "a body: the router");
        assert_eq!(kind("GET /checkout HTTP/1.1\r\n\r\n", true), Some(Kind::Proxy));
        assert_eq!(kind("GET /checkout HTTP/1.1\r\n\r\n", false), None, "forward-auth mode forwards nothing");
    }
}
