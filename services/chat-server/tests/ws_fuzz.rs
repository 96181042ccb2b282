//! WebSocket fuzzer: the real `chat-server` binary as a child process, a real
//! valkey-server with the module, and hostile clients over raw TCP with hand-built
//! frames, each admitted with a real ticket: random bytes, random frames (opcodes,
//! reserved bits, masks, fin bits), 64-bit lengths far beyond the limit, frames over
//! `--max-frame-bytes`, fragmented text never finished or growing past the message
//! limit with pings in between, invalid UTF-8, binary frames, oversized and
//! fragmented pings, unmasked frames, half a frame and a stall, odd close frames, a
//! flood, garbage JSON, and clients that never read while the room is busy.
//!
//! Meanwhile a few well-behaved sessions keep chatting; each must receive every one of
//! their messages, complete and in order, and never be closed or told it lagged.
//! Every hostile connection must end as docs/http-api.md says ("Close codes"): 1009
//! for a frame or message over the limit, 1000 `idle` for a stall, 1008 for a flood,
//! a dropped connection or 1002 for a protocol violation; never hang. After: the server serves a new
//! session, holds only the good ones, and its memory stayed bounded (VmRSS before,
//! peak, after).
//!
//! `WS_FUZZ_CONNECTIONS` (default 400) hostile connections, `WS_FUZZ_SEED` replays a
//! run (printed); `bash bench/ws-fuzz.sh` runs 5,000.

mod common;

use common::*;
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use testkit::{Backend, Rng, ValkeyServer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpSocket, TcpStream};
use tokio_tungstenite::tungstenite::Message;

/// Longest a hostile connection may take to end: idle, the 2 s closing handshake,
/// a 10 s stalled write, and slack for a loaded machine.
const END_WITHIN: Duration = Duration::from_secs(30);
/// The protocol's message limit the server sets for `--max-frame-bytes` 4096 (16x, at
/// least 64 KiB): past it, tungstenite stops reading the message.
const PROTOCOL_LIMIT: usize = 64 * 1024;
const GOOD: usize = 4;
const NEVER_READERS: usize = 4;
const CONCURRENCY: usize = 48;

// ------------------------------------------------------------------ framing

/// A client frame: `mask` None sends it unmasked; `declared` claims another length.
fn frame(fin: bool, rsv: u8, opcode: u8, mask: Option<[u8; 4]>, payload: &[u8], declared: Option<u64>) -> Vec<u8> {
    let mut f = vec![(u8::from(fin) << 7) | ((rsv & 7) << 4) | (opcode & 15)];
    let len = declared.unwrap_or(payload.len() as u64);
    let m = if mask.is_some() { 0x80 } else { 0 };
    if len < 126 {
        f.push(m | len as u8);
    } else if len <= 0xffff {
        f.push(m | 126);
        f.extend_from_slice(&(len as u16).to_be_bytes());
    } else {
        f.push(m | 127);
        f.extend_from_slice(&len.to_be_bytes());
    }
    match mask {
        Some(k) => {
            f.extend_from_slice(&k);
            f.extend(payload.iter().enumerate().map(|(i, b)| b ^ k[i % 4]));
        }
        None => f.extend_from_slice(payload),
    }
    f
}

const TEXT: u8 = 1;
const BINARY: u8 = 2;
const CONT: u8 = 0;
const CLOSE: u8 = 8;
const PING: u8 = 9;

struct Out<'a> {
    rng: &'a mut Rng,
    bytes: Vec<u8>,
}

impl Out<'_> {
    fn key(&mut self) -> [u8; 4] {
        (self.rng.next_u64() as u32).to_be_bytes()
    }
    /// A well-formed masked frame.
    fn put(&mut self, fin: bool, opcode: u8, payload: &[u8]) {
        let k = self.key();
        self.bytes.extend(frame(fin, 0, opcode, Some(k), payload, None));
    }
    fn text(&mut self, s: &str) {
        self.put(true, TEXT, s.as_bytes());
    }
    fn close(&mut self) {
        self.put(true, CLOSE, &1000u16.to_be_bytes());
    }
}

