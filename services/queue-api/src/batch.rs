//! Status reads gathered per queue: the status requests that arrive while one
//! `QUEUE.RANKS` call for their queue is under way wait for the next one and are all
//! asked in it. `QUEUE.RANKS` answers each user exactly as `QUEUE.STATUS` would (and
//! counts them as heard from the same way), and every call is sent after the requests
//! in it arrived, so an answer is never older than its request: this is batching, not
//! caching. One call per queue is under way at a time, so the batches grow with the
//! load and a busy queue costs Valkey one command for many requests. A traced
//! request's trace shows its read as a `QUEUE.RANKS` span, from its arrival in the
//! batch to its answer.

use queue_client::{ClientError, QueueClient, Standing};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::sync::oneshot;

/// Most requests answered by one `QUEUE.RANKS` call (bounds its time inside Valkey).
pub const MAX_BATCH: usize = 512;

type Reply = oneshot::Sender<Result<Standing, ClientError>>;

#[derive(Default)]
struct Pending {
    waiting: Vec<(String, Reply)>,
    /// A call for this queue is under way (its task will take `waiting` next).
    busy: bool,
}

/// The gathering point of every queue's status reads.
#[derive(Default)]
pub struct StatusBatcher {
    queues: Mutex<HashMap<String, Pending>>,
}

impl StatusBatcher {
    /// `user`'s standing on `queue`, read by the next `QUEUE.RANKS` call for the queue.
    pub async fn status(
        self: &Arc<Self>,
        client: &QueueClient,
        queue: &str,
        user: String,
    ) -> Result<Standing, ClientError> {
        let (tx, rx) = oneshot::channel();
        let start = {
            let mut queues = self.queues.lock().unwrap();
            // Looked up by &str first: no String made per request.
            if !queues.contains_key(queue) {
                queues.insert(queue.to_string(), Pending::default());
            }
            let p = queues.get_mut(queue).expect("just made");
            p.waiting.push((user, tx));
            !std::mem::replace(&mut p.busy, true)
        };
        if start {
            // The shared call belongs to no request: no span of its own.
            tokio::spawn(queue_client::untraced(self.clone().drain(client.clone(), queue.to_string())));
        }
        // A traced request's span for its read covers the wait and the shared call.
        let read =
            async { rx.await.unwrap_or_else(|_| Err(ClientError::Unavailable("the status read was dropped".into()))) };
        queue_client::in_command_span("QUEUE.RANKS", queue, read).await
    }

    /// Asks for what waits on `queue`, batch after batch, until nothing does.
    async fn drain(self: Arc<Self>, client: QueueClient, queue: String) {
        loop {
            let batch: Vec<(String, Reply)> = {
                let mut queues = self.queues.lock().unwrap();
                let Some(p) = queues.get_mut(&queue) else { return };
                if p.waiting.is_empty() {
                    queues.remove(&queue);
                    return;
                }
                let n = p.waiting.len().min(MAX_BATCH);
                p.waiting.drain(..n).collect()
            };
            // Each user asked once, however many of its requests wait: `slots[k]` is
            // where the k-th request's user is in `users`.
            let mut index: HashMap<&str, usize> = HashMap::with_capacity(batch.len());
            let mut users: Vec<&str> = Vec::with_capacity(batch.len());
            let slots: Vec<usize> = batch
                .iter()
                .map(|(user, _)| {
                    *index.entry(user.as_str()).or_insert_with(|| {
                        users.push(user.as_str());
                        users.len() - 1
                    })
                })
                .collect();
            let answer = client.ranks(&queue, &users).await;
            match answer {
                Ok(standings) => {
                    for ((_, reply), i) in batch.into_iter().zip(slots) {
                        let _ = reply.send(Ok(standings[i].clone()));
                    }
                }
                Err(e) => {
                    for (_, reply) in batch {
                        let _ = reply.send(Err(e.clone()));
                    }
                }
            }
        }
    }
}
