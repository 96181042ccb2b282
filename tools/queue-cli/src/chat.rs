//! The chat-server side of a journey: the ticket is claimed by the WebSocket handshake
//! (`/gameserver?ticketId=&queue=`), then frames are JSON `{"type", "payload"}`.

use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::{self, Message};
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

pub type Socket = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// How a handshake ended.
pub enum Handshake {
    /// The ticket was claimed: the session is open.
    Admitted(Box<Socket>),
    /// The server answered with an HTTP refusal (401 unknown/expired ticket, 409 used, 503...).
    Refused(u16, String),
    /// No answer.
    Failed(String),
}

/// The WebSocket address of the claim for `ticket`: `chat` like `http://127.0.0.1:8081`.
pub fn gameserver_url(chat: &str, queue: &str, ticket: &str) -> Result<String, String> {
    let mut url = url::Url::parse(chat).map_err(|e| format!("bad chat URL {chat:?}: {e}"))?;
    let scheme = match url.scheme() {
        "http" | "ws" => "ws",
        "https" | "wss" => return Err("wss:// is not supported by this client; use the plain address".into()),
        other => return Err(format!("bad chat URL scheme {other:?}")),
    };
    url.set_scheme(scheme).map_err(|_| "bad chat URL".to_string())?;
    url.set_path("/gameserver");
    url.query_pairs_mut().clear().append_pair("ticketId", ticket).append_pair("queue", queue);
    Ok(url.to_string())
}

/// Opens the session for `ticket`.
pub async fn connect(chat: &str, queue: &str, ticket: &str) -> Handshake {
    let url = match gameserver_url(chat, queue, ticket) {
        Ok(u) => u,
        Err(e) => return Handshake::Failed(e),
    };
    match tokio_tungstenite::connect_async(url).await {
        Ok((ws, _)) => Handshake::Admitted(Box::new(ws)),
        Err(tungstenite::Error::Http(resp)) => {
            let body = resp.body().as_ref().map(|b| String::from_utf8_lossy(b).into_owned()).unwrap_or_default();
            Handshake::Refused(resp.status().as_u16(), crate::api::error_text(&body))
        }
        Err(e) => Handshake::Failed(e.to_string()),
    }
}

/// A frame as text.
pub fn frame(kind: &str, payload: Value) -> Message {
    Message::text(json!({ "type": kind, "payload": payload }).to_string())
}

/// `MESSAGE_SEND {message}`.
pub fn say(message: &str) -> Message {
    frame("MESSAGE_SEND", json!({ "message": message }))
}

/// Sends `msg`; false when the connection is gone.
pub async fn send(ws: &mut Socket, msg: Message) -> bool {
    ws.send(msg).await.is_ok()
}

/// A frame from the server.
#[derive(Debug, Clone, PartialEq)]
pub struct Frame {
    pub kind: String,
    pub payload: Value,
}

/// What reading the socket gave.
#[derive(Debug)]
pub enum Incoming {
    Frame(Frame),
    /// The server closed the session (code and reason), or the connection dropped (None).
    Closed(Option<(u16, String)>),
}

/// The next frame, skipping pings and pongs.
pub async fn next(ws: &mut Socket) -> Incoming {
    loop {
        match ws.next().await {
            Some(Ok(Message::Text(t))) => {
                let v: Value = serde_json::from_str(t.as_str()).unwrap_or(Value::Null);
                let kind = v["type"].as_str().unwrap_or("").to_string();
                return Incoming::Frame(Frame { kind, payload: v["payload"].clone() });
            }
            Some(Ok(Message::Close(c))) => {
                return Incoming::Closed(c.map(|c| (u16::from(c.code), c.reason.to_string())));
            }
            Some(Ok(_)) => continue,
            Some(Err(_)) | None => return Incoming::Closed(None),
        }
    }
}

/// Ends the session politely (close 1000) and waits briefly for the server's close.
pub async fn leave(mut ws: Socket) {
    let _ = ws.close(None).await;
    let drain = async { while let Some(Ok(_)) = ws.next().await {} };
    let _ = tokio::time::timeout(std::time::Duration::from_secs(2), drain).await;
}

/// One line for a person to read, or None for frames they need not see.
pub fn describe(f: &Frame) -> Option<String> {
    let p = &f.payload;
    let s = |k: &str| p[k].as_str().unwrap_or("").to_string();
    Some(match f.kind.as_str() {
        "MESSAGE_RECEIVE" => format!("[{}] {}: {}", s("timestamp"), s("nickname"), s("message")),
        "SYSTEM_MESSAGE_RECEIVE" => format!("[{}] * {}", s("timestamp"), s("message")),
        "SERVERSTATUS_RESPONSE" => format!("* {} in the room", p["clientCount"]),
        "PRESENCE_SNAPSHOT" => {
            let names: Vec<&str> =
                p["users"].as_array().into_iter().flatten().filter_map(|u| u["nickname"].as_str()).collect();
            format!("* here now ({}): {}", names.len(), names.join(", "))
        }
        "ERROR" => format!("! {}", s("message")),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gameserver_url_from_http_base() {
        let u = gameserver_url("http://127.0.0.1:8081/", "default", "12.ab-_").unwrap();
        assert_eq!(u, "ws://127.0.0.1:8081/gameserver?ticketId=12.ab-_&queue=default");
        assert!(gameserver_url("https://x/", "q", "t").is_err());
        assert!(gameserver_url("not a url", "q", "t").is_err());
    }

    #[test]
    fn frames_described() {
        let f = Frame {
            kind: "MESSAGE_RECEIVE".into(),
            payload: json!({"timestamp": "t", "nickname": "a", "message": "hi"}),
        };
        assert_eq!(describe(&f).unwrap(), "[t] a: hi");
        let f = Frame { kind: "PRESENCE_JOINED".into(), payload: json!({}) };
        assert_eq!(describe(&f), None);
    }
}