fn random_bytes(rng: &mut Rng, n: usize) -> Vec<u8> {
    (0..n).map(|_| rng.below(256) as u8).collect()
}

fn chat_frame(message: &str) -> String {
    json!({"type": "MESSAGE_SEND", "payload": {"message": message}}).to_string()
}

// ------------------------------------------------------------------ cases

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    RandomBytes,
    RandomFrames,
    HugeLength,
    HugeLengthTopBit,
    FrameOverLimit,
    FragmentsOverLimit,
    FragmentsNeverFinished,
    HalfFrameStall,
    InvalidUtf8,
    Binary,
    GarbageText,
    BigPing,
    FragmentedPing,
    Unmasked,
    ReservedBits,
    ReservedOpcode,
    StrayContinuation,
    DataInsideFragments,
    OddClose,
    Flood,
}

const KINDS: [Kind; 20] = [
    Kind::RandomBytes,
    Kind::RandomFrames,
    Kind::HugeLength,
    Kind::HugeLengthTopBit,
    Kind::FrameOverLimit,
    Kind::FragmentsOverLimit,
    Kind::FragmentsNeverFinished,
    Kind::HalfFrameStall,
    Kind::InvalidUtf8,
    Kind::Binary,
    Kind::GarbageText,
    Kind::BigPing,
    Kind::FragmentedPing,
    Kind::Unmasked,
    Kind::ReservedBits,
    Kind::ReservedOpcode,
    Kind::StrayContinuation,
    Kind::DataInsideFragments,
    Kind::OddClose,
    Kind::Flood,
];

/// How a connection ended, as the client saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum End {
    Closed(u16, String),
    Dropped,
    Hung,
}

/// What the client sends (in one or more writes, with pauses), and how it must end.
struct Script {
    writes: Vec<Vec<u8>>,
    /// Ping payloads sent, whose pongs must come back.
    pings: Vec<Vec<u8>>,
    /// Must receive at least one ERROR (or seed system) notice.
    wants_notice: bool,
}

