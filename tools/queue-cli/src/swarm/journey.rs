//! One virtual user's journey: enter, follow the position (push stream or polling),
//! abandon or claim, through outages in chaos runs (starting over when lost), and the
//! FIFO audit asked on each promotion.

use super::chat_session::chat_session;
use super::lanes::CodeAnswer;
use super::ledger::{Audit, Phase};
use super::{Plan, Shared};
use crate::api::{Api, ApiError, Polled, Via};
use crate::gate::Arrival;
use crate::outage::{self, Outage, OutageLog};
use queue_client::{Standing, Status};
use rand::Rng;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub(super) async fn journey(shared: Arc<Shared>, who: usize, plan: Plan, forwarded_for: Option<String>) {
    let outcome = walk(&shared, who, &plan, forwarded_for).await;
    shared.with(|l| {
        if let Err(e) = outcome {
            l.error(who, e);
        }
        l.people[who].phase = Phase::Done;
    });
}

/// Why a journey stopped before its end.
pub(super) enum Stop {
    /// A clear error: the user is done.
    Error(String),
    /// Lost with a failing service (chaos runs only): the user starts over.
    Lost(Outage, String),
}

impl From<String> for Stop {
    fn from(e: String) -> Stop {
        Stop::Error(e)
    }
}

impl From<&str> for Stop {
    fn from(e: &str) -> Stop {
        Stop::Error(e.to_string())
    }
}

async fn walk(shared: &Arc<Shared>, who: usize, plan: &Plan, forwarded_for: Option<String>) -> Result<(), String> {
    let mut api = shared.api(forwarded_for);
    if let Some(token) = &plan.token {
        api = api.with_token(token.clone(), None);
    }
    let nickname = format!("{}{who}", shared.cfg.nickname_prefix);
    let Some(log) = shared.cfg.outages.clone() else {
        return journey_once(shared, who, plan, &api, &nickname, None).await.map_err(|stop| match stop {
            Stop::Error(e) | Stop::Lost(_, e) => e,
        });
    };
    let mut round = 1;
    loop {
        // Each journey its own userId, chosen up front so that an entry sent again
        // after a lost answer moves the same person instead of entering a second one.
        let user_id = outage::random_user_id(&mut rand::rng());
        match journey_once(shared, who, plan, &api, &nickname, Some((&log, &user_id))).await {
            Ok(()) => return Ok(()),
            Err(Stop::Error(e)) => return Err(e),
            Err(Stop::Lost(what, e)) => {
                log.note(who, what);
                if round >= log.max_attempts {
                    return Err(format!("{e} (gave up after {round} journeys)"));
                }
                log.note(who, Outage::Reentered);
                shared.with(|l| {
                    let p = &mut l.people[who];
                    p.generation += 1;
                    p.steadfast = false;
                    p.phase = Phase::Entering;
                    (p.eta_at_entry, p.eta_at_rank10) = (None, None);
                });
                round += 1;
            }
        }
    }
}

/// A pause of 250-750 ms before trying again.
pub(super) async fn back_off() {
    let ms = rand::rng().random_range(250..750);
    tokio::time::sleep(Duration::from_millis(ms)).await;
}

