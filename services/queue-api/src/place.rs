//! One place per browser: the place cookie. Every entry's answer sets
//! `queue_place_<queue>` (HttpOnly, SameSite=Lax, a day) naming the person the
//! entry stands for. An entry that carries it while that person still waits, holds
//! a ticket or is inside gets that person's standing back, unchanged (no second
//! person, no move to the back of the line): Back after admission, a reload, a
//! bookmark or a second tab of the same browser stays one person.
//!
//! The cookie has no `Path`: a browser then scopes it to the directory of the entry's
//! URL (`/api/queue`, or `/gate/room/api/queue` under the gate's prefix), so it goes
//! with the queue API's requests only, wherever the API is mounted. Clients that keep
//! no cookies (apps, `queue-cli`) are unaffected: they name their own userId, and an
//! entry naming it moves that person to the back as before.
//!
//! A place entered without a nickname (a queue whose `nickname` setting is `none`: the
//! page enters as it loads) is also *bound* to the cookie: its userId is a UUID of
//! version 8 ([`bound_id`]), and a status read, a stream, a leave or a re-entry that
//! names such an id is taken only with the place cookie naming the same id. The page
//! keeps the id where every tab sees it, but the cookie is HttpOnly: a copied id alone
//! (another browser, a shared link, a script on the page) reads nothing, follows
//! nothing and moves nobody; it is answered like an id nobody holds.

use crate::error::ApiError;
use crate::AppState;
use axum::http::{HeaderMap, HeaderValue};
use queue_client::{QueueClient, Standing, Status};

/// The cookie's name starts with this; the queue's name follows.
pub const COOKIE_PREFIX: &str = "queue_place_";

/// How long the browser keeps the cookie (seconds). The place itself lives as the
/// queue's settings say; a cookie naming a person who is gone is ignored.
pub const MAX_AGE_S: u64 = 24 * 60 * 60;

/// The cookie's name for `queue`: queue names are cookie-name characters, but for
/// `:`, written `%3A` (`%` is in no queue name, so no two queues share a cookie).
pub fn cookie_name(queue: &str) -> String {
    format!("{COOKIE_PREFIX}{}", queue.replace(':', "%3A"))
}

/// The userId the request's place cookie names for `queue`, if it names one this
/// service could have issued (a UUID).
pub fn from_cookie(headers: &HeaderMap, queue: &str) -> Option<String> {
    service_kit::http::cookie(headers, &cookie_name(queue))
        .and_then(|v| uuid::Uuid::parse_str(v).ok())
        .map(|id| id.hyphenated().to_string())
}

/// A new userId bound to the browser's place cookie: a random UUID marked as
/// version 8 (the ids of other entries are version 4).
pub fn bound_id() -> String {
    let mut bytes = *uuid::Uuid::new_v4().as_bytes();
    bytes[6] = (bytes[6] & 0x0f) | 0x80;
    uuid::Uuid::from_bytes(bytes).hyphenated().to_string()
}

/// Whether `user` is an id [`bound_id`] gives.
pub fn is_bound(user: &str) -> bool {
    uuid::Uuid::parse_str(user).is_ok_and(|u| u.get_version_num() == 8)
}

/// Whether the request may name `user` in `queue`: any id but a bound one, which
/// only with the place cookie naming it.
pub fn may_name(headers: &HeaderMap, queue: &str, user: &str) -> bool {
    if !is_bound(user) {
        return true;
    }
    let named = uuid::Uuid::parse_str(user).map(|u| u.hyphenated().to_string()).ok();
    named.is_some() && from_cookie(headers, queue) == named
}

/// `user` when the request may name it ([`may_name`]); else the answer to an id
/// nobody holds (404), so that a copied id tells nothing.
pub fn named(headers: &HeaderMap, queue: &str, user: String) -> Result<String, ApiError> {
    if may_name(headers, queue, &user) {
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
    let Some(user) = from_cookie(headers, queue) else { return Ok(None) };
    let standing = state.statuses.status(client, queue, user).await?;
    Ok((standing.status != Status::Unknown).then_some(standing))
}

/// The Set-Cookie naming `user`'s place in `queue`: `Secure` when the request came
/// over HTTPS as a proxy in front says (`--trusted-proxies` or `--trust-proxy` given,
/// `X-Forwarded-Proto`). A client that says so itself only loses its own cookie over
/// plain HTTP.
pub fn set_cookie(state: &AppState, headers: &HeaderMap, queue: &str, user: &str) -> HeaderValue {
    let https = state.client_addrs.any_trusted()
        && headers
            .get("x-forwarded-proto")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|p| p.eq_ignore_ascii_case("https"));
    let secure = if https { "; Secure" } else { "" };
    let cookie = format!("{}={user}; Max-Age={MAX_AGE_S}; HttpOnly; SameSite=Lax{secure}", cookie_name(queue));
    HeaderValue::from_str(&cookie).expect("a cookie of name and UUID characters")
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
        assert_eq!(from_cookie(&h, "a:b").as_deref(), Some(id));
        assert_eq!(from_cookie(&h, "other"), None, "not a UUID");
        assert_eq!(from_cookie(&h, "a_b"), None);
        assert_eq!(from_cookie(&HeaderMap::new(), "a:b"), None);
    }

    #[test]
    fn a_bound_id_is_named_only_with_its_cookie() {
        let id = bound_id();
        assert!(is_bound(&id), "{id}");
        assert!(!is_bound(&uuid::Uuid::new_v4().to_string()));
        assert!(!is_bound("alice"));
        let with = |cookie: &str| {
            let mut h = HeaderMap::new();
            h.append(header::COOKIE, HeaderValue::from_str(&format!("queue_place_q={cookie}")).unwrap());
            h
        };
        assert!(may_name(&with(&id), "q", &id));
        assert!(may_name(&with(&id), "q", &id.to_uppercase()));
        assert!(!may_name(&HeaderMap::new(), "q", &id), "a copied id alone");
        assert!(!may_name(&with(&bound_id()), "q", &id), "another place's cookie");
        assert!(!may_name(&with(&id), "other", &id), "another queue's cookie");
        let plain = uuid::Uuid::new_v4().to_string();
        assert!(may_name(&HeaderMap::new(), "q", &plain), "seed 000's ids as before");
        assert!(named(&HeaderMap::new(), "q", id).is_err());
    }
}