fn script(kind: Kind, rng: &mut Rng) -> Script {
    let mut o = Out { rng, bytes: Vec::new() };
    let mut writes = Vec::new();
    let mut pings = Vec::new();
    let mut wants_notice = false;
    match kind {
        Kind::RandomBytes => {
            let n = o.rng.range(1, 3000) as usize;
            o.bytes = random_bytes(o.rng, n);
            o.close();
        }
        Kind::RandomFrames => {
            for _ in 0..o.rng.range(1, 12) {
                let fin = o.rng.chance(70);
                let rsv = if o.rng.chance(80) { 0 } else { o.rng.below(8) as u8 };
                let opcode = if o.rng.chance(60) {
                    [TEXT, BINARY, CONT, PING, 10][o.rng.below(5) as usize]
                } else {
                    o.rng.below(16) as u8
                };
                let n = if o.rng.chance(90) { o.rng.range(0, 200) } else { o.rng.range(126, 5000) } as usize;
                let payload = if o.rng.chance(50) { chat_frame("random").into_bytes() } else { random_bytes(o.rng, n) };
                let mask = if o.rng.chance(90) { Some(o.key()) } else { None };
                o.bytes.extend(frame(fin, rsv, opcode, mask, &payload, None));
            }
            o.close();
        }
        Kind::HugeLength => {
            // Far past the limit: 4 GiB to 4 EiB, 63-bit clean.
            let len = 1u64 << o.rng.range(32, 62);
            let k = o.key();
            o.bytes.extend(frame(true, 0, [TEXT, BINARY][o.rng.below(2) as usize], Some(k), b"", Some(len)));
            let n = o.rng.range(0, 300) as usize;
            o.bytes.extend(random_bytes(o.rng, n));
        }
        Kind::HugeLengthTopBit => {
            let k = o.key();
            o.bytes.extend(frame(true, 0, TEXT, Some(k), b"", Some(u64::MAX - o.rng.below(1000))));
        }
        Kind::FrameOverLimit => {
            // Over --max-frame-bytes (4096), up to the protocol limit: read whole, then 1009.
            let n = o.rng.range(4097, PROTOCOL_LIMIT as i64 - 100) as usize;
            let body = "x".repeat(n);
            let t = chat_frame(&body);
            if o.rng.chance(50) {
                o.text(&t);
            } else {
                o.put(true, BINARY, t.as_bytes());
            }
        }
        Kind::FragmentsOverLimit => {
            let first = b"{\"type\":\"MESSAGE_SEND\",\"payload\":{\"message\":\"";
            o.put(false, TEXT, first);
            let mut total = first.len();
            while total <= PROTOCOL_LIMIT {
                let n = o.rng.range(1, 9000) as usize;
                o.put(false, CONT, &vec![b'a'; n]);
                total += n;
                // Pings in between; none after the frame that passes the limit, which
                // the server would never read (its close could then be lost to a reset).
                if total <= PROTOCOL_LIMIT && o.rng.chance(20) {
                    let p = random_bytes(o.rng, 8);
                    o.put(true, PING, &p);
                    pings.push(p);
                }
            }
        }
        Kind::FragmentsNeverFinished => {
            o.put(false, TEXT, b"{\"type\":\"MESSAGE_SEND\",");
            for _ in 0..o.rng.range(0, 6) {
                let n = o.rng.range(0, 1000) as usize;
                o.put(false, CONT, &vec![b' '; n]);
                let n = o.rng.range(0, 125) as usize;
                let p = random_bytes(o.rng, n);
                o.put(true, PING, &p);
                pings.push(p);
            }
        }
        Kind::HalfFrameStall => {
            let t = chat_frame("half");
            let k = o.key();
            let f = frame(true, 0, TEXT, Some(k), t.as_bytes(), None);
            let cut = o.rng.range(1, f.len() as i64 - 1) as usize;
            o.bytes.extend_from_slice(&f[..cut]);
        }
        Kind::InvalidUtf8 => {
            let mut p = b"{\"type\":\"MESSAGE_SEND\",\"payload\":{\"message\":\"".to_vec();
            p.extend_from_slice(
                [&[0xc3, 0x28][..], &[0xff], &[0xed, 0xa0, 0x80], &[0xe2, 0x82]][o.rng.below(4) as usize],
            );
            p.extend_from_slice(b"\"}}");
            if o.rng.chance(50) {
                o.put(true, TEXT, &p);
            } else {
                let cut = o.rng.range(1, p.len() as i64 - 1) as usize;
                o.put(false, TEXT, &p[..cut]);
                o.put(true, CONT, &p[cut..]);
            }
            o.close();
        }
        Kind::Binary => {
            for _ in 0..o.rng.range(1, 4) {
                let n = o.rng.range(0, 3000) as usize;
                let p = random_bytes(o.rng, n);
                o.put(true, BINARY, &p);
            }
            o.close();
            wants_notice = true;
        }
        Kind::GarbageText => {
            for _ in 0..o.rng.range(1, 4) {
                let t = match o.rng.below(8) {
                    0 => "[".repeat(o.rng.range(100, 4000) as usize),
                    1 => "{\"type\":\"MESSAGE_SEND\"}".into(),
                    2 => "{\"type\":\"MESSAGE_SEND\",\"payload\":{\"message\":42}}".into(),
                    3 => "{\"type\":\"NOPE\",\"payload\":{}}".into(),
                    4 => "null".into(),
                    5 => String::new(),
                    6 => "{\"type\":\"SERVERSTATUS_REQUEST\",\"payload\":".into(),
                    _ => "\u{0}\u{1}é😀".into(),
                };
                o.text(&t);
            }
            o.close();
            wants_notice = true;
        }
        Kind::BigPing => {
            // Over the 125 bytes a control frame may carry, under the protocol limit.
            let n = o.rng.range(126, PROTOCOL_LIMIT as i64 - 100) as usize;
            o.put(true, PING, &vec![b'p'; n]);
        }
        Kind::FragmentedPing => o.put(false, PING, b"frag"),
        Kind::Unmasked => {
            let t = chat_frame("unmasked");
            o.bytes.extend(frame(true, 0, TEXT, None, t.as_bytes(), None));
        }
        Kind::ReservedBits => {
            let k = o.key();
            let t = chat_frame("rsv");
            o.bytes.extend(frame(true, o.rng.range(1, 7) as u8, TEXT, Some(k), t.as_bytes(), None));
        }
        Kind::ReservedOpcode => {
            let op = [3, 4, 5, 6, 7, 11, 12, 13, 14, 15][o.rng.below(10) as usize];
            o.put(true, op, b"{}");
        }
        Kind::StrayContinuation => {
            let fin = o.rng.chance(50);
            o.put(fin, CONT, b"{}");
        }
        Kind::DataInsideFragments => {
            o.put(false, TEXT, b"{\"type\":");
            let op = [TEXT, BINARY][o.rng.below(2) as usize];
            o.put(true, op, b"{}");
        }
        Kind::OddClose => {
            let payload: Vec<u8> = match o.rng.below(5) {
                0 => vec![3],
                1 => 1005u16.to_be_bytes().to_vec(),
                2 => [&999u16.to_be_bytes()[..], b"bye"].concat(),
                3 => [&1000u16.to_be_bytes()[..], &[0xff, 0xfe][..]].concat(),
                _ => [&1000u16.to_be_bytes()[..], &vec![b'r'; 200][..]].concat(),
            };
            o.put(true, CLOSE, &payload);
        }
        Kind::Flood => {
            // The burst (200 here), then more than 50 dropped in a row: 1008. Frames
            // that would be refused anyway (not JSON), so the room hears none of them;
            // many more than the burst, so that a slow server's refill cannot save it.
            for _ in 0..2000 {
                o.text("x");
            }
        }
    }
    writes.push(std::mem::take(&mut o.bytes));
    Script { writes, pings, wants_notice }
}

