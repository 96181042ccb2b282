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
}
