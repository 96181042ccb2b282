//! One place per browser: the place cookie. Every entry's answer sets
//! `queue_place_<queue>` (HttpOnly, SameSite=Lax, a day) naming the person the
//! entry stands for. An entry that carries it while that person still waits, holds
//! a ticket or is inside gets that person's standing back, unchanged (no second
//! person, no move to the back of the line): Back after admission, a reload, a
//! bookmark or a second tab of the same browser stays one person.
//!
//! Over plain HTTP the cookie has no `Path`: a browser then scopes it to the directory
//! of the entry's URL (`/api/queue`, or `/gate/room/api/queue` under the gate's
//! prefix), so it goes with the queue API's requests only, wherever the API is
//! mounted. Over HTTPS (as a trusted proxy says) it is named with the `__Host-`
//! prefix (`__Host-queue_place_<queue>`, `Secure`, `Path=/`, no `Domain`): a browser
//! takes such a cookie only from this very host over HTTPS, so a page on a sibling
//! subdomain cannot plant a place of its choosing in it (cookie fixation). The old
//! name is still read when no `__Host-` cookie is there, so places entered before keep
//! working; the `__Host-` cookie wins when both are sent. Clients that keep
//! no cookies (apps, `queue-cli`) are unaffected: they name their own userId, and an
//! entry naming it moves that person to the back as before.
//!
//! A place entered without a nickname (a queue whose `nickname` setting is `none`: the
//! page enters as it loads) is also *bound* to the cookie: the cookie then holds a
//! random secret (32 hex digits), and the userId is a UUID of version 8 derived from
//! it ([`new_bound`]: SHA-256 of the secret, so the id does not give the secret away).
//! A status read, a stream, a leave or a re-entry that names such an id is taken only
//! with the place cookie holding its secret. The page keeps the id where every tab
//! sees it, but the cookie is HttpOnly: a copied id (another browser, a shared link,
//! even written into a forged cookie) reads nothing, follows nothing and moves nobody;
//! it is answered like an id nobody holds. A script running on the page's own origin
//! is another matter: the browser sends the cookie with its requests (no cookie can
//! stop that; keep the origin free of other people's scripts).

use crate::error::ApiError;
use crate::AppState;
use axum::http::{HeaderMap, HeaderValue};
use queue_client::{QueueClient, Standing, Status};

/// The cookie's name starts with this; the queue's name follows.
pub const COOKIE_PREFIX: &str = "queue_place_";

/// How long the browser keeps the cookie (seconds). The place itself lives as the
/// queue's settings say; a cookie naming a person who is gone is ignored.
pub const MAX_AGE_S: u64 = 24 * 60 * 60;

/// The prefix a browser holds to this host, HTTPS and `Path=/` (no sibling
/// subdomain can set such a cookie).
pub const HOST_PREFIX: &str = "__Host-";

/// The cookie's name for `queue`: queue names are cookie-name characters, but for
/// `:`, written `%3A` (`%` is in no queue name, so no two queues share a cookie).
pub fn cookie_name(queue: &str) -> String {
    format!("{COOKIE_PREFIX}{}", queue.replace(':', "%3A"))
}

/// The cookie's name over HTTPS: [`cookie_name`] with the `__Host-` prefix.
pub fn host_cookie_name(queue: &str) -> String {
    format!("{HOST_PREFIX}{}", cookie_name(queue))
}

/// The place cookie's value as the request carries it: over HTTPS ([`over_https`])
/// only the `__Host-` one, which a sibling subdomain cannot set (an old-named cookie
/// there could be one such a site planted, to give its own place to a new visitor);
/// over plain HTTP the old name.
fn raw_cookie<'a>(headers: &'a HeaderMap, queue: &str, https: bool) -> Option<&'a str> {
    if https {
        service_kit::http::cookie(headers, &host_cookie_name(queue))
    } else {
        service_kit::http::cookie(headers, &cookie_name(queue))
    }
}

/// Whether the request came over HTTPS as a proxy in front says (`--trusted-proxies`
/// or `--trust-proxy` given, `X-Forwarded-Proto: https`): the place cookie is then
/// the `__Host-` one. A client that says so itself only loses its own cookie.
pub fn over_https(state: &AppState, headers: &HeaderMap) -> bool {
    state.client_addrs.any_trusted()
        && headers
            .get("x-forwarded-proto")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|p| p.eq_ignore_ascii_case("https"))
}

/// The userId the request's place cookie names for `queue`, if it names one this
/// service could have issued: a bound person's, derived from the secret the cookie
/// holds, or a plain (version 4) UUID. A cookie naming a version-8 id itself names
/// nobody: only the secret stands for a bound place.
pub fn from_cookie(headers: &HeaderMap, queue: &str, https: bool) -> Option<String> {
    let value = raw_cookie(headers, queue, https)?;
    if is_secret(value) {
        return Some(bound_id_of(value));
    }
    uuid::Uuid::parse_str(value).ok().filter(|id| id.get_version_num() != 8).map(|id| id.hyphenated().to_string())
}