/// The ends a case may have; a message if `end` is not one of them.
fn judge(kind: Kind, end: &End) -> Result<(), String> {
    let code = match end {
        End::Closed(c, _) => Some(*c),
        End::Dropped => None,
        End::Hung => return Err("never ended".into()),
    };
    let protocol = matches!(code, None | Some(1002));
    let ok = match kind {
        // Anything, as long as it ends (random frames may hold a close of any code).
        Kind::RandomBytes | Kind::RandomFrames => true,
        Kind::HugeLength | Kind::FrameOverLimit | Kind::FragmentsOverLimit => code == Some(1009),
        Kind::HugeLengthTopBit => protocol || code == Some(1009),
        Kind::FragmentsNeverFinished | Kind::HalfFrameStall => {
            matches!(end, End::Closed(1000, r) if r == "idle")
        }
        Kind::Flood => matches!(end, End::Closed(1008, r) if r == "too many messages"),
        Kind::InvalidUtf8 => protocol || code == Some(1007),
        // Our close (1000) answered.
        Kind::Binary | Kind::GarbageText => code == Some(1000),
        Kind::OddClose => protocol || code == Some(1000),
        Kind::BigPing
        | Kind::FragmentedPing
        | Kind::Unmasked
        | Kind::ReservedBits
        | Kind::ReservedOpcode
        | Kind::StrayContinuation
        | Kind::DataInsideFragments => protocol,
    };
    if ok {
        Ok(())
    } else {
        Err(format!("ended {end:?}"))
    }
}

// ------------------------------------------------------------------ raw client

struct Raw {
    r: OwnedReadHalf,
    w: OwnedWriteHalf,
    buf: Vec<u8>,
}

/// What the server sent until the end.
#[derive(Default)]
struct Seen {
    notices: usize,
    pongs: Vec<Vec<u8>>,
}

