//! The admission cookie and the Bearer header: where a request's tokens are, and the
//! Set-Cookie that stores them.
//!
//! One cookie holds the person's tokens for every queue behind this gate, joined by
//! `~` (not a base64url or JWT character): someone admitted to `/checkout` and then
//! to `/tickets/` keeps both. Usually it holds one token, a plain JWT.

use axum::http::{HeaderMap, HeaderValue};

/// Separates the tokens of several queues in the cookie.
pub const SEPARATOR: char = '~';

/// Most tokens one cookie keeps (the oldest go first).
pub const MAX_TOKENS: usize = 8;

pub use service_kit::http::{bearer, cookie};

/// The tokens the request carries: the Bearer token, then those of the admission cookie.
pub fn tokens<'a>(headers: &'a HeaderMap, cookie_name: &str) -> impl Iterator<Item = &'a str> {
    let from_cookie = cookie(headers, cookie_name).into_iter().flat_map(|v| v.split(SEPARATOR)).take(MAX_TOKENS);
    bearer(headers).into_iter().chain(from_cookie).filter(|t| !t.is_empty())
}

/// How the cookie is set.
#[derive(Debug, Clone)]
pub struct CookieSpec {
    pub name: String,
    pub domain: Option<String>,
}

impl CookieSpec {
    /// Set-Cookie holding `tokens` (cleared when empty), living `max_age_s`.
    pub fn set(&self, tokens: &[String], max_age_s: u64, secure: bool) -> HeaderValue {
        let mut c = if tokens.is_empty() {
            format!("{}=; Max-Age=0", self.name)
        } else {
            format!("{}={}; Max-Age={max_age_s}", self.name, tokens.join(&SEPARATOR.to_string()))
        };
        c.push_str("; Path=/; HttpOnly; SameSite=Lax");
        if let Some(d) = &self.domain {
            c.push_str("; Domain=");
            c.push_str(d);
        }
        if secure {
            c.push_str("; Secure");
        }
        HeaderValue::from_str(&c).expect("cookie of token characters")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::header;

    #[test]
    fn reads_bearer_then_cookie_tokens() {
        let mut h = HeaderMap::new();
        h.insert(header::AUTHORIZATION, HeaderValue::from_static("Bearer aaa"));
        h.append(header::COOKIE, HeaderValue::from_static("x=1; queue_admission=bbb~ccc; y=2"));
        assert_eq!(tokens(&h, "queue_admission").collect::<Vec<_>>(), ["aaa", "bbb", "ccc"]);
        assert_eq!(cookie(&h, "y"), Some("2"));
        assert_eq!(cookie(&h, "queue"), None);
        let spec = CookieSpec { name: "queue_admission".into(), domain: Some("example.com".into()) };
        let set = spec.set(&["t1".into(), "t2".into()], 600, true);
        assert_eq!(
            set,
            "queue_admission=t1~t2; Max-Age=600; Path=/; HttpOnly; SameSite=Lax; Domain=example.com; Secure"
        );
        assert!(spec.set(&[], 0, false).to_str().unwrap().starts_with("queue_admission=; Max-Age=0"));
    }
}
