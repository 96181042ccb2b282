//! `queue-cli watch`: the load and the probes of `bench/push-scale.sh` (push cost at
//! scale). Two parts, run as separate processes by the script:
//!
//! - `watch streams`: opens this process's share of the push streams of a line of
//!   people named `p-0000000` .. (`--line`), spread evenly over the line and over the
//!   queue-api instances (`--api`, one per instance), from several loopback source
//!   addresses, over plain TCP (a hand-written GET, a small buffer per stream); counts
//!   the events by name and rewrites a one-line JSON status file (`--status`) four
//!   times a second. Streams ended by the server (a `promoted` or `unknown` event) are
//!   not reopened. Stops by itself after `--max-secs`.
//! - `watch drive`: one measured phase. Optionally churn (entries, leaves of random
//!   waiting people, `QUEUE.PROMOTE MAX n` at a fixed cadence, each followed by the
//!   queue-manager's announcement when it did something), probes that time a change
//!   of a watched person's standing to the event on their stream, and over the window
//!   the deltas of Valkey's `INFO commandstats` and `INFO cpu` and of the streams'
//!   status files; writes them as one JSON object (`--out`) for the script's summary.
//!
//! Probes. Leave: a victim and a watcher enter at the back, the watcher's stream
//! opens, then `MULTI; STATUS watcher; LEAVE victim; EXEC`: every state after the
//! leave shows the watcher at a rank below the one read, every state before it at that
//! rank or more, so the first event with a lower rank (or another status) is the
//! leave's; its arrival minus the EXEC's reply is one sample. Promote (churn only):
//! `--promote-probes` watchers at the back of the line; each PROMOTE goes in a
//! `MULTI` after their STATUS, and the first event at or below rank - promoted is
//! that PROMOTE's.
//!
//! With `--backend lua` the QUEUE.* commands go as `FCALL queue_x 1 Q ...`, and the
//! FCALLs' server time is split by function from the slow log (threshold 0 during the
//! window, drained under MULTI), as `INFO commandstats` has one line for every FCALL.
//!
//! The files: this one (the subcommand's flags), [`sse_tcp`] (a push stream over
//! plain TCP), [`streams`] (`watch streams`), [`drive`] (`watch drive`), [`probes`]
//! (its latency probes), [`valkey`] (its commands and Valkey's statistics).

mod drive;
mod probes;
mod sse_tcp;
mod streams;
mod valkey;

use clap::{Args, Subcommand};
use std::net::SocketAddr;
use std::process::ExitCode;

pub use streams::person;

#[derive(Args)]
pub struct WatchArgs {
    #[command(subcommand)]
    pub cmd: WatchCmd,
}

#[derive(Subcommand)]
pub enum WatchCmd {
    /// Opens this process's share of the push streams and counts their events.
    Streams(StreamsArgs),
    /// One measured phase: churn, probes, Valkey's command statistics.
    Drive(DriveArgs),
}

#[derive(Args)]
pub struct StreamsArgs {
    /// queue-api instances, host:port, comma-separated.
    #[arg(long, value_delimiter = ',', required = true)]
    api: Vec<SocketAddr>,
    #[arg(long, default_value = "push")]
    queue: String,
    /// People in line, `p-0000000` ..; the streams are spread evenly over them.
    #[arg(long)]
    line: u64,
    /// Streams per instance (over all parts).
    #[arg(long)]
    per_instance: u64,
    /// This process's part (0-based) of --parts.
    #[arg(long, default_value_t = 0)]
    part: u64,
    #[arg(long, default_value_t = 1)]
    parts: u64,
    /// First loopback source address (127.0.0.B).
    #[arg(long, default_value_t = 2)]
    source_base: u8,
    /// How many source addresses.
    #[arg(long, default_value_t = 16)]
    sources: u8,
    /// Streams being opened at once.
    #[arg(long, default_value_t = 256)]
    opening: usize,
    /// The status file, rewritten every 250 ms.
    #[arg(long)]
    status: String,
    /// Stops after this long, whatever happens.
    #[arg(long, default_value_t = 1800)]
    max_secs: u64,
}

#[derive(Args)]
pub struct DriveArgs {
    #[arg(long)]
    valkey: String,
    /// queue-api instances (probe streams go to them in turn).
    #[arg(long, value_delimiter = ',', required = true)]
    api: Vec<SocketAddr>,
    #[arg(long, default_value = "push")]
    queue: String,
    /// module or lua.
    #[arg(long, default_value = "module")]
    backend: String,
    /// People the line was filled with (`p-0000000` ..): the pool random leaves draw from.
    #[arg(long)]
    line: u64,
    /// Seconds of churn before the window.
    #[arg(long, default_value_t = 2.0)]
    warmup: f64,
    /// The measured window, seconds.
    #[arg(long, default_value_t = 20.0)]
    secs: f64,
    /// Entries per second (new people at the back).
    #[arg(long, default_value_t = 0.0)]
    enter_rate: f64,
    /// Leaves per second (random people of the line).
    #[arg(long, default_value_t = 0.0)]
    leave_rate: f64,
    /// Promotions per second.
    #[arg(long, default_value_t = 0.0)]
    promote_rate: f64,
    /// One PROMOTE every this many ms (MAX = rate x interval).
    #[arg(long, default_value_t = 200)]
    promote_every_ms: u64,
    /// Publish the queue-manager's announcement after a PROMOTE that did something.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    announce: bool,
    /// Leave probes run at once (each: enter a pair, open, leave, wait, close).
    #[arg(long, default_value_t = 4)]
    leave_probes: usize,
    /// Pause after a probe stream's first event before the change (ms).
    #[arg(long, default_value_t = 300)]
    probe_settle_ms: u64,
    /// Watchers of the promote probe (with promotions only).
    #[arg(long, default_value_t = 4)]
    promote_probes: usize,
    /// Turn probes (with promotions only): people of the line whose turn comes during
    /// the window, each with a stream of its own; one sample each, from the reply of
    /// the PROMOTE that promoted them to the `promoted` event on their stream.
    #[arg(long, default_value_t = 40)]
    turn_probes: usize,
    /// Source address of the probe streams (127.0.0.B).
    #[arg(long, default_value_t = 250)]
    source: u8,
    /// Prefix of the probes' people (each phase its own, so that people who left in
    /// one phase are not entered again, behind the watchers, in the next).
    #[arg(long, default_value = "")]
    tag: String,
    /// Status files of the `watch streams` processes, comma-separated.
    #[arg(long, value_delimiter = ',')]
    status: Vec<String>,
    /// Where the JSON result goes.
    #[arg(long)]
    out: String,
    /// The queue-api processes (their ids, comma-separated): their CPU time over the
    /// window is read from /proc (user and system), for queue-api's CPU per event.
    #[arg(long, value_delimiter = ',')]
    api_pids: Vec<u32>,
}

pub async fn run(args: WatchArgs) -> ExitCode {
    let r = match args.cmd {
        WatchCmd::Streams(a) => streams::streams(a).await,
        WatchCmd::Drive(a) => drive::drive(a).await,
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("queue-cli watch: {e}");
            ExitCode::from(2)
        }
    }
}