impl Raw {
    /// Connects and upgrades with `ticket` (a small receive buffer for `tiny_rcvbuf`).
    async fn open(port: u16, ticket: &str, tiny_rcvbuf: bool) -> Raw {
        let sock = TcpSocket::new_v4().unwrap();
        if tiny_rcvbuf {
            sock.set_recv_buffer_size(4096).unwrap();
        }
        let tcp: TcpStream = sock.connect(([127, 0, 0, 1], port).into()).await.expect("connect");
        tcp.set_nodelay(true).unwrap();
        let (r, mut w) = tcp.into_split();
        let req = format!(
            "GET /gameserver?ticketId={ticket}&presence=1 HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n\
             Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
        );
        w.write_all(req.as_bytes()).await.unwrap();
        let mut raw = Raw { r, w, buf: Vec::new() };
        let head = tokio::time::timeout(WAIT, async {
            loop {
                if let Some(i) = raw.buf.windows(4).position(|w| w == b"\r\n\r\n") {
                    return raw.buf.drain(..i + 4).collect::<Vec<u8>>();
                }
                raw.fill().await.expect("handshake answer");
            }
        })
        .await
        .expect("handshake in time");
        let head = String::from_utf8_lossy(&head).into_owned();
        assert!(head.starts_with("HTTP/1.1 101"), "upgrade refused: {head}");
        raw
    }

    async fn fill(&mut self) -> std::io::Result<()> {
        let mut chunk = [0u8; 16 * 1024];
        let n = self.r.read(&mut chunk).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        self.buf.extend_from_slice(&chunk[..n]);
        Ok(())
    }

    async fn take(&mut self, n: usize) -> std::io::Result<Vec<u8>> {
        while self.buf.len() < n {
            self.fill().await?;
        }
        Ok(self.buf.drain(..n).collect())
    }

    /// One server frame: (fin, opcode, payload).
    async fn frame(&mut self) -> std::io::Result<(bool, u8, Vec<u8>)> {
        let h = self.take(2).await?;
        assert_eq!(h[1] & 0x80, 0, "the server masked a frame");
        let len = match h[1] & 0x7f {
            126 => u16::from_be_bytes(self.take(2).await?.try_into().unwrap()) as usize,
            127 => u64::from_be_bytes(self.take(8).await?.try_into().unwrap()) as usize,
            n => n as usize,
        };
        assert!(len <= 1 << 20, "a server frame of {len} bytes");
        Ok((h[0] & 0x80 != 0, h[0] & 0x0f, self.take(len).await?))
    }

    /// Reads until the server closes or drops the connection, or `within` passes.
    async fn until_end(&mut self, within: Duration, seen: &mut Seen) -> End {
        let work = async {
            let mut text: Vec<u8> = Vec::new();
            loop {
                let (fin, op, payload) = match self.frame().await {
                    Ok(f) => f,
                    Err(_) => return End::Dropped,
                };
                match op {
                    CLOSE => {
                        let code = if payload.len() >= 2 { u16::from_be_bytes([payload[0], payload[1]]) } else { 1005 };
                        let reason = String::from_utf8_lossy(payload.get(2..).unwrap_or_default()).into_owned();
                        return End::Closed(code, reason);
                    }
                    10 => seen.pongs.push(payload),
                    TEXT | CONT => {
                        text.extend_from_slice(&payload);
                        if fin {
                            let v: Value = serde_json::from_slice(&text).expect("server text frames are JSON");
                            if v["type"] == "ERROR" {
                                seen.notices += 1;
                            }
                            text.clear();
                        }
                    }
                    _ => {}
                }
            }
        };
        tokio::time::timeout(within, work).await.unwrap_or(End::Hung)
    }
}

// ------------------------------------------------------------------ the test

#[derive(Default)]
struct Tally {
    by_kind: BTreeMap<Kind, (u64, BTreeMap<String, u64>)>,
    failures: Vec<String>,
}

fn end_label(end: &End) -> String {
    match end {
        End::Closed(c, r) if r.is_empty() => format!("{c}"),
        End::Closed(c, r) => format!("{c} {r}"),
        End::Dropped => "dropped".into(),
        End::Hung => "HUNG".into(),
    }
}

