//! The back office's API (`/api/admin/...`, bearer token): every queue with its live
//! counts, one queue's counts, settings and branding, changing settings and
//! branding, pausing and resuming admission. Every change is an audit line in the
//! logs (target `audit`: queue, action, what changed from what to what) and counted
//! in `queue_api_admin_changes_total{action}`.
//!
//! Which queues there are: the declared ones ([`crate::declared`]), as the registry
//! set `queue-registry` lists them (created here, changed here, the gate's routes,
//! queues declared by their settings once queue-api met them, and every queue an older
//! queue-api served), and `default`. It is one set, read with one call on a single
//! server or a cluster alike; a SCAN of the keyspace would walk every key of every
//! line (millions of chunk keys) on every primary at each refresh of the page. The
//! listing is paged and searched by name, and says how many there are; only the
//! page's queues have their counts read. A queue is created here
//! (`POST /api/admin/queues`, or any change of its settings, branding or pause) and
//! deleted here once nobody waits in it, holds its ticket or is inside.

use crate::brand::{self, Brand};
use crate::error::ApiError;
use crate::extract::{JsonBody, SettingsRequest};
use crate::routes::{queue_name, DEFAULT_QUEUE};
use crate::AppState;
use axum::extract::{FromRequestParts, Path, Query, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use queue_client::{QueueClient, QueueInfo};
use serde::Deserialize;
use serde_json::{json, Map, Value};
use std::sync::Arc;

type St = State<Arc<AppState>>;

/// Most queues one page of the listing holds (a bound on one request's work: the
/// counts of each are read).
pub const MAX_LISTED: u64 = 500;
/// Queues on a page of the listing when the request says nothing.
pub const DEFAULT_LISTED: u64 = 50;
/// The furthest offset into the listing (far past any number of queues).
pub const MAX_OFFSET: u64 = 1_000_000_000;
/// The longest search (a queue name's longest).
const MAX_SEARCH: usize = 64;

pub(crate) fn authorize(state: &AppState, headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(token) = state.config.admin_token.as_deref().filter(|t| !t.is_empty()) else {
        return Err(ApiError::AdminDisabled);
    };
    let given = service_kit::http::bearer(headers);
    // Compared as SHA-256 digests (equal lengths), in constant time, so the time taken
    // says nothing about how much of the token (or of its length) a guess got right.
    use sha2::{Digest, Sha256};
    use subtle::ConstantTimeEq;
    let (want, got) = (Sha256::digest(token.as_bytes()), Sha256::digest(given.unwrap_or("").as_bytes()));
    if given.is_some() && bool::from(want.as_slice().ct_eq(got.as_slice())) {
        Ok(())
    } else {
        Err(ApiError::Unauthorized)
    }
}

/// The queue an admin request under `/api/admin/queues/{queue}` is about, with the
/// state: the path read, then the bearer token checked (401), then the queue's name
/// (400), in that order, before any body is read.
pub struct AdminQueue {
    pub state: Arc<AppState>,
    pub queue: String,
}

impl FromRequestParts<Arc<AppState>> for AdminQueue {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &Arc<AppState>) -> Result<AdminQueue, Response> {
        let Path(queue) =
            Path::<String>::from_request_parts(parts, state).await.map_err(IntoResponse::into_response)?;
        authorize(state, &parts.headers).map_err(IntoResponse::into_response)?;
        let queue = queue_name(Some(&queue)).map_err(IntoResponse::into_response)?;
        Ok(AdminQueue { state: state.clone(), queue })
    }
}

/// A settings body (`{"name": value, ...}`) as sent; read by [`named_settings`].
type SettingsBody = Result<JsonBody<SettingsRequest>, ApiError>;

/// The settings a body names; `none_named` is the error's text when it names none.
fn named_settings(body: SettingsBody, none_named: impl FnOnce() -> String) -> Result<Map<String, Value>, ApiError> {
    let JsonBody(SettingsRequest(settings)) = body?;
    if settings.is_empty() {
        return Err(ApiError::Invalid(none_named()));
    }
    Ok(settings)
}

