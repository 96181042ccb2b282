//! Typed async client for the waiting room's commands, the one every service uses.
//!
//! ```no_run
//! # async fn demo() -> Result<(), queue_client::ClientError> {
//! use queue_client::{QueueClient, Status};
//! let queue = QueueClient::connect("redis://127.0.0.1:6379/").await?;
//! let me = queue.enter("launch", "u-1", "alice").await?;
//! if me.status == Status::Promoted {
//!     let claim = queue.claim("launch", me.ticket_id.as_deref().unwrap()).await?;
//!     assert_eq!(claim.user_id, "u-1");
//! }
//! # Ok(()) }
//! ```
//!
//! At connect the client finds out what serves the commands: the `valkey-queue`
//! module when `MODULE LIST` shows a module named `queue`, else the `queue` Valkey
//! Functions library, which it loads (the copy of `lua-fallback/queue.lua` built into
//! it, with fresh entropy) when it is missing or older. Either way the calls and
//! their replies are the same; RESP2 and RESP3 connections both work.
//!
//! The connection reconnects by itself with exponential backoff; while the store is
//! unreachable every call fails within the response timeout with
//! [`ClientError::Unavailable`], and succeeds again once the store is back.

#![warn(missing_docs)]

pub mod announce;
mod backend;
mod backoff;
pub mod backoffice;
mod challenge;
mod changelog;
mod conn;
mod durable;
mod error;
pub mod events;
pub mod feed;
pub mod gates;
mod health;
mod lanes;
mod lazy;
mod lease;
mod library;
mod presence;
mod registry;
mod reply;
pub mod sessions;
mod target;
mod types;

pub use backend::Backend;
pub use backoff::Backoff;
pub use changelog::{Checkpoint, LogEntry, Moved, QueueState};
pub use conn::ConnectOptions;
pub use durable::{Durability, MAX_WAITING_CONNECTIONS};
pub use error::{ClientError, QueueError};
pub use lanes::{code_hash, EntryOptions, LaneCodes};
pub use lazy::LazyClient;
pub use library::LIBRARY_VERSION;
pub use target::{redact, Target, TlsFiles};
pub use types::{Claim, LaneCounts, LinePage, Opening, PromoteReport, QueueConfig, QueueInfo, Standing, Status};

use conn::Conn;
use error::{is_missing_command, NOT_INSTALLED};
use redis::{Cmd, Value};
use std::future::Future;
use std::sync::Arc;

tokio::task_local! {
    /// Set while a request that was not sampled for tracing runs: its commands make
    /// no spans (a span nobody exports still costs its building).
    static UNTRACED: ();
}

/// Runs `f` with no command spans: for a request its server decided not to trace.
pub fn untraced<F: Future>(f: F) -> impl Future<Output = F::Output> {
    UNTRACED.scope((), f)
}

/// Runs `call`, a queue command made for the current task (by it, or on its behalf in
/// a call shared with others), in a `debug` span named after `command` (traced when
/// the service exports traces and the task is not [`untraced`]) with the queue and
/// the outcome: `ok`, `refused` (the queue's own refusal) or `error`.
pub async fn in_command_span<T>(
    command: &str,
    queue: &str,
    call: impl Future<Output = Result<T, ClientError>>,
) -> Result<T, ClientError> {
    use tracing::Instrument;
    let span = if UNTRACED.try_with(|_| ()).is_ok() {
        tracing::Span::none()
    } else {
        tracing::debug_span!(
            "valkey command",
            otel.name = command,
            otel.kind = "client",
            db.system.name = "valkey",
            db.operation.name = command,
            queue,
            outcome = tracing::field::Empty,
            otel.status_code = tracing::field::Empty,
        )
    };
    let result = call.instrument(span.clone()).await;
    if !span.is_disabled() {
        let outcome = match &result {
            Ok(_) => "ok",
            Err(ClientError::Refused(_)) => "refused",
            Err(_) => "error",
        };
        span.record("outcome", outcome);
        if outcome == "error" {
            span.record("otel.status_code", "ERROR");
        }
    }
    result
}

