//! Access codes in the back office (`/api/admin/queues/{queue}/codes`): adding codes
//! to a lane of a queue, as JSON or as CSV, and each lane's counts. A code is hashed
//! here ([`queue_client::code_hash`]) before it goes anywhere: Valkey holds only the
//! hashes, so no code can be read back, by the back office or by anyone reading the
//! store. An upload is checked whole before anything is added: a bad code, a bad line
//! of CSV or a lane the queue does not have refuses it all, naming what and where.

use crate::admin::AdminQueue;
use crate::error::ApiError;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::http::{header, HeaderMap, StatusCode};
use axum::Json;
use queue_client::QueueClient;
use serde_json::{json, Value};
use std::collections::HashMap;

/// The longest code, in bytes (after trimming spaces around it).
pub const MAX_CODE_LEN: usize = 128;
/// Most codes one upload may add.
pub const MAX_CODES: usize = 10_000;
/// The largest upload body (10,000 codes of the longest length, with their lane and
/// uses, fit).
pub const BODY_LIMIT: usize = 2 * 1024 * 1024;
/// Codes per `QUEUE.CODES ADD` (the engine's most per call).
const CHUNK: usize = 1000;
/// The most uses one code may have (the engine's bound).
pub const MAX_USES: u64 = 1_000_000;
/// Bad lines of a CSV upload named in its refusal (their number is always given).
const LINES_SHOWN: usize = 20;

/// A code as typed or sent, checked: spaces around it are not part of it; 1 to 128
/// bytes, no control characters, no commas (a CSV line could not hold one). The same
/// rule for the back office and for entries, so that a code added is a code enterable.
pub fn check_code(code: &str) -> Result<&str, String> {
    let code = code.trim();
    if code.is_empty() {
        return Err("a code must not be empty".into());
    }
    if code.len() > MAX_CODE_LEN {
        return Err(format!("a code must be at most {MAX_CODE_LEN} bytes"));
    }
    if code.chars().any(|c| c.is_control() || c == ',') {
        return Err("a code must hold no control characters and no commas".into());
    }
    Ok(code)
}

/// The queue's lanes, in admission order (empty for a queue without lanes, or an
/// engine older than lanes).
pub async fn queue_lanes(client: &QueueClient, queue: &str) -> Result<Vec<String>, ApiError> {
    match client.config_text(queue, "lanes").await {
        Ok(s) => Ok(s.split(',').map(str::trim).filter(|l| !l.is_empty()).map(str::to_string).collect()),
        Err(queue_client::ClientError::InvalidArgument(m)) if m.contains("unknown config field") => Ok(Vec::new()),
        Err(e) => Err(e.into()),
    }
}

/// One code of an upload: the code, its lane and uses, and where it was (a CSV line
/// number, or the code's index in a JSON list).
struct Row {
    code: String,
    lane: String,
    uses: u64,
    at: usize,
}

fn uses_of(v: &str) -> Result<u64, String> {
    match v.trim().parse::<u64>() {
        Ok(n) if (1..=MAX_USES).contains(&n) => Ok(n),
        _ => Err(format!("uses must be a whole number from 1 to {MAX_USES}")),
    }
}

/// `?lane=&uses=`: a CSV upload's defaults for lines that leave them out.
#[derive(serde::Deserialize, Default)]
pub struct CsvDefaults {
    lane: Option<String>,
    uses: Option<String>,
}

/// A CSV upload's rows: one code a line (`code`, `code,lane` or `code,lane,uses`),
/// lane and uses from the query when a line leaves them out (uses: 1). Blank lines
/// and a first line `code,lane,uses` (a header) are skipped. Every bad line is named
/// by its number (1-based).
fn csv_rows(text: &str, defaults: &CsvDefaults) -> Result<Vec<Row>, ApiError> {
    let default_uses = match defaults.uses.as_deref() {
        None | Some("") => 1,
        Some(u) => uses_of(u).map_err(|m| ApiError::BadRequest(format!("?uses=: {m}")))?,
    };
    let mut rows = Vec::new();
    let mut bad: Vec<(usize, String)> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        let line = line.trim();
        if line.is_empty() || (n == 1 && line.eq_ignore_ascii_case("code,lane,uses")) {
            continue;
        }
        let cols: Vec<&str> = line.split(',').map(str::trim).collect();
        if cols.len() > 3 {
            bad.push((n, "more than three columns (code,lane,uses)".into()));
            continue;
        }
        let code = match check_code(cols[0]) {
            Ok(c) => c.to_string(),
            Err(m) => {
                bad.push((n, m));
                continue;
            }
        };
        let lane = match cols.get(1).filter(|l| !l.is_empty()).map(|l| l.to_string()).or(defaults.lane.clone()) {
            Some(l) => l,
            None => {
                bad.push((n, "no lane: give it on the line or as ?lane=".into()));
                continue;
            }
        };
        let uses = match cols.get(2).filter(|u| !u.is_empty()) {
            None => default_uses,
            Some(u) => match uses_of(u) {
                Ok(u) => u,
                Err(m) => {
                    bad.push((n, m));
                    continue;
                }
            },
        };
        rows.push(Row { code, lane, uses, at: n });
    }
    if !bad.is_empty() {
        return Err(bad_lines(&bad));
    }
    Ok(rows)
}

