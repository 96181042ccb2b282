//! The app's answer as the fast path reads it: its head (interim answers skipped), how
//! its body is framed, and the body relayed to the client as the app framed it.

use super::chunks::Chunks;
use super::MAX_HEAD;
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, StatusCode};
use bytes::{Buf, BytesMut};
use std::io;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// How the app's answer ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Framing {
    /// No body (HEAD, 204, 304).
    Empty,
    Length(u64),
    Chunked,
    /// Until the app closes the connection.
    Close,
}

/// The app's answer head.
pub(super) struct RespHead {
    pub(super) status: StatusCode,
    pub(super) headers: HeaderMap,
    pub(super) len: usize,
    pub(super) framing: Framing,
    /// The app closes its connection after this answer.
    pub(super) close: bool,
}

fn invalid(why: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, why.to_string())
}

/// Reads the app's answer head into `ubuf` (interim 1xx answers skipped).
pub(super) async fn read_response_head(
    conn: &mut TcpStream,
    ubuf: &mut BytesMut,
    is_head: bool,
) -> io::Result<RespHead> {
    loop {
        if let Some(head) = parse_response(ubuf, is_head)? {
            if head.status.is_informational() {
                if head.status == StatusCode::SWITCHING_PROTOCOLS {
                    return Err(invalid("the upstream switched protocols unasked"));
                }
                ubuf.advance(head.len);
                continue;
            }
            return Ok(head);
        }
        if ubuf.len() >= MAX_HEAD {
            return Err(invalid("the upstream's answer head is too large"));
        }
        ubuf.reserve(16 * 1024);
        if conn.read_buf(ubuf).await? == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
    }
}

fn parse_response(buf: &[u8], is_head: bool) -> io::Result<Option<RespHead>> {
    let mut slots = [httparse::EMPTY_HEADER; 100];
    let mut resp = httparse::Response::new(&mut slots);
    let len = match resp.parse(buf) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(invalid(&format!("the upstream's answer head: {e}"))),
    };
    let status = resp.code.and_then(|c| StatusCode::from_u16(c).ok()).ok_or_else(|| invalid("no status"))?;
    let mut headers = HeaderMap::with_capacity(resp.headers.len());
    let mut close = resp.version != Some(1);
    let mut length: Option<u64> = None;
    let mut chunked = None;
    for h in resp.headers.iter() {
        let name = HeaderName::from_bytes(h.name.as_bytes()).map_err(|_| invalid("a bad header name"))?;
        let value = HeaderValue::from_bytes(h.value).map_err(|_| invalid("a bad header value"))?;
        if name == header::CONTENT_LENGTH {
            let digits = value.as_bytes();
            if digits.is_empty() || digits.len() > 19 || !digits.iter().all(u8::is_ascii_digit) {
                return Err(invalid("a bad length"));
            }
            let n: u64 =
                value.to_str().ok().and_then(|v| v.trim().parse().ok()).ok_or_else(|| invalid("a bad length"))?;
            if length.is_some_and(|l| l != n) {
                return Err(invalid("two lengths"));
            }
            length = Some(n);
        } else if name == header::TRANSFER_ENCODING {
            // The last coding decides: chunked, or the body runs until the close.
            let last = value.to_str().ok().and_then(|v| v.rsplit(',').next()).map(str::trim);
            chunked = Some(last.is_some_and(|l| l.eq_ignore_ascii_case("chunked")));
        } else if name == header::CONNECTION {
            let tokens = value.to_str().unwrap_or("");
            close |= tokens.split(',').any(|t| t.trim().eq_ignore_ascii_case("close"));
        }
        headers.append(name, value);
    }
    let code = status.as_u16();
    let framing = if is_head || status.is_informational() || code == 204 || code == 304 {
        Framing::Empty
    } else {
        match (chunked, length) {
            (Some(true), _) => Framing::Chunked,
            (Some(false), _) => Framing::Close,
            (None, Some(n)) => Framing::Length(n),
            (None, None) => Framing::Close,
        }
    };
    if framing == Framing::Close {
        close = true;
    }
    Ok(Some(RespHead { status, headers, len, framing, close }))
}

/// Relays the answer's body after `out` (its head) to the client; `ubuf` holds what
/// was read past the head. True when the app's connection ended exactly at the
/// answer's end (it may carry another request).
pub(super) async fn relay(
    conn: &mut TcpStream,
    client: &mut TcpStream,
    ubuf: &mut BytesMut,
    framing: Framing,
    mut out: Vec<u8>,
) -> io::Result<bool> {
    let mut scanner = Chunks::default();
    let mut left = match framing {
        Framing::Length(n) => n,
        _ => 0,
    };
    loop {
        // What of `ubuf` belongs to this answer, and whether the answer is complete.
        let (take, done) = match framing {
            Framing::Empty => (0, true),
            Framing::Length(_) => {
                let take = (ubuf.len() as u64).min(left) as usize;
                left -= take as u64;
                (take, left == 0)
            }
            Framing::Chunked => match scanner.feed(ubuf).map_err(|_| invalid("bad chunked framing"))? {
                Some(end) => (end, true),
                None => (ubuf.len(), false),
            },
            Framing::Close => (ubuf.len(), false),
        };
        out.extend_from_slice(&ubuf[..take]);
        ubuf.advance(take);
        if !out.is_empty() {
            client.write_all(&out).await?;
            out.clear();
        }
        if done {
            return Ok(ubuf.is_empty());
        }
        ubuf.clear();
        ubuf.reserve(16 * 1024);
        if conn.read_buf(ubuf).await? == 0 {
            return if framing == Framing::Close { Ok(false) } else { Err(io::ErrorKind::UnexpectedEof.into()) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_framed_as_the_app_framed_them() {
        let framing = |r: &str, is_head: bool| parse_response(r.as_bytes(), is_head).unwrap().unwrap().framing;
        assert_eq!(framing("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", false), Framing::Length(5));
        assert_eq!(framing("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", true), Framing::Empty);
        assert_eq!(framing("HTTP/1.1 204 No Content\r\n\r\n", false), Framing::Empty);
        assert_eq!(
            framing("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\nContent-Length: 5\r\n\r\n", false),
            Framing::Chunked
        );
        assert_eq!(framing("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n", false), Framing::Close);
        assert_eq!(framing("HTTP/1.1 200 OK\r\n\r\n", false), Framing::Close);
        assert!(parse_response(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n", false).is_err());
        assert!(parse_response(b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n", false).is_err());
        assert!(parse_response(b"HTTP/1.1 200 OK\r\nContent-Length: +5\r\n\r\n", false).is_err());
        assert!(parse_response(b"HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\n", false).unwrap().unwrap().close);
    }
}
