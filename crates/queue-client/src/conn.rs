//! The connection under the client: one reconnecting connection to a single server,
//! or a cluster connection that follows the topology by itself. Every request has a
//! deadline, so a call never waits longer than the configured response timeout, even
//! while a reconnection is under way.

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{MultipleNodeRoutingInfo, RoutingInfo, SingleNodeRoutingInfo};
use redis::{Cmd, RedisError, RedisResult, Value};
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::Target;

/// How the client connects and how long it waits.
#[derive(Debug, Clone)]
pub struct ConnectOptions {
    /// How long one call may take, waiting for a reconnection included, before it
    /// fails with [`ClientError::Unavailable`](crate::ClientError::Unavailable).
    /// Default 5 s.
    pub response_timeout: Duration,
    /// How long one attempt to open a connection may take. Default 2 s.
    pub connection_timeout: Duration,
    /// Attempts to reconnect after the connection is lost (and to connect at first),
    /// with exponential backoff, before the calls waiting on it fail; the next call
    /// starts a new round. For a cluster, the retries of one request. Default 6.
    pub reconnect_retries: usize,
    /// The longest pause between two reconnection attempts; pauses start at about
    /// 1 s and double up to this. Default 4 s.
    pub reconnect_max_delay: Duration,
}

impl Default for ConnectOptions {
    fn default() -> Self {
        ConnectOptions {
            response_timeout: Duration::from_secs(5),
            connection_timeout: Duration::from_secs(2),
            reconnect_retries: 6,
            reconnect_max_delay: Duration::from_secs(4),
        }
    }
}

impl ConnectOptions {
    fn manager_config(&self) -> ConnectionManagerConfig {
        ConnectionManagerConfig::new()
            .set_connection_timeout(self.connection_timeout)
            .set_response_timeout(self.response_timeout)
            .set_number_of_retries(self.reconnect_retries)
            // Delays grow by this factor from about one second (with jitter).
            .set_factor(2)
            .set_max_delay(self.reconnect_max_delay.as_millis() as u64)
    }
}

/// One primary of the deployment (the only server, or a cluster node).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Node {
    Only,
    Addr { host: String, port: u16 },
}

#[derive(Clone)]
enum Link {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

/// A connection with a deadline on every request.
#[derive(Clone)]
pub(crate) struct Conn {
    link: Link,
    deadline: Duration,
    refusals: Arc<Refusals>,
}

/// The permissions Valkey refused this connection's user: each logged once, as an
/// error naming it, the latest kept for health checks.
#[derive(Default)]
pub(crate) struct Refusals {
    logged: Mutex<HashSet<String>>,
    latest: Mutex<Option<(String, Instant)>>,
}

/// How long a refusal counts as current without being seen again.
const REFUSAL_CURRENT_FOR: Duration = Duration::from_secs(30);

impl Refusals {
    fn note(&self, e: RedisError, cmd: &Cmd) -> RedisError {
        let e = crate::error::name_refusal(e, cmd);
        let text = crate::error::server_text(&e);
        if e.code() == Some("NOPERM") || crate::error::is_permission_text(&text) {
            if self.logged.lock().unwrap().insert(text.clone()) {
                tracing::error!("Valkey refuses a permission this service needs: {text}");
            }
            *self.latest.lock().unwrap() = Some((text, Instant::now()));
        }
        e
    }