/// `f` traced the way the current task is: for work a request hands to a task of its own.
pub fn tracing_as_now<F: Future>(f: F) -> impl Future<Output = F::Output> {
    let untraced = UNTRACED.try_with(|_| ()).is_ok();
    async move {
        if untraced {
            UNTRACED.scope((), f).await
        } else {
            f.await
        }
    }
}

/// The queue commands, each with its module name and its function twin.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Op {
    Enter,
    Pass,
    Status,
    Ranks,
    Line,
    Leave,
    Promote,
    Claim,
    Heartbeat,
    End,
    Info,
    Config,
    Opening,
    Watch,
    Unwatch,
    Sold,
}

impl Op {
    fn command(self) -> &'static str {
        match self {
            Op::Enter => "QUEUE.ENTER",
            Op::Pass => "QUEUE.PASS",
            Op::Status => "QUEUE.STATUS",
            Op::Ranks => "QUEUE.RANKS",
            Op::Line => "QUEUE.LINE",
            Op::Leave => "QUEUE.LEAVE",
            Op::Promote => "QUEUE.PROMOTE",
            Op::Claim => "TICKET.CLAIM",
            Op::Heartbeat => "SESSION.HEARTBEAT",
            Op::End => "SESSION.END",
            Op::Info => "QUEUE.INFO",
            Op::Config => "QUEUE.CONFIG",
            Op::Opening => "QUEUE.OPENING",
            Op::Watch => "QUEUE.WATCH",
            Op::Unwatch => "QUEUE.UNWATCH",
            Op::Sold => "QUEUE.SOLD",
        }
    }

    fn function(self) -> &'static str {
        match self {
            Op::Enter => "queue_enter",
            Op::Pass => "queue_pass",
            Op::Status => "queue_status",
            Op::Ranks => "queue_ranks",
            Op::Line => "queue_line",
            Op::Leave => "queue_leave",
            Op::Promote => "queue_promote",
            Op::Claim => "ticket_claim",
            Op::Heartbeat => "session_heartbeat",
            Op::End => "session_end",
            Op::Info => "queue_info",
            Op::Config => "queue_config",
            Op::Opening => "queue_opening",
            Op::Watch => "queue_watch",
            Op::Unwatch => "queue_unwatch",
            Op::Sold => "queue_sold",
        }
    }

    /// Functions flagged `no-writes`, called with FCALL_RO (so replicas may serve them).
    fn read_only(self) -> bool {
        matches!(self, Op::Info | Op::Opening)
    }
}

/// A handle on the queue commands of one Valkey server or cluster. Cheap to clone;
/// clones share the connection.
#[derive(Clone)]
pub struct QueueClient {
    conn: Conn,
    backend: Backend,
    /// What the connection was opened to, for the connections durable claims wait on.
    target: Target,
    options: ConnectOptions,
    /// Set by [`QueueClient::with_durability`]: how durable [`QueueClient::claim_as`]
    /// makes its claims, and the connections it waits on.
    waiters: Option<Arc<durable::Waiters>>,
    /// One library reinstallation at a time (after a server lost its functions).
    reinstall: Arc<tokio::sync::Mutex<()>>,
}

impl std::fmt::Debug for QueueClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueueClient").field("backend", &self.backend).field("cluster", &self.conn.is_cluster()).finish()
    }
}

impl QueueClient {
    /// Connects to one server (`redis://host:port/`, `?protocol=resp3` for RESP3) with
    /// the default [`ConnectOptions`], and detects the backend.
    pub async fn connect(url: &str) -> Result<QueueClient, ClientError> {
        QueueClient::connect_with(url, ConnectOptions::default()).await
    }

