//! One WebSocket session, from the upgrade to the lease given back.
//!
//! A single task owns the socket: it reads the client's frames, writes what the
//! room's feed brings, and watches the idle timer, the lease and the shutdown flag.
//! Its end decides the close code:
//!
//! | why | close | SESSION.END |
//! | --- | --- | --- |
//! | client closed or vanished | (theirs) | yes |
//! | no frame for `--idle-timeout-secs` | 1000 `idle` | yes |
//! | a frame over `--max-frame-bytes` | 1009 `message too big` | yes |
//! | more than 50 frames in a row over the rate | 1008 `too many messages` | yes |
//! | heartbeat found the lease gone | 1008 `session lease lost` | no (nothing to end) |
//! | shutdown | 1001 `server shutting down` | yes |
//! | a write stalled for 10 s | (none) | yes |

use crate::frames::{self, Request};
use crate::lease::LeaseGuard;
use crate::limit::{FrameLimit, Verdict};
use crate::room::{Kick, Membership};
use crate::{bus, presence, AppState, Config};
use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use queue_client::Claim;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::broadcast;
use tokio::sync::broadcast::error::{RecvError, TryRecvError};
use tokio::time::{sleep, timeout, Instant};
use tokio_tungstenite::tungstenite::protocol::frame::coding::{CloseCode, Data, OpCode};
use tokio_tungstenite::tungstenite::protocol::frame::{CloseFrame, Frame};
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::{Error as WsError, Message, Utf8Bytes};
use tokio_tungstenite::WebSocketStream;

/// A write that takes longer than this means the client stopped reading.
const SEND_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the closing handshake may take.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(2);
/// Messages larger than this go out in fragments of this size, so that no socket's
/// write buffer grows to the size of the largest message it ever sent.
const FRAGMENT: usize = 2 * 1024;
/// tungstenite's buffers: writes go out once a kilobyte is queued (and at each
/// flush); reads take up to 1 KiB at a time. Small, because sessions are many and
/// frames small.
const WRITE_BUFFER: usize = 1024;
const READ_BUFFER: usize = 1024;
/// Most frames written with one flush.
const BATCH: u64 = 64;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Exit {
    Gone,
    Idle,
    TooBig,
    Flood,
    LeaseLost,
    Shutdown,
    Stalled,
}

impl Exit {
    fn close_frame(self) -> Option<CloseFrame> {
        let (code, reason) = match self {
            Exit::Gone | Exit::Stalled => return None,
            Exit::Idle => (CloseCode::Normal, "idle"),
            Exit::TooBig => (CloseCode::Size, "message too big"),
            Exit::Flood => (CloseCode::Policy, "too many messages"),
            Exit::LeaseLost => (CloseCode::Policy, "session lease lost"),
            Exit::Shutdown => (CloseCode::Away, "server shutting down"),
        };
        Some(CloseFrame { code, reason: Utf8Bytes::from_static(reason) })
    }
}

struct Conn<S> {
    ws: WebSocketStream<S>,
    state: Arc<AppState>,
    /// The client asked for the additions to seed 000 (`presence=1`).
    extended: bool,
}

impl<S: AsyncRead + AsyncWrite + Unpin> Conn<S> {
    /// Queues one text message without flushing; a large one as a first frame and
    /// continuations, each cut at a character boundary.
    async fn queue(&mut self, text: Utf8Bytes) -> Result<(), WsError> {
        if text.len() <= FRAGMENT {
            return self.ws.feed(Message::Text(text)).await;
        }
        let text = Bytes::from(text);
        let mut start = 0;
        while start < text.len() {
            let mut end = (start + FRAGMENT).min(text.len());
            while end < text.len() && (text[end] & 0xC0) == 0x80 {
                end -= 1;
            }
            let opcode = OpCode::Data(if start == 0 { Data::Text } else { Data::Continue });
            self.ws.feed(Message::Frame(Frame::message(text.slice(start..end), opcode, end == text.len()))).await?;
            start = end;
        }
        Ok(())
    }

    /// Sends `first` and, given the room's feed, whatever else the feed already
    /// holds (up to [`BATCH`] frames), with one flush: a busy room costs one write
    /// per batch rather than per frame. Err when the client is gone or stopped
    /// reading.
    async fn send(&mut self, first: Utf8Bytes, feed: Option<&mut broadcast::Receiver<Utf8Bytes>>) -> Result<(), ()> {
        let metrics = self.state.metrics.clone();
        let extended = self.extended;
        let work = async {
            let mut sent = 0;
            if extended || !frames::is_presence(&first) {
                self.queue(first).await?;
                sent += 1;
            }
            if let Some(feed) = feed {
                let mut looked = 1;
                while looked < BATCH {
                    let next = match feed.try_recv() {
                        Ok(frame) if !extended && frames::is_presence(&frame) => {
                            looked += 1;
                            continue;
                        }
                        Ok(frame) => frame,
                        Err(TryRecvError::Lagged(n)) => {
                            metrics.lagged.increment(n);
                            Utf8Bytes::from(lagged(extended, n))
                        }
                        Err(_) => break,
                    };
                    self.queue(next).await?;
                    sent += 1;
                    looked += 1;
                }
            }
            if sent == 0 {
                return Ok(0);
            }
            self.ws.flush().await?;
            Ok::<u64, WsError>(sent)
        };
        match timeout(SEND_TIMEOUT, work).await {
            Ok(Ok(sent)) => {
                metrics.messages_sent.increment(sent);
                Ok(())
            }
            _ => Err(()),
        }
    }