    /// The latest refusal, if seen within the last [`REFUSAL_CURRENT_FOR`].
    pub(crate) fn current(&self) -> Option<String> {
        let latest = self.latest.lock().unwrap();
        latest.as_ref().filter(|(_, at)| at.elapsed() < REFUSAL_CURRENT_FOR).map(|(t, _)| t.clone())
    }
}

/// A cluster client for `target` (its seeds, TLS certificates, ACL user from the URLs).
pub(crate) fn cluster_builder(target: &Target, options: &ConnectOptions) -> RedisResult<ClusterClientBuilder> {
    crate::target::install_crypto();
    let max_wait = options.reconnect_max_delay.as_millis() as u64;
    let mut builder = ClusterClientBuilder::new(target.urls.iter().map(String::as_str))
        .connection_timeout(options.connection_timeout)
        .response_timeout(options.response_timeout)
        .retries(u32::try_from(options.reconnect_retries).unwrap_or(u32::MAX))
        .min_retry_wait(max_wait.min(100))
        .max_retry_wait(max_wait);
    if let Some(certs) = target.certificates()? {
        builder = builder.certs(certs);
    }
    Ok(builder)
}

fn timed_out(after: Duration) -> RedisError {
    RedisError::from(std::io::Error::new(std::io::ErrorKind::TimedOut, format!("no reply within {after:?}")))
}

impl Conn {
    /// A reconnecting connection to one server.
    pub(crate) async fn single(url: &str, options: &ConnectOptions) -> RedisResult<Conn> {
        Conn::single_client(redis::Client::open(url)?, options).await
    }

    /// The connection `target` names: one server or a cluster, TLS or not.
    pub(crate) async fn open(target: &Target, options: &ConnectOptions) -> RedisResult<Conn> {
        if target.cluster {
            Conn::cluster_target(target, options).await
        } else {
            Conn::single_client(target.client()?, options).await
        }
    }

    async fn single_client(client: redis::Client, options: &ConnectOptions) -> RedisResult<Conn> {
        let manager = ConnectionManager::new_with_config(client, options.manager_config()).await?;
        Ok(Conn { link: Link::Single(manager), deadline: options.response_timeout, refusals: Default::default() })
    }

    /// A connection to a cluster, found from any of `urls`.
    pub(crate) async fn cluster(urls: &[String], options: &ConnectOptions) -> RedisResult<Conn> {
        Conn::cluster_target(&Target::cluster(urls.iter().cloned()), options).await
    }

    async fn cluster_target(target: &Target, options: &ConnectOptions) -> RedisResult<Conn> {
        let client = cluster_builder(target, options)?.build()?;
        let connection = client.get_async_connection().await?;
        Ok(Conn { link: Link::Cluster(connection), deadline: options.response_timeout, refusals: Default::default() })
    }

    /// Another connection to `target`, noting refusals where `refusals` (the main
    /// connection's) does: for calls that must not share the main connection.
    pub(crate) async fn open_sharing(
        target: &Target,
        options: &ConnectOptions,
        refusals: Arc<Refusals>,
    ) -> RedisResult<Conn> {
        let mut conn = Conn::open(target, options).await?;
        conn.refusals = refusals;
        Ok(conn)
    }

    /// The refusals this connection notes (shared with [`Conn::open_sharing`]'s).
    pub(crate) fn refusals(&self) -> Arc<Refusals> {
        self.refusals.clone()
    }

