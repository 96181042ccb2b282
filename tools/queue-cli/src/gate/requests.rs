//! The gate's routes as one person's requests: the gated path asked for as a browser
//! would, `/gate/claim`, `/gate/leave`, with a credential (the admission cookie or a
//! bearer token), and the admission cookie read from `Set-Cookie` with its flags.

use std::time::Duration;

/// A credential the gate accepts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Credential {
    /// The admission cookie (name, value).
    Cookie(String, String),
    /// `Authorization: Bearer <token>`.
    Bearer(String),
}

impl Credential {
    pub(super) fn apply(&self, r: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match self {
            Credential::Cookie(name, value) => r.header("cookie", format!("{name}={value}")),
            Credential::Bearer(token) => r.bearer_auth(token),
        }
    }

    /// The token itself.
    pub fn token(&self) -> &str {
        match self {
            Credential::Cookie(_, v) | Credential::Bearer(v) => v,
        }
    }
}

/// How the gated path answered.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// The app answered (2xx): its JSON body when it had one, and a renewed cookie.
    App(u16, Option<serde_json::Value>, Option<String>),
    /// Sent to the waiting room (3xx, or a JSON answer naming the room).
    Room(String),
    /// Anything else: status and body.
    Other(u16, String),
}

/// How a claim at /gate/claim ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Claimed {
    /// Admitted: the cookie's value and where the gate sent the person.
    Admitted(String, String),
    /// Refused: status, `Retry-After` if any, body.
    Refused(u16, Option<String>, String),
    /// No answer.
    Failed(String),
}

/// Each request's own time limit.
pub(super) const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// An HTTP client that follows no redirects (each one is checked) and keeps no cookies
/// (each user's are sent by hand).
pub fn http_client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .connect_timeout(Duration::from_secs(5))
        .pool_max_idle_per_host(256)
        .build()
        .expect("an HTTP client without TLS builds")
}

/// The value of cookie `name` among `resp`'s Set-Cookie headers (empty when cleared),
/// and whether that Set-Cookie had the flags an admission cookie must have.
pub fn set_cookie(headers: &reqwest::header::HeaderMap, name: &str) -> Option<(String, bool)> {
    headers.get_all("set-cookie").iter().filter_map(|v| v.to_str().ok()).find_map(|v| {
        let mut parts = v.split(';').map(str::trim);
        let (n, value) = parts.next()?.split_once('=')?;
        if n != name {
            return None;
        }
        let attrs: Vec<String> = parts.map(|p| p.to_ascii_lowercase().replace(' ', "")).collect();
        let flagged = attrs.iter().any(|a| a == "httponly") && attrs.iter().any(|a| a == "samesite=lax");
        Some((value.to_string(), flagged))
    })
}

/// A gated path's answer read whole (see [`fetch`]).
pub(super) struct Reply {
    pub(super) code: u16,
    /// Where a redirect sends the person.
    pub(super) location: Option<String>,
    /// The admission cookie set, and whether it had HttpOnly and SameSite=Lax.
    pub(super) cookie: Option<(String, bool)>,
    pub(super) body: Option<serde_json::Value>,
    /// The body's first 200 characters.
    pub(super) text: String,
}

/// Asks for `url` as a browser would (HTML accepted), with `cred` and
/// `X-Forwarded-For: forwarded_for` if any, and reads the answer whole: where it
/// redirects, the Set-Cookie of cookie `cookie` (when named), its JSON body.
pub(super) async fn fetch(
    http: &reqwest::Client,
    url: &str,
    cred: Option<&Credential>,
    forwarded_for: Option<&str>,
    cookie: Option<&str>,
) -> Result<Reply, String> {
    let mut r = http.get(url).header("accept", "text/html,application/xhtml+xml;q=0.9,*/*;q=0.8");
    if let Some(c) = cred {
        r = c.apply(r);
    }
    if let Some(ip) = forwarded_for {
        r = r.header("x-forwarded-for", ip);
    }
    let resp = r.timeout(REQUEST_TIMEOUT).send().await.map_err(|e| e.to_string())?;
    let code = resp.status().as_u16();
    let location = resp
        .status()
        .is_redirection()
        .then(|| resp.headers().get("location").and_then(|v| v.to_str().ok()).unwrap_or("").to_string());
    let cookie = cookie.and_then(|name| set_cookie(resp.headers(), name));
    let text = resp.text().await.unwrap_or_default();
    let body = serde_json::from_str(&text).ok();
    Ok(Reply { code, location, cookie, body, text: text.chars().take(200).collect() })
}