/// Writes the audit line and counts the change.
pub(crate) fn audit(state: &AppState, queue: &str, action: &'static str, changes: Value) {
    tracing::info!(target: "audit", queue, action, changes = %changes, "back-office change");
    state.metrics.admin_change(action).increment(1);
}

/// The estimated wait of the last person in line, as the line's own estimate makes it.
fn last_in_line_wait(info: &QueueInfo) -> Option<i64> {
    queue_core::admission::estimated_wait_seconds(info.waiting as i64, info.admission_rate_per_min as i64)
}

/// One queue's live counts, as the listing and the queue's page show them.
fn counts(queue: &str, info: &QueueInfo, paused_soft_cap: Option<i64>) -> Value {
    json!({
        "queue": queue,
        "waiting": info.waiting,
        "ticketsOut": info.joining,
        "inside": info.active,
        "admittedPerMinute": info.admission_rate_per_min,
        "lastInLineWaitSeconds": last_in_line_wait(info),
        "softCap": info.config.soft_cap(),
        "opensAt": Some(info.config.opens_at()).filter(|&t| t > 0),
        "paused": info.config.soft_cap() == 0,
        "pausedSoftCap": paused_soft_cap,
        "closesAt": Some(info.config.closes_at()).filter(|&t| t > 0),
        "closed": info.closed,
        "inventory": info.inventory,
        "outstanding": info.outstanding,
        "soldOut": info.sold_out,
        "message": info.message,
    })
}

/// `?search=&offset=&limit=` of the listing.
#[derive(Deserialize)]
pub struct ListQuery {
    search: Option<String>,
    offset: Option<u64>,
    limit: Option<u64>,
}

/// `GET /api/admin/queues?search=&offset=&limit=`: the declared queues (default
/// always), in name order, whose name holds `search` (any case), `limit` of them
/// (1-500, 50 by default) from `offset`, each with its live counts; `total` says how
/// many match, `known` how many there are, `truncated` whether this page leaves any
/// out.
pub async fn list(
    State(state): St,
    headers: HeaderMap,
    q: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    authorize(&state, &headers)?;
    let Query(q) = q?;
    let limit = q.limit.unwrap_or(DEFAULT_LISTED);
    if !(1..=MAX_LISTED).contains(&limit) {
        return Err(ApiError::BadRequest(format!("limit must be 1 to {MAX_LISTED}")));
    }
    let offset = q.offset.unwrap_or(0);
    if offset > MAX_OFFSET {
        return Err(ApiError::BadRequest(format!("offset must be 0 to {MAX_OFFSET}")));
    }
    let search = q.search.unwrap_or_default().to_ascii_lowercase();
    if search.len() > MAX_SEARCH {
        return Err(ApiError::BadRequest(format!("search must be at most {MAX_SEARCH} characters")));
    }
    let client = state.valkey.client().await?;
    let mut names: std::collections::BTreeSet<String> = client
        .registered_queues()
        .await?
        .into_iter()
        .filter(|q| queue_core::keys::check_queue(q.as_bytes()).is_ok())
        .collect();
    names.insert(DEFAULT_QUEUE.to_string());
    let known = names.len();
    let matching: Vec<&String> = names.iter().filter(|q| q.to_ascii_lowercase().contains(&search)).collect();
    let total = matching.len();
    let page: Vec<&String> = matching.into_iter().skip(offset as usize).take(limit as usize).collect();
    let reads = page.iter().map(|q| {
        let client = client.clone();
        async move { (client.info(q).await, client.paused_soft_cap(q).await) }
    });
    let mut queues = Vec::with_capacity(page.len());
    for (q, (info, paused)) in page.iter().zip(futures_util::future::join_all(reads).await) {
        queues.push(counts(q, &info?, paused?));
    }
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
    Ok(Json(json!({
        "queues": queues,
        "total": total,
        "known": known,
        "offset": offset,
        "limit": limit,
        "truncated": queues.len() < total,
        "at": now,
    })))
}