    async fn send_str(&mut self, text: String) -> Result<(), ()> {
        self.send(Utf8Bytes::from(text), None).await
    }
}

/// A notice for this client alone: `ERROR` for a client that asked for the
/// additions, seed 000's `SYSTEM_MESSAGE_RECEIVE` for the others.
fn notice(extended: bool, message: &str) -> String {
    if extended {
        frames::error(message)
    } else {
        frames::system(frames::now_ms(), message)
    }
}

/// The notice telling a slow client what it missed.
fn lagged(extended: bool, n: u64) -> String {
    notice(extended, &format!("{n} room messages were skipped: this connection is too slow"))
}

/// The tungstenite settings of a session: small buffers, and a protocol limit well
/// above `--max-frame-bytes`, so that a frame over the limit is still read and
/// answered with a 1009 close.
pub fn ws_config(config: &Config) -> WebSocketConfig {
    let limit = (config.max_frame_bytes as usize * 16).clamp(64 * 1024, 16 * 1024 * 1024);
    WebSocketConfig::default()
        .read_buffer_size(READ_BUFFER)
        .write_buffer_size(WRITE_BUFFER)
        .max_message_size(Some(limit))
        .max_frame_size(Some(limit))
}

pub async fn run<S>(
    ws: WebSocketStream<S>,
    state: Arc<AppState>,
    queue: String,
    claim: Claim,
    lease: LeaseGuard,
    extended: bool,
) where
    S: AsyncRead + AsyncWrite + Unpin,
{
    // The Valkey calls of the rare steps (announce, greet, answer, end) are boxed:
    // inlined, their futures would enlarge every resting session's state.
    let metrics = state.metrics.clone();
    metrics.connections.increment(1);
    // Join the local feed before announcing and before reading the snapshot: every
    // change after the snapshot's read then arrives as a delta.
    let mut member = state.rooms.join(&queue, &claim.user_id);
    Box::pin(crate::bus::join_room(&state, &queue)).await;
    tracing::info!(queue, user = claim.user_id, nickname = claim.nickname, "joined");
    announce(&state, &queue, &claim, true);
    let mut conn = Conn { ws, state: state.clone(), extended };
    let greeted = if extended { Box::pin(greet(&mut conn, &queue)).await } else { Ok(()) };
    let exit = match greeted {
        Ok(()) => serve(&mut conn, &mut member, &queue, &claim).await,
        Err(()) => Exit::Gone,
    };
    metrics.disconnections.increment(1);
    if exit == Exit::Idle {
        metrics.idle_disconnects.increment(1);
    }
    if let Some(frame) = exit.close_frame() {
        let _ = timeout(CLOSE_TIMEOUT, conn.ws.send(Message::Close(Some(frame)))).await;
    }
    if exit == Exit::LeaseLost {
        lease.release();
    } else {
        Box::pin(lease.end()).await;
    }
    if exit != Exit::Stalled {
        // Until the client answers the close (or hangs up); this also flushes our
        // answer to a close the client started.
        let _ = timeout(CLOSE_TIMEOUT, async { while let Some(Ok(_)) = conn.ws.next().await {} }).await;
    }
    drop(conn);
    drop(member);
    announce(&state, &queue, &claim, false);
    tracing::info!(queue, user = claim.user_id, reason = ?exit, "left");
}

/// Notes that the user joined or left: the room (every instance) hears it with the
/// other changes of this presence tick ([`presence::tell_loop`]).
fn announce(state: &AppState, queue: &str, claim: &Claim, joined: bool) {
    let person = frames::Person { user_id: claim.user_id.clone(), nickname: claim.nickname.clone() };
    state.rooms.note(queue, joined, person);
}

/// The first frame for a client that asked for presence: who is in the room.
async fn greet<S: AsyncRead + AsyncWrite + Unpin>(conn: &mut Conn<S>, queue: &str) -> Result<(), ()> {
    let people = match conn.state.store.client().await {
        Some(client) => presence::snapshot(&client, queue, frames::now_ms()).await.map_err(|e| e.to_string()),
        None => Err("not connected".into()),
    };
    match people {
        Ok(people) => conn.send_str(frames::presence_snapshot(&people)).await,
        Err(e) => {
            tracing::warn!(queue, error = %e, "presence snapshot unavailable");
            conn.send_str(frames::error("the presence list is unavailable right now")).await
        }
    }
}

