//! Walking through a gate (`queue-cli swarm --gate URL --gate-path /checkout`): each
//! virtual user first asks for the gated path without admission and must either be let
//! straight in on that request (the gate's straight pass while nobody waits and a slot
//! is free: the admission cookie set on the answer, the app told whom it serves; the
//! user is then inside as after a claim) or be sent to the waiting room; in the room it
//! stands in line through the room's API as served by the gate
//! (`<gate>/gate/room/api/queue/*`), and once promoted goes where the waiting-room page
//! sends it, `/gate/claim?queue=&ticketId=&return=`, which must set the admission cookie
//! and send it back to the gated path. Inside, it asks for the gated path a few times
//! with the cookie (or, as an app would, with `Authorization: Bearer`), then leaves at
//! `/gate/leave` or goes idle. Audited on top of the swarm's own audits:
//!
//! - **Passed unadmitted**: the gated path answered without admission.
//! - **Wrong user**: the app (the example upstream, which echoes what it was told) saw
//!   another person than the one whose cookie was sent.
//! - **Access after leaving**: the cookie still opened the gated path after `/gate/leave`.
//! - A used ticket claimed again (after leaving) or twice at once is a double claim.
//!
//! With `--gate-journal FILE` each admitted person's window is written as a JSON line
//! (`user`, `queue`, `claimSentUs`, `insideUntilUs`, microseconds since the epoch), so
//! that a test can check the upstream's own log against it: every request the app
//! served must fall inside the window of the person it was served to.
//!
//! The files: this one (the flags and what a visit tells the swarm), [`walk`] (the
//! gate and each visit), [`requests`] (the gate's routes as requests), [`report`]
//! (what the users saw).

mod report;
mod requests;
mod walk;

pub use report::GateReport;
pub use requests::{ask, claim, http_client, leave, set_cookie, Answer, Claimed, Credential};
pub(crate) use walk::Arrival;
pub use walk::{epoch_us, Gate};

use std::time::Duration;

// The gate's options of `queue-cli swarm` (no doc comment: clap would take it for the
// subcommand's description).
#[derive(clap::Args, Debug, Clone)]
pub struct GateArgs {
    /// Walk through a gate at this address (the gate itself, or the proxy in front of it)
    /// instead of claiming tickets at chat-server; the line is followed through the room
    /// the gate serves (--gate-room).
    #[arg(long)]
    pub gate: Option<String>,
    /// The gated path each user asks for.
    #[arg(long, default_value = "/checkout")]
    pub gate_path: String,
    /// Where the gate serves the waiting room and its API.
    #[arg(long, default_value = "/gate/room/")]
    pub gate_room: String,
    /// Requests each admitted user makes to the gated path while inside (spread over
    /// its stay, --stay-secs).
    #[arg(long, default_value_t = 3)]
    pub gate_requests: u32,
    /// Share of admitted users who go idle instead of leaving at /gate/leave.
    #[arg(long, default_value_t = 0.2)]
    pub gate_idle: f64,
    /// The gate's --idle in seconds: an idle user counts as inside until this long
    /// after its last request (its slot cannot come back sooner).
    #[arg(long, default_value_t = 300.0)]
    pub gate_idle_secs: f64,
    /// Share of admitted users who send their token as `Authorization: Bearer` (as an
    /// app or a mobile client does) instead of the cookie.
    #[arg(long, default_value_t = 0.1)]
    pub gate_bearer: f64,
    /// The admission cookie's name (the gate's --cookie-name).
    #[arg(long, default_value = "queue_admission")]
    pub gate_cookie: String,
    /// Write each admitted user's window (claim sent .. no longer inside) to this file,
    /// one JSON line each, for an audit of the upstream's log.
    #[arg(long)]
    pub gate_journal: Option<std::path::PathBuf>,
}

impl GateArgs {
    /// The gate to walk through, if `--gate` was given.
    pub fn into_gate(self) -> Result<Option<Gate>, String> {
        let Some(url) = self.gate.clone() else { return Ok(None) };
        let walk = GateWalk {
            url,
            path: self.gate_path,
            room: self.gate_room,
            requests: self.gate_requests,
            idle: self.gate_idle,
            idle_after: Duration::try_from_secs_f64(self.gate_idle_secs.max(0.0)).unwrap_or(Duration::MAX),
            bearer: self.gate_bearer,
            cookie: self.gate_cookie,
            journal: self.gate_journal,
        };
        Gate::new(walk).map(Some)
    }
}

/// How virtual users walk through a gate; see [`GateArgs`] for each field.
#[derive(Debug, Clone)]
pub struct GateWalk {
    pub url: String,
    pub path: String,
    pub room: String,
    pub requests: u32,
    pub idle: f64,
    pub idle_after: Duration,
    pub bearer: f64,
    pub cookie: String,
    pub journal: Option<std::path::PathBuf>,
}

/// What a visit tells the swarm's ledger (implemented by the swarm).
pub(crate) trait Tally: Sync {
    /// Updates the gate's counters.
    fn gate(&self, f: &mut dyn FnMut(&mut GateReport));
    /// User `who` claimed its ticket: inside.
    fn admitted(&self, who: usize);
    /// A ticket or session is about to be given back (or was refused).
    fn released(&self);
    /// Every claim of the ticket was refused.
    fn claim_refused(&self);
    /// One ticket admitted twice.
    fn double_claim(&self, who: usize, what: &str);
    /// A used ticket was refused when claimed again.
    fn reuse_refused(&self);
    /// Left after being inside.
    fn left(&self);
}