/// `POST /api/admin/queues {"queue": "shop"}`: declares a queue (201; 200 when it
/// exists already), then answers like GET.
pub async fn create(State(state): St, headers: HeaderMap, body: SettingsBody) -> Result<Response, ApiError> {
    authorize(&state, &headers)?;
    let JsonBody(SettingsRequest(fields)) = body?;
    if let Some(other) = fields.keys().find(|k| k.as_str() != "queue") {
        return Err(ApiError::BadRequest(format!("unknown field {other}: the body is {{\"queue\": name}}")));
    }
    let queue = match fields.get("queue") {
        Some(Value::String(q)) => queue_name(Some(q))?,
        _ => return Err(ApiError::BadRequest("queue (a name) is required".into())),
    };
    let client = state.valkey.client().await?;
    let existed = state.declared.ask(&client, &queue).await?;
    if !existed {
        state.declared.declare(&client, &queue).await?;
        audit(&state, &queue, "create", json!({}));
    }
    let status = if existed { StatusCode::OK } else { StatusCode::CREATED };
    Ok((status, Json(queue_body(&state, &client, &queue).await?)).into_response())
}

/// The keys a deletion removes: the settings, the back office's, the counters, the
/// change log, the opening and push instances' records, leases left expired, the
/// access codes (a queue re-created with the same name and lanes must not take the
/// old ones) and the claims of sessions now gone (the line's own keys hold nobody by
/// then, and Valkey keeps no empty ones). The test below holds this list against
/// every key of the engine.
const DELETED_KEYS: [&str; 15] = [
    queue_core::keys::CONFIG,
    queue_client::backoffice::BRAND,
    queue_client::backoffice::PAUSED,
    queue_core::keys::STATS,
    queue_core::keys::LOG,
    queue_core::keys::OPENING,
    queue_core::keys::PROOF,
    queue_core::keys::WATCHED,
    queue_core::keys::INSTANCES,
    queue_core::keys::CLOCK,
    queue_core::keys::SESSIONS,
    queue_core::keys::ACTIVE,
    queue_core::keys::CODES,
    queue_core::keys::CLAIMED,
    queue_core::keys::BOUGHT,
];

/// Why a queue cannot be deleted now, if it cannot.
async fn in_use(client: &QueueClient, queue: &str) -> Result<Option<String>, ApiError> {
    let (info, opening) = tokio::join!(client.info(queue), client.opening(queue));
    let (info, opening) = (info?, opening?);
    let pre = if opening.state == "scheduled" { opening.entrants } else { 0 };
    if info.waiting + info.joining + info.active + pre == 0 {
        return Ok(None);
    }
    Ok(Some(format!(
        "queue {queue} is in use: {} waiting, {} in the pre-queue, {} holding a ticket, {} inside; \
         it can be deleted once empty (pause it to stop admissions)",
        info.waiting, pre, info.joining, info.active
    )))
}

/// `DELETE /api/admin/queues/{queue}`: deletes a queue nobody waits in, holds a
/// ticket of or is inside (409 otherwise, 404 when it does not exist): its keys, then
/// its name in the registry. Other instances stop serving it within
/// [`crate::declared::KEEP`]. `default` always exists (409).
pub async fn delete(AdminQueue { state, queue }: AdminQueue) -> Result<Json<Value>, ApiError> {
    if queue == DEFAULT_QUEUE {
        return Err(ApiError::Conflict("the default queue always exists; it cannot be deleted".into()));
    }
    let client = state.valkey.client().await?;
    if !state.declared.ask(&client, &queue).await? {
        return Err(ApiError::UnknownQueue(queue));
    }
    if let Some(why) = in_use(&client, &queue).await? {
        return Err(ApiError::QueueInUse(why));
    }
    // The settings first, then the name: a check meanwhile finds it registered and
    // still declared, never settings without a name (which it would register again).
    let removed = client.delete_keys(&queue, &DELETED_KEYS).await?;
    client.unregister_queue(&queue).await?;
    state.declared.forget(&queue);
    // Someone let in meanwhile by an instance that still kept it as declared keeps it.
    if let Some(why) = in_use(&client, &queue).await? {
        state.declared.declare(&client, &queue).await?;
        return Err(ApiError::QueueInUse(format!(
            "{why} (someone entered during the deletion; its settings were reset)"
        )));
    }
    audit(&state, &queue, "delete", json!({ "keys": removed }));
    Ok(Json(json!({ "queue": queue, "deleted": true })))
}

