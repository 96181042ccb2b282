//! One person's journey, as seed 000's chat client makes it: enter, watch the place in
//! line, then chat with the ticket, typing lines on stdin. Everything it prints goes to
//! `out`, one event per line, so scripts can follow it too.

use crate::api::{Api, Via};
use crate::chat::{self, Handshake, Incoming};
use queue_client::Status;
use std::io::Write;
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufRead, AsyncBufReadExt};

pub struct JoinConfig {
    pub api: String,
    pub chat: String,
    pub queue: String,
    pub nickname: String,
    pub polling: bool,
    pub poll_every: Duration,
    pub max_wait: Duration,
}

/// Runs the journey; returns when the person leaves (`/quit`, Ctrl+C, or end of input
/// once inside; `/quit` or Ctrl+C while waiting gives the place in line back) or the
/// server ends the session. Err carries what went wrong, for the exit message.
pub async fn run(cfg: JoinConfig, input: impl AsyncBufRead + Unpin, out: &mut impl Write) -> Result<(), String> {
    // Ctrl+C is listened for from the start: a handler installed only when first
    // awaited would let one that comes early (right after the first line printed)
    // kill the process without giving the place back.
    let mut interrupt = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
        .map_err(|e| format!("listening for Ctrl+C: {e}"))?;
    let api = Api::new(Api::http_client(), &cfg.api, &cfg.queue, None);
    let deadline = Instant::now() + cfg.max_wait;
    let entered = api.patiently(deadline, || api.enter(&cfg.nickname)).await.map_err(|e| format!("entry: {e}"))?;
    let say = |out: &mut dyn Write, line: String| {
        let _ = writeln!(out, "{line}");
        let _ = out.flush();
    };
    let eta = |s: Option<u64>| s.map(|s| format!(" (about {s} s)")).unwrap_or_default();
    say(out, format!("entered {} as {} (userId {})", cfg.queue, cfg.nickname, entered.user_id));
    let mut lines = input.lines();
    let standing = if entered.status == Status::Waiting {
        say(out, format!("waiting: rank {}{}", entered.rank, eta(entered.estimated_wait_seconds)));
        let mut last = (entered.rank, entered.estimated_wait_seconds);
        let mut fell_back = false;
        let followed = {
            let follow = api.follow(&entered.user_id, cfg.polling, cfg.poll_every, deadline, |s, via| {
                if via == Via::Poll && !cfg.polling && !fell_back {
                    fell_back = true;
                    say(out, "push updates unavailable: polling".into());
                }
                if (s.rank, s.estimated_wait_seconds) != last {
                    last = (s.rank, s.estimated_wait_seconds);
                    say(out, format!("waiting: rank {}{}", s.rank, eta(s.estimated_wait_seconds)));
                }
            });
            tokio::pin!(follow);
            // `/quit` or Ctrl+C while waiting gives the place back; other input waits.
            let mut input_open = true;
            loop {
                tokio::select! {
                    r = &mut follow => break Some(r),
                    line = lines.next_line(), if input_open => match line {
                        Ok(Some(l)) if l.trim() == "/quit" => break None,
                        Ok(Some(_)) => {}
                        Ok(None) | Err(_) => input_open = false,
                    },
                    _ = interrupt.recv() => break None,
                }
            }
        };
        match followed {
            Some(r) => r.map_err(|e| format!("following the line: {e}"))?,
            None => {
                let gone = api.leave(&entered.user_id).await.map_err(|e| format!("leaving the line: {e}"))?;
                say(
                    out,
                    if gone { "left the line".into() } else { "left the line (the place had already lapsed)".into() },
                );
                return Ok(());
            }
        }
    } else {
        entered
    };
    let ticket = match (standing.status, standing.ticket_id) {
        (Status::Promoted, Some(t)) => t,
        (Status::Unknown, _) => return Err("no longer in line (dropped or left)".into()),
        (other, _) => return Err(format!("unexpected standing {}", other.as_str())),
    };
    say(out, format!("admitted: ticket {ticket}"));
    let mut ws = match chat::connect(&cfg.chat, &cfg.queue, &ticket).await {
        Handshake::Admitted(ws) => *ws,
        Handshake::Refused(code, text) => return Err(format!("chat refused the ticket: {code} {text}")),
        Handshake::Failed(e) => return Err(format!("chat unreachable: {e}")),
    };
    say(out, format!("connected to chat as {}; type a message and press Enter (/status, /quit)", cfg.nickname));
    loop {
        tokio::select! {
            incoming = chat::next(&mut ws) => match incoming {
                Incoming::Frame(f) => {
                    if let Some(line) = chat::describe(&f) {
                        say(out, line);
                    }
                }
                Incoming::Closed(c) => {
                    let why = c.map(|(code, reason)| format!("{code} {reason}")).unwrap_or_else(|| "connection lost".into());
                    return Err(format!("the chat server ended the session: {why}"));
                }
            },
            _ = interrupt.recv() => break,
            line = lines.next_line() => {
                let msg = match line {
                    Ok(Some(l)) => l,
                    Ok(None) | Err(_) => break,
                };
                let msg = msg.trim();
                let frame = match msg {
                    "" => continue,
                    "/quit" => break,
                    "/status" => chat::frame("SERVERSTATUS_REQUEST", serde_json::json!({})),
                    text => chat::say(text),
                };
                if !chat::send(&mut ws, frame).await {
                    return Err("the chat connection is gone".into());
                }
            }
        }
    }
    chat::leave(ws).await;
    say(out, "left the chat".into());
    Ok(())
}
