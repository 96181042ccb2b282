//! Which implementation serves the queue commands, found at connect time, and the
//! installation of the Lua library where the module is missing.

use crate::conn::{Conn, Node};
use crate::error::{is_missing_command, server_text, ClientError};
use crate::library::{is_outdated, source_with_entropy, LIBRARY_VERSION};
use crate::reply::{array, text, Fields};
use redis::{cmd, RedisError, Value};

/// The implementation of the queue commands a server runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Backend {
    /// The `valkey-queue` module (`QUEUE.ENTER ...`).
    Module,
    /// The `queue` Valkey Functions library (`FCALL queue_enter 1 ...`).
    Lua,
}

/// A queue name used only to ask a server whether it knows the queue commands.
const PROBE_QUEUE: &str = "queue-client:probe";

/// Connection-level failures end detection at once; anything else a server says
/// (no permission for MODULE, a renamed command) only rules one way out.
fn fatal(e: RedisError) -> Result<(), ClientError> {
    if is_connection_failure(&e) {
        Err(ClientError::from(e))
    } else {
        Ok(())
    }
}

fn is_connection_failure(e: &RedisError) -> bool {
    use redis::ErrorKind::*;
    matches!(
        e.kind(),
        IoError
            | ClusterConnectionNotFound
            | BusyLoadingError
            | TryAgain
            | ClusterDown
            | MasterDown
            | AuthenticationFailed
    )
}

/// Module if every primary lists a module named `queue`, else the Lua library
/// (installed or upgraded here when needed).
pub(crate) async fn detect(conn: &Conn) -> Result<Backend, ClientError> {
    if has_module(conn).await? {
        return Ok(Backend::Module);
    }
    ensure_library(conn).await?;
    Ok(Backend::Lua)
}

fn lists_queue_module(reply: &Value) -> bool {
    let Ok(modules) = array(reply.clone(), "MODULE LIST") else { return false };
    modules.into_iter().any(|m| Fields::new(m, "module").and_then(|f| f.string("name")).is_ok_and(|n| n == "queue"))
}

async fn has_module(conn: &Conn) -> Result<bool, ClientError> {
    match conn.probe_primaries(cmd("MODULE").arg("LIST")).await {
        Ok(replies) => Ok(!replies.is_empty() && replies.iter().all(|(_, v)| lists_queue_module(v))),
        Err(e) => {
            // MODULE may be forbidden to a service user (`+@queue` only) or renamed
            // on a managed service: ask a queue command instead (so the refusal is
            // expected, and not noted as a permission the service needs).
            fatal(e)?;
            match conn.send(cmd("QUEUE.INFO").arg(PROBE_QUEUE)).await {
                Ok(_) => Ok(true),
                Err(e) => fatal(e).map(|()| false),
            }
        }
    }
}

fn lists_queue_library(reply: &Value) -> bool {
    let Ok(libraries) = array(reply.clone(), "FUNCTION LIST") else { return false };
    libraries
        .into_iter()
        .any(|l| Fields::new(l, "library").and_then(|f| f.string("library_name")).is_ok_and(|n| n == "queue"))
}

/// The version the `queue` library on `node` reports, or None when it cannot say.
async fn installed_version(conn: &Conn, node: &Node) -> Result<Option<String>, ClientError> {
    match conn.send_to(node, cmd("FCALL_RO").arg("queue_version").arg(0)).await {
        Ok(v) => Ok(text(&v)),
        Err(e) if is_missing_command(&e) => Ok(None),
        Err(e) => fatal(e).map(|()| None),
    }
}

/// The primaries and the library version each holds (None: no usable library).
async fn installed(conn: &Conn) -> Result<Vec<(Node, Option<String>)>, ClientError> {
    let listing = conn.probe_primaries(cmd("FUNCTION").arg("LIST").arg("LIBRARYNAME").arg("queue")).await;
    let nodes = match listing {
        Ok(per_node) => per_node,
        Err(e) => {
            // FUNCTION LIST may be forbidden (an expected refusal, not noted): ask
            // the library itself.
            fatal(e)?;
            let node = Node::Only;
            let version = installed_version(conn, &node).await?;
            return Ok(vec![(node, version)]);
        }
    };
    let mut out = Vec::with_capacity(nodes.len());
    for (node, listed) in nodes {
        let version = if lists_queue_library(&listed) { installed_version(conn, &node).await? } else { None };
        out.push((node, version));
    }
    Ok(out)
}

/// Loads the embedded library (fresh entropy) on `node`, replacing what is there.
async fn load(conn: &Conn, node: &Node) -> Result<(), ClientError> {
    let source = source_with_entropy()?;
    let loaded = conn.send_to(node, cmd("FUNCTION").arg("LOAD").arg("REPLACE").arg(source)).await;
    if let Err(e) = loaded {
        if is_connection_failure(&e) {
            return Err(ClientError::from(e));
        }
        return Err(ClientError::Unavailable(format!("cannot load the queue library: {}", server_text(&e))));
    }
    match installed_version(conn, node).await? {
        Some(v) if v == LIBRARY_VERSION => Ok(()),
        other => Err(ClientError::protocol(format!(
            "loaded library version {LIBRARY_VERSION} but queue_version says {other:?}"
        ))),
    }
}

/// Makes sure every primary holds the embedded library or a newer one, loading it
/// where it is missing or outdated.
pub(crate) async fn ensure_library(conn: &Conn) -> Result<(), ClientError> {
    for (node, version) in installed(conn).await? {
        let current = version.as_deref().is_some_and(|v| !is_outdated(v, LIBRARY_VERSION));
        if !current {
            load(conn, &node).await?;
        }
    }
    Ok(())
}