pub(crate) async fn queue_body(state: &AppState, client: &QueueClient, queue: &str) -> Result<Value, ApiError> {
    // Where the waiting room sends the queue's admitted people (`--admit-url`, else
    // `--chat-url`): the back office says when it is a gate's, reachable only there.
    let admit_url = crate::pages::admit_url(state, queue);
    let (info, brand, paused, entry, lanes) = tokio::join!(
        client.info(queue),
        client.brand(queue),
        client.paused_soft_cap(queue),
        crate::identity::read_mode(client, queue),
        crate::codes::queue_lanes(client, queue)
    );
    let info = info?;
    let mut v = json!({ "queue": queue, "info": info, "brand": Brand::from_stored(&brand?),
                        "entry": entry?.as_str(), "lanes": lanes?, "admitUrl": admit_url });
    v["counts"] = counts(queue, &info, paused?);
    Ok(v)
}

/// `GET /api/admin/queues/{queue}`: QUEUE.INFO as JSON, with the queue's branding and
/// live counts.
pub async fn get(AdminQueue { state, queue }: AdminQueue) -> Result<Json<Value>, ApiError> {
    let client = state.valkey.client().await?;
    state.declared.check(&client, &queue).await?;
    Ok(Json(queue_body(&state, &client, &queue).await?))
}

/// `GET /api/admin/gates`: the gates running now, as each describes itself in Valkey
/// (hash `gate:instances`, written by every gate at start and every 10 s; the
/// format is the gate's, services/gate/src/registry.rs): its mode, listening address,
/// routes (host and path prefix to queue), what an unmatched request gets, bypass
/// rules, session, cookie and durability settings. A description past its expiry
/// (a gate stopped without withdrawing it) or unreadable is left out. `routes` lists
/// every gate's routes flat, by queue then prefix, each naming its gate.
pub async fn gates(State(state): St, headers: HeaderMap) -> Result<Json<Value>, ApiError> {
    authorize(&state, &headers)?;
    let client = state.valkey.client().await?;
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
    let (gates, routes) = live_gates(client.gate_descriptions().await?, now);
    Ok(Json(json!({ "gates": gates, "routes": routes, "at": now })))
}

/// The live descriptions (by instance name) and their routes, flat.
fn live_gates(descriptions: std::collections::HashMap<String, String>, now_ms: u64) -> (Vec<Value>, Vec<Value>) {
    let mut gates: Vec<(String, Value)> = descriptions
        .into_iter()
        .filter_map(|(id, text)| Some((id, serde_json::from_str::<Value>(&text).ok()?)))
        .filter(|(_, d)| d.is_object() && d["expiresAtMs"].as_u64().is_some_and(|t| t > now_ms))
        .collect();
    gates.sort_by(|a, b| a.0.cmp(&b.0));
    let mut routes = Vec::new();
    for (id, d) in &gates {
        for r in d["routes"].as_array().into_iter().flatten() {
            let Some(queue) = r["queue"].as_str() else { continue };
            routes.push(json!({ "queue": queue, "host": r["host"], "prefix": r["prefix"], "gate": id,
                                "mode": d["mode"], "listen": d["listen"], "publicUrl": d["publicUrl"], "waitingRoom": d["waitingRoom"],
                                "servesRoom": d["servesRoom"] }));
        }
    }
    routes.sort_by(|a, b| {
        (a["queue"].as_str(), a["prefix"].as_str(), a["gate"].as_str()).cmp(&(
            b["queue"].as_str(),
            b["prefix"].as_str(),
            b["gate"].as_str(),
        ))
    });
    let gates = gates
        .into_iter()
        .map(|(id, mut d)| {
            d["instance"] = json!(id);
            d
        })
        .collect();
    (gates, routes)
}