async fn serve<S: AsyncRead + AsyncWrite + Unpin>(
    conn: &mut Conn<S>,
    member: &mut Membership,
    queue: &str,
    claim: &Claim,
) -> Exit {
    let state = conn.state.clone();
    let config = &state.config;
    let metrics = &state.metrics;
    let mut shutdown = state.shutdown.clone();
    let stopping = crate::stopped(&mut shutdown);
    tokio::pin!(stopping);
    let mut limit = FrameLimit::new(config.messages_per_second, config.message_burst, Instant::now().into_std());
    // One timer per session, moved on by each client frame (not one per loop turn).
    let idle = sleep(config.idle_timeout);
    tokio::pin!(idle);
    loop {
        tokio::select! {
            _ = &mut stopping => return Exit::Shutdown,
            Some(Kick::LeaseLost) = member.kicks.recv() => return Exit::LeaseLost,
            _ = &mut idle => return Exit::Idle,
            heard = member.feed.recv() => {
                let sent = match heard {
                    Ok(frame) => conn.send(frame, Some(&mut member.feed)).await,
                    Err(RecvError::Lagged(n)) => {
                        metrics.lagged.increment(n);
                        conn.send_str(lagged(conn.extended, n)).await
                    }
                    Err(RecvError::Closed) => return Exit::Shutdown,
                };
                if sent.is_err() {
                    return Exit::Stalled;
                }
            }
            msg = conn.ws.next() => {
                let (size, text) = match msg {
                    Some(Ok(Message::Text(t))) => (t.len(), Some(t)),
                    Some(Ok(Message::Binary(b))) => (b.len(), None),
                    Some(Ok(Message::Close(_))) | None => return Exit::Gone,
                    // Pings are answered by tungstenite; they do not count as activity.
                    Some(Ok(_)) => continue,
                    Some(Err(WsError::Capacity(_))) => {
                        metrics.oversized.increment(1);
                        return Exit::TooBig;
                    }
                    Some(Err(e)) => {
                        tracing::debug!(error = %e, "websocket read failed");
                        return Exit::Gone;
                    }
                };
                metrics.messages_received.increment(1);
                metrics.observe_size(size);
                if size > config.max_frame_bytes as usize {
                    metrics.oversized.increment(1);
                    return Exit::TooBig;
                }
                let now = Instant::now();
                idle.as_mut().reset(now + config.idle_timeout);
                match limit.check(now.into_std()) {
                    Verdict::Accept => {}
                    Verdict::Drop => {
                        metrics.rate_limited.increment(1);
                        let why = format!(
                            "too many messages: at most {} per second (bursts of {}); this one was dropped",
                            config.messages_per_second, config.message_burst
                        );
                        if conn.send_str(notice(conn.extended, &why)).await.is_err() {
                            return Exit::Stalled;
                        }
                        continue;
                    }
                    Verdict::Close => {
                        metrics.rate_limited.increment(1);
                        return Exit::Flood;
                    }
                }
                let extended = conn.extended;
                let reply = match text {
                    Some(text) => Box::pin(answer(&state, queue, claim, &text, extended)).await,
                    None => {
                        metrics.malformed.increment(1);
                        Some(notice(extended, "binary frames are not supported: send JSON text frames"))
                    }
                };
                if let Some(reply) = reply {
                    if conn.send_str(reply).await.is_err() {
                        return Exit::Stalled;
                    }
                }
            }
        }
    }
}

/// Acts on one client frame; the reply for this client alone, if any (broadcasts
/// come back through the room's feed like everyone else's).
async fn answer(state: &AppState, queue: &str, claim: &Claim, text: &str, extended: bool) -> Option<String> {
    match frames::parse(text) {
        Ok(Request::Send(message)) => {
            let frame = frames::chat(frames::now_ms(), &claim.nickname, &message);
            match bus::publish(state, queue, &frame).await {
                Ok(()) => None,
                Err(e) => {
                    tracing::warn!(queue, error = %e, "message not delivered");
                    Some(notice(extended, "the message could not be delivered: the room is unavailable; try again"))
                }
            }
        }
        Ok(Request::Status) => {
            let info = match state.store.client().await {
                Some(client) => client.info(queue).await.ok(),
                None => None,
            };
            // Without Valkey, the last count known (or who is connected here).
            Some(frames::server_status(state.rooms.client_count(queue, info.map(|i| i.active))))
        }
        Err(why) => {
            state.metrics.malformed.increment(1);
            Some(notice(extended, &why))
        }
    }
}