/// The refusal of a CSV upload with bad lines: 400 `bad_lines`, the first of them
/// with their reasons, and how many there are.
fn bad_lines(bad: &[(usize, String)]) -> ApiError {
    let lines: Vec<Value> = bad.iter().take(LINES_SHOWN).map(|(n, m)| json!({ "line": n, "message": m })).collect();
    let shown: Vec<String> = bad.iter().take(LINES_SHOWN).map(|(n, _)| n.to_string()).collect();
    ApiError::BadLines(
        format!(
            "{} bad line(s), nothing added: line {}{}",
            bad.len(),
            shown.join(", "),
            if bad.len() > LINES_SHOWN { ", ..." } else { "" }
        ),
        json!({ "lines": lines, "badLines": bad.len() }),
    )
}

/// A JSON upload's rows: `{"lane": "presale", "uses": 1, "codes": ["...", ...]}`
/// (uses 1 when left out).
fn json_rows(bytes: &[u8]) -> Result<Vec<Row>, ApiError> {
    let v: Value = serde_json::from_slice(bytes)
        .map_err(|e| ApiError::BadRequest(format!("the body must be a JSON object: {e}")))?;
    let at = |field: &str, m: String| ApiError::AtField(StatusCode::UNPROCESSABLE_ENTITY, field.into(), m);
    let Value::Object(o) = v else { return Err(ApiError::BadRequest("the body must be a JSON object".into())) };
    let lane = match o.get("lane") {
        Some(Value::String(l)) if !l.trim().is_empty() => l.trim().to_string(),
        _ => return Err(at("lane", "lane must name a lane of the queue".into())),
    };
    let uses = match o.get("uses") {
        None | Some(Value::Null) => 1,
        Some(Value::Number(n)) => n
            .as_u64()
            .filter(|n| (1..=MAX_USES).contains(n))
            .ok_or_else(|| at("uses", format!("uses must be a whole number from 1 to {MAX_USES}")))?,
        Some(_) => return Err(at("uses", format!("uses must be a whole number from 1 to {MAX_USES}"))),
    };
    let Some(Value::Array(codes)) = o.get("codes") else {
        return Err(at("codes", "codes must be a list of strings".into()));
    };
    if codes.len() > MAX_CODES {
        return Err(ApiError::TooMany(format!("at most {MAX_CODES} codes an upload; this one has {}", codes.len())));
    }
    let mut rows = Vec::with_capacity(codes.len());
    for (i, c) in codes.iter().enumerate() {
        let code = c
            .as_str()
            .ok_or_else(|| at("codes", format!("codes[{i}] is not a string")))
            .and_then(|c| check_code(c).map_err(|m| at("codes", format!("codes[{i}]: {m}"))))?;
        rows.push(Row { code: code.to_string(), lane: lane.clone(), uses, at: i });
    }
    Ok(rows)
}

fn is_csv(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.split(';').next().unwrap_or("").trim().eq_ignore_ascii_case("text/csv"))
}