/// A setting's value: an integer (JSON says 500 and 500.0 alike).
pub(crate) fn integer(v: &Value) -> Option<i64> {
    let whole = v.as_f64().filter(|f| f.fract() == 0.0 && f.abs() < 9.0e15).map(|f| f as i64);
    v.as_i64().or(whole)
}

/// The settings as pairs, each checked against the schema; the first bad one is an
/// error naming its field (400 unknown or out of range, 422 not an integer).
fn checked_settings(settings: &Map<String, Value>) -> Result<Vec<(String, i64)>, ApiError> {
    let mut pairs = Vec::new();
    for (name, v) in settings {
        let at = |status, message: String| ApiError::AtField(status, name.clone(), message);
        let strip = |e: queue_core::QueueError| e.to_string().trim_start_matches("ERR ").to_string();
        let field = queue_core::config::field(name.as_bytes()).map_err(|e| at(StatusCode::BAD_REQUEST, strip(e)))?;
        let n = integer(v).ok_or_else(|| at(StatusCode::UNPROCESSABLE_ENTITY, format!("{name} must be an integer")))?;
        queue_core::config::check_value(field, n.to_string().as_bytes())
            .map_err(|e| at(StatusCode::BAD_REQUEST, strip(e)))?;
        // By the schema's spelling (the store takes any case; the audit reads by name).
        pairs.push((field.name.to_string(), n));
    }
    Ok(pairs)
}

