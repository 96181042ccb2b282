//! The probes of `watch drive`: the time from a change of a watched person's standing
//! (a leave ahead of them, a PROMOTE) to the event on their stream, sampled inside the
//! measured window.

use super::sse_tcp::{rank, Event, Sse};
use super::valkey::{field_i64, qcmd};
use redis::aio::MultiplexedConnection;
use redis::Value;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Latency samples (ms) and how many expected events never came.
#[derive(Default)]
pub(super) struct Samples {
    pub(super) ms: Vec<f64>,
    pub(super) timeouts: u64,
    pub(super) errors: u64,
}

pub(super) struct Window {
    pub(super) start: Instant,
    pub(super) end: Instant,
}

impl Window {
    pub(super) fn inside(&self, t: Instant) -> bool {
        t >= self.start && t < self.end
    }
}

pub(super) async fn open_first(
    api: SocketAddr,
    source: Ipv4Addr,
    queue: &str,
    user: &str,
) -> Result<(Sse, Event), String> {
    let mut s = Sse::open(api, source, queue, user).await?;
    let first = tokio::time::timeout(Duration::from_secs(10), s.next())
        .await
        .map_err(|_| "no first event".to_string())?
        .ok_or("ended before the first event")?;
    Ok((s, first))
}

/// Leave probe number `k`: its watcher waits at the back of the line behind a chain of
/// `victims` people; each round, the victim right ahead of the watcher leaves, and the
/// time until the watcher's stream shows it is one sample. The watcher's stream is
/// opened before the window and stays open (opening one wakes the instance's push
/// path, which would be counted as push cost), and rounds are spread at random over a
/// second so that they fall anywhere between an instance's refreshes.
#[allow(clippy::too_many_arguments)]
pub(super) async fn leave_probe(
    k: usize,
    mut conn: MultiplexedConnection,
    mut sse: Sse,
    victims: usize,
    tag: String,
    queue: String,
    lua: bool,
    win: Arc<Window>,
    out: Arc<Mutex<Samples>>,
) {
    let watcher = format!("{tag}lw-{k}");
    let mut next = victims;
    while Instant::now() < win.end && next > 0 {
        tokio::time::sleep(Duration::from_millis(rand::random_range(200..1200))).await;
        next -= 1;
        let victim = format!("{tag}lv-{k}-{next:04}");
        let mut tx = redis::pipe();
        tx.atomic()
            .add_command(qcmd(lua, "QUEUE.STATUS", &queue).arg(&watcher).clone())
            .add_command(qcmd(lua, "QUEUE.LEAVE", &queue).arg(&victim).clone());
        let r: Result<Vec<Value>, _> = tx.query_async(&mut conn).await;
        let t0 = Instant::now();
        let Some(before) = r.ok().and_then(|v| v.first().and_then(|s| field_i64(s, "rank"))) else {
            out.lock().unwrap().errors += 1;
            continue;
        };
        let wait = tokio::time::timeout(Duration::from_secs(10), async {
            while let Some(ev) = sse.next().await {
                if ev.name != "position" || rank(&ev).is_some_and(|r| r < before) {
                    return Some((Instant::now(), ev.name != "position"));
                }
            }
            None
        })
        .await;
        let mut o = out.lock().unwrap();
        match wait {
            Ok(Some((t1, ended))) => {
                if win.inside(t0) {
                    o.ms.push((t1 - t0).as_secs_f64() * 1e3);
                }
                if ended {
                    o.errors += 1;
                    return;
                }
            }
            Ok(None) => {
                o.errors += 1;
                return;
            }
            Err(_) => {
                if win.inside(t0) {
                    o.timeouts += 1;
                }
            }
        }
    }
}

/// What a promote probe's watcher waits for: an event at or below `rank` (or another
/// status), expected since `t0`.
pub(super) struct Expect {
    pub(super) rank: i64,
    pub(super) t0: Instant,
}

#[derive(Default)]
pub(super) struct Watcher {
    pub(super) pending: Vec<Expect>,
    /// The last event: (rank, or -1 when not waiting; when it came).
    pub(super) last: Option<(i64, Instant)>,
}

pub(super) fn resolve(w: &mut Watcher, rank: i64, at: Instant, win: &Window, out: &Mutex<Samples>) {
    w.last = Some((rank, at));
    w.pending.retain(|e| {
        if rank <= e.rank {
            if win.inside(e.t0) {
                out.lock().unwrap().ms.push(at.saturating_duration_since(e.t0).as_secs_f64() * 1e3);
            }
            false
        } else {
            true
        }
    });
}
