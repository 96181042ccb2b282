//! The virtual users and the promoter, every call recorded as the client saw it.
//!
//! Each user, over and over until the run stops: enters, polls its standing every
//! ~200 ms (sometimes leaving the line instead), and once promoted claims its ticket
//! with a holder of its own (retrying an unknown claim with the same holder; a
//! quarter of the time a second tab claims the same ticket with another holder, at
//! once or up to 4 s later, which must be refused), heartbeats for a second or two, ends its session and comes
//! back. A promoter runs QUEUE.PROMOTE every 100 ms, as queue-manager would. At the
//! end every user's standing is read once more (the final read).

use super::claim::Claimer;
use super::record::{Op, Outcome, Recorder, F};
use queue_client::{ClientError, QueueClient, Standing, Status};
use rand::{Rng, SeedableRng};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// What every task shares.
pub struct Ctx {
    pub client: QueueClient,
    pub claimer: Claimer,
    pub rec: Arc<Recorder>,
    pub queue: String,
    pub stop: AtomicBool,
    /// Share of lives in which the user leaves the line before its turn.
    pub leave_share: f64,
    /// Share of claims a second tab repeats with another holder.
    pub second_tab_share: f64,
}

impl Ctx {
    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }
}

/// A call's error as a history outcome: the queue's refusal certainly did nothing;
/// anything else (no reply in time, a lost connection, a cluster redirect storm)
/// may or may not have taken effect.
pub fn outcome_of(e: &ClientError) -> Outcome {
    match e {
        ClientError::Refused(_) | ClientError::InvalidArgument(_) => Outcome::Fail,
        // Not durable in time: the claim stands on the primary but may be lost with it.
        ClientError::Unavailable(_) | ClientError::Protocol(_) | ClientError::NotDurable(_) => Outcome::Unknown,
    }
}

fn standing_op(s: &Standing) -> Op {
    Op { status: Some(s.status.as_str().to_string()), rank: Some(s.rank), ticket: s.ticket_id.clone(), ..Op::default() }
}

fn error_op(e: &ClientError) -> Op {
    Op { error: Some(e.to_string()), ..Op::default() }
}

fn base(process: &str, user: &str, f: F) -> Op {
    Op { process: process.to_string(), user: Some(user.to_string()), f: Some(f), ..Op::default() }
}

/// A standing call (enter, status, final read), recorded.
async fn standing(ctx: &Ctx, process: &str, user: &str, f: F) -> Option<Standing> {
    let id = ctx.rec.invoke(base(process, user, f));
    let r = match f {
        F::Enter => ctx.client.enter(&ctx.queue, user, &format!("n{}", &user[2..])).await,
        _ => ctx.client.status(&ctx.queue, user).await,
    };
    match r {
        Ok(s) => {
            ctx.rec.complete(id, Outcome::Ok, standing_op(&s));
            Some(s)
        }
        Err(e) => {
            ctx.rec.complete(id, outcome_of(&e), error_op(&e));
            None
        }
    }
}

/// A call whose reply is a flag (leave, end, heartbeat), recorded.
async fn flag_call(ctx: &Ctx, user: &str, f: F) -> Result<bool, Outcome> {
    let id = ctx.rec.invoke(base(user, user, f));
    let r = match f {
        F::Leave => ctx.client.leave(&ctx.queue, user).await,
        F::End => ctx.client.end_session(&ctx.queue, user).await,
        _ => ctx.client.heartbeat(&ctx.queue, &[user]).await.map(|v| v.first().copied().unwrap_or(false)),
    };
    match r {
        Ok(b) => {
            let done = if f == F::Heartbeat { Op { alive: Some(b), ..Op::default() } } else { Op::default() };
            ctx.rec.complete(id, Outcome::Ok, done);
            Ok(b)
        }
        Err(e) => {
            let o = outcome_of(&e);
            ctx.rec.complete(id, o, error_op(&e));
            Err(o)
        }
    }
}

/// A claim of `ticket` by `holder`, recorded; the outcome.
async fn claim(ctx: &Ctx, process: &str, user: &str, holder: &str, ticket: &str) -> Outcome {
    let inv =
        Op { holder: Some(holder.to_string()), ticket: Some(ticket.to_string()), ..base(process, user, F::Claim) };
    let id = ctx.rec.invoke(inv);
    match ctx.claimer.claim(&ctx.queue, ticket, holder).await {
        Ok(c) => {
            let done = Op { claim_user: Some(c.user_id.clone()), ..Op::default() };
            ctx.rec.complete(id, Outcome::Ok, done);
            Outcome::Ok
        }
        Err(e) => {
            let o = outcome_of(&e);
            ctx.rec.complete(id, o, error_op(&e));
            o
        }
    }
}

