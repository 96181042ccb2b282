//! The gate describes itself to the back office: at start and every [`REFRESH`] it
//! writes a description of its configuration into Valkey (hash `gate:instances`, one
//! field per running instance, [`queue_client::gates`]) that queue-api's back office
//! reads (`GET /api/admin/gates`) to show which routes lead to each queue and how the
//! gate runs. Nothing secret is in it: no key, no bypass secret (only whether one is
//! set), no Valkey or app URL.
//!
//! A hash field has no TTL of its own on Valkey 8.0, so each description carries its
//! expiry ([`LIFETIME`] after it was written): readers skip expired ones, and every
//! gate removes the expired descriptions it finds when it writes its own. A gate that
//! stops withdraws its own; one that dies is gone from the back office within
//! [`LIFETIME`].

use crate::config::Config;
use crate::rules::{QueueSettings, Unmatched};
use crate::{now_ms, Gate};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// How often a gate writes its description again.
pub const REFRESH: Duration = Duration::from_secs(10);
/// How long a description counts after it was written (three refreshes: one missed
/// write does not make a running gate disappear).
pub const LIFETIME: Duration = Duration::from_secs(30);

/// This instance's name in the hash: the host's name, the process id and the start
/// time, so that two gates on one host (or a restarted one) are told apart.
pub fn instance_id(started_ms: u64) -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "gate".into());
    format!("{host}:{}:{started_ms}", std::process::id())
}

fn ms(d: Duration) -> u64 {
    d.as_millis() as u64
}

fn session(s: &QueueSettings) -> Value {
    json!({ "idleMs": ms(s.idle), "maxSessionMs": s.max_session.map(ms), "straightThrough": s.straight_through })
}

/// The description of a gate running with `config`, listening on `listen`, written at
/// `now_ms`.
pub fn describe(config: &Config, instance: &str, listen: &str, started_ms: u64, now_ms: u64) -> Value {
    let rules = &config.rules;
    let routes: Vec<Value> = rules
        .routes()
        .iter()
        .map(|r| json!({ "host": r.host, "prefix": r.prefix, "queue": r.queue, "staticAssets": r.static_assets }))
        .collect();
    let unmatched = match &rules.unmatched {
        Unmatched::Pass => Value::Null,
        Unmatched::Queue(q) => json!(q),
    };
    let queues: serde_json::Map<String, Value> = rules.queues.iter().map(|(q, s)| (q.clone(), session(s))).collect();
    let d = config.durability;
    json!({
        "instance": instance,
        "version": env!("CARGO_PKG_VERSION"),
        "mode": if config.upstream.is_some() { "proxy" } else { "forward-auth" },
        "listen": listen,
        "publicUrl": config.public_url,
        "waitingRoom": config.waiting_room,
        "servesRoom": config.queue_api.is_some(),
        "routes": routes,
        "unmatched": unmatched,
        "bypass": {
            "paths": rules.bypass_paths,
            "networks": rules.bypass_networks.iter().map(ToString::to_string).collect::<Vec<_>>(),
            "staticExtensions": rules.static_extensions,
            "secret": config.bypass_secret.is_some(),
        },
        "sessions": session(&rules.defaults),
        "queues": queues,
        "tokenTtlMs": ms(config.token_ttl),
        "tickMs": ms(config.tick),
        "cookie": { "name": config.cookie_name, "domain": config.cookie_domain },
        "failOpenMs": config.fail_open.map(ms),
        "durability": { "replicas": d.replicas, "timeoutMs": ms(d.timeout), "aof": d.aof },
        "startedAtMs": started_ms,
        "seenAtMs": now_ms,
        "expiresAtMs": now_ms + ms(LIFETIME),
    })
}

