//! `watch drive`: one measured phase: the churn (entries, leaves, PROMOTEs with the
//! queue-manager's announcement), the probes, and over the window the deltas of
//! Valkey's statistics and of the streams' status files, written as one JSON object.

use super::probes::{leave_probe, open_first, resolve, Expect, Samples, Watcher, Window};
use super::sse_tcp::rank;
use super::valkey::{drain_slowlog, field_i64, field_str, int, qcmd, snapshot};
use super::DriveArgs;
use redis::Value;
use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Default, Clone, serde::Serialize)]
struct Churn {
    entered: u64,
    enter_errors: u64,
    leaves: u64,
    left: u64,
    promotes: u64,
    promoted: u64,
    tickets_expired: u64,
    announced: u64,
    errors: u64,
}

/// A turn probe: a person of the line watched until their turn.
struct Turn {
    user: String,
    /// The reply of the PROMOTE that promoted them.
    promoted_at: Option<Instant>,
    /// Their `promoted` event.
    event_at: Option<Instant>,
    /// Left the line (a random leave), or their stream ended otherwise.
    gone: bool,
}

pub(super) async fn drive(a: DriveArgs) -> Result<(), String> {
    let lua = a.backend == "lua";
    let client = redis::Client::open(a.valkey.as_str()).map_err(|e| e.to_string())?;
    let conn = |name: &'static str| {
        let client = client.clone();
        async move {
            let mut c = client.get_multiplexed_async_connection().await.map_err(|e| e.to_string())?;
            let _: Result<(), _> = redis::cmd("CLIENT").arg("SETNAME").arg(name).query_async(&mut c).await;
            Ok::<_, String>(c)
        }
    };
    let mut meter = conn("bench-meter").await?;
    let source = Ipv4Addr::new(127, 0, 0, a.source);
    let queue = a.queue.clone();
    let tag = a.tag.clone();
    let promoting = a.promote_rate > 0.0;

    // Promote probe watchers: at the back, streams open before anything starts.
    let promote_out = Arc::new(Mutex::new(Samples::default()));
    let mut watchers: Vec<(String, Arc<Mutex<Watcher>>)> = Vec::new();
    let mut readers = Vec::new();
    if promoting {
        let mut c = conn("bench-probe").await?;
        for k in 0..a.promote_probes {
            let user = format!("{}pw-{k}", a.tag);
            qcmd(lua, "QUEUE.ENTER", &queue)
                .arg(&user)
                .arg("probe")
                .query_async::<Value>(&mut c)
                .await
                .map_err(|e| e.to_string())?;
            let api = a.api[k % a.api.len()];
            let (sse, first) = open_first(api, source, &queue, &user).await?;
            let w = Arc::new(Mutex::new(Watcher::default()));
            w.lock().unwrap().last = Some((rank(&first).unwrap_or(-1), Instant::now()));
            readers.push((sse, w.clone()));
            watchers.push((user, w));
        }
    }

    // Turn probes: people of the line (`p-0000000` .., promoted in that order) whose
    // turn comes during the window at the promotion rate, a stream each.
    let turns: Arc<Mutex<Vec<Turn>>> = Arc::default();
    if promoting && a.turn_probes > 0 {
        let ahead = a.promote_rate * (a.warmup + 0.5);
        let span = a.promote_rate * (a.secs - 1.0).max(0.5);
        for k in 0..a.turn_probes {
            let i = (ahead + span * k as f64 / a.turn_probes as f64) as u64;
            if i >= a.line {
                break;
            }
            let user = format!("p-{i:07}");
            let api = a.api[k % a.api.len()];
            let Ok((mut sse, first)) = open_first(api, source, &queue, &user).await else { continue };
            if first.name != "position" {
                continue;
            }
            let n = {
                let mut t = turns.lock().unwrap();
                t.push(Turn { user, promoted_at: None, event_at: None, gone: false });
                t.len() - 1
            };
            let turns = turns.clone();
            tokio::spawn(async move {
                while let Some(ev) = sse.next().await {
                    let mut t = turns.lock().unwrap();
                    match ev.name.as_str() {
                        "position" => continue,
                        "promoted" => t[n].event_at = Some(Instant::now()),
                        _ => t[n].gone = true,
                    }
                    return;
                }
            });
        }
    }

    // Leave probes: each a chain of victims and a watcher, entered at the back, the
    // watcher's stream open before the window.
    let leave_out = Arc::new(Mutex::new(Samples::default()));
    let mut tasks = Vec::new();
    let victims = ((a.warmup + a.secs) / 0.2).ceil() as usize + 1;
    for k in 0..a.leave_probes {
        let mut c = conn("bench-probe").await?;
        let mut p = redis::pipe();
        for v in 0..victims {
            p.add_command(qcmd(lua, "QUEUE.ENTER", &queue).arg(format!("{}lv-{k}-{v:04}", a.tag)).arg("probe").clone())
                .ignore();
        }
        p.add_command(qcmd(lua, "QUEUE.ENTER", &queue).arg(format!("{tag}lw-{k}")).arg("probe").clone()).ignore();
        p.query_async::<()>(&mut c).await.map_err(|e| e.to_string())?;
        let api = a.api[(k + 1) % a.api.len()];
        let (sse, _) = open_first(api, source, &queue, &format!("{tag}lw-{k}")).await?;
        tasks.push((sse, c));
    }
    tokio::time::sleep(Duration::from_millis(a.probe_settle_ms)).await;
    // The window starts after the warmup, counted from here.
    let start = Instant::now() + Duration::from_secs_f64(a.warmup);
    let win = Arc::new(Window { start, end: start + Duration::from_secs_f64(a.secs) });
    for (mut sse, w) in readers {
        let (win, out) = (win.clone(), promote_out.clone());
        tokio::spawn(async move {
            while let Some(ev) = sse.next().await {
                let rank = if ev.name == "position" { rank(&ev).unwrap_or(i64::MAX) } else { -1 };
                resolve(&mut w.lock().unwrap(), rank, Instant::now(), &win, &out);
            }
        });
    }
    let tasks: Vec<_> = tasks
        .into_iter()
        .enumerate()
        .map(|(k, (sse, c))| {
            tokio::spawn(leave_probe(
                k,
                c,
                sse,
                victims,
                tag.clone(),
                queue.clone(),
                lua,
                win.clone(),
                leave_out.clone(),
            ))
        })
        .collect();
    let mut tasks = tasks;

    // The floor: an ECHO every 200 ms, as sparse as queue-api's own calls in a quiet
    // line, so that the report can show what any command costs here when sent that
    // rarely (commandstats `echo`: never counted as push).
    {
        let mut c = conn("bench-floor").await?;
        let win = win.clone();
        tasks.push(tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(200));
            while Instant::now() < win.end {
                tick.tick().await;
                let _: Result<String, _> = redis::cmd("ECHO").arg("floor").query_async(&mut c).await;
            }
        }));
    }

    // Churn: entries and leaves every 10 ms, PROMOTE every promote_every_ms.
    let churn = Arc::new(Mutex::new(Churn::default()));
    if a.enter_rate > 0.0 || a.leave_rate > 0.0 {
        let mut c = conn("bench-churn").await?;
        let (queue, churn, win) = (queue.clone(), churn.clone(), win.clone());
        let (enter_rate, leave_rate, line) = (a.enter_rate, a.leave_rate, a.line);
        let promote_rate = a.promote_rate;
        tasks.push(tokio::spawn(async move {
            let t0 = Instant::now();
            let (mut entered, mut left) = (0u64, 0u64);
            let mut tick = tokio::time::interval(Duration::from_millis(10));
            while Instant::now() < win.end {
                tick.tick().await;
                let secs = t0.elapsed().as_secs_f64();
                let mut p = redis::pipe();
                let mut n_enter = 0;
                while (entered as f64) < enter_rate * secs {
                    p.add_command(qcmd(lua, "QUEUE.ENTER", &queue).arg(format!("c-{entered:07}")).arg("churn").clone());
                    entered += 1;
                    n_enter += 1;
                }
                let mut n_leave = 0;
                while (left as f64) < leave_rate * secs {
                    // A random person still in line, most likely: promotions take the
                    // head at promote_rate, entries add c-... at the back.
                    let head = ((promote_rate * secs) as u64).min(line);
                    let pool = (line - head) + entered;
                    let pick = rand::random_range(0..pool.max(1));
                    let who = if pick < line - head {
                        format!("p-{:07}", head + pick)
                    } else {
                        format!("c-{:07}", pick - (line - head))
                    };
                    p.add_command(qcmd(lua, "QUEUE.LEAVE", &queue).arg(who).clone());
                    left += 1;
                    n_leave += 1;
                }
                if n_enter + n_leave == 0 {
                    continue;
                }
                let r: Result<Vec<Value>, _> = p.query_async(&mut c).await;
                let mut ch = churn.lock().unwrap();
                match r {
                    Ok(v) => {
                        ch.entered += n_enter as u64;
                        ch.leaves += n_leave as u64;
                        for x in &v[n_enter..] {
                            if int(x) == Some(1) {
                                ch.left += 1;
                            }
                        }
                        ch.enter_errors +=
                            v[..n_enter].iter().filter(|x| matches!(x, Value::ServerError(_))).count() as u64;
                    }
                    Err(_) => ch.errors += 1,
                }
            }
        }));
    }
    if promoting {
        let mut c = conn("bench-churn").await?;
        let (queue, churn, win, out) = (queue.clone(), churn.clone(), win.clone(), promote_out.clone());
        let every = Duration::from_millis(a.promote_every_ms.max(1));
        let max = ((a.promote_rate * every.as_secs_f64()).round() as i64).max(1);
        let announce = a.announce;
        let watchers = watchers.clone();
        let turns = turns.clone();
        tasks.push(tokio::spawn(async move {
            let mut held = 0i64;
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            while Instant::now() < win.end {
                tick.tick().await;
                let mut tx = redis::pipe();
                tx.atomic();
                for (u, _) in &watchers {
                    tx.add_command(qcmd(lua, "QUEUE.STATUS", &queue).arg(u).clone());
                }
                // The soft cap just lets MAX more in: a slot freed between PROMOTEs (a
                // ticket holder leaving) promotes one, not batch_max.
                tx.add_command(qcmd(lua, "QUEUE.CONFIG", &queue).arg("SET").arg("soft_cap").arg(held + max).clone()).ignore();
                tx.add_command(qcmd(lua, "QUEUE.PROMOTE", &queue).arg("MAX").arg(max).clone());
                // The next turn probes not promoted yet: promoted by this PROMOTE
                // when their status right after it (in the same MULTI) says so.
                let next: Vec<(usize, String)> = {
                    let t = turns.lock().unwrap();
                    t.iter()
                        .enumerate()
                        .filter(|(_, t)| t.promoted_at.is_none() && !t.gone)
                        .take(3)
                        .map(|(n, t)| (n, t.user.clone()))
                        .collect()
                };
                for (_, u) in &next {
                    tx.add_command(qcmd(lua, "QUEUE.STATUS", &queue).arg(u).clone());
                }
                let r: Result<Vec<Value>, _> = tx.query_async(&mut c).await;
                let t0 = Instant::now();
                let Ok(v) = r else {
                    churn.lock().unwrap().errors += 1;
                    continue;
                };
                let Some(report) = v.get(watchers.len()) else { continue };
                {
                    let mut t = turns.lock().unwrap();
                    for ((n, _), st) in next.iter().zip(&v[watchers.len() + 1..]) {
                        match field_str(st, "status").unwrap_or_default().as_str() {
                            "PROMOTED" => t[*n].promoted_at = Some(t0),
                            "WAITING" => {}
                            _ => t[*n].gone = true,
                        }
                    }
                }
                let promoted = field_i64(report, "promoted").unwrap_or(0);
                let expired = field_i64(report, "tickets_expired").unwrap_or(0);
                let waiting = field_i64(report, "waiting").unwrap_or(0);
                held = field_i64(report, "joining").unwrap_or(0) + field_i64(report, "active").unwrap_or(0);
                {
                    let mut ch = churn.lock().unwrap();
                    ch.promotes += 1;
                    ch.promoted += promoted as u64;
                    ch.tickets_expired += expired as u64;
                }
                if promoted > 0 {
                    for ((_, w), st) in watchers.iter().zip(&v) {
                        let status = field_str(st, "status").unwrap_or_default();
                        let Some(rank) = field_i64(st, "rank").filter(|_| status == "WAITING") else { continue };
                        let expect = Expect { rank: rank - promoted, t0 };
                        let mut w = w.lock().unwrap();
                        // An event already at or below it can only show a state after
                        // the PROMOTE (ranks never rise): it came before the reply.
                        match w.last {
                            Some((r, at)) if r <= expect.rank && at >= t0 - Duration::from_secs(1) => {
                                if win.inside(t0) {
                                    out.lock().unwrap().ms.push(0.0);
                                }
                            }
                            _ => w.pending.push(expect),
                        }
                    }
                }
                if announce && promoted + expired > 0 {
                    let ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis();
                    let payload = serde_json::json!({"queue": queue, "promoted": promoted, "waiting": waiting, "atMs": ms as u64});
                    let ch = format!("queue:{{{queue}}}:promoted");
                    if redis::cmd("PUBLISH").arg(ch).arg(payload.to_string()).query_async::<i64>(&mut c).await.is_ok() {
                        churn.lock().unwrap().announced += 1;
                    }
                }
            }
        }));
    }

    // The window.
    tokio::time::sleep_until(win.start.into()).await;
    if lua {
        for (k, v) in [("slowlog-log-slower-than", "0"), ("slowlog-max-len", "1000000")] {
            let _: Result<(), _> = redis::cmd("CONFIG").arg("SET").arg(k).arg(v).query_async(&mut meter).await;
        }
        let _: Result<(), _> = redis::cmd("SLOWLOG").arg("RESET").query_async(&mut meter).await;
    }
    let s0 = snapshot(&mut meter, &a.status).await?;
    let api0 = processes_cpu_s(&a.api_pids);
    let c0 = churn.lock().unwrap().clone();
    let mut split: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    while Instant::now() < win.end {
        tokio::time::sleep(Duration::from_millis(250).min(win.end.saturating_duration_since(Instant::now()))).await;
        if lua {
            drain_slowlog(&mut meter, &mut split).await;
        }
    }
    let s1 = snapshot(&mut meter, &a.status).await?;
    let api1 = processes_cpu_s(&a.api_pids);
    let c1 = churn.lock().unwrap().clone();
    if lua {
        drain_slowlog(&mut meter, &mut split).await;
        let _: Result<(), _> =
            redis::cmd("CONFIG").arg("SET").arg("slowlog-log-slower-than").arg("10000").query_async(&mut meter).await;
        let _: Result<(), _> = redis::cmd("SLOWLOG").arg("RESET").query_async(&mut meter).await;
    }
    // Let pending probes finish (their own timeouts bound this).
    for t in tasks {
        let _ = tokio::time::timeout(Duration::from_secs(12), t).await;
    }
    let secs = (s1.at - s0.at).as_secs_f64();
    let mut cmd = serde_json::Map::new();
    for (name, (calls, usec)) in &s1.cmd {
        let (c0, u0) = s0.cmd.get(name).copied().unwrap_or((0, 0));
        if calls > &c0 {
            cmd.insert(name.clone(), serde_json::json!([calls - c0, usec - u0]));
        }
    }
    let fcall: serde_json::Map<String, serde_json::Value> =
        split.iter().map(|(k, (c, u))| (k.clone(), serde_json::json!([c, u]))).collect();
    // Turn probes promoted in the window and promote probes moved in it: their event,
    // if it has not come yet, within 10 s (a rank event is paced by --push-interval, so
    // a PROMOTE near the window's end is told up to an interval and a quarter later).
    // Promote probes' expectations from inside the window still waiting for their event.
    let moved_pending = || -> u64 {
        watchers.iter().map(|(_, w)| w.lock().unwrap().pending.iter().filter(|e| win.inside(e.t0)).count() as u64).sum()
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    let (turn_ms, turn_timeouts) = loop {
        let moved_pending = moved_pending();
        let done = {
            let t = turns.lock().unwrap();
            let inside: Vec<&Turn> = t.iter().filter(|t| t.promoted_at.is_some_and(|at| win.inside(at))).collect();
            let waiting = inside.iter().filter(|t| t.event_at.is_none() && !t.gone).count();
            (Instant::now() >= deadline || (waiting == 0 && moved_pending == 0)).then(|| {
                let ms: Vec<f64> = inside
                    .iter()
                    .filter_map(|t| Some(t.event_at?.saturating_duration_since(t.promoted_at?).as_secs_f64() * 1e3))
                    .collect();
                (ms, waiting)
            })
        };
        match done {
            Some(r) => break r,
            None => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    };
    let mut promote = promote_out.lock().unwrap();
    promote.timeouts += moved_pending();
    let leave = leave_out.lock().unwrap();
    // The churn done inside the window.
    let (c0, c1) = (serde_json::to_value(&c0).unwrap(), serde_json::to_value(&c1).unwrap());
    let churn_win: serde_json::Map<String, serde_json::Value> = c1
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), (v.as_u64().unwrap_or(0) - c0[k].as_u64().unwrap_or(0)).into()))
        .collect();
    let result = serde_json::json!({
        "secs": secs,
        "cmdstats": cmd,
        "fcall_split": fcall,
        "cpu_main_s": s1.cpu_main - s0.cpu_main,
        "cpu_all_s": s1.cpu_all - s0.cpu_all,
        "api_cpu_s": api1 - api0,
        "streams_start": s0.streams,
        "streams_end": s1.streams,
        "lat_leave_ms": leave.ms, "leave_timeouts": leave.timeouts, "leave_errors": leave.errors,
        "lat_promote_ms": promote.ms, "promote_timeouts": promote.timeouts,
        "lat_turn_ms": turn_ms, "turn_timeouts": turn_timeouts,
        "churn": churn_win,
    });
    std::fs::write(&a.out, format!("{result}\n")).map_err(|e| format!("{}: {e}", a.out))?;
    Ok(())
}

/// CPU seconds (user and system) the processes `pids` have used so far, from
/// /proc/<pid>/stat (a process gone counts 0).
fn processes_cpu_s(pids: &[u32]) -> f64 {
    // /proc counts in USER_HZ, 100 a second on Linux whatever the kernel's own tick.
    let tick = 100.0;
    pids.iter()
        .filter_map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            // The fields after the command's name (which may hold spaces) in parentheses.
            let rest = &stat[stat.rfind(')')? + 2..];
            let f: Vec<&str> = rest.split(' ').collect();
            // utime and stime are fields 14 and 15 of the whole line: 11 and 12 (from 0) here.
            Some((f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?) as f64 / tick)
        })
        .sum()
}
