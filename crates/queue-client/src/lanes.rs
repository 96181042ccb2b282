//! Lanes and access codes (docs/commands.md, "Lanes and access codes"): entering a
//! lane, with or without an access code (`QUEUE.ENTER ... [LANE l] [CODE h]`), and an
//! operator's codes (`QUEUE.CODES Q ADD | REMOVE | COUNTS`). Codes travel and are kept
//! only as their hash, [`code_hash`], so that every service hashes a code alike and
//! Valkey never holds one a reader could use.
//!
//! The refusals: [`QueueError::Invite`] (a plain entry into an invitation-only queue),
//! [`QueueError::NoCode`] (a code unknown or used up) and [`QueueError::CodeLane`] (a
//! code of another lane than the one named), as [`ClientError::Refused`]; a lane the
//! queue does not have, a queue without lanes, a hash that is not one, as
//! [`ClientError::InvalidArgument`] with the server's text. A refused entry consumes
//! no use of its code.

use crate::backend::{self, Backend};
use crate::error::is_missing_command;
use crate::reply::{array, int, text};
#[cfg(doc)]
use crate::QueueError;
use crate::{in_command_span, ClientError, Op, QueueClient, Standing};
use redis::Value;
use sha2::{Digest, Sha256};

/// An access code's hash as the queue keeps it: the hex SHA-256 of the code's text
/// (64 lowercase hex digits). Hash a code with this, never by hand, so that the codes
/// an operator adds and the ones visitors bring match.
pub fn code_hash(code: &str) -> String {
    queue_core::hex::hex(&Sha256::digest(code.as_bytes()))
}

/// `QUEUE.ENTER`'s options: the lane to enter and an access code's hash. With
/// neither, the entry is a plain one (a queue with lanes puts it in its last lane).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EntryOptions {
    /// `LANE l`: a lane of the queue (with a code, it must be the code's).
    pub lane: Option<String>,
    /// `CODE h`: an access code's hash ([`code_hash`]); enters the code's lane and
    /// consumes one of its uses.
    pub code_hash: Option<String>,
}

/// One lane's access codes, as `QUEUE.CODES Q COUNTS` reports them.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LaneCodes {
    /// The lane, in the queue's order.
    pub lane: String,
    /// Codes of this lane.
    pub codes: u64,
    /// Uses consumed, over its codes.
    pub used: u64,
    /// Uses left, over its codes.
    pub left: u64,
}

/// The command, and its function in the Lua library.
const CODES: &str = "QUEUE.CODES";
const CODES_FUNCTION: &str = "queue_codes";

fn count(v: &Value, what: &str) -> Result<u64, ClientError> {
    int(v)
        .and_then(|n| u64::try_from(n).ok())
        .ok_or_else(|| ClientError::protocol(format!("{what}: expected a count, got {v:?}")))
}

impl QueueClient {
    /// `QUEUE.ENTER Q userId nickname [LANE l] [CODE h]`: [`QueueClient::enter`] into a
    /// lane, or with an access code (its lane; one use consumed, only when the entry
    /// is not refused). Fails with [`QueueError::Invite`], [`QueueError::NoCode`],
    /// [`QueueError::CodeLane`], [`QueueError::LineFull`] as refusals; an unknown lane
    /// or a queue without lanes is [`ClientError::InvalidArgument`].
    pub async fn enter_with(
        &self,
        queue: &str,
        user_id: &str,
        nickname: &str,
        options: &EntryOptions,
    ) -> Result<Standing, ClientError> {
        let mut args = vec![user_id, nickname];
        if let Some(lane) = &options.lane {
            args.extend(["LANE", lane]);
        }
        if let Some(h) = &options.code_hash {
            args.extend(["CODE", h]);
        }
        Standing::from_value(self.run(Op::Enter, queue, &args).await?)
    }

    /// `QUEUE.CODES Q ADD lane uses h...`: adds access codes (their hashes, at most
    /// 1000 a call) to `lane`, each good for `uses` entries (1 to 1000000); a code
    /// already there moves to `lane` with `uses`, keeping the uses it consumed. Returns
    /// how many codes are new. An empty list asks nothing.
    pub async fn codes_add<S: AsRef<str>>(
        &self,
        queue: &str,
        lane: &str,
        uses: u64,
        hashes: &[S],
    ) -> Result<u64, ClientError> {
        if hashes.is_empty() {
            return Ok(0);
        }
        let uses = uses.to_string();
        let mut args = vec!["ADD", lane, &uses];
        args.extend(hashes.iter().map(AsRef::as_ref));
        count(&self.codes(queue, &args).await?, "codes add")
    }

    /// `QUEUE.CODES Q REMOVE h...`: removes access codes; how many were there. An
    /// empty list asks nothing.
    pub async fn codes_remove<S: AsRef<str>>(&self, queue: &str, hashes: &[S]) -> Result<u64, ClientError> {
        if hashes.is_empty() {
            return Ok(0);
        }
        let mut args = vec!["REMOVE"];
        args.extend(hashes.iter().map(AsRef::as_ref));
        count(&self.codes(queue, &args).await?, "codes remove")
    }

    /// `QUEUE.CODES Q COUNTS`: per lane, in the queue's order, its codes and their uses
    /// consumed and left.
    pub async fn codes_counts(&self, queue: &str) -> Result<Vec<LaneCodes>, ClientError> {
        array(self.codes(queue, &["COUNTS"]).await?, "codes counts")?
            .into_iter()
            .map(|row| {
                let row = array(row, "codes counts row")?;
                let [lane, codes, used, left] = row.as_slice() else {
                    return Err(ClientError::protocol(format!("codes counts: a row of {} items, want 4", row.len())));
                };
                Ok(LaneCodes {
                    lane: text(lane).ok_or_else(|| ClientError::protocol("codes counts: a lane that is not text"))?,
                    codes: count(codes, "codes counts")?,
                    used: count(used, "codes counts")?,
                    left: count(left, "codes counts")?,
                })
            })
            .collect()
    }

    /// Runs `QUEUE.CODES` (`FCALL queue_codes` under the library) as the other queue
    /// commands run: in a command span, the library installed again once if the
    /// server lost it.
    async fn codes(&self, queue: &str, args: &[&str]) -> Result<Value, ClientError> {
        let mut cmd = match self.backend {
            Backend::Module => redis::cmd(CODES),
            Backend::Lua => {
                let mut c = redis::cmd("FCALL");
                c.arg(CODES_FUNCTION).arg(1);
                c
            }
        };
        cmd.arg(queue).arg(args);
        in_command_span(CODES, queue, async {
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
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn code_hash_is_hex_sha256() {
        assert_eq!(code_hash("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
        let h = code_hash("PRESALE-2026-XYZ");
        assert!(queue_core::lanes::check_code(h.as_bytes()).is_ok(), "the form the queue accepts: {h}");
        assert_ne!(code_hash("a"), code_hash("A"), "codes are case-sensitive");
    }
}