/// `POST /api/admin/queues/{queue}/codes`: adds access codes, all or none. JSON
/// `{"lane", "uses", "codes": [...]}`, or `Content-Type: text/csv` (see [`csv_rows`]).
/// Answers how many codes were new and each lane's counts; the codes are never
/// answered back or logged.
pub async fn add(
    AdminQueue { state, queue }: AdminQueue,
    defaults: axum::extract::Query<CsvDefaults>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
    let bytes = body.map_err(|e| {
        if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::TooMany(format!("an upload of codes must be at most {BODY_LIMIT} bytes"))
        } else {
            ApiError::BadRequest(e.body_text())
        }
    })?;
    let csv = is_csv(&headers);
    let rows = if csv {
        let text = std::str::from_utf8(&bytes).map_err(|_| ApiError::BadRequest("the CSV must be UTF-8".into()))?;
        csv_rows(text, &defaults)?
    } else {
        json_rows(&bytes)?
    };
    if rows.is_empty() {
        return Err(ApiError::Invalid("no codes given".into()));
    }
    if rows.len() > MAX_CODES {
        return Err(ApiError::TooMany(format!("at most {MAX_CODES} codes an upload; this one has {}", rows.len())));
    }
    // One code twice in one upload is a mistake to show, not to settle silently.
    let mut seen: HashMap<&str, usize> = HashMap::new();
    let mut repeats = Vec::new();
    for r in &rows {
        if let Some(first) = seen.insert(&r.code, r.at) {
            repeats.push((r.at, first));
        }
    }
    if !repeats.is_empty() {
        if csv {
            let bad: Vec<(usize, String)> =
                repeats.iter().map(|(n, first)| (*n, format!("the same code as line {first}"))).collect();
            return Err(bad_lines(&bad));
        }
        let (i, first) = repeats[0];
        return Err(ApiError::AtField(
            StatusCode::UNPROCESSABLE_ENTITY,
            "codes".into(),
            format!("codes[{i}] is the same code as codes[{first}]"),
        ));
    }
    let client = state.valkey.client().await?;
    state.declared.check(&client, &queue).await?;
    let lanes = queue_lanes(&client, &queue).await?;
    if lanes.is_empty() {
        return Err(ApiError::NoLanes);
    }
    let unknown: Vec<(usize, String)> = rows
        .iter()
        .filter(|r| !lanes.contains(&r.lane))
        .map(|r| (r.at, format!("unknown lane {:?}; the queue's lanes are {}", r.lane, lanes.join(", "))))
        .collect();
    if let Some((i, m)) = unknown.first() {
        if csv {
            return Err(bad_lines(&unknown));
        }
        let _ = i;
        return Err(ApiError::AtField(StatusCode::BAD_REQUEST, "lane".into(), m.clone()));
    }
    // Hashed here: the plain codes go no further than this function.
    let mut groups: HashMap<(&str, u64), Vec<String>> = HashMap::new();
    for r in &rows {
        groups.entry((r.lane.as_str(), r.uses)).or_default().push(queue_client::code_hash(&r.code));
    }
    let mut added = 0;
    let mut per_lane: HashMap<&str, usize> = HashMap::new();
    for ((lane, uses), hashes) in &groups {
        for chunk in hashes.chunks(CHUNK) {
            added += client.codes_add(&queue, lane, *uses, chunk).await?;
        }
        *per_lane.entry(lane).or_default() += hashes.len();
    }
    state.declared.declare(&client, &queue).await?;
    crate::admin::audit(&state, &queue, "codes", json!({ "given": rows.len(), "new": added, "perLane": per_lane }));
    let counts = client.codes_counts(&queue).await?;
    Ok(Json(json!({ "queue": queue, "given": rows.len(), "added": added, "lanes": counts })))
}

/// `GET /api/admin/queues/{queue}/codes`: per lane, in the queue's order, `{lane,
/// codes, used, left}` (never the codes: only their hashes are kept).
pub async fn counts(AdminQueue { state, queue }: AdminQueue) -> Result<Json<Value>, ApiError> {
    let client = state.valkey.client().await?;
    state.declared.check(&client, &queue).await?;
    let lanes = queue_lanes(&client, &queue).await?;
    let counts = client.codes_counts(&queue).await?;
    Ok(Json(json!({ "queue": queue, "laneNames": lanes, "lanes": counts })))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_checked() {
        assert_eq!(check_code("  PRESALE-1 "), Ok("PRESALE-1"));
        assert!(check_code("   ").is_err());
        assert!(check_code(&"x".repeat(MAX_CODE_LEN + 1)).is_err());
        assert!(check_code("a,b").is_err());
        assert!(check_code("a\tb").is_err());
    }

    #[test]
    fn csv_lines() {
        let d = CsvDefaults { lane: Some("general".into()), uses: None };
        let rows = csv_rows("code,lane,uses\nA\n\nB,presale\nC,presale,5\n", &d).unwrap();
        let got: Vec<_> = rows.iter().map(|r| (r.code.as_str(), r.lane.as_str(), r.uses, r.at)).collect();
        assert_eq!(got, [("A", "general", 1, 2), ("B", "presale", 1, 4), ("C", "presale", 5, 5)]);
        let ApiError::BadLines(m, detail) = csv_rows("A\nB,x,0\n,x\nD,x,1,2\n", &d).err().unwrap() else {
            panic!("bad lines")
        };
        assert!(m.starts_with("3 bad line(s), nothing added: line 2, 3, 4"), "{m}");
        assert_eq!(detail["badLines"], 3);
        assert!(csv_rows("A\n", &CsvDefaults::default()).is_err(), "no lane anywhere");
    }
}
