//! The WebSocket protocol: every frame is UTF-8 JSON text `{"type": T, "payload": {...}}`.
//!
//! Seed 000's frames, unchanged:
//!
//! | type | direction | payload |
//! | --- | --- | --- |
//! | `MESSAGE_SEND` | client → server | `{message}` |
//! | `MESSAGE_RECEIVE` | server → clients | `{timestamp, nickname, message}` |
//! | `SYSTEM_MESSAGE_RECEIVE` | server → clients | `{timestamp, message}` ("alice joined", "alice and bob left", once per presence tick) |
//! | `SERVERSTATUS_REQUEST` | client → server | `{}` |
//! | `SERVERSTATUS_RESPONSE` | server → client | `{clientCount}` (everyone in the room, every instance) |
//!
//! Additions, sent only to a client that asks with `&presence=1` on the URL (the chat
//! page does): `PRESENCE_SNAPSHOT {users: [{userId, nickname}]}` right after
//! connecting, then `PRESENCE_JOINED {users}` and `PRESENCE_LEFT {users}`, each the
//! changes of one presence tick (`--presence-tick`); `ERROR {message}` for a frame the server could not take (malformed,
//! unknown type, too fast), after which the connection stays open. A client written
//! to seed 000 alone gets only seed 000's frames: the same notices arrive as
//! `SYSTEM_MESSAGE_RECEIVE`, and `SERVERSTATUS_REQUEST` is always answered with
//! `SERVERSTATUS_RESPONSE` (the last count known when Valkey cannot be asked).

use serde::Serialize;
use serde_json::Value;

pub const MESSAGE_SEND: &str = "MESSAGE_SEND";
pub const MESSAGE_RECEIVE: &str = "MESSAGE_RECEIVE";
pub const SYSTEM_MESSAGE_RECEIVE: &str = "SYSTEM_MESSAGE_RECEIVE";
pub const SERVERSTATUS_REQUEST: &str = "SERVERSTATUS_REQUEST";
pub const SERVERSTATUS_RESPONSE: &str = "SERVERSTATUS_RESPONSE";
pub const PRESENCE_SNAPSHOT: &str = "PRESENCE_SNAPSHOT";
pub const PRESENCE_JOINED: &str = "PRESENCE_JOINED";
pub const PRESENCE_LEFT: &str = "PRESENCE_LEFT";
pub const ERROR: &str = "ERROR";

#[derive(Serialize)]
struct Frame<'a, P> {
    #[serde(rename = "type")]
    kind: &'a str,
    payload: P,
}

fn frame<P: Serialize>(kind: &str, payload: P) -> String {
    serde_json::to_string(&Frame { kind, payload }).expect("frames serialize")
}

/// Someone in the room.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Person {
    pub user_id: String,
    pub nickname: String,
}

#[derive(Serialize)]
struct Chat<'a> {
    timestamp: &'a str,
    nickname: &'a str,
    message: &'a str,
}

#[derive(Serialize)]
struct System<'a> {
    timestamp: &'a str,
    message: &'a str,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Status {
    client_count: u64,
}

#[derive(Serialize)]
struct Users<'a> {
    users: &'a [Person],
}

#[derive(Serialize)]
struct Error<'a> {
    message: &'a str,
}

/// `MESSAGE_RECEIVE`.
pub fn chat(at_ms: u64, nickname: &str, message: &str) -> String {
    frame(MESSAGE_RECEIVE, Chat { timestamp: &timestamp(at_ms), nickname, message })
}

/// `SYSTEM_MESSAGE_RECEIVE`.
pub fn system(at_ms: u64, message: &str) -> String {
    frame(SYSTEM_MESSAGE_RECEIVE, System { timestamp: &timestamp(at_ms), message })
}

/// `SERVERSTATUS_RESPONSE`.
pub fn server_status(client_count: u64) -> String {
    frame(SERVERSTATUS_RESPONSE, Status { client_count })
}

/// `PRESENCE_SNAPSHOT`.
pub fn presence_snapshot(users: &[Person]) -> String {
    frame(PRESENCE_SNAPSHOT, Users { users })
}

/// `PRESENCE_JOINED {users}`: everyone who joined in one presence tick.
pub fn presence_joined(users: &[Person]) -> String {
    frame(PRESENCE_JOINED, Users { users })
}

/// `PRESENCE_LEFT {users}`: everyone who left in one presence tick.
pub fn presence_left(users: &[Person]) -> String {
    frame(PRESENCE_LEFT, Users { users })
}

/// Names shown in one system line before "and N others".
const NAMES_SHOWN: usize = 5;

/// The system line for a tick's joins or leaves: `alice joined`, `alice and bob
/// joined`, `a, b, c, d, e and 37 others joined`.
pub fn people_line(people: &[Person], verb: &str) -> String {
    let names: Vec<&str> = people.iter().map(|p| p.nickname.as_str()).collect();
    match names.len() {
        0 => String::new(),
        1 => format!("{} {verb}", names[0]),
        n if n <= NAMES_SHOWN + 1 => format!("{} and {} {verb}", names[..n - 1].join(", "), names[n - 1]),
        n => format!("{} and {} others {verb}", names[..NAMES_SHOWN].join(", "), n - NAMES_SHOWN),
    }
}

