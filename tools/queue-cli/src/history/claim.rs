//! How the run claims a ticket: `TICKET.CLAIM Q ticket HOLDER h` (or its function
//! twin), idempotent for its holder (a repeat by the same holder while the session
//! lives answers the same admission), sent over the run's own cluster connection.
//!
//! Plain: acknowledged once the primary applied it. Durable (`--durable`): the claim
//! and `WAIT 1 <ms>` go together to the queue's primary, in one pipeline on one
//! connection, so that WAIT counts the replicas that have the claim; fewer than one in
//! time is an error ("not durable in time, retry") and the claim's outcome is then
//! unknown (it may survive, or be lost with the primary).

use queue_client::{Backend, ClientError};
use redis::cluster_async::ClusterConnection;
use redis::Value;
use std::time::Duration;

/// How long a durable claim waits for a replica.
pub const DURABLE_WAIT: Duration = Duration::from_millis(500);

/// The run's way of claiming: `TICKET.CLAIM Q ticket HOLDER h` (or its function
/// twin), followed by `WAIT 1` when durable (`--durable`).
#[derive(Clone)]
pub struct Claimer {
    conn: ClusterConnection,
    backend: Backend,
    durable: bool,
}

/// What a claim admitted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admission {
    pub user_id: String,
}

impl Claimer {
    /// A claimer over its own cluster connection to `seeds`.
    pub async fn connect(seeds: &[String], backend: Backend, durable: bool, timeout: Duration) -> Result<Claimer, String> {
        let client = redis::cluster::ClusterClient::builder(seeds.to_vec())
            .response_timeout(timeout)
            .connection_timeout(timeout)
            .retries(2)
            .build()
            .map_err(|e| e.to_string())?;
        let conn = client.get_async_connection().await.map_err(|e| format!("connect: {e}"))?;
        Ok(Claimer { conn, backend, durable })
    }

    /// Claims `ticket` for `holder`.
    pub async fn claim(&self, queue: &str, ticket: &str, holder: &str) -> Result<Admission, ClientError> {
        durable_claim(self.conn.clone(), self.backend, self.durable, queue, ticket, holder).await
    }
}

async fn durable_claim(
    mut conn: ClusterConnection,
    backend: Backend,
    durable: bool,
    queue: &str,
    ticket: &str,
    holder: &str,
) -> Result<Admission, ClientError> {
    let mut claim = match backend {
        Backend::Module => redis::cmd("TICKET.CLAIM"),
        Backend::Lua => {
            let mut c = redis::cmd("FCALL");
            c.arg("ticket_claim").arg(1);
            c
        }
    };
    claim.arg(queue).arg(ticket).arg("HOLDER").arg(holder);
    let mut pipe = redis::pipe();
    pipe.add_command(claim);
    if durable {
        pipe.add_command({
            let mut w = redis::cmd("WAIT");
            w.arg(1).arg(DURABLE_WAIT.as_millis() as u64);
            w
        });
    }
    let replies: Vec<Value> = match pipe.query_async(&mut conn).await {
        Ok(v) => v,
        Err(e) => return Err(classify(&e)),
    };
    let Some(reply) = replies.first() else {
        return Err(ClientError::Protocol("claim: no reply".into()));
    };
    if let Value::ServerError(e) = reply {
        return Err(refusal(e.code(), e.details().unwrap_or_default()));
    }
    let user_id = field(reply, "userId").ok_or_else(|| ClientError::Protocol(format!("claim: {reply:?}")))?;
    match replies.get(1) {
        None if !durable => Ok(Admission { user_id }),
        Some(Value::Int(n)) if *n >= 1 => Ok(Admission { user_id }),
        _ => Err(ClientError::Unavailable("claim not durable in time, retry".into())),
    }
}

/// A refusal by its code, in the client's vocabulary (NOTICKET, EXPIRED, ...).
fn refusal(code: &str, detail: &str) -> ClientError {
    use queue_client::QueueError as Q;
    match code {
        "NOTICKET" => ClientError::Refused(Q::NoTicket),
        "EXPIRED" => ClientError::Refused(Q::TicketExpired),
        "INSIDE" => ClientError::Refused(Q::AlreadyInside),
        "FULL" => ClientError::Refused(Q::HardCap),
        "ERR" => ClientError::InvalidArgument(format!("ERR {detail}")),
        _ => ClientError::Unavailable(format!("{code} {detail}")),
    }
}

fn classify(e: &redis::RedisError) -> ClientError {
    match e.code() {
        Some(code) if matches!(code, "NOTICKET" | "EXPIRED" | "INSIDE" | "FULL" | "ERR") => {
            refusal(code, e.detail().unwrap_or_default())
        }
        _ => ClientError::Unavailable(e.to_string()),
    }
}

/// A field of a map reply (RESP3 map or RESP2 flat array).
fn field(v: &Value, name: &str) -> Option<String> {
    let text = |v: &Value| match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    };
    match v {
        Value::Map(m) => m.iter().find(|(k, _)| text(k).as_deref() == Some(name)).and_then(|(_, v)| text(v)),
        Value::Array(a) => {
            a.chunks(2).find(|c| text(&c[0]).as_deref() == Some(name)).and_then(|c| c.get(1).and_then(text))
        }
        _ => None,
    }
}