/// `PUT /api/admin/queues/{queue}` `{"soft_cap": 500, "rate": 20, ...}`: changes
/// settings at runtime (all or none), then answers like GET. Setting a soft cap above
/// 0 while paused ends the pause (the new cap is the one to keep).
pub async fn put(AdminQueue { state, queue }: AdminQueue, body: SettingsBody) -> Result<Json<Value>, ApiError> {
    let mut settings = named_settings(body, || "name at least one setting".into())?;
    // `entry` is a word, the other settings numbers.
    let entry = match settings.remove("entry") {
        None => None,
        Some(v) => Some(v.as_str().and_then(crate::identity::EntryMode::parse).ok_or_else(|| {
            ApiError::AtField(
                StatusCode::UNPROCESSABLE_ENTITY,
                "entry".into(),
                "entry must be open, identified or invite".into(),
            )
        })?),
    };
    // `lanes` is text too: names, comma-separated, in admission order (empty: none).
    let lanes = match settings.remove("lanes") {
        None => None,
        Some(Value::Null) => Some(String::new()),
        Some(Value::String(l)) => Some(l.split(',').map(str::trim).collect::<Vec<_>>().join(",")),
        Some(Value::Array(list)) if list.iter().all(Value::is_string) => {
            Some(list.iter().filter_map(Value::as_str).map(str::trim).collect::<Vec<_>>().join(","))
        }
        Some(_) => {
            return Err(ApiError::AtField(
                StatusCode::UNPROCESSABLE_ENTITY,
                "lanes".into(),
                "lanes must be a string of names separated by commas (or a list of names)".into(),
            ))
        }
    };
    // `closes_at` null: never closes (0). `inventory` lives apart from the schema's
    // numbers (the stats hash): null is no limit (-1).
    if settings.get("closes_at").is_some_and(Value::is_null) {
        settings.insert("closes_at".into(), json!(0));
    }
    let inventory = match settings.remove("inventory") {
        None => None,
        Some(Value::Null) => Some(-1),
        Some(v) => {
            let at = |status, m: String| ApiError::AtField(status, "inventory".into(), m);
            let n = integer(&v).ok_or_else(|| {
                at(StatusCode::UNPROCESSABLE_ENTITY, "inventory must be an integer (null: no limit)".into())
            })?;
            queue_core::config::check_inventory(n.to_string().as_bytes())
                .map_err(|e| at(StatusCode::BAD_REQUEST, e.to_string().trim_start_matches("ERR ").to_string()))?;
            Some(n)
        }
    };
    let mut pairs = checked_settings(&settings)?;
    let client = state.valkey.client().await?;
    let before = client.config_get(&queue).await?;
    let inventory_before = match inventory {
        Some(_) => Some(client.info(&queue).await?.inventory),
        None => None,
    };
    if let Some(n) = inventory {
        // Set with the others, in the one QUEUE.CONFIG SET (all or none).
        pairs.push(("inventory".into(), n));
    }
    let mut lanes_change = None;
    if let Some(l) = &lanes {
        let was = crate::codes::queue_lanes(&client, &queue).await?.join(",");
        client.config_set_text(&queue, "lanes", l).await.map_err(|e| match ApiError::from(e) {
            ApiError::BadRequest(m) => ApiError::AtField(StatusCode::BAD_REQUEST, "lanes".into(), m),
            other => other,
        })?;
        lanes_change = Some(json!({ "from": was, "to": l }));
    }
    if !pairs.is_empty() {
        client.config_set(&queue, &pairs).await.map_err(|e| at_named_field(e, &pairs))?;
    }
    let mut entry_change = None;
    if let Some(mode) = entry {
        let was = crate::identity::read_mode(&client, &queue).await?;
        client.config_set_text(&queue, "entry", mode.as_str()).await.map_err(|e| match ApiError::from(e) {
            ApiError::BadRequest(m) => ApiError::AtField(StatusCode::BAD_REQUEST, "entry".into(), m),
            other => other,
        })?;
        state.entry_modes.forget(&queue);
        entry_change = Some(json!({ "from": was.as_str(), "to": mode.as_str() }));
    }
    state.declared.declare(&client, &queue).await?;
    if pairs.iter().any(|(f, n)| f == "soft_cap" && *n > 0) {
        client.forget_pause(&queue).await?;
    }
    let mut changes: Map<String, Value> = pairs
        .iter()
        .filter(|(f, _)| f != "inventory")
        .map(|(f, n)| (f.clone(), json!({ "from": before.get(f), "to": n })))
        .collect();
    if let (Some(n), Some(was)) = (inventory, inventory_before) {
        changes.insert("inventory".into(), json!({ "from": was, "to": Some(n).filter(|&n| n >= 0) }));
    }
    if let Some(c) = entry_change {
        changes.insert("entry".into(), c);
    }
    if let Some(c) = lanes_change {
        changes.insert("lanes".into(), c);
    }
    audit(&state, &queue, "settings", Value::Object(changes));
    Ok(Json(queue_body(&state, &client, &queue).await?))
}

/// A refusal of QUEUE.CONFIG SET that names one of the fields sent (a rule between
/// fields) is shown at that field.
fn at_named_field(e: queue_client::ClientError, pairs: &[(String, i64)]) -> ApiError {
    match ApiError::from(e) {
        ApiError::BadRequest(m) => match pairs.iter().find(|(f, _)| m.contains(f.as_str())) {
            Some((f, _)) => ApiError::AtField(StatusCode::BAD_REQUEST, f.clone(), m),
            None => ApiError::BadRequest(m),
        },
        other => other,
    }
}