    /// [`QueueClient::connect`] with explicit timeouts and reconnection settings.
    pub async fn connect_with(url: &str, options: ConnectOptions) -> Result<QueueClient, ClientError> {
        let conn = Conn::single(url, &options).await.map_err(connect_error)?;
        QueueClient::start(conn, Target::single(url), options).await
    }

    /// Connects to a cluster through any of its nodes' URLs and detects the backend
    /// (which every primary must share; the library is installed on each primary).
    pub async fn connect_cluster(urls: &[String]) -> Result<QueueClient, ClientError> {
        QueueClient::connect_cluster_with(urls, ConnectOptions::default()).await
    }

    /// [`QueueClient::connect_cluster`] with explicit timeouts and retry settings.
    pub async fn connect_cluster_with(urls: &[String], options: ConnectOptions) -> Result<QueueClient, ClientError> {
        let conn = Conn::cluster(urls, &options).await.map_err(connect_error)?;
        QueueClient::start(conn, Target::cluster(urls.iter().cloned()), options).await
    }

    /// Connects to what `target` names (one server or a cluster, TLS, an ACL user)
    /// and detects the backend.
    pub async fn connect_target(target: &Target, options: ConnectOptions) -> Result<QueueClient, ClientError> {
        let conn = Conn::open(target, &options).await.map_err(connect_error)?;
        QueueClient::start(conn, target.clone(), options).await
    }

    async fn start(conn: Conn, target: Target, options: ConnectOptions) -> Result<QueueClient, ClientError> {
        let backend = backend::detect(&conn).await?;
        Ok(QueueClient {
            conn,
            backend,
            target,
            options,
            waiters: None,
            reinstall: Arc::new(tokio::sync::Mutex::new(())),
        })
    }

    /// This client (sharing its connection) with claims made by
    /// [`QueueClient::claim_as`] acknowledged only once `durability` is confirmed
    /// (see [`Durability`]); [`Durability::OFF`] turns that off. A setting out of
    /// range is [`ClientError::InvalidArgument`].
    pub fn with_durability(mut self, durability: Durability) -> Result<QueueClient, ClientError> {
        durability.check().map_err(ClientError::InvalidArgument)?;
        self.waiters = durability.is_on().then(|| {
            Arc::new(durable::Waiters::new(durability, self.target.clone(), self.options.clone(), self.conn.refusals()))
        });
        Ok(self)
    }

    /// The durability [`QueueClient::claim_as`] waits for ([`Durability::OFF`] unless
    /// set with [`QueueClient::with_durability`]).
    pub fn durability(&self) -> Durability {
        self.waiters.as_ref().map_or(Durability::OFF, |w| w.durability)
    }

    /// What serves the queue commands, as detected at connect.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// Whether this is a cluster connection.
    pub fn is_cluster(&self) -> bool {
        self.conn.is_cluster()
    }

    /// Sends a command that is not a queue command (registry, leader lease, pub/sub,
    /// health signal, presence: the services' coordination keys, each behind a typed
    /// method), routed by its key on a cluster.
    pub(crate) async fn raw(&self, cmd: &Cmd) -> Result<Value, ClientError> {
        Ok(self.conn.send(cmd).await?)
    }

    /// The permission Valkey refused this client's user within the last 30 s, as the
    /// server said it (the key or channel added where the server names only the
    /// command); None when nothing was refused lately. Each refusal is also logged
    /// once, as an error.
    pub fn refused_permission(&self) -> Option<String> {
        self.conn.refused_permission()
    }

    /// What a service's `/healthz` says of the store: `up` (it answers `PING`),
    /// `down`, or `refused` with the permission Valkey refused lately (never reported
    /// as the store being down).
    pub async fn health(client: Option<&QueueClient>) -> (&'static str, Option<String>) {
        let answers = match client {
            Some(c) => c.ping().await.is_ok(),
            None => false,
        };
        match client.and_then(|c| c.refused_permission()) {
            Some(refused) => ("refused", Some(refused)),
            None if answers => ("up", None),
            None => ("down", None),
        }
    }