/// A cookie's secret: 32 lowercase hex digits.
fn is_secret(value: &str) -> bool {
    value.len() == 32 && value.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// The userId a secret stands for: the first 16 bytes of SHA-256("queue-place:" +
/// secret), marked as a UUID of version 8 (the ids of other entries are version 4).
fn bound_id_of(secret: &str) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(format!("queue-place:{secret}").as_bytes());
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&digest[..16]);
    bytes[6] = (bytes[6] & 0x0f) | 0x80;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    uuid::Uuid::from_bytes(bytes).hyphenated().to_string()
}

/// A new person bound to the browser's place cookie: (their userId, the secret the
/// cookie holds). The secret is 128 random bits.
pub fn new_bound() -> (String, String) {
    let mut raw = [0u8; 16];
    getrandom::fill(&mut raw).expect("the operating system's random numbers");
    let secret: String = raw.iter().map(|b| format!("{b:02x}")).collect();
    (bound_id_of(&secret), secret)
}

/// Whether `user` is an id [`new_bound`] gives.
pub fn is_bound(user: &str) -> bool {
    uuid::Uuid::parse_str(user).is_ok_and(|u| u.get_version_num() == 8)
}

/// Whether the request may name `user` in `queue`: any id but a bound one, which
/// only with the place cookie naming it.
pub fn may_name(headers: &HeaderMap, queue: &str, user: &str, https: bool) -> bool {
    if !is_bound(user) {
        return true;
    }
    let named = uuid::Uuid::parse_str(user).map(|u| u.hyphenated().to_string()).ok();
    named.is_some() && from_cookie(headers, queue, https) == named
}

/// What the place cookie for `user` holds: a plain id itself; a bound id's secret,
/// given (a new person) or the one the request's cookie holds for that id. None when
/// the secret is not at hand (no cookie is set then).
fn cookie_value(headers: &HeaderMap, queue: &str, user: &str, secret: Option<&str>, https: bool) -> Option<String> {
    if !is_bound(user) {
        return Some(user.to_string());
    }
    if let Some(s) = secret.filter(|s| is_secret(s) && bound_id_of(s) == user) {
        return Some(s.to_string());
    }
    raw_cookie(headers, queue, https).filter(|v| is_secret(v) && bound_id_of(v) == user).map(str::to_string)
}

/// `user` when the request may name it ([`may_name`]); else the answer to an id
/// nobody holds (404), so that a copied id tells nothing.
pub fn named(headers: &HeaderMap, queue: &str, user: String, https: bool) -> Result<String, ApiError> {
    if may_name(headers, queue, &user, https) {
        Ok(user)
    } else {
        Err(ApiError::NotFound("unknown user: not waiting, promoted or inside".into()))
    }
}

/// The place the request's cookie holds in `queue`, when its person still waits,
/// holds a ticket or is inside (a status read, which counts a waiting person as heard
/// from; nothing written). None without a cookie, or for a person no longer there.
pub async fn held(
    state: &AppState,
    client: &QueueClient,
    queue: &str,
    headers: &HeaderMap,
) -> Result<Option<Standing>, queue_client::ClientError> {
    let Some(user) = from_cookie(headers, queue, over_https(state, headers)) else { return Ok(None) };
    let standing = state.statuses.status(client, queue, user).await?;
    Ok((standing.status != Status::Unknown).then_some(standing))
}

/// The Set-Cookie naming `user`'s place in `queue`: `Secure`, and named with the
/// `__Host-` prefix (`Path=/`, no `Domain`), when the request came over HTTPS as a
/// proxy in front says (`--trusted-proxies` or `--trust-proxy` given,
/// `X-Forwarded-Proto`). A client that says so itself only loses its own cookie over
/// plain HTTP.
pub fn set_cookie(
    state: &AppState,
    headers: &HeaderMap,
    queue: &str,
    user: &str,
    secret: Option<&str>,
) -> Option<HeaderValue> {
    let https = over_https(state, headers);
    let value = cookie_value(headers, queue, user, secret, https)?;
    Some(
        HeaderValue::from_str(&cookie_header(queue, &value, https)).expect("a cookie of name, UUID and hex characters"),
    )
}