async fn journey_once(
    shared: &Arc<Shared>,
    who: usize,
    plan: &Plan,
    api: &Api,
    nickname: &str,
    chaos: Option<(&Arc<OutageLog>, &str)>,
) -> Result<(), Stop> {
    let cfg = &shared.cfg;
    if let Some(gate) = &shared.gate {
        let sent = Instant::now();
        if let Arrival::Straight { user, token, sent_us } =
            gate.arrive(&**shared, &cfg.queue, api.forwarded_for()).await?
        {
            // In on the first request (nobody waited, a slot was free): entered and
            // admitted at once, as an entry that answers PROMOTED.
            let now = Instant::now();
            let audits = shared.with(|l| {
                let p = &mut l.people[who];
                p.entry_sent = sent;
                p.entry_recv = Some(now);
                p.user_id = user.clone();
                p.phase = Phase::Waiting;
                l.report.entered += 1;
                l.report.admitted_at_once += 1;
                l.promoted(who, now)
            });
            start_audits(shared, who, audits);
            return Ok(gate
                .stay_after_pass(&**shared, who, cfg.seed, &cfg.queue, (&user, &token, sent_us), plan.stay)
                .await?);
        }
    }
    let entry_sent = Instant::now();
    let user_id = chaos.map(|(_, id)| id.to_string());
    let mut code = plan.code.clone();
    let entered = loop {
        let r = api
            .patiently(shared.deadline, || {
                let api = api.clone();
                let nickname = nickname.to_string();
                let user_id = user_id.clone();
                let code = code.clone();
                let shared = shared.clone();
                async move {
                    let r = api.enter_with(&nickname, user_id.as_deref(), code.as_deref()).await;
                    if matches!(r, Err(ApiError::RateLimited(_))) {
                        shared.with(|l| l.report.rate_limited += 1);
                    }
                    r
                }
            })
            .await;
        match (r, chaos) {
            (Err(e), Some((log, _))) if e.is_outage() && Instant::now() < shared.deadline => {
                log.note(who, Outage::EntryRetried);
                back_off().await;
            }
            (r, _) => {
                if let Some(c) = &code {
                    let answer = match &r {
                        Ok(_) => CodeAnswer::Accepted,
                        Err(ApiError::Refused(status @ 400..=499, text)) if *status != 429 => {
                            CodeAnswer::Refused(*status, text.clone())
                        }
                        Err(_) => CodeAnswer::Unanswered,
                    };
                    let refused = matches!(&answer, CodeAnswer::Refused(..));
                    shared.with(|l| l.code_answer(who, c, answer));
                    if refused {
                        // Turned away at the presale door: joins the general line instead.
                        code = None;
                        continue;
                    }
                }
                break r.map_err(|e| format!("entry: {e}"))?;
            }
        }
    };
    let now = Instant::now();
    shared.with(|l| {
        let lane = l.entered_lane(who, entered.lane.as_deref(), code.is_some());
        let p = &mut l.people[who];
        p.entry_sent = entry_sent;
        p.entry_recv = Some(now);
        p.user_id = entered.user_id.clone();
        p.phase = Phase::Waiting;
        p.lane = lane;
        p.last_waiting = (entered.status == Status::Waiting).then_some(now);
        p.surely_waiting_at = (entered.status == Status::Waiting).then_some(entry_sent);
        if entered.status == Status::Waiting {
            p.eta_at_entry = Some((now, entered.estimated_wait_seconds));
            if entered.rank <= 10 {
                p.eta_at_rank10 = p.eta_at_entry;
            }
            l.eta_shown(who, now, entered.estimated_wait_seconds, true);
        }
        l.report.entered += 1;
    });
    if let (true, Some(token)) = (plan.second_tab, &plan.token) {
        second_tab(shared, who, api, token, nickname, code.as_deref(), &entered).await;
    }

    let log = chaos.map(|(log, _)| log);
    let standing = match entered.status {
        Status::Promoted => {
            shared.with(|l| l.report.admitted_at_once += 1);
            entered
        }
        Status::Waiting => match wait(shared, who, plan, api, &entered, log).await? {
            Some(s) => s,
            None => return Ok(()), // abandoned
        },
        other => return Err(format!("entry answered {}", other.as_str()).into()),
    };
    if standing.status != Status::Promoted {
        if standing.status == Status::Unknown {
            shared.with(|l| l.report.dropped += 1);
            let e = "dropped from the line while following it".to_string();
            return Err(if chaos.is_some() { Stop::Lost(Outage::Dropped, e) } else { Stop::Error(e) });
        }
        return Err(format!("expected a ticket, got {}", standing.status.as_str()).into());
    }
    let promoted_at = Instant::now();
    start_audits(shared, who, shared.with(|l| l.promoted(who, promoted_at)));
    let ticket = standing.ticket_id.ok_or("promoted without a ticket")?;
    if let Some(gate) = &shared.gate {
        let (user, stay) = (&standing.user_id, plan.stay);
        return Ok(gate
            .visit(&**shared, who, cfg.seed, &cfg.queue, user, &ticket, plan.race, plan.replay, stay)
            .await?);
    }
    chat_session(shared, who, plan, nickname, &ticket, log, promoted_at).await
}

/// Follows the place in line; None when the user abandons first.
pub(super) async fn wait(
    shared: &Arc<Shared>,
    who: usize,
    plan: &Plan,
    api: &Api,
    entered: &Standing,
    chaos: Option<&Arc<OutageLog>>,
) -> Result<Option<Standing>, String> {
    let mut last_rank = entered.rank;
    let mut last_waiting = None;
    // Someone entering an earlier lane goes ahead of a later lane's people: their
    // rank may rise. Nobody goes ahead of the first lane's.
    let (first_lane, entry_recv) = shared.with(|l| {
        let p = &l.people[who];
        (p.lane.is_none_or(|lane| lane == 0), p.entry_recv.unwrap_or_else(Instant::now))
    });
    let (mut previous, mut surely_waiting_at) = (entry_recv, None);
    let on_update = |s: &Standing, via: Via| {
        let at = Instant::now();
        last_waiting = Some(at);
        // Every update was asked for after the entry's answer; a poll, also after the
        // update before it: the server still had this person WAITING then.
        let asked_after = if via == Via::Poll { previous } else { entry_recv };
        surely_waiting_at = Some(asked_after.max(surely_waiting_at.unwrap_or(entry_recv)));
        previous = at;
        if s.status == Status::Waiting {
            shared.with(|l| {
                l.eta_shown(who, at, s.estimated_wait_seconds, false);
                if s.rank <= 10 {
                    l.people[who].eta_at_rank10.get_or_insert((at, s.estimated_wait_seconds));
                }
            });
        }
        if first_lane && s.rank > last_rank {
            let (was, now) = (last_rank, s.rank);
            shared.with(|l| {
                l.report.rank_rises += 1;
                l.report.fifo_inversions += 1;
                l.error(who, format_args!("rank rose from {was} to {now}"));
            });
        }
        last_rank = s.rank;
    };
    let (user, every, deadline) = (&entered.user_id, shared.cfg.poll_every, shared.deadline);
    let follow = async move {
        match chaos {
            Some(log) => follow_through_outages(who, api, user, plan.polling, every, deadline, log, on_update).await,
            None => api.follow(user, plan.polling, every, deadline, on_update).await,
        }
    };
    let result = match plan.abandon_after {
        None => follow.await,
        Some(after) => {
            tokio::select! {
                r = follow => r,
                _ = tokio::time::sleep(after) => {
                    // Either leaves the line, or closes the tab: the stream or polling
                    // just stops, and the queue drops the silent waiter after abandon_after.
                    let left = if !plan.polite {
                        false
                    } else {
                        match (api.leave(&entered.user_id).await, chaos) {
                            (Ok(left), _) => left,
                            // The click went nowhere: the page is closed instead.
                            (Err(e), Some(log)) if e.is_outage() => {
                                log.note(who, Outage::LeaveFailed);
                                false
                            }
                            (Err(e), _) => return Err(format!("leaving the line: {e}")),
                        }
                    };
                    shared.with(|l| {
                        l.report.abandoned += 1;
                        l.report.abandoned_by_leaving += u64::from(left);
                    });
                    return Ok(None);
                }
            }
        }
    };
    if let Some(at) = last_waiting {
        shared.with(|l| {
            let p = &mut l.people[who];
            p.last_waiting = Some(at);
            p.surely_waiting_at = p.surely_waiting_at.max(surely_waiting_at);
        });
    }
    result.map(Some).map_err(|e| format!("following the line: {e}"))
}