/// Whether a room frame is one of the presence additions (the frames are made
/// here, so the type is always the first member).
pub fn is_presence(frame: &str) -> bool {
    frame.as_bytes().starts_with(br#"{"type":"PRESENCE_"#)
}

/// `ERROR`.
pub fn error(message: &str) -> String {
    frame(ERROR, Error { message })
}

/// What a client asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// `MESSAGE_SEND`: say this to the room.
    Send(String),
    /// `SERVERSTATUS_REQUEST`: how many are in the room.
    Status,
}

/// Reads a client frame; the error is the text of the `ERROR` frame that answers it.
pub fn parse(text: &str) -> Result<Request, String> {
    let v: Value = serde_json::from_str(text)
        .map_err(|e| format!("malformed frame: expected JSON {{\"type\": ..., \"payload\": {{...}}}} ({e})"))?;
    let Some(obj) = v.as_object() else {
        return Err("malformed frame: expected a JSON object with \"type\" and \"payload\"".into());
    };
    let Some(kind) = obj.get("type").and_then(Value::as_str) else {
        return Err("malformed frame: \"type\" must be a string".into());
    };
    match kind {
        MESSAGE_SEND => match obj.get("payload").and_then(|p| p.get("message")) {
            Some(Value::String(m)) if !m.trim().is_empty() => Ok(Request::Send(m.clone())),
            Some(Value::String(_)) => Err("MESSAGE_SEND: the message is empty".into()),
            _ => Err("MESSAGE_SEND: payload.message must be a string".into()),
        },
        SERVERSTATUS_REQUEST => Ok(Request::Status),
        other => {
            let shown: String = other.chars().take(40).collect();
            Err(format!("unknown frame type {shown:?}; expected MESSAGE_SEND or SERVERSTATUS_REQUEST"))
        }
    }
}

/// Unix milliseconds as ISO-8601 UTC with milliseconds: `2026-11-22T03:58:53.123Z`.
pub fn timestamp(ms: u64) -> String {
    let (secs, millis) = (ms / 1000, ms % 1000);
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days as i64);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{millis:03}Z", rem / 3600, rem % 3600 / 60, rem % 60)
}

/// Days since 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// Now, in Unix milliseconds.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_iso_utc_with_millis() {
        assert_eq!(timestamp(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(timestamp(1_795_319_933_123), "2026-11-22T03:58:53.123Z");
        assert_eq!(timestamp(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(timestamp(4_107_542_399_999), "2100-02-28T23:59:59.999Z");
    }

    #[test]
    fn server_frames_have_the_seed_shape() {
        let v: Value = serde_json::from_str(&chat(0, "라이언", "안녕하세요!")).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"type": "MESSAGE_RECEIVE",
                "payload": {"timestamp": "1970-01-01T00:00:00.000Z", "nickname": "라이언", "message": "안녕하세요!"}})
        );
        assert_eq!(server_status(42), r#"{"type":"SERVERSTATUS_RESPONSE","payload":{"clientCount":42}}"#);
        assert_eq!(
            presence_snapshot(&[Person { user_id: "u-1".into(), nickname: "a".into() }]),
            r#"{"type":"PRESENCE_SNAPSHOT","payload":{"users":[{"userId":"u-1","nickname":"a"}]}}"#
        );
        let who = |n: &str| Person { user_id: format!("u-{n}"), nickname: n.into() };
        assert_eq!(
            presence_left(&[who("n")]),
            r#"{"type":"PRESENCE_LEFT","payload":{"users":[{"userId":"u-n","nickname":"n"}]}}"#
        );
        let people: Vec<Person> = ["a", "b", "c", "d", "e", "f", "g", "h"].map(who).to_vec();
        assert_eq!(people_line(&people[..1], "joined"), "a joined");
        assert_eq!(people_line(&people[..2], "left"), "a and b left");
        assert_eq!(people_line(&people[..6], "joined"), "a, b, c, d, e and f joined");
        assert_eq!(people_line(&people, "joined"), "a, b, c, d, e and 3 others joined");
        assert_eq!(error("x\"y"), r#"{"type":"ERROR","payload":{"message":"x\"y"}}"#);
    }

    #[test]
    fn client_frames() {
        let ok = [
            (r#"{"type":"MESSAGE_SEND","payload":{"message":"hi"}}"#, Request::Send("hi".into())),
            (r#"{"type":"SERVERSTATUS_REQUEST","payload":{}}"#, Request::Status),
            (r#"{"type":"SERVERSTATUS_REQUEST"}"#, Request::Status),
        ];
        for (text, want) in ok {
            assert_eq!(parse(text), Ok(want), "{text}");
        }
        let bad = [
            ("not json", "malformed frame"),
            ("[1,2]", "malformed frame"),
            (r#"{"payload":{}}"#, "\"type\" must be a string"),
            (r#"{"type":"MESSAGE_SEND","payload":{"message":5}}"#, "payload.message must be a string"),
            (r#"{"type":"MESSAGE_SEND","payload":{"message":"  "}}"#, "empty"),
            (r#"{"type":"MESSAGE_SEND"}"#, "payload.message must be a string"),
            (r#"{"type":"MESSAGE_RECEIVE","payload":{}}"#, "unknown frame type \"MESSAGE_RECEIVE\""),
        ];
        for (text, want) in bad {
            let e = parse(text).unwrap_err();
            assert!(e.contains(want), "{text}: {e}");
        }
    }
}