/// The Set-Cookie's text: over HTTPS the `__Host-` cookie (Secure, Path=/, no
/// Domain), else the old one, scoped by the browser to the entry URL's directory.
fn cookie_header(queue: &str, value: &str, https: bool) -> String {
    if https {
        format!("{}={value}; Path=/; Max-Age={MAX_AGE_S}; HttpOnly; SameSite=Lax; Secure", host_cookie_name(queue))
    } else {
        format!("{}={value}; Max-Age={MAX_AGE_S}; HttpOnly; SameSite=Lax", cookie_name(queue))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::header;

    #[test]
    fn reads_the_queues_own_cookie() {
        let id = "0f8fad5b-d9cb-469f-a165-70867728950e";
        let mut h = HeaderMap::new();
        h.append(
            header::COOKIE,
            HeaderValue::from_str(&format!("x=1; queue_place_a%3Ab={id}; queue_place_other=junk")).unwrap(),
        );
        assert_eq!(cookie_name("a:b"), "queue_place_a%3Ab");
        assert_eq!(from_cookie(&h, "a:b", false).as_deref(), Some(id));
        assert_eq!(from_cookie(&h, "other", false), None, "not a UUID");
        assert_eq!(from_cookie(&h, "a_b", false), None);
        assert_eq!(from_cookie(&HeaderMap::new(), "a:b", false), None);
    }

    #[test]
    fn over_https_the_cookie_is_held_to_this_host() {
        let c = cookie_header("a:b", "v", true);
        assert!(c.starts_with("__Host-queue_place_a%3Ab=v;"), "{c}");
        assert!(c.contains("; Path=/;") && c.ends_with("; Secure") && !c.contains("Domain"), "{c}");
        let c = cookie_header("a:b", "v", false);
        assert!(c.starts_with("queue_place_a%3Ab=v;") && !c.contains("Path") && !c.contains("Secure"), "{c}");
        // Over HTTPS only the __Host- name is read: a sibling subdomain can set the
        // old name, and a new visitor would take the place it planted.
        let (old, new) = (uuid::Uuid::new_v4().to_string(), uuid::Uuid::new_v4().to_string());
        let mut h = HeaderMap::new();
        h.append(
            header::COOKIE,
            HeaderValue::from_str(&format!("queue_place_q={old}; __Host-queue_place_q={new}")).unwrap(),
        );
        assert_eq!(from_cookie(&h, "q", true), Some(new));
        assert_eq!(from_cookie(&h, "q", false), Some(old.clone()), "over plain HTTP the old name");
        let (planted, secret) = new_bound();
        let mut h = HeaderMap::new();
        h.append(header::COOKIE, HeaderValue::from_str(&format!("queue_place_q={secret}")).unwrap());
        assert_eq!(from_cookie(&h, "q", true), None, "a planted old-named cookie names nobody over HTTPS");
        assert!(!may_name(&h, "q", &planted, true));
        assert_eq!(cookie_value(&h, "q", &planted, None, true), None, "nor is its secret carried over");
    }

    #[test]
    fn a_bound_id_is_named_only_with_its_secret() {
        let (id, secret) = new_bound();
        assert!(is_bound(&id), "{id}");
        assert!(!id.contains(&secret[..8]) && secret.len() == 32, "{id} {secret}");
        assert!(!is_bound(&uuid::Uuid::new_v4().to_string()));
        assert!(!is_bound("alice"));
        let with = |cookie: &str| {
            let mut h = HeaderMap::new();
            h.append(header::COOKIE, HeaderValue::from_str(&format!("queue_place_q={cookie}")).unwrap());
            h
        };
        assert!(may_name(&with(&secret), "q", &id, false));
        assert!(may_name(&with(&secret), "q", &id.to_uppercase(), false));
        assert_eq!(from_cookie(&with(&secret), "q", false), Some(id.clone()));
        assert!(!may_name(&HeaderMap::new(), "q", &id, false), "a copied id alone");
        assert!(!may_name(&with(&id), "q", &id, false), "a cookie forged from the copied id");
        assert_eq!(from_cookie(&with(&id), "q", false), None, "a version-8 id in a cookie names nobody");
        assert!(!may_name(&with(&new_bound().1), "q", &id, false), "another place's cookie");
        assert!(!may_name(&with(&secret), "other", &id, false), "another queue's cookie");
        assert!(!may_name(&with(&secret.to_uppercase()), "q", &id, false), "only the secret as given");
        let plain = uuid::Uuid::new_v4().to_string();
        assert!(may_name(&HeaderMap::new(), "q", &plain, false), "seed 000's ids as before");
        assert!(named(&HeaderMap::new(), "q", id.clone(), false).is_err());
        // The cookie an answer sets: the secret for a bound id (given, or the
        // request's own), never the id; the id itself for a plain one.
        assert_eq!(cookie_value(&HeaderMap::new(), "q", &id, Some(&secret), false), Some(secret.clone()));
        assert_eq!(cookie_value(&with(&secret), "q", &id, None, false), Some(secret.clone()));
        assert_eq!(cookie_value(&with(&id), "q", &id, None, false), None);
        assert_eq!(cookie_value(&HeaderMap::new(), "q", &plain, None, false), Some(plain.clone()));
    }
}