    /// Checks that the store answers (`PING`), for readiness probes.
    pub async fn ping(&self) -> Result<(), ClientError> {
        self.conn.send(&redis::cmd("PING")).await?;
        Ok(())
    }

    fn build(&self, op: Op, queue: &str, args: &[&str]) -> Cmd {
        let mut c = match self.backend {
            Backend::Module => redis::cmd(op.command()),
            Backend::Lua => {
                let mut c = redis::cmd(if op.read_only() { "FCALL_RO" } else { "FCALL" });
                c.arg(op.function()).arg(1);
                c
            }
        };
        c.arg(queue);
        for a in args {
            c.arg(*a);
        }
        c
    }

    /// Runs a queue command. Under the Lua backend a server that lost its functions
    /// (restarted without persistence, flushed, a new cluster primary) gets the
    /// library again and the call is retried once: it never ran.
    ///
    /// Each call is a `debug` span (traced when the service exports traces) with the
    /// queue, the command and its outcome: `ok`, `refused` (the queue's own refusal)
    /// or `error`.
    async fn run(&self, op: Op, queue: &str, args: &[&str]) -> Result<Value, ClientError> {
        in_command_span(op.command(), queue, self.dispatch(op, queue, args)).await
    }

    async fn dispatch(&self, op: Op, queue: &str, args: &[&str]) -> Result<Value, ClientError> {
        let cmd = self.build(op, queue, args);
        match self.conn.send(&cmd).await {
            Err(e) if self.backend == Backend::Lua && is_missing_command(&e) => {
                {
                    let _one_at_a_time = self.reinstall.lock().await;
                    backend::ensure_library(&self.conn).await?;
                }
                Ok(self.conn.send(&cmd).await?)
            }
            r => Ok(r?),
        }
    }

    /// `QUEUE.ENTER`: joins the line at the back (re-entry moves to the back and
    /// withdraws an unclaimed ticket); promoted at once when nobody waits and there
    /// is room.
    pub async fn enter(&self, queue: &str, user_id: &str, nickname: &str) -> Result<Standing, ClientError> {
        Standing::from_value(self.run(Op::Enter, queue, &[user_id, nickname]).await?)
    }

    /// `QUEUE.STATUS`: where the user stands; also notes that a waiting user is still
    /// there.
    pub async fn status(&self, queue: &str, user_id: &str) -> Result<Standing, ClientError> {
        Standing::from_value(self.run(Op::Status, queue, &[user_id]).await?)
    }

    /// `QUEUE.RANKS`: the standings of many users in one call, in the order asked.
    /// An empty list asks nothing and returns an empty list.
    pub async fn ranks<S: AsRef<str>>(&self, queue: &str, user_ids: &[S]) -> Result<Vec<Standing>, ClientError> {
        if user_ids.is_empty() {
            return Ok(Vec::new());
        }
        let args: Vec<&str> = user_ids.iter().map(AsRef::as_ref).collect();
        Standing::list_from_value(self.run(Op::Ranks, queue, &args).await?, args.len())
    }

    /// `QUEUE.LINE`: up to `count` waiting users after `cursor` (0: from the head) in
    /// line order, with the first one's rank; walk the whole line by passing each
    /// page's `cursor` back until it is 0. Nobody counts as heard from.
    pub async fn line(&self, queue: &str, cursor: u64, count: u32) -> Result<LinePage, ClientError> {
        let (cursor, count) = (cursor.to_string(), count.to_string());
        LinePage::from_value(self.run(Op::Line, queue, &[&cursor, &count]).await?)
    }

    /// `QUEUE.LEAVE`: true if the user was waiting or held a ticket.
    pub async fn leave(&self, queue: &str, user_id: &str) -> Result<bool, ClientError> {
        reply::flag(&self.run(Op::Leave, queue, &[user_id]).await?)
    }