/// `PUT /api/admin/queues/{queue}/brand` `{"title": "...", "accent": "#123456", ...}`:
/// sets the named branding settings; an empty string or null removes one. All or
/// none: the first bad value is an error naming its field. 404 `unknown_queue` when
/// the queue does not exist.
pub async fn put_brand(AdminQueue { state, queue }: AdminQueue, body: SettingsBody) -> Result<Json<Value>, ApiError> {
    let settings = named_settings(body, || format!("name at least one branding setting ({})", brand::names()))?;
    let (mut set, mut clear) = (Vec::new(), Vec::new());
    for (name, v) in &settings {
        let at = |m: String| ApiError::AtField(StatusCode::UNPROCESSABLE_ENTITY, name.clone(), m);
        if !brand::FIELDS.iter().any(|(n, ..)| n == name) {
            return Err(at(format!("unknown setting {name}; the branding settings are {}", brand::names())));
        }
        match v {
            Value::Null => clear.push(name.as_str()),
            Value::String(s) if s.trim().is_empty() => clear.push(name.as_str()),
            Value::String(s) => set.push((name.as_str(), brand::check(name, s).map_err(at)?)),
            _ => return Err(at(format!("{name} must be a string (empty or null removes it)"))),
        }
    }
    let client = state.valkey.client().await?;
    // Branding belongs to a queue that exists: a queue never made (or deleted) is not
    // made by branding it (404, as pause and the codes answer); create it first.
    state.declared.check(&client, &queue).await?;
    let before = Brand::from_stored(&client.brand(&queue).await?);
    let pairs: Vec<(&str, &str)> = set.iter().map(|(n, v)| (*n, v.as_str())).collect();
    client.set_brand(&queue, &pairs, &clear).await?;
    // Open pages take the change through their streams (one PUBLISH, not one write
    // per page); a lost announcement leaves them as they were until a reload.
    if let Err(e) = client.publish_event(&brand::change_notice(&queue)).await {
        tracing::warn!(queue, error = %e, "announcing a branding change failed");
    }
    let mut changes = Map::new();
    for (n, v) in &pairs {
        changes.insert(n.to_string(), json!({ "from": before.get(n), "to": v }));
    }
    for n in &clear {
        changes.insert(n.to_string(), json!({ "from": before.get(n), "to": null }));
    }
    audit(&state, &queue, "brand", Value::Object(changes));
    Ok(Json(queue_body(&state, &client, &queue).await?))
}

/// `POST /api/admin/queues/{queue}/pause`: stops admission (soft cap 0), remembering
/// the soft cap it had for resume. Pausing a paused queue changes nothing.
pub async fn pause(AdminQueue { state, queue }: AdminQueue) -> Result<Json<Value>, ApiError> {
    let client = state.valkey.client().await?;
    // A queue that does not exist (never declared, or deleted) is not brought back
    // by pausing it: 404, as resume answers.
    state.declared.check(&client, &queue).await?;
    let soft_cap = client.config_get(&queue).await?.soft_cap();
    if client.paused_soft_cap(&queue).await?.is_some() && soft_cap == 0 {
        return Ok(Json(queue_body(&state, &client, &queue).await?));
    }
    // A record left by a pause that a settings change ended is replaced.
    client.forget_pause(&queue).await?;
    client.remember_pause(&queue, soft_cap).await?;
    client.config_set(&queue, &[("soft_cap", 0)]).await?;
    state.declared.declare(&client, &queue).await?;
    soft_cap_changed(&state, &client, &queue, "pause", soft_cap, 0).await
}

/// `POST /api/admin/queues/{queue}/resume`: restores the soft cap the pause replaced;
/// 409 when the queue is not paused.
pub async fn resume(AdminQueue { state, queue }: AdminQueue) -> Result<Json<Value>, ApiError> {
    let client = state.valkey.client().await?;
    state.declared.check(&client, &queue).await?;
    let Some(soft_cap) = client.paused_soft_cap(&queue).await? else {
        return Err(ApiError::Conflict("the queue is not paused (pause it first)".into()));
    };
    client.config_set(&queue, &[("soft_cap", soft_cap)]).await?;
    client.forget_pause(&queue).await?;
    soft_cap_changed(&state, &client, &queue, "resume", 0, soft_cap).await
}