/// A well-behaved session: sends numbered messages, collects what the good sessions say.
struct Good {
    nickname: String,
    sent: Arc<Mutex<u64>>,
    /// Per good sender: the numbers received, in order.
    got: Arc<Mutex<BTreeMap<String, Vec<u64>>>>,
    harm: Arc<Mutex<Vec<String>>>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_server_survives_hostile_websocket_clients() {
    let connections: u64 = std::env::var("WS_FUZZ_CONNECTIONS").ok().and_then(|v| v.parse().ok()).unwrap_or(400);
    let seed: u64 = std::env::var("WS_FUZZ_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64 | 1
    });
    println!("ws-fuzz: seed {seed} (WS_FUZZ_SEED={seed} replays the cases), {connections} hostile connections");
    let s = ValkeyServer::start(Backend::Module);
    let qc = queue_client(&s).await;
    qc.config_set("default", &[("soft_cap", 10_000_000)]).await.unwrap();
    let mut p = Process::start(
        &s.url(),
        &[
            "--idle-timeout",
            "3s",
            "--heartbeat",
            "1s",
            // A busy room (the good sessions say 200 messages a second in all), so that
            // a client that never reads fills the socket buffers within seconds.
            "--messages-per-second",
            "100",
            "--message-burst",
            "200",
        ],
        "error",
    )
    .await;
    let port = p.0.port;
    let ws_base = p.ws();

