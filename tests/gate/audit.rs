//! The upstream's log audited against the gate's published keys and the swarm's
//! journal: no request reached the app without a valid admission, and the people
//! inside at once never exceeded the soft cap.
//!
//! For every request the app served on a gated path: one of the tokens it carried is a
//! JWT whose signature verifies (written here from RFC 7515/8037 over `ring`'s
//! primitives, not with the gate's code) under a key of the JWKS at
//! `/.well-known/jwks.json`, issued by the gate, for the path's queue (`aud`), for the
//! user the proxy named in X-Queue-User (`sub`), unexpired when the request arrived;
//! and the request arrived inside that user's window in the swarm's journal (after
//! its claim was sent, before it left or its idle time ran out). The one exception is
//! a straight pass (the gate let someone without a token in on that very request, the
//! token set on the answer): one request without a token per person, naming someone
//! the journal has inside from then on. From the log alone,
//! each user is inside from its first request to its last: those spans never overlap
//! more than the soft cap.

use base64::Engine;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};

/// The gate's public keys by `kid`: (alg, key bytes as `ring` takes them).
pub struct Jwks(HashMap<String, (String, Vec<u8>)>);

fn b64(s: &str) -> Result<Vec<u8>, String> {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(s).map_err(|e| format!("bad base64url: {e}"))
}

impl Jwks {
    pub async fn fetch(base: &str) -> Jwks {
        let url = format!("{base}/.well-known/jwks.json");
        let v: Value = reqwest::get(&url).await.unwrap().json().await.unwrap();
        Jwks::from_json(&v).unwrap_or_else(|e| panic!("{url}: {e}: {v}"))
    }

    pub fn from_json(v: &Value) -> Result<Jwks, String> {
        let mut keys = HashMap::new();
        for k in v["keys"].as_array().ok_or("no keys")? {
            let kid = k["kid"].as_str().ok_or("a key without kid")?.to_string();
            let s = |f: &str| k[f].as_str().ok_or_else(|| format!("key {kid} lacks {f}"));
            let key = match (s("kty")?, s("crv")?) {
                ("OKP", "Ed25519") => ("EdDSA".to_string(), b64(s("x")?)?),
                ("EC", "P-256") => {
                    let mut point = vec![4u8];
                    point.extend(b64(s("x")?)?);
                    point.extend(b64(s("y")?)?);
                    ("ES256".to_string(), point)
                }
                (kty, crv) => return Err(format!("key {kid}: unexpected {kty}/{crv}")),
            };
            keys.insert(kid, key);
        }
        if keys.is_empty() {
            return Err("an empty key set".into());
        }
        Ok(Jwks(keys))
    }

    /// The claims of `token` if its signature verifies under one of the keys.
    pub fn verify(&self, token: &str) -> Result<Value, String> {
        let mut parts = token.split('.');
        let (Some(h), Some(c), Some(sig), None) = (parts.next(), parts.next(), parts.next(), parts.next()) else {
            return Err("not a compact JWS".into());
        };
        let header: Value = serde_json::from_slice(&b64(h)?).map_err(|e| format!("header: {e}"))?;
        let kid = header["kid"].as_str().ok_or("no kid")?;
        let (alg, key) = self.0.get(kid).ok_or_else(|| format!("unknown kid {kid}"))?;
        if header["alg"].as_str() != Some(alg.as_str()) {
            return Err(format!("alg {} for a {alg} key", header["alg"]));
        }
        let algorithm: &dyn ring::signature::VerificationAlgorithm = match alg.as_str() {
            "EdDSA" => &ring::signature::ED25519,
            _ => &ring::signature::ECDSA_P256_SHA256_FIXED,
        };
        let signed = &token[..h.len() + 1 + c.len()];
        ring::signature::UnparsedPublicKey::new(algorithm, key)
            .verify(signed.as_bytes(), &b64(sig)?)
            .map_err(|_| "bad signature".to_string())?;
        serde_json::from_slice(&b64(c)?).map_err(|e| format!("claims: {e}"))
    }
}

/// One admitted user's window from the swarm's journal, in µs since the epoch.
#[derive(Debug, Clone, Copy)]
pub struct Window {
    pub from: u64,
    pub until: u64,
}

/// `queue-cli swarm --gate-journal` lines by (queue, user).
pub fn journal(path: &std::path::Path) -> HashMap<(String, String), Window> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            let s = |k: &str| v[k].as_str().unwrap().to_string();
            let n = |k: &str| v[k].as_u64().unwrap();
            ((s("queue"), s("user")), Window { from: n("claimSentUs"), until: n("insideUntilUs") })
        })
        .collect()
}