    /// `QUEUE.PROMOTE [MAX n]`: one step of the admission loop.
    pub async fn promote(&self, queue: &str, max: Option<u32>) -> Result<PromoteReport, ClientError> {
        let max = max.map(|m| m.to_string());
        let args: Vec<&str> = match &max {
            Some(m) => vec!["MAX", m],
            None => Vec::new(),
        };
        PromoteReport::from_value(self.run(Op::Promote, queue, &args).await?)
    }

    /// `TICKET.CLAIM`: uses a ticket (once) and opens its user's session lease.
    /// Fails with [`ClientError::Refused(QueueError::NoTicket)`], [`ClientError::Refused(QueueError::TicketExpired)`],
    /// [`ClientError::Refused(QueueError::AlreadyInside)`] or [`ClientError::Refused(QueueError::HardCap)`].
    pub async fn claim(&self, queue: &str, ticket_id: &str) -> Result<Claim, ClientError> {
        Claim::from_value(self.run(Op::Claim, queue, &[ticket_id]).await?)
    }

    /// `TICKET.CLAIM Q ticket HOLDER holder`: [`QueueClient::claim`] by a named
    /// holder (1-64 characters from the ticket id's charset, e.g. a random id the
    /// caller keeps for this admission). The same holder repeating the claim while
    /// the session it opened is live gets the same [`Claim`] again (and nothing
    /// changes); anyone else gets `NOTICKET`.
    ///
    /// With a [`Durability`] set ([`QueueClient::with_durability`]) the claim is
    /// acknowledged only once that many replicas hold it (`WAIT`, or `WAITAOF` for
    /// the append-only file): the claim is made on a connection of its own, then
    /// the client renews the lease it was just given (`SESSION.HEARTBEAT Q user`, so
    /// that the wait covers a repeated claim too, which writes nothing) and sends
    /// `WAIT` right behind it on that connection. When they do not confirm in time the answer is
    /// [`ClientError::NotDurable`]: the claim stands on the primary; do not let the
    /// user in, and retry with the same holder (which gets the same claim and waits
    /// again). Other failures are those of [`QueueClient::claim`], plus
    /// [`ClientError::InvalidArgument`] for a bad holder.
    pub async fn claim_as(&self, queue: &str, ticket_id: &str, holder: &str) -> Result<Claim, ClientError> {
        let args = [ticket_id, "HOLDER", holder];
        let Some(waiters) = &self.waiters else {
            return Claim::from_value(self.run(Op::Claim, queue, &args).await?);
        };
        let claim = self.build(Op::Claim, queue, &args);
        let heartbeat = |user: &str| self.build(Op::Heartbeat, queue, &[user]);
        match waiters.claim(&claim, queue, heartbeat).await {
            // A server that lost the library: installed again, and the claim (which
            // never ran) made once more.
            Err(ClientError::Unavailable(why)) if self.backend == Backend::Lua && why.starts_with(NOT_INSTALLED) => {
                {
                    let _one_at_a_time = self.reinstall.lock().await;
                    backend::ensure_library(&self.conn).await?;
                }
                waiters.claim(&claim, queue, heartbeat).await
            }
            r => r,
        }
    }