    // The good sessions: connected first, chatting throughout.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut goods = Vec::new();
    let mut tasks = Vec::new();
    let mut writers = Vec::new();
    // All in before anyone speaks.
    let mut clients = Vec::new();
    for g in 0..GOOD {
        let t = ticket(&qc, "default", &format!("g-{g}"), &format!("good{g}")).await;
        clients.push(Client::join(&game_url(&ws_base, &t, None)).await.0);
    }
    for (g, client) in clients.into_iter().enumerate() {
        let nickname = format!("good{g}");
        let (mut sink, mut stream) = client.ws.split();
        let good = Good { nickname: nickname.clone(), sent: Arc::default(), got: Arc::default(), harm: Arc::default() };
        let (got, harm, stopping) = (good.got.clone(), good.harm.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            while let Some(msg) = stream.next().await {
                match msg {
                    Ok(Message::Text(t)) => {
                        let v: Value = serde_json::from_str(&t).unwrap();
                        let text = v["payload"]["message"].as_str().unwrap_or_default().to_string();
                        let from = v["payload"]["nickname"].as_str().unwrap_or_default().to_string();
                        if v["type"] == "MESSAGE_RECEIVE" && from.starts_with("good") {
                            let n: u64 = text.split(':').nth(1).unwrap().parse().unwrap();
                            got.lock().unwrap().entry(from).or_default().push(n);
                        } else if v["type"] == "ERROR" {
                            harm.lock().unwrap().push(format!("ERROR {text}"));
                        }
                    }
                    Ok(Message::Close(f)) => {
                        // The answer to our own close at the end is fine.
                        if !stopping.load(std::sync::atomic::Ordering::Relaxed) {
                            harm.lock().unwrap().push(format!("closed {f:?}"));
                        }
                        return;
                    }
                    Ok(_) => {}
                    Err(e) => {
                        harm.lock().unwrap().push(format!("read failed: {e}"));
                        return;
                    }
                }
            }
        }));
        let (sent, stop, harm) = (good.sent.clone(), stop.clone(), good.harm.clone());
        let mut rng = Rng(seed ^ (0x1000 + g as u64));
        writers.push(tokio::spawn(async move {
            let mut n = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                // Up to ~3 KB (under --max-frame-bytes with the JSON around it), 50 a
                // second (under the rate limit).
                let pad = "m".repeat(rng.range(1000, 3000) as usize);
                let frame = json!({"type": "MESSAGE_SEND", "payload": {"message": format!("{nickname}:{n}:{pad}")}});
                if let Err(e) = sink.send(Message::Text(frame.to_string().into())).await {
                    harm.lock().unwrap().push(format!("send failed: {e}"));
                    return None;
                }
                n += 1;
                *sent.lock().unwrap() = n;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Some(sink)
        }));
        goods.push(good);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (rss_before, _) = p.memory();

    // Memory, sampled throughout.
    let peak = Arc::new(Mutex::new(rss_before));
    let pid = p.pid();
    let sampler = {
        let (peak, stop) = (peak.clone(), stop.clone());
        tokio::spawn(async move {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
                if let Some(kib) = status
                    .lines()
                    .find(|l| l.starts_with("VmRSS:"))
                    .and_then(|l| l.split_whitespace().nth(1))
                    .and_then(|v| v.parse::<u64>().ok())
                {
                    let mut p = peak.lock().unwrap();
                    *p = (*p).max(kib);
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };

    // Readers that never read: a tiny receive buffer, a status request every 400 ms
    // (under the rate limit, so never idle), and not one byte read after the upgrade.
    // The server must give up on them (a write stalled for 10 s: dropped).
    let mut never = Vec::new();
    for i in 0..NEVER_READERS {
        let t = ticket(&qc, "default", &format!("never-{i}"), "never").await;
        let mut raw = Raw::open(port, &t, true).await;
        never.push(tokio::spawn(async move {
            let started = Instant::now();
            let mut rng = Rng(seed ^ (0x2000 + i as u64));
            while started.elapsed() < Duration::from_secs(120) {
                let mut o = Out { rng: &mut rng, bytes: Vec::new() };
                o.text("{\"type\":\"SERVERSTATUS_REQUEST\",\"payload\":{}}");
                if raw.w.write_all(&o.bytes).await.is_err() {
                    return Some(started.elapsed());
                }
                tokio::time::sleep(Duration::from_millis(400)).await;
            }
            None
        }));
    }

    // The hostile connections, CONCURRENCY at a time.
    let tally = Arc::new(Mutex::new(Tally::default()));
    let next = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let started = Instant::now();
    let mut workers = Vec::new();
    for _ in 0..CONCURRENCY {
        let (tally, next, qc) = (tally.clone(), next.clone(), qc.clone());
        workers.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= connections {
                    return;
                }
                let mut rng = Rng((seed ^ i.wrapping_mul(0x9E37_79B9_7F4A_7C15)) | 1);
                let kind = KINDS[rng.below(KINDS.len() as u64) as usize];
                let sc = script(kind, &mut rng);
                let t = ticket(&qc, "default", &format!("f-{i}"), "fz").await;
                let mut raw = Raw::open(port, &t, false).await;
                for w in &sc.writes {
                    // The server may hang up before reading it all.
                    if raw.w.write_all(w).await.is_err() {
                        break;
                    }
                }
                let mut seen = Seen::default();
                let end = raw.until_end(END_WITHIN, &mut seen).await;
                let mut verdict = judge(kind, &end);
                // Every ping read is answered, in order (the last ones may come after
                // the frame that ended the connection); all of them while it stays open.
                let pongs_ok = match kind {
                    // Random frames may hold pings of their own.
                    Kind::RandomBytes | Kind::RandomFrames => true,
                    Kind::FragmentsNeverFinished => seen.pongs == sc.pings,
                    _ => sc.pings.starts_with(&seen.pongs),
                };
                if verdict.is_ok() && !pongs_ok {
                    verdict = Err(format!("pongs {:?} for pings {:?}", seen.pongs, sc.pings));
                }
                if verdict.is_ok() && sc.wants_notice && seen.notices == 0 {
                    verdict = Err("no ERROR frame".into());
                }
                let mut t = tally.lock().unwrap();
                let e = t.by_kind.entry(kind).or_default();
                e.0 += 1;
                *e.1.entry(end_label(&end)).or_default() += 1;
                if let Err(why) = verdict {
                    t.failures.push(format!("connection {i} {kind:?}: {why}"));
                }
            }
        }));
    }
    for w in workers {
        w.await.unwrap();
    }
    let fuzz_secs = started.elapsed().as_secs_f64();
    println!("ws-fuzz: hostile connections done in {fuzz_secs:.1} s");
    println!("ws-fuzz: how the hostile connections ended, by kind:");
    for (kind, (n, ends)) in &tally.lock().unwrap().by_kind {
        let ends: Vec<String> = ends.iter().map(|(e, c)| format!("{e}: {c}")).collect();
        println!("  {kind:?}: {n} ({})", ends.join(", "));
    }
    let mut never_ended = Vec::new();
    for n in never {
        never_ended.push(n.await.unwrap());
    }
    let never_s: Vec<String> =
        never_ended.iter().map(|e| e.map_or("never".to_string(), |d| format!("{:.1} s", d.as_secs_f64()))).collect();
    println!("  never-reading clients dropped after: {}", never_s.join(", "));

    // The good sessions stop and must have received everything, in order.
    // Every message is on its way before the writers close.
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut sinks = Vec::new();
    for w in writers {
        sinks.push(w.await.unwrap());
    }
    sampler.await.unwrap();
    let sent: BTreeMap<String, u64> = goods.iter().map(|g| (g.nickname.clone(), *g.sent.lock().unwrap())).collect();
    for g in &goods {
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline {
            let complete = {
                let got = g.got.lock().unwrap();
                sent.iter().all(|(nick, n)| got.get(nick).map_or(0, |v| v.len() as u64) >= *n)
            };
            if complete {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let got = g.got.lock().unwrap();
        for (nick, n) in &sent {
            let want: Vec<u64> = (0..*n).collect();
            let have = got.get(nick).cloned().unwrap_or_default();
            if have != want {
                let missing: Vec<u64> = want.iter().filter(|n| !have.contains(n)).copied().collect();
                let ordered = have.windows(2).all(|w| w[0] < w[1]);
                panic!(
                    "seed {seed}: {} got {} of {n} messages from {nick} (missing {missing:?}, in order: {ordered}); \
                     its notices: {:?}",
                    g.nickname,
                    have.len(),
                    g.harm.lock().unwrap()
                );
            }
        }
        let harm = g.harm.lock().unwrap();
        assert!(harm.is_empty(), "seed {seed}: {} was harmed: {harm:?}", g.nickname);
    }
    for mut sink in sinks.into_iter().flatten() {
        let _ = sink.close().await;
    }
    for t in tasks {
        let _ = tokio::time::timeout(WAIT, t).await;
    }

    // Only the good sessions' leases were live until they closed; every hostile one is
    // gone; the server still serves a newcomer.
    assert!(p.alive(), "seed {seed}: chat-server died");
    wait_active(&qc, "default", 0).await;
    let t = ticket(&qc, "default", "after", "after").await;
    let (mut c, _) = Client::join(&game_url(&ws_base, &t, None)).await;
    c.say("still serving").await;
    c.wait_for("MESSAGE_RECEIVE", |p| p["message"] == "still serving").await;
    c.close().await;
    wait_active(&qc, "default", 0).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (rss_after, hwm) = p.memory();
    let rss_peak = (*peak.lock().unwrap()).max(hwm);

    let tally = tally.lock().unwrap();
    println!(
        "ws-fuzz: {connections} hostile connections in {fuzz_secs:.1} s ({CONCURRENCY} at a time); \
         {GOOD} good sessions sent {} messages, all received in order by all",
        sent.values().sum::<u64>()
    );
    println!(
        "ws-fuzz: chat-server VmRSS before {} MiB, peak {} MiB, after {} MiB",
        rss_before / 1024,
        rss_peak / 1024,
        rss_after / 1024
    );
    assert!(
        tally.failures.is_empty(),
        "seed {seed}: {} failures:\n{}",
        tally.failures.len(),
        tally.failures.join("\n")
    );
    assert!(never_ended.iter().all(|e| e.is_some()), "seed {seed}: a client that never reads was kept: {never_s:?}");
    // Bounded: a frame is never buffered past the 64 KiB protocol limit, so the
    // hostile connections at once (CONCURRENCY) cost a few MiB; allow generous slack for
    // the allocator, but far less than a leak of even 64 KiB per connection would show.
    assert!(rss_peak < rss_before + 128 * 1024, "seed {seed}: peak VmRSS {rss_peak} KiB from {rss_before} KiB");
    assert!(rss_after < rss_before + 64 * 1024, "seed {seed}: VmRSS after {rss_after} KiB from {rss_before} KiB");
}
