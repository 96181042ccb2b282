//! What the fast path writes: the request head to the app (as it came, the gate's
//! headers applied), the answer's head to the client, and the gate's own answers.

use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::Response;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

fn put_header(out: &mut Vec<u8>, name: &str, value: &[u8]) {
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

fn status_line(out: &mut Vec<u8>, status: StatusCode) {
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(status.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(status.canonical_reason().unwrap_or("").as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// The Date header's value now.
pub(super) fn http_date() -> HeaderValue {
    HeaderValue::from_str(&httpdate::fmt_http_date(std::time::SystemTime::now())).expect("a date is ASCII")
}

/// Writes one of the gate's own answers (a whole body, none to a HEAD); returns its
/// status and whether the connection may carry another request.
pub(super) async fn write_answer(
    client: &mut TcpStream,
    resp: Response,
    close: bool,
    is_head: bool,
) -> (StatusCode, bool) {
    let (parts, body) = resp.into_parts();
    let body = axum::body::to_bytes(body, usize::MAX).await.unwrap_or_default();
    let close =
        close || parts.headers.get(header::CONNECTION).is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"close"));
    let mut out = Vec::with_capacity(256 + body.len());
    status_line(&mut out, parts.status);
    for (name, value) in &parts.headers {
        if name != header::CONTENT_LENGTH && name != header::TRANSFER_ENCODING && name != header::CONNECTION {
            put_header(&mut out, name.as_str(), value.as_bytes());
        }
    }
    put_header(&mut out, "content-length", body.len().to_string().as_bytes());
    if !parts.headers.contains_key(header::DATE) {
        put_header(&mut out, "date", http_date().as_bytes());
    }
    if close {
        out.extend_from_slice(b"connection: close\r\n");
    }
    out.extend_from_slice(b"\r\n");
    if !is_head {
        out.extend_from_slice(&body);
    }
    let ok = client.write_all(&out).await.is_ok();
    (parts.status, ok && !close)
}

/// The request to the app: its line with the upstream's path before the target, a
/// Host when the request came without one (`authority`), the headers, the body.
pub(super) fn request(
    method: &Method,
    prefix: &str,
    target: &str,
    authority: Option<&str>,
    headers: &HeaderMap,
    body: &[u8],
) -> Vec<u8> {
    let mut out = Vec::with_capacity(prefix.len() + target.len() + 64 * headers.len() + body.len());
    out.extend_from_slice(method.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(prefix.as_bytes());
    out.extend_from_slice(target.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
    if let Some(host) = authority {
        put_header(&mut out, "host", host.as_bytes());
    }
    for (name, value) in headers {
        put_header(&mut out, name.as_str(), value.as_bytes());
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(body);
    out
}

/// The answer's head for the client (`capacity`: room for the body bytes that follow
/// it in the same write).
pub(super) fn response_head(
    status: StatusCode,
    headers: &HeaderMap,
    chunked: bool,
    close: bool,
    capacity: usize,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(256 + capacity);
    status_line(&mut out, status);
    for (name, value) in headers {
        put_header(&mut out, name.as_str(), value.as_bytes());
    }
    if chunked {
        out.extend_from_slice(b"transfer-encoding: chunked\r\n");
    }
    if close {
        out.extend_from_slice(b"connection: close\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out
}
