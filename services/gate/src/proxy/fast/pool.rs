//! The app as the fast path reaches it: kept-alive connections (plain HTTP), and the
//! exchange of one request for an answer's head on one of them.

use super::response::{read_response_head, RespHead};
use axum::http::{Method, Uri};
use bytes::BytesMut;
use std::collections::VecDeque;
use std::io;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

/// How long a kept-alive connection to the app waits in the pool at most (apps close
/// idle ones after a few seconds; one closed meanwhile is seen when taken).
const POOL_IDLE: Duration = Duration::from_secs(30);
/// Idle connections to the app kept at most.
const POOL_MAX: usize = 1024;
/// How long connecting to the app may take (as the general path's client).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The app as the fast path reaches it: plain HTTP only.
pub struct Upstream {
    /// `host:port`, to connect to.
    pub(super) addr: String,
    /// The Host header for requests that came without one.
    pub(super) authority: String,
    /// The base URL's path, before every forwarded path.
    pub(super) prefix: String,
    /// Kept-alive connections, the oldest at the front, the most recently used at
    /// the back (taken first: the likeliest to be still open).
    idle: Mutex<VecDeque<(TcpStream, Instant)>>,
}

impl Upstream {
    /// The fast path's view of `--upstream` (None for a scheme it does not speak).
    pub fn of(base: &Uri) -> Option<Upstream> {
        if base.scheme_str() != Some("http") {
            return None;
        }
        let authority = base.authority()?;
        let addr = format!("{}:{}", authority.host(), authority.port_u16().unwrap_or(80));
        Some(Upstream {
            addr,
            authority: authority.as_str().to_string(),
            prefix: base.path().trim_end_matches('/').to_string(),
            idle: Mutex::new(VecDeque::new()),
        })
    }

    /// An idle connection still open with nothing to read: one the app closed, or that
    /// carries bytes past its last answer, is dropped (the reactor knows it readable, so
    /// a quiet connection costs no call).
    fn take(&self) -> Option<TcpStream> {
        loop {
            let (conn, since) = self.idle.lock().unwrap().pop_back()?;
            if since.elapsed() >= POOL_IDLE {
                continue;
            }
            // A real look at the socket (one non-blocking peek), not the runtime's
            // readiness, which may not have seen the app's FIN yet: nothing to read
            // means still open; an end of stream, bytes nobody asked for or an error
            // mean let it go.
            let mut byte = [std::mem::MaybeUninit::<u8>::uninit()];
            match socket2::SockRef::from(&conn).peek(&mut byte) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Some(conn),
                _ => continue,
            }
        }
    }

    /// Keeps `conn` for the next request; connections idle too long are let go from
    /// the front (the oldest: under steady load only the back is ever taken, so they
    /// would otherwise stay open, closed by the app, until the pool fills), and a full
    /// pool lets its oldest go.
    pub(super) fn put(&self, conn: TcpStream) {
        let mut idle = self.idle.lock().unwrap();
        while idle.front().is_some_and(|(_, since)| since.elapsed() >= POOL_IDLE) {
            idle.pop_front();
        }
        if idle.len() >= POOL_MAX {
            idle.pop_front();
        }
        idle.push_back((conn, Instant::now()));
    }

    async fn connect(&self) -> io::Result<TcpStream> {
        let conn = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(&self.addr))
            .await
            .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "connect timed out"))??;
        conn.set_nodelay(true)?;
        Ok(conn)
    }

    /// Sends the request and reads the answer's head, on a kept-alive connection or a
    /// new one. A kept-alive connection the app had closed meanwhile (nothing read
    /// back) is tried again on a new one when that cannot do a request twice: the
    /// request was not written, or `method` is idempotent.
    pub(super) async fn exchange(
        &self,
        request: &[u8],
        ubuf: &mut BytesMut,
        method: &Method,
    ) -> io::Result<(TcpStream, RespHead)> {
        let is_head = *method == Method::HEAD;
        let mut pooled = self.take();
        loop {
            let reused = pooled.is_some();
            let mut conn = match pooled.take() {
                Some(conn) => conn,
                None => self.connect().await?,
            };
            ubuf.clear();
            let written = conn.write_all(request).await;
            let unsent = written.is_err();
            let read = match written {
                Ok(()) => read_response_head(&mut conn, ubuf, is_head).await,
                Err(e) => Err(e),
            };
            match read {
                Ok(head) => return Ok((conn, head)),
                Err(e) if reused && ubuf.is_empty() && (unsent || idempotent(method)) && stale(&e) => continue,
                Err(e) => return Err(e),
            }
        }
    }
}

/// Errors of a connection closed under us.
fn stale(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::UnexpectedEof
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::BrokenPipe
            | io::ErrorKind::ConnectionAborted
    )
}

fn idempotent(m: &Method) -> bool {
    matches!(*m, Method::GET | Method::HEAD | Method::OPTIONS | Method::PUT | Method::DELETE | Method::TRACE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn connections_idle_too_long_are_let_go_when_one_is_put_back() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base: Uri = format!("http://{}", listener.local_addr().unwrap()).parse().unwrap();
        let upstream = Upstream::of(&base).unwrap();
        let mut conns = Vec::new();
        for _ in 0..4 {
            conns.push(TcpStream::connect(listener.local_addr().unwrap()).await.unwrap());
        }
        // Two put back long ago (at the front), one recently.
        let long_ago = Instant::now().checked_sub(POOL_IDLE + Duration::from_secs(1)).expect("a clock that far back");
        {
            let mut idle = upstream.idle.lock().unwrap();
            idle.push_back((conns.pop().unwrap(), long_ago));
            idle.push_back((conns.pop().unwrap(), long_ago));
            idle.push_back((conns.pop().unwrap(), Instant::now()));
        }
        upstream.put(conns.pop().unwrap());
        let idle = upstream.idle.lock().unwrap();
        assert_eq!(idle.len(), 2, "the two idle too long are gone");
        assert!(idle.iter().all(|(_, since)| since.elapsed() < POOL_IDLE));
    }
}