/// Follows the place in line through outages (chaos runs): a push stream that cannot
/// be opened or breaks is noted, the status polled once, and the stream opened again
/// (polling users poll throughout); failed polls are noted and tried again, until
/// `deadline`.
#[allow(clippy::too_many_arguments)]
async fn follow_through_outages(
    who: usize,
    api: &Api,
    user: &str,
    polling_only: bool,
    poll_every: Duration,
    deadline: Instant,
    log: &OutageLog,
    mut on_update: impl FnMut(&Standing, Via),
) -> Result<Standing, ApiError> {
    let mut last_error = None;
    while Instant::now() < deadline {
        if !polling_only {
            match api.stream(user, deadline, &mut on_update).await {
                Ok(Some(done)) => return Ok(done),
                Ok(None) | Err(_) => log.note(who, Outage::StreamLost),
            }
        }
        match api.poll_once(user, &mut on_update).await {
            Polled::Done(s) => return Ok(s),
            Polled::Waiting => last_error = None,
            Polled::RateLimited => continue,
            Polled::Failed(e) => {
                log.note(who, Outage::PollFailed);
                last_error = Some(e);
            }
        }
        tokio::time::sleep(if polling_only { poll_every } else { poll_every.min(Duration::from_millis(500)) }).await;
    }
    Err(last_error.unwrap_or_else(|| ApiError::Transport("gave up waiting: deadline passed".into())))
}

/// Asks the person `audit` names (who surely entered before `who`, or before its
/// promotion from a later lane) where it stands, after `who` was seen promoted: still
/// WAITING means the line was jumped. Void when that person started its journey over
/// meanwhile (chaos runs).
/// Starts the FIFO audits the ledger asked for on `who`'s promotion.
fn start_audits(shared: &Arc<Shared>, who: usize, audits: Vec<Audit>) {
    for audit in audits {
        tokio::spawn(audit_fifo(shared.clone(), who, audit));
    }
}

async fn audit_fifo(shared: Arc<Shared>, who: usize, audit: Audit) {
    let mut api = shared.api(audit.forwarded_for.clone());
    if let Some(token) = &audit.token {
        api = api.with_token(token.clone(), None);
    }
    let Ok(s) = api.status(&audit.user).await else { return };
    shared.with(|l| {
        if l.people[audit.ahead].generation != audit.generation {
            return;
        }
        let waiting = (s.status == Status::Waiting).then_some(s.rank);
        if audit.earlier_lane {
            l.lane_audited(who, &audit.user, waiting);
            return;
        }
        l.report.fifo_audits += 1;
        if let Some(rank) = waiting {
            l.report.fifo_inversions += 1;
            l.error(
                who,
                format_args!("promoted while {}, who entered earlier, still waits at rank {rank}", audit.user),
            );
        }
    });
}

/// The same account opens a second tab (or device): its entry, with the same token and
/// code, must find the first tab's place ([`super::lanes`]).
async fn second_tab(
    shared: &Arc<Shared>,
    who: usize,
    api: &Api,
    token: &str,
    nickname: &str,
    code: Option<&str>,
    first: &Standing,
) {
    let tab = api.clone().with_token(token.to_string(), shared.cfg.access.identity_cookie.clone());
    let r = tab.patiently(shared.deadline, || tab.enter_with(nickname, None, code)).await;
    shared.with(|l| match r {
        Ok(second) => l.second_tab(who, first, &second),
        Err(e) => l.error(who, format_args!("second tab: {e}")),
    });
}
