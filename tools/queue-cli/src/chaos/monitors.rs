//! The monitors of a chaos run, each a loop beside the swarm: a probe entry through
//! queue-api every 200 ms, a sample of the queue's holders and counters from Valkey
//! every 250 ms, and who leads among the managers every 200 ms.

use super::valkey::{holders, queue_info, valkey_conn};
use super::QUEUE;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// One slot seen held: a ticket (kind 't') or a session ('s') of a user.
#[derive(Debug, Clone)]
pub struct Hold {
    pub kind: char,
    pub user: String,
    pub first_seen: Instant,
    /// The first sample without it (or the end of the run while still held).
    pub gone: Instant,
}

/// One probe entry.
#[derive(Debug, Clone, Copy)]
pub struct Probe {
    pub sent: Instant,
    pub answered: Instant,
    pub ok: bool,
}

#[derive(Default)]
pub(super) struct Monitor {
    /// Probe entries: when sent, when answered (or given up), whether it went through.
    pub(super) probes: Vec<Probe>,
    /// Successful samples of the promoted counter.
    pub(super) promoted: Vec<(Instant, u64)>,
    pub(super) open_holds: HashMap<(char, String), Instant>,
    pub(super) holds: Vec<Hold>,
    /// Who leads, per manager (None: no answer).
    pub(super) leaders: Vec<(Instant, [Option<bool>; 2])>,
    pub(super) samples_failed: u64,
}

pub(super) async fn probe_loop(mon: Arc<Mutex<Monitor>>, http: reqwest::Client, api: String) {
    let mut i: u32 = 0;
    loop {
        i = i.wrapping_add(1);
        let ff = format!("10.254.{}.{}", (i >> 8) & 255, i & 255);
        let a = crate::api::Api::new(http.clone(), &api, QUEUE, Some(ff));
        let sent = Instant::now();
        let r = tokio::time::timeout(Duration::from_secs(2), a.enter("probe")).await;
        let ok = matches!(r, Ok(Ok(_)));
        mon.lock().unwrap().probes.push(Probe { sent, answered: Instant::now(), ok });
        if let Ok(Ok(s)) = r {
            // Leave at once, so the probe holds no place and no slot.
            for _ in 0..5 {
                if tokio::time::timeout(Duration::from_secs(2), a.leave(&s.user_id)).await.is_ok_and(|r| r.is_ok()) {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
        tokio::time::sleep_until((sent + Duration::from_millis(200)).into()).await;
    }
}

pub(super) async fn sample_loop(mon: Arc<Mutex<Monitor>>, url: String) {
    let mut conn = None;
    loop {
        let at = Instant::now();
        if conn.is_none() {
            conn = valkey_conn(&url).await.ok();
        }
        let got = match conn.as_mut() {
            Some(c) => match (holders(c).await, queue_info(c).await) {
                (Ok(h), Ok(info)) => Some((h, info)),
                _ => None,
            },
            None => None,
        };
        let now = Instant::now();
        let failed = got.is_none();
        record_sample(&mut mon.lock().unwrap(), got, now);
        if failed {
            conn = None;
        }
        tokio::time::sleep_until((at + Duration::from_millis(250)).into()).await;
    }
}

type Sample = ((Vec<String>, Vec<String>), BTreeMap<String, i64>);

fn record_sample(m: &mut Monitor, got: Option<Sample>, now: Instant) {
    match got {
        None => m.samples_failed += 1,
        Some(((tickets, sessions), info)) => {
            if let Some(p) = info.get("promoted") {
                m.promoted.push((now, (*p).max(0) as u64));
            }
            let seen: std::collections::HashSet<(char, String)> =
                tickets.into_iter().map(|u| ('t', u)).chain(sessions.into_iter().map(|u| ('s', u))).collect();
            let gone: Vec<(char, String)> = m.open_holds.keys().filter(|k| !seen.contains(*k)).cloned().collect();
            for k in gone {
                let first_seen = m.open_holds.remove(&k).expect("listed");
                m.holds.push(Hold { kind: k.0, user: k.1, first_seen, gone: now });
            }
            for k in seen {
                m.open_holds.entry(k).or_insert(now);
            }
        }
    }
}

pub(super) async fn is_leader(http: &reqwest::Client, port: u16) -> Option<bool> {
    let url = format!("http://127.0.0.1:{port}/metrics");
    let r = http.get(url).timeout(Duration::from_millis(400)).send().await.ok()?;
    let text = r.text().await.ok()?;
    let line = text.lines().find(|l| l.starts_with("queue_manager_is_leader"))?;
    Some(line.split_whitespace().last()? == "1")
}

pub(super) async fn leader_loop(mon: Arc<Mutex<Monitor>>, http: reqwest::Client, ports: [u16; 2]) {
    loop {
        let at = Instant::now();
        let (a, b) = tokio::join!(is_leader(&http, ports[0]), is_leader(&http, ports[1]));
        mon.lock().unwrap().leaders.push((at, [a, b]));
        tokio::time::sleep_until((at + Duration::from_millis(200)).into()).await;
    }
}