async fn pause(rng: &mut impl Rng, lo_ms: u64, hi_ms: u64) {
    tokio::time::sleep(Duration::from_millis(rng.random_range(lo_ms..=hi_ms))).await;
}

/// One virtual user until the run stops.
pub async fn user(ctx: Arc<Ctx>, index: usize, seed: u64) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed ^ (index as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let user = format!("u-{index}");
    // Arrivals spread over the first second.
    pause(&mut rng, 0, 1000).await;
    let mut life = 0;
    'lives: while !ctx.stopped() {
        life += 1;
        let Some(mut now) = standing(&ctx, &user, &user, F::Enter).await else {
            pause(&mut rng, 200, 500).await;
            continue;
        };
        let leave_at = rng.random_bool(ctx.leave_share).then(|| rng.random_range(1..15));
        let mut polls = 0;
        let ticket = loop {
            match now.status {
                Status::Promoted => match now.ticket_id.clone() {
                    Some(t) => break t,
                    None => continue 'lives,
                },
                Status::Active => {
                    let _ = flag_call(&ctx, &user, F::End).await;
                    continue 'lives;
                }
                Status::Unknown => {
                    pause(&mut rng, 100, 300).await;
                    continue 'lives;
                }
                Status::Waiting => {}
            }
            if ctx.stopped() {
                return;
            }
            if leave_at == Some(polls) {
                let _ = flag_call(&ctx, &user, F::Leave).await;
                pause(&mut rng, 200, 1000).await;
                continue 'lives;
            }
            pause(&mut rng, 150, 250).await;
            polls += 1;
            if let Some(s) = standing(&ctx, &user, &user, F::Status).await {
                now = s;
            }
        };
        // Holders are 1 to 64 of A-Z a-z 0-9 . _ : @ -.
        let holder = format!("{user}:{life}");
        let mut admitted = false;
        for _ in 0..3 {
            match claim(&ctx, &user, &user, &holder, &ticket).await {
                Outcome::Ok => {
                    admitted = true;
                    break;
                }
                Outcome::Fail => break,
                Outcome::Unknown => pause(&mut rng, 100, 300).await,
            }
        }
        if rng.random_bool(ctx.second_tab_share) {
            let (ctx2, user2, ticket2) = (ctx.clone(), user.clone(), ticket.clone());
            let tab = format!("{user}/b");
            // Sometimes at once, sometimes after a failover could have lost the first claim.
            let after = Duration::from_millis(rng.random_range(0..4000));
            tokio::spawn(async move {
                tokio::time::sleep(after).await;
                claim(&ctx2, &tab, &user2, &format!("{holder}:b"), &ticket2).await;
            });
        }
        if !admitted {
            pause(&mut rng, 100, 300).await;
            continue;
        }
        let beats = rng.random_range(1..=3);
        for _ in 0..beats {
            pause(&mut rng, 500, 800).await;
            if flag_call(&ctx, &user, F::Heartbeat).await == Ok(false) {
                continue 'lives;
            }
        }
        let _ = flag_call(&ctx, &user, F::End).await;
        pause(&mut rng, 200, 1000).await;
    }
}

/// QUEUE.PROMOTE every 100 ms until the run stops.
pub async fn promoter(ctx: Arc<Ctx>) {
    while !ctx.stopped() {
        let id = ctx.rec.invoke(Op { process: "promoter".into(), f: Some(F::Promote), ..Op::default() });
        match ctx.client.promote(&ctx.queue, None).await {
            Ok(r) => ctx.rec.complete(id, Outcome::Ok, Op { promoted: Some(r.promoted), ..Op::default() }),
            Err(e) => ctx.rec.complete(id, outcome_of(&e), error_op(&e)),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The final read: every user's standing, retried until one read succeeds (or ten
/// attempts failed).
pub async fn final_read(ctx: &Ctx, users: usize) {
    for i in 0..users {
        let user = format!("u-{i}");
        for _ in 0..10 {
            if standing(ctx, "final", &user, F::Read).await.is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }
}