/// The instances whose description expired by `now_ms` (or cannot be read).
pub fn expired(descriptions: &std::collections::HashMap<String, String>, now_ms: u64) -> Vec<String> {
    descriptions
        .iter()
        .filter(|(_, text)| {
            serde_json::from_str::<Value>(text).ok().and_then(|v| v["expiresAtMs"].as_u64()).is_none_or(|t| t <= now_ms)
        })
        .map(|(id, _)| id.clone())
        .collect()
}

/// Writes this gate's description now and every [`REFRESH`] until `stop`, then
/// withdraws it. A write Valkey refuses is logged once (until one succeeds again).
pub async fn publish_loop(gate: Arc<Gate>, listen: String, mut stop: watch::Receiver<bool>) {
    let started = now_ms();
    let id = instance_id(started);
    let mut failing = false;
    loop {
        let wait = match gate.store.client().await {
            // The connection is made in the background: described as soon as it is up.
            None => Duration::from_millis(50),
            Some(client) => {
                let now = now_ms();
                // The expired ones first: the description written is this round's last
                // command (a test that waits for it then sees no other until the next).
                if let Ok(all) = client.gate_descriptions().await {
                    let _ = client.remove_gates(&expired(&all, now)).await;
                }
                let text = describe(&gate.config, &id, &listen, started, now).to_string();
                match client.set_gate(&id, &text).await {
                    Ok(()) => {
                        if std::mem::take(&mut failing) {
                            tracing::info!("the gate's description is written again");
                        }
                    }
                    Err(e) if !failing => {
                        failing = true;
                        tracing::warn!(error = %e, "could not write the gate's description for the back office; retrying");
                    }
                    Err(_) => {}
                }
                REFRESH
            }
        };
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = stop.changed() => break,
        }
    }
    if let Some(client) = gate.store.client().await {
        let _ = client.remove_gates(&[&id]).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::parse_route;

    #[test]
    fn the_description_says_how_the_gate_runs_and_nothing_secret() {
        let mut c = Config::new("redis://user:valkey-password@127.0.0.1:6379/");
        c.rules.add_route(parse_route("/checkout=shop").unwrap());
        c.rules.add_route(parse_route("a.test/tickets/=concert").unwrap());
        c.bypass_secret = Some("staff-secret-0123456789".into());
        c.upstream = Some("http://app-user:app-password@127.0.0.1:3000".parse().unwrap());
        let d = describe(&c, "h:1:2", "127.0.0.1:8090", 1, 1_000);
        assert_eq!(d["mode"], "proxy");
        assert_eq!(
            d["routes"][1],
            json!({ "host": null, "prefix": "/checkout", "queue": "shop", "staticAssets": false })
        );
        // In the order the gate matches them: the longest prefix first.
        assert_eq!(d["routes"][0]["host"], "a.test");
        assert_eq!(d["bypass"]["secret"], true);
        assert_eq!(d["sessions"]["idleMs"], 300_000);
        assert_eq!(d["expiresAtMs"], 1_000 + 30_000);
        let text = d.to_string();
        for secret in ["staff-secret", "password", "PRIVATE", "app-user"] {
            assert!(!text.contains(secret), "{secret} in {text}");
        }
        assert_eq!((&d["publicUrl"], &d["sessions"]["straightThrough"]), (&Value::Null, &json!(true)));
        c.upstream = None;
        c.public_url = Some("https://shop.example".into());
        let d = describe(&c, "h", "l", 1, 1);
        assert_eq!((d["mode"].as_str(), d["publicUrl"].as_str()), (Some("forward-auth"), Some("https://shop.example")));
    }

    #[test]
    fn expired_and_unreadable_descriptions_are_removed() {
        let all: std::collections::HashMap<String, String> = [
            ("live", r#"{"expiresAtMs": 2000}"#),
            ("old", r#"{"expiresAtMs": 1000}"#),
            ("junk", "not json"),
            ("none", "{}"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let mut gone = expired(&all, 1000);
        gone.sort();
        assert_eq!(gone, ["junk", "none", "old"]);
    }
}
