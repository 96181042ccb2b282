//! An admitted user's time in the chat: the handshake with the ticket (twice at once
//! for racers), the messages, leaving, and the used ticket tried again.

use super::journey::{back_off, Stop};
use super::ledger::Phase;
use super::{Plan, Shared};
use crate::chat::{self, Handshake, Incoming};
use crate::outage::{Outage, OutageLog};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a chaos run's user waits for one handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Whether a failed handshake is a server's trouble a person would retry.
fn handshake_outage(h: &Handshake) -> bool {
    match h {
        Handshake::Admitted(_) => false,
        Handshake::Refused(code, _) => *code == 1013 || (500..=599).contains(code),
        Handshake::Failed(_) => true,
    }
}

#[allow(clippy::too_many_arguments)]
pub(super) async fn chat_session(
    shared: &Arc<Shared>,
    who: usize,
    plan: &Plan,
    nickname: &str,
    ticket: &str,
    chaos: Option<&Arc<OutageLog>>,
    promoted_at: Instant,
) -> Result<(), Stop> {
    let cfg = &shared.cfg;
    let attempts = if plan.race { 2 } else { 1 };
    let connect = || async {
        match chaos {
            None => chat::connect(&cfg.chat, &cfg.queue, ticket).await,
            Some(_) => tokio::time::timeout(HANDSHAKE_TIMEOUT, chat::connect(&cfg.chat, &cfg.queue, ticket))
                .await
                .unwrap_or_else(|_| Handshake::Failed("handshake timed out".into())),
        }
    };
    if plan.race {
        shared.with(|l| l.report.claim_races += 1);
    }
    let (mut sockets, refusals) = loop {
        let handshakes = futures_util::future::join_all((0..attempts).map(|_| connect())).await;
        let all_outages = handshakes.iter().all(handshake_outage);
        let mut sockets = Vec::new();
        let mut refusals = Vec::new();
        for h in handshakes {
            match h {
                Handshake::Admitted(ws) => sockets.push(ws),
                Handshake::Refused(code, text) => refusals.push(format!("{code} {text}")),
                Handshake::Failed(e) => refusals.push(e),
            }
        }
        shared.with(|l| {
            if sockets.len() > 1 {
                l.report.double_claims += sockets.len() as u64 - 1;
                l.error(who, "one ticket opened two sessions at once");
            }
        });
        match chaos {
            // chat-server down or without Valkey: try again while the ticket lives.
            Some(log) if all_outages && Instant::now() < promoted_at + log.claim_for => {
                log.note(who, Outage::ClaimRetried);
                back_off().await;
            }
            _ => break (sockets, refusals),
        }
    };
    // Every session past the first (none when every handshake was refused).
    for extra in sockets.split_off(sockets.len().min(1)) {
        chat::leave(*extra).await;
    }
    let Some(ws) = sockets.pop() else {
        shared.with(|l| {
            l.report.claim_refused += 1;
            l.release(Instant::now());
        });
        let e = format!("the ticket was refused: {}", refusals.join("; "));
        return Err(if chaos.is_some() { Stop::Lost(Outage::TicketLost, e) } else { Stop::Error(e) });
    };
    shared.with(|l| {
        l.report.admitted += 1;
        l.people[who].phase = Phase::InChat;
    });

    let mut ws = *ws;
    let started = Instant::now();
    let end = started + plan.stay;
    let mut sent = 0u32;
    let gap = plan.stay / (cfg.messages + 1);
    let mut lost = None;
    loop {
        let next_send = started + gap * (sent + 1);
        let wake = if sent < cfg.messages { next_send.min(end) } else { end };
        tokio::select! {
            incoming = chat::next(&mut ws) => match incoming {
                Incoming::Frame(f) => {
                    if f.kind == "MESSAGE_RECEIVE" && f.payload["nickname"] == nickname {
                        shared.with(|l| l.report.messages_echoed += 1);
                    }
                }
                Incoming::Closed(c) => {
                    lost = Some(c);
                    break;
                }
            },
            _ = tokio::time::sleep_until(wake.into()) => {
                if Instant::now() >= end {
                    break;
                }
                sent += 1;
                if chat::send(&mut ws, chat::say(&format!("hello from {nickname} #{sent}"))).await {
                    shared.with(|l| l.report.messages_sent += 1);
                }
            }
        }
    }
    shared.with(|l| l.release(Instant::now()));
    if let Some(c) = lost {
        let e = format!("the chat session was closed by the server: {c:?}");
        return Err(if chaos.is_some() { Stop::Lost(Outage::SessionLost, e) } else { Stop::Error(e) });
    }
    chat::leave(ws).await;
    shared.with(|l| l.report.left += 1);

    if plan.replay {
        match connect().await {
            Handshake::Admitted(ws) => {
                shared.with(|l| {
                    l.report.double_claims += 1;
                    l.error(who, "a used ticket opened a second session");
                });
                chat::leave(*ws).await;
            }
            Handshake::Refused(401 | 409, _) => shared.with(|l| l.report.reuse_refused += 1),
            // A server in trouble admitted nobody: nothing to audit (chaos runs).
            h if chaos.is_some() && handshake_outage(&h) => {}
            Handshake::Refused(code, text) => {
                return Err(format!("reusing the ticket: unexpected {code} {text}").into())
            }
            Handshake::Failed(e) => return Err(format!("reusing the ticket: {e}").into()),
        }
    }
    Ok(())
}