    /// `QUEUE.PASS Q userId nickname [HOLDER holder]`: lets the user straight in
    /// when `QUEUE.ENTER` would let them in at once (nobody waits, a free slot, a
    /// rate token, a unit to sell; entry `open`, no opening scheduled, not closed)
    /// and they neither wait, hold a ticket nor are inside: entered and claimed in
    /// one command, the [`Claim`] (as [`QueueClient::claim_as`] returns it, its
    /// `ticket_id` the ticket just used). `None` otherwise, and nothing changed: send
    /// the visitor to the waiting room (`QUEUE.ENTER`).
    ///
    /// With a holder, the pass is remembered as a claim by that holder: repeating
    /// `TICKET.CLAIM Q ticketId HOLDER holder` (or [`QueueClient::claim_as`]) while
    /// the session lives answers the same claim. With a holder and a [`Durability`]
    /// set, the pass is acknowledged only once confirmed, as `claim_as` is; when it is
    /// not, the answer is [`ClientError::NotDurable`] naming the ticket: the pass
    /// stands on the primary, and `claim_as` with that ticket and the same holder
    /// waits again (a second pass answers `None`: the user is inside). Without a
    /// holder nothing is waited for, as with [`QueueClient::claim`].
    ///
    /// Fails with [`ClientError::InvalidArgument`] for a bad user id, nickname or
    /// holder (nothing is read or written).
    pub async fn pass(
        &self,
        queue: &str,
        user_id: &str,
        nickname: &str,
        holder: Option<&str>,
    ) -> Result<Option<Claim>, ClientError> {
        let mut args = vec![user_id, nickname];
        if let Some(h) = holder {
            args.extend(["HOLDER", h]);
        }
        let waiters = match (&self.waiters, holder) {
            (Some(w), Some(_)) => w,
            _ => return Claim::from_pass(self.run(Op::Pass, queue, &args).await?),
        };
        let pass = self.build(Op::Pass, queue, &args);
        let heartbeat = |user: &str| self.build(Op::Heartbeat, queue, &[user]);
        match waiters.pass(&pass, queue, heartbeat).await {
            Err(ClientError::Unavailable(why)) if self.backend == Backend::Lua && why.starts_with(NOT_INSTALLED) => {
                {
                    let _one_at_a_time = self.reinstall.lock().await;
                    backend::ensure_library(&self.conn).await?;
                }
                waiters.pass(&pass, queue, heartbeat).await
            }
            r => r,
        }
    }

    /// `SESSION.HEARTBEAT`: extends the users' leases; false where no lease is live
    /// (disconnect that user). An empty list asks nothing and returns an empty list.
    pub async fn heartbeat<S: AsRef<str>>(&self, queue: &str, user_ids: &[S]) -> Result<Vec<bool>, ClientError> {
        if user_ids.is_empty() {
            return Ok(Vec::new());
        }
        let args: Vec<&str> = user_ids.iter().map(AsRef::as_ref).collect();
        types::flags(self.run(Op::Heartbeat, queue, &args).await?, args.len(), "heartbeat")
    }

    /// `SESSION.END`: ends the user's session, freeing its slot; true if it had one.
    pub async fn end_session(&self, queue: &str, user_id: &str) -> Result<bool, ClientError> {
        reply::flag(&self.run(Op::End, queue, &[user_id]).await?)
    }

    /// `QUEUE.INFO`: counts, settings and counters of the queue.
    pub async fn info(&self, queue: &str) -> Result<QueueInfo, ClientError> {
        QueueInfo::from_value(self.run(Op::Info, queue, &[]).await?)
    }

    /// `QUEUE.SOLD Q n [USER userId]`: reports `n` units sold. The inventory goes down
    /// by `n` (never below 0); with a user who is inside, that person no longer
    /// counts against it. The units left, or `None` when the queue has no inventory.
    pub async fn sold(&self, queue: &str, n: u64, user_id: Option<&str>) -> Result<Option<u64>, ClientError> {
        let n = n.to_string();
        let mut args = vec![n.as_str()];
        if let Some(u) = user_id {
            args.extend(["USER", u]);
        }
        let v = self.run(Op::Sold, queue, &args).await?;
        if reply::is_nil(&v) {
            return Ok(None);
        }
        reply::int(&v)
            .and_then(|i| u64::try_from(i).ok())
            .map(Some)
            .ok_or_else(|| ClientError::protocol(format!("sold: not a count: {v:?}")))
    }

    /// `QUEUE.OPENING`: the queue's fair opening (commitment, state, seed once open).
    pub async fn opening(&self, queue: &str) -> Result<Opening, ClientError> {
        Opening::from_value(self.run(Op::Opening, queue, &[]).await?)
    }