/// What the audit found.
#[derive(Debug, Default)]
pub struct Audit {
    /// Requests on gated paths, and on others.
    pub gated: u64,
    pub ungated: u64,
    /// Distinct users the app served, per queue.
    pub users: BTreeMap<String, usize>,
    /// Most users inside at once (first to last request), per queue.
    pub most_inside: BTreeMap<String, usize>,
    pub violations: Vec<String>,
}

impl Audit {
    fn violation(&mut self, what: String) {
        if self.violations.len() < 20 {
            self.violations.push(what);
        } else if self.violations.len() == 20 {
            self.violations.push("...".into());
        }
    }
}

/// Audits the upstream's `log`. `routes`: (path prefix, queue); `windows`: the
/// journal (None: not checked); `soft_cap` per queue.
pub fn audit(
    log: &[Value],
    jwks: &Jwks,
    routes: &[(String, String)],
    windows: Option<&HashMap<(String, String), Window>>,
    soft_cap: u64,
) -> Audit {
    let mut a = Audit::default();
    let mut spans: HashMap<(String, String), (u64, u64)> = HashMap::new();
    let mut straight = std::collections::HashSet::new();
    for line in log {
        let uri = line["uri"].as_str().unwrap_or("");
        let path = uri.split('?').next().unwrap_or("");
        let Some((_, queue)) = routes.iter().find(|(p, _)| path == p || path.starts_with(&format!("{p}/"))) else {
            a.ungated += 1;
            continue;
        };
        a.gated += 1;
        let us = line["us"].as_u64().unwrap_or(0);
        let named = line["user"].as_str().unwrap_or("");
        let tokens: Vec<&str> =
            line["tokens"].as_array().map(|t| t.iter().filter_map(Value::as_str).collect()).unwrap_or_default();
        let mut why = Vec::new();
        let mut admitted = None;
        for t in &tokens {
            match jwks.verify(t) {
                Err(e) => why.push(e),
                Ok(c) => {
                    let secs = |k: &str| c[k].as_u64().unwrap_or(0) * 1_000_000;
                    let sub = c["sub"].as_str().unwrap_or("");
                    if c["aud"].as_str() != Some(queue) {
                        why.push(format!("a token for {} on {queue}'s path", c["aud"]));
                    } else if c["iss"].as_str() != Some("valkey-queue-gate") {
                        why.push(format!("issuer {}", c["iss"]));
                    } else if sub != named {
                        why.push(format!("X-Queue-User {named:?} with a token for {sub:?}"));
                    } else if secs("exp") + 1_000_000 < us {
                        why.push("an expired token".into());
                    } else if secs("iat") > us + 1_000_000 {
                        why.push("a token issued after the request".into());
                    } else {
                        admitted = Some(sub.to_string());
                    }
                }
            }
        }
        // A straight pass: the gate let someone without a token in on this very
        // request (the token goes back on the answer), naming them to the app. Only
        // once per person, and only someone the swarm's journal says it let in then.
        let passed = tokens.is_empty()
            && !named.is_empty()
            && windows.and_then(|w| w.get(&(queue.clone(), named.to_string()))).is_some_and(|w| w.from <= us)
            && straight.insert((queue.clone(), named.to_string()));
        let Some(user) = admitted.or_else(|| passed.then(|| named.to_string())) else {
            a.violation(format!("{uri} at {us} reached the app without a valid admission ({why:?})"));
            continue;
        };
        let key = (queue.clone(), user);
        if let Some(w) = windows {
            match w.get(&key) {
                None => a.violation(format!("{uri} at {us}: {} was never admitted by the swarm", key.1)),
                Some(w) if us < w.from || us > w.until => {
                    a.violation(format!("{uri} at {us}: {} was not inside then ({} .. {})", key.1, w.from, w.until))
                }
                Some(_) => {}
            }
        }
        let span = spans.entry(key).or_insert((us, us));
        span.0 = span.0.min(us);
        span.1 = span.1.max(us);
    }
    let mut by_queue: HashMap<String, Vec<(u64, i64)>> = HashMap::new();
    for ((queue, _), (from, until)) in &spans {
        *a.users.entry(queue.clone()).or_default() += 1;
        let events = by_queue.entry(queue.clone()).or_default();
        // Ends before starts at the same instant: a span is [from, until].
        events.push((*from, 1));
        events.push((*until + 1, -1));
    }
    for (queue, mut events) in by_queue {
        events.sort();
        let (mut now, mut most) = (0i64, 0i64);
        for (_, d) in events {
            now += d;
            most = most.max(now);
        }
        a.most_inside.insert(queue.clone(), most as usize);
        if most as u64 > soft_cap {
            a.violation(format!("{most} people of {queue} were inside at once, over the soft cap {soft_cap}"));
        }
    }
    a
}