    /// Sends `count` commands as one pipeline on one connection (on a cluster, the
    /// node of the first command with a key), within the deadline plus `longer`.
    /// Error replies stay in the list.
    pub(crate) async fn send_pipeline(
        &self,
        pipe: &redis::Pipeline,
        count: usize,
        longer: Duration,
    ) -> RedisResult<Vec<Value>> {
        let deadline = self.deadline + longer;
        let sent = async {
            match &self.link {
                Link::Single(m) => m.clone().send_packed_commands(pipe, 0, count).await,
                Link::Cluster(c) => c.clone().req_packed_commands(pipe, 0, count).await,
            }
        };
        match tokio::time::timeout(deadline, sent).await {
            Ok(Ok(values)) => {
                for v in &values {
                    if let Value::ServerError(e) = v {
                        let e: RedisError = e.clone().into();
                        if e.code() == Some("NOPERM") {
                            let first = pipe.cmd_iter().next().cloned().unwrap_or_else(|| redis::cmd("?"));
                            return Err(self.refusals.note(e, &first));
                        }
                    }
                }
                Ok(values)
            }
            Ok(Err(e)) => Err(e),
            Err(_) => Err(timed_out(deadline)),
        }
    }

    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self.link, Link::Cluster(_))
    }

    /// Awaits a request within the deadline. Error replies arrive as values (so that
    /// arrays can carry them): the top-level one becomes the Err.
    async fn within(&self, f: impl std::future::Future<Output = RedisResult<Value>>) -> RedisResult<Value> {
        match tokio::time::timeout(self.deadline, f).await {
            Ok(Ok(Value::ServerError(e))) => Err(e.into()),
            Ok(r) => r,
            Err(_) => Err(timed_out(self.deadline)),
        }
    }

    /// Sends a command where its key (or, keyless, any node) lives.
    pub(crate) async fn send(&self, cmd: &Cmd) -> RedisResult<Value> {
        self.send_unnoted(cmd).await.map_err(|e| self.refusals.note(e, cmd))
    }

    /// [`Conn::send`] without noting a refusal in [`Refusals`].
    async fn send_unnoted(&self, cmd: &Cmd) -> RedisResult<Value> {
        match &self.link {
            Link::Single(m) => self.within(m.clone().send_packed_command(cmd)).await,
            Link::Cluster(c) => self.within(c.clone().req_packed_command(cmd)).await,
        }
    }

    /// The permission Valkey refused this user lately, naming it (see [`Refusals`]).
    pub(crate) fn refused_permission(&self) -> Option<String> {
        self.refusals.current()
    }

    /// Sends a command to every primary; one reply per primary.
    pub(crate) async fn send_to_primaries(&self, cmd: &Cmd) -> RedisResult<Vec<(Node, Value)>> {
        self.to_primaries(cmd).await.map_err(|e| self.refusals.note(e, cmd))
    }

    /// [`Conn::send_to_primaries`] for a probe that has a way round a refusal (the
    /// backend detection's MODULE LIST and FUNCTION LIST, which a least-privilege user
    /// is not given): its refusal is not a permission the service needs, so it is not
    /// noted in [`Refusals`].
    pub(crate) async fn probe_primaries(&self, cmd: &Cmd) -> RedisResult<Vec<(Node, Value)>> {
        self.to_primaries(cmd).await
    }

    async fn to_primaries(&self, cmd: &Cmd) -> RedisResult<Vec<(Node, Value)>> {
        match &self.link {
            Link::Single(_) => Ok(vec![(Node::Only, self.send_unnoted(cmd).await?)]),
            Link::Cluster(c) => {
                let routing = RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, None));
                let reply = self.within(c.clone().route_command(cmd, routing)).await?;
                let Value::Map(per_node) = reply else {
                    return Err(RedisError::from((
                        redis::ErrorKind::ClientError,
                        "unexpected reply shape from all primaries",
                        format!("{reply:?}"),
                    )));
                };
                per_node
                    .into_iter()
                    .map(|(addr, v)| {
                        let addr = crate::reply::text(&addr).unwrap_or_default();
                        let (host, port) =
                            addr.rsplit_once(':').and_then(|(h, p)| Some((h, p.parse().ok()?))).ok_or_else(|| {
                                RedisError::from((
                                    redis::ErrorKind::ClientError,
                                    "unexpected node address",
                                    addr.clone(),
                                ))
                            })?;
                        Ok((Node::Addr { host: host.trim_matches(['[', ']']).to_string(), port }, v))
                    })
                    .collect()
            }
        }
    }

    /// The primaries of the current topology (`Node::Only` on one server).
    pub(crate) async fn primaries(&self) -> RedisResult<Vec<Node>> {
        if !self.is_cluster() {
            return Ok(vec![Node::Only]);
        }
        Ok(self.send_to_primaries(&redis::cmd("PING")).await?.into_iter().map(|(node, _)| node).collect())
    }

    /// Sends a command to one primary.
    pub(crate) async fn send_to(&self, node: &Node, cmd: &Cmd) -> RedisResult<Value> {
        match (&self.link, node) {
            (Link::Cluster(c), Node::Addr { host, port }) => {
                let routing =
                    RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress { host: host.clone(), port: *port });
                self.within(c.clone().route_command(cmd, routing)).await.map_err(|e| self.refusals.note(e, cmd))
            }
            _ => self.send(cmd).await,
        }
    }
}
