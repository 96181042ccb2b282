//! One push stream over plain TCP, as `bench/push-scale.sh` opens thousands of them:
//! a hand-written GET from a chosen loopback source address, a small buffer per
//! stream, the events read by the crate's one event-stream parser ([`crate::sse`]).
//! The body's chunk-size lines (queue-api sends each event as one chunk) read as
//! lines of no field there, and are skipped.

use crate::sse::{self, Parser};
use std::collections::VecDeque;
use std::net::{Ipv4Addr, SocketAddr};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

pub(super) use crate::sse::Event;

/// `rank` from an event's JSON data (without parsing it all).
pub(super) fn rank(ev: &Event) -> Option<i64> {
    let at = ev.data.find("\"rank\":")? + 7;
    let digits: String = ev.data[at..].chars().take_while(|c| c.is_ascii_digit()).collect();
    digits.parse().ok()
}

/// One push stream being read.
pub(super) struct Sse {
    tcp: TcpStream,
    buf: Vec<u8>,
    parser: Parser,
    ready: VecDeque<sse::Event>,
}

async fn connect(api: SocketAddr, source: Ipv4Addr) -> std::io::Result<TcpStream> {
    let sock = TcpSocket::new_v4()?;
    sock.bind(SocketAddr::new(source.into(), 0))?;
    sock.connect(api).await
}

impl Sse {
    /// Opens a stream; Err(status line) when the answer is not 200.
    pub(super) async fn open(api: SocketAddr, source: Ipv4Addr, queue: &str, user: &str) -> Result<Sse, String> {
        let mut tcp = connect(api, source).await.map_err(|e| format!("connect: {e}"))?;
        let req = format!(
            "GET /api/queue/stream?userId={user}&queue={queue} HTTP/1.1\r\nHost: bench\r\nAccept: text/event-stream\r\n\r\n"
        );
        tcp.write_all(req.as_bytes()).await.map_err(|e| format!("write: {e}"))?;
        let mut buf = vec![0u8; 2048];
        let mut len = 0;
        // The head.
        loop {
            if let Some(end) = buf[..len].windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&buf[..end]).to_string();
                let status = head.split(' ').nth(1).unwrap_or("").to_string();
                if status != "200" {
                    return Err(format!("status {status}"));
                }
                let mut parser = Parser::default();
                let ready = parser.push(&buf[end + 4..len]).into();
                return Ok(Sse { tcp, buf, parser, ready });
            }
            if len == buf.len() {
                return Err("head too long".into());
            }
            let n = tcp.read(&mut buf[len..]).await.map_err(|e| format!("read: {e}"))?;
            if n == 0 {
                return Err("closed before the head".into());
            }
            len += n;
        }
    }

    /// The next event; None when the stream ended.
    pub(super) async fn next(&mut self) -> Option<Event> {
        loop {
            if let Some(ev) = self.ready.pop_front() {
                return Some(ev);
            }
            match self.tcp.read(&mut self.buf).await {
                Ok(0) | Err(_) => return None,
                Ok(n) => self.ready.extend(self.parser.push(&self.buf[..n])),
            }
        }
    }
}