/// After a pause or resume: the audit line, push streams woken at once (the line
/// moves or stops), and the queue as GET answers it.
async fn soft_cap_changed(
    state: &AppState,
    client: &QueueClient,
    queue: &str,
    action: &'static str,
    from: i64,
    to: i64,
) -> Result<Json<Value>, ApiError> {
    audit(state, queue, action, json!({ "soft_cap": { "from": from, "to": to } }));
    state.hub.wake(queue);
    Ok(Json(queue_body(state, client, queue).await?))
}

#[cfg(test)]
mod tests {
    use super::DELETED_KEYS;

    #[test]
    fn only_live_readable_gates_are_listed_with_their_routes() {
        let all = [
            ("b", r#"{"expiresAtMs": 2000, "mode": "proxy", "routes": [{"host": null, "prefix": "/z", "queue": "shop"}]}"#),
            ("a", r#"{"expiresAtMs": 1500, "mode": "forward-auth", "routes": [{"host": "x.test", "prefix": "/a", "queue": "shop"}, {"prefix": "/c"}]}"#),
            ("old", r#"{"expiresAtMs": 1000, "routes": [{"prefix": "/old", "queue": "shop"}]}"#),
            ("junk", "not json"),
            ("list", "[1]"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let (gates, routes) = super::live_gates(all, 1000);
        let names: Vec<&str> = gates.iter().map(|g| g["instance"].as_str().unwrap()).collect();
        assert_eq!(names, ["a", "b"]);
        let prefixes: Vec<(&str, &str)> =
            routes.iter().map(|r| (r["prefix"].as_str().unwrap(), r["gate"].as_str().unwrap())).collect();
        assert_eq!(prefixes, [("/a", "a"), ("/z", "b")]);
        assert_eq!(routes[0]["host"], "x.test");
        assert_eq!(routes[1]["mode"], "proxy");
    }

    /// Every `&str` constant of queue-core's key module: deleted with the queue, or
    /// named here with why not. A key added to the engine fails this test until it is
    /// one or the other (an access code left behind would work again in a queue
    /// re-created with the same name).
    #[test]
    fn a_deletion_knows_every_key_of_the_engine() {
        let not_deleted = [
            // The line's own keys: empty, so absent, once the queue is not in use.
            "WAITING",
            "CHUNK_PREFIX",
            "PRE",
            // Expires on its own (the challenge's lifetime).
            "POW_USED_PREFIX",
            // Rewritten by the chat servers while they serve the queue.
            "HEALTH",
            // Not keys of a queue: parts of key names, fields, channels, patterns,
            // and the keys without a queue's hash tag (the registry is handled apart).
            "LAYOUT_FIELD",
            "KEY_OPEN",
            "KEY_CLOSE",
            "CLAIMED_USER_MARK",
            "PROMOTED",
            "PROMOTED_PATTERN",
            "CHANGES",
            "CHANGES_PATTERN",
            "ANY_KEY_PATTERN",
            "REGISTRY",
            "LEADER",
            "ROOM_OPEN",
            "ROOM_CLOSE",
            "ROOM_PATTERN",
        ];
        let source = include_str!("../../../crates/queue-core/src/keys.rs");
        let mut seen = 0;
        for line in source.lines() {
            let Some(rest) = line.trim().strip_prefix("pub const ") else { continue };
            let Some((name, rest)) = rest.split_once(": &str = \"") else { continue };
            let value = rest.trim_end_matches("\";");
            seen += 1;
            assert!(
                DELETED_KEYS.contains(&value) || not_deleted.contains(&name),
                "keys::{name} (\"{value}\") is neither deleted with a queue (DELETED_KEYS) nor said not to be"
            );
        }
        assert!(seen >= 20, "the key constants were not found ({seen})");
    }
}