/// Asks for `url` as a browser would (HTML accepted), with `cred` if any.
pub async fn ask(http: &reqwest::Client, url: &str, cred: Option<&Credential>) -> Answer {
    let cookie = match cred {
        Some(Credential::Cookie(name, _)) => Some(name.as_str()),
        _ => None,
    };
    match fetch(http, url, cred, None, cookie).await {
        Err(e) => Answer::Other(0, e),
        Ok(Reply { location: Some(location), .. }) => Answer::Room(location),
        Ok(r) if (200..300).contains(&r.code) => Answer::App(r.code, r.body, r.cookie.map(|(v, _)| v)),
        Ok(r) => Answer::Other(r.code, r.text),
    }
}

/// `GET <gate>/gate/claim?queue=&ticketId=&return=`: admitted when the gate sets cookie
/// `cookie` (with HttpOnly and SameSite=Lax) and redirects.
pub async fn claim(
    http: &reqwest::Client,
    gate: &str,
    cookie: &str,
    queue: &str,
    ticket: &str,
    back_to: &str,
) -> Claimed {
    let url = format!("{}/gate/claim", gate.trim_end_matches('/'));
    let r = http.get(url).query(&[("queue", queue), ("ticketId", ticket), ("return", back_to)]);
    let resp = match r.header("accept", "text/html").timeout(REQUEST_TIMEOUT).send().await {
        Ok(r) => r,
        Err(e) => return Claimed::Failed(e.to_string()),
    };
    let code = resp.status().as_u16();
    let header = |name: &str| resp.headers().get(name).and_then(|v| v.to_str().ok()).map(String::from);
    if resp.status().is_redirection() {
        let location = header("location").unwrap_or_default();
        return match set_cookie(resp.headers(), cookie) {
            Some((value, true)) if !value.is_empty() => Claimed::Admitted(value, location),
            Some((_, false)) => {
                Claimed::Refused(code, None, "the admission cookie lacks HttpOnly or SameSite=Lax".into())
            }
            _ => Claimed::Refused(code, None, format!("redirected to {location} without an admission cookie")),
        };
    }
    let retry_after = header("retry-after");
    let body: String = resp.text().await.unwrap_or_default().chars().take(200).collect();
    Claimed::Refused(code, retry_after, body)
}

/// `GET <gate>/gate/leave?queue=&return=/` with the person's credential: the session
/// ends; a cookie must be cleared.
pub async fn leave(http: &reqwest::Client, gate: &str, queue: &str, cred: &Credential) -> Result<(), String> {
    let url = format!("{}/gate/leave", gate.trim_end_matches('/'));
    let r = cred.apply(http.get(url).query(&[("queue", queue), ("return", "/")]));
    let resp = r.timeout(REQUEST_TIMEOUT).send().await.map_err(|e| format!("leaving at /gate/leave: {e}"))?;
    let code = resp.status().as_u16();
    if !(resp.status().is_redirection() || resp.status().is_success()) {
        return Err(format!("/gate/leave answered {code}"));
    }
    if let Credential::Cookie(name, _) = cred {
        match set_cookie(resp.headers(), name) {
            Some((v, _)) if v.is_empty() => {}
            _ => return Err("/gate/leave did not clear the admission cookie".into()),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_admission_cookie_is_read_with_its_flags() {
        let mut h = reqwest::header::HeaderMap::new();
        h.append("set-cookie", "other=1; Path=/".parse().unwrap());
        h.append("set-cookie", "queue_admission=abc.def; Path=/; HttpOnly; SameSite=Lax".parse().unwrap());
        assert_eq!(set_cookie(&h, "queue_admission"), Some(("abc.def".into(), true)));
        let mut h = reqwest::header::HeaderMap::new();
        h.append("set-cookie", "queue_admission=; Path=/; Max-Age=0".parse().unwrap());
        assert_eq!(set_cookie(&h, "queue_admission"), Some((String::new(), false)));
        assert_eq!(set_cookie(&h, "queue"), None);
    }
}