    /// `QUEUE.OPENING Q PROOF start count`: a page of the proof, the idHashes in
    /// placed order (empty before the opening).
    pub async fn opening_proof(&self, queue: &str, start: u64, count: u64) -> Result<Vec<String>, ClientError> {
        let (start, count) = (start.to_string(), count.to_string());
        reply::strings(self.run(Op::Opening, queue, &["PROOF", &start, &count]).await?, "proof")
    }

    /// `QUEUE.CONFIG Q GET *`: the queue's effective settings.
    pub async fn config_get(&self, queue: &str) -> Result<QueueConfig, ClientError> {
        QueueConfig::from_value(self.run(Op::Config, queue, &["GET", "*"]).await?)
    }

    /// `QUEUE.CONFIG Q SET field value ...`: changes settings; all pairs are checked
    /// before any is applied (an unknown field or a value out of range fails with
    /// [`ClientError::InvalidArgument`] and changes nothing).
    pub async fn config_set<F: AsRef<str>>(&self, queue: &str, pairs: &[(F, i64)]) -> Result<(), ClientError> {
        let values: Vec<String> = pairs.iter().map(|(_, v)| v.to_string()).collect();
        let mut args = vec!["SET"];
        for ((field, _), value) in pairs.iter().zip(&values) {
            args.push(field.as_ref());
            args.push(value);
        }
        match self.run(Op::Config, queue, &args).await? {
            Value::Okay => Ok(()),
            v if reply::text(&v).as_deref() == Some("OK") => Ok(()),
            other => Err(ClientError::protocol(format!("config set: expected OK, got {other:?}"))),
        }
    }

    /// `QUEUE.CONFIG Q GET field`: one setting as text, for the settings that are
    /// words (`entry`) as well as numbers.
    pub async fn config_text(&self, queue: &str, field: &str) -> Result<String, ClientError> {
        let v = self.run(Op::Config, queue, &["GET", field]).await?;
        reply::text(&v)
            .or_else(|| reply::int(&v).map(|n| n.to_string()))
            .ok_or_else(|| ClientError::protocol(format!("config get {field}: expected a value, got {v:?}")))
    }

    /// `QUEUE.CONFIG Q SET field value` with the value as text (a word setting such
    /// as `entry`); checked as [`QueueClient::config_set`] is.
    pub async fn config_set_text(&self, queue: &str, field: &str, value: &str) -> Result<(), ClientError> {
        match self.run(Op::Config, queue, &["SET", field, value]).await? {
            Value::Okay => Ok(()),
            v if reply::text(&v).as_deref() == Some("OK") => Ok(()),
            other => Err(ClientError::protocol(format!("config set: expected OK, got {other:?}"))),
        }
    }
}

/// A URL the client cannot use is the caller's mistake; anything else at connect
/// means the store cannot be reached.
fn connect_error(e: redis::RedisError) -> ClientError {
    if e.kind() == redis::ErrorKind::InvalidClientConfig {
        ClientError::InvalidArgument(format!("invalid Valkey URL: {e}"))
    } else {
        ClientError::from(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_is_shareable() {
        fn shareable<T: Clone + Send + Sync + 'static>() {}
        shareable::<QueueClient>();
        shareable::<ClientError>();
    }

    #[test]
    fn functions_are_the_commands_lowercased() {
        for op in [
            Op::Enter,
            Op::Pass,
            Op::Status,
            Op::Ranks,
            Op::Line,
            Op::Leave,
            Op::Promote,
            Op::Claim,
            Op::Heartbeat,
            Op::End,
            Op::Info,
            Op::Config,
            Op::Sold,
        ] {
            assert_eq!(op.function(), op.command().to_ascii_lowercase().replace('.', "_"));
            assert!(library::SOURCE.contains(&format!("\"{}\"", op.function())), "{op:?}");
        }
    }
}
