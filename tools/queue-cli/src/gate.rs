//! Walking through a gate (`queue-cli swarm --gate URL --gate-path /checkout`): each
//! virtual user first asks for the gated path without admission and must be sent to the
//! waiting room; it then stands in line through the room's API as served by the gate
//! (`<gate>/gate/room/api/queue/*`), and once promoted goes where the waiting-room page
//! sends it, `/gate/claim?queue=&ticketId=&return=`, which must set the admission cookie
//! and send it back to the gated path. Inside, it asks for the gated path a few times
//! with the cookie (or, as an app would, with `Authorization: Bearer`), then leaves at
//! `/gate/leave` or goes idle. Audited on top of the swarm's own audits:
//!
//! - **Passed unadmitted**: the gated path answered without admission.
//! - **Wrong user**: the app (the example upstream, which echoes what it was told) saw
//!   another person than the one whose cookie was sent.
//! - **Access after leaving**: the cookie still opened the gated path after `/gate/leave`.
//! - A used ticket claimed again (after leaving) or twice at once is a double claim.
//!
//! With `--gate-journal FILE` each admitted person's window is written as a JSON line
//! (`user`, `queue`, `claimSentUs`, `insideUntilUs`, microseconds since the epoch), so
//! that a test can check the upstream's own log against it: every request the app
//! served must fall inside the window of the person it was served to.

use serde::Serialize;
use std::io::Write;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

// The gate's options of `queue-cli swarm` (no doc comment: clap would take it for the
// subcommand's description).
#[derive(clap::Args, Debug, Clone)]
pub struct GateArgs {
    /// Walk through a gate at this address (the gate itself, or the proxy in front of it)
    /// instead of claiming tickets at chat-server; the line is followed through the room
    /// the gate serves (--gate-room).
    #[arg(long)]
    pub gate: Option<String>,
    /// The gated path each user asks for.
    #[arg(long, default_value = "/checkout")]
    pub gate_path: String,
    /// Where the gate serves the waiting room and its API.
    #[arg(long, default_value = "/gate/room/")]
    pub gate_room: String,
    /// Requests each admitted user makes to the gated path while inside (spread over
    /// its stay, --stay-secs).
    #[arg(long, default_value_t = 3)]
    pub gate_requests: u32,
    /// Share of admitted users who go idle instead of leaving at /gate/leave.
    #[arg(long, default_value_t = 0.2)]
    pub gate_idle: f64,
    /// The gate's --idle in seconds: an idle user counts as inside until this long
    /// after its last request (its slot cannot come back sooner).
    #[arg(long, default_value_t = 300.0)]
    pub gate_idle_secs: f64,
    /// Share of admitted users who send their token as `Authorization: Bearer` (as an
    /// app or a mobile client does) instead of the cookie.
    #[arg(long, default_value_t = 0.1)]
    pub gate_bearer: f64,
    /// The admission cookie's name (the gate's --cookie-name).
    #[arg(long, default_value = "queue_admission")]
    pub gate_cookie: String,
    /// Write each admitted user's window (claim sent .. no longer inside) to this file,
    /// one JSON line each, for an audit of the upstream's log.
    #[arg(long)]
    pub gate_journal: Option<std::path::PathBuf>,
}

impl GateArgs {
    /// The gate to walk through, if `--gate` was given.
    pub fn into_gate(self) -> Result<Option<Gate>, String> {
        let Some(url) = self.gate.clone() else { return Ok(None) };
        let walk = GateWalk {
            url,
            path: self.gate_path,
            room: self.gate_room,
            requests: self.gate_requests,
            idle: self.gate_idle,
            idle_after: Duration::try_from_secs_f64(self.gate_idle_secs.max(0.0)).unwrap_or(Duration::MAX),
            bearer: self.gate_bearer,
            cookie: self.gate_cookie,
            journal: self.gate_journal,
        };
        Gate::new(walk).map(Some)
    }
}

/// How virtual users walk through a gate; see [`GateArgs`] for each field.
#[derive(Debug, Clone)]
pub struct GateWalk {
    pub url: String,
    pub path: String,
    pub room: String,
    pub requests: u32,
    pub idle: f64,
    pub idle_after: Duration,
    pub bearer: f64,
    pub cookie: String,
    pub journal: Option<std::path::PathBuf>,
}

/// What the users saw at the gate. `passed_unadmitted`, `wrong_user`, `app_unverified`
/// and `access_after_leave` must be 0.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "snake_case")]
pub struct GateReport {
    /// Unadmitted requests for the gated path sent to the waiting room.
    pub sent_to_room: u64,
    /// Unadmitted requests for the gated path that got through (2xx).
    pub passed_unadmitted: u64,
    /// Tickets claimed at /gate/claim (cookie set, sent back to the gated path).
    pub claims: u64,
    /// Users who claimed their ticket twice at once.
    pub claim_races: u64,
    /// Users who sent their token as a bearer token.
    pub bearer_users: u64,
    /// Requests to the gated path while admitted, and how many the app answered.
    pub app_requests: u64,
    pub app_answered: u64,
    /// The app saw another user than the one admitted.
    pub wrong_user: u64,
    /// The app answered without telling whom it served (no X-Queue-User, no token).
    pub app_unverified: u64,
    /// Admission cookies renewed by the gate (a new Set-Cookie while inside).
    pub cookies_renewed: u64,
    /// Users who left at /gate/leave, and who went idle.
    pub left: u64,
    pub idle: u64,
    /// After leaving, the old cookie was refused (sent to the room) or still let in.
    pub refused_after_leave: u64,
    pub access_after_leave: u64,
}

impl GateReport {
    pub fn clean(&self) -> bool {
        self.passed_unadmitted == 0 && self.wrong_user == 0 && self.app_unverified == 0 && self.access_after_leave == 0
    }
}

impl std::fmt::Display for GateReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mark = |n: u64| if n == 0 { "ok" } else { "FAIL" };
        writeln!(
            f,
            "  gate: sent to room    {} ({} got through unadmitted [{}])",
            self.sent_to_room,
            self.passed_unadmitted,
            mark(self.passed_unadmitted)
        )?;
        writeln!(
            f,
            "  gate: claims          {} ({} raced, {} with a bearer token)",
            self.claims, self.claim_races, self.bearer_users
        )?;
        writeln!(
            f,
            "  gate: app requests    {} sent, {} answered, {} renewed cookies",
            self.app_requests, self.app_answered, self.cookies_renewed
        )?;
        writeln!(
            f,
            "  gate: wrong user      {} [{}] ({} answers unverified [{}])",
            self.wrong_user,
            mark(self.wrong_user),
            self.app_unverified,
            mark(self.app_unverified)
        )?;
        writeln!(
            f,
            "  gate: after leaving   {} let in [{}], {} refused ({} left, {} went idle)",
            self.access_after_leave,
            mark(self.access_after_leave),
            self.refused_after_leave,
            self.left,
            self.idle
        )
    }
}

/// What a visit tells the swarm's ledger (implemented by the swarm).
pub(crate) trait Tally: Sync {
    /// Updates the gate's counters.
    fn gate(&self, f: &mut dyn FnMut(&mut GateReport));
    /// User `who` claimed its ticket: inside.
    fn admitted(&self, who: usize);
    /// A ticket or session is about to be given back (or was refused).
    fn released(&self);
    /// Every claim of the ticket was refused.
    fn claim_refused(&self);
    /// One ticket admitted twice.
    fn double_claim(&self, who: usize, what: &str);
    /// A used ticket was refused when claimed again.
    fn reuse_refused(&self);
    /// Left after being inside.
    fn left(&self);
}

/// A credential the gate accepts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Credential {
    /// The admission cookie (name, value).
    Cookie(String, String),
    /// `Authorization: Bearer <token>`.
    Bearer(String),
}

impl Credential {
    fn apply(&self, r: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
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
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// A gate to walk through, shared by a swarm's users.
pub struct Gate {
    pub walk: GateWalk,
    http: reqwest::Client,
    journal: Option<Mutex<std::fs::File>>,
}

/// Microseconds since the epoch (the upstream's log uses the same clock).
pub fn epoch_us() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_micros() as u64).unwrap_or(0)
}

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

impl Gate {
    pub fn new(walk: GateWalk) -> Result<Gate, String> {
        url::Url::parse(&walk.url).map_err(|e| format!("bad --gate URL {:?}: {e}", walk.url))?;
        if !walk.path.starts_with('/') || !walk.room.starts_with('/') {
            return Err("--gate-path and --gate-room are paths starting with /".into());
        }
        let journal = match &walk.journal {
            Some(p) => Some(Mutex::new(
                std::fs::File::create(p).map_err(|e| format!("cannot write the journal {}: {e}", p.display()))?,
            )),
            None => None,
        };
        Ok(Gate { walk, http: http_client(), journal })
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.walk.url.trim_end_matches('/'))
    }

    /// Where the room's API is: queue-api's paths go after it (`<this>/api/queue/entry`).
    pub fn room_base(&self) -> String {
        self.url(self.walk.room.trim_end_matches('/'))
    }

    /// Asks for the gated path as someone unadmitted: it must send them to the room of
    /// `queue`, to come back to the gated path.
    pub(crate) async fn arrive(&self, tally: &dyn Tally, queue: &str) -> Result<(), String> {
        let answer = ask(&self.http, &self.url(&self.walk.path), None).await;
        match answer {
            Answer::Room(location) => {
                let room = url::Url::parse(&self.walk.url)
                    .and_then(|base| base.join(&location))
                    .map_err(|e| format!("unreadable waiting-room address {location:?}: {e}"))?;
                let param = |k: &str| room.query_pairs().find(|(n, _)| n == k).map(|(_, v)| v.into_owned());
                if room.path().trim_end_matches('/') != self.walk.room.trim_end_matches('/') {
                    return Err(format!("sent to {location}, not to the waiting room {}", self.walk.room));
                }
                if param("queue").as_deref() != Some(queue) || param("return").as_deref() != Some(&self.walk.path) {
                    return Err(format!("sent to {location}: expected queue={queue} and return={}", self.walk.path));
                }
                tally.gate(&mut |g| g.sent_to_room += 1);
                Ok(())
            }
            Answer::App(code, ..) => {
                tally.gate(&mut |g| g.passed_unadmitted += 1);
                Err(format!("the gated path answered {code} to someone unadmitted"))
            }
            Answer::Other(code, body) => Err(format!("the gated path answered {code}: {body}")),
        }
    }

    /// Claims `ticket` as the waiting-room page does; `race`: twice at once. Then asks for
    /// the gated path `requests` times over `stay`, and leaves or goes idle. `user` is the
    /// person's userId (the token's subject).
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn visit(
        &self,
        tally: &dyn Tally,
        who: usize,
        seed: u64,
        queue: &str,
        user: &str,
        ticket: &str,
        race: bool,
        replay: bool,
        stay: Duration,
    ) -> Result<(), String> {
        use rand::{Rng, SeedableRng};
        let mut dice = rand::rngs::StdRng::seed_from_u64(seed ^ (who as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let goes_idle = dice.random_bool(self.walk.idle.clamp(0.0, 1.0));
        let bearer = dice.random_bool(self.walk.bearer.clamp(0.0, 1.0));
        let path = &self.walk.path;

        let claim_sent = epoch_us();
        let attempts = if race { 2 } else { 1 };
        if race {
            tally.gate(&mut |g| g.claim_races += 1);
        }
        let claims = futures_util::future::join_all(
            (0..attempts).map(|_| claim(&self.http, &self.walk.url, &self.walk.cookie, queue, ticket, path)),
        )
        .await;
        let mut cookies = Vec::new();
        let mut refusals = Vec::new();
        for c in claims {
            match c {
                Claimed::Admitted(value, location) if location == *path => cookies.push(value),
                Claimed::Admitted(_, location) => refusals.push(format!("the claim sent the person to {location}")),
                Claimed::Refused(code, _, body) => refusals.push(format!("{code} {body}")),
                Claimed::Failed(e) => refusals.push(e),
            }
        }
        if cookies.len() > 1 {
            tally.double_claim(who, "one ticket claimed twice at once");
        }
        let Some(token) = cookies.pop() else {
            tally.claim_refused();
            return Err(format!("the ticket was refused at /gate/claim: {}", refusals.join("; ")));
        };
        tally.admitted(who);
        tally.gate(&mut |g| {
            g.claims += 1;
            g.bearer_users += u64::from(bearer);
        });
        let mut cred =
            if bearer { Credential::Bearer(token) } else { Credential::Cookie(self.walk.cookie.clone(), token) };

        let started = Instant::now();
        let gap = stay / (self.walk.requests + 1);
        let mut trouble = None;
        for i in 1..=self.walk.requests {
            tokio::time::sleep_until((started + gap * i).into()).await;
            tally.gate(&mut |g| g.app_requests += 1);
            match ask(&self.http, &self.url(path), Some(&cred)).await {
                Answer::App(_, body, renewed) => {
                    let seen = served_user(body.as_ref());
                    tally.gate(&mut |g| {
                        g.app_answered += 1;
                        match &seen {
                            Served::Unverified => g.app_unverified += 1,
                            Served::Users(users) if users.iter().any(|u| u != user) => g.wrong_user += 1,
                            Served::Users(_) => {}
                        }
                    });
                    if let Served::Users(users) = &seen {
                        if users.iter().any(|u| u != user) {
                            trouble.get_or_insert(format!("the app served {users:?} to {user}"));
                        }
                    }
                    if let (Some(new), Credential::Cookie(_, old)) = (renewed, &mut cred) {
                        if !new.is_empty() && new != *old {
                            *old = new;
                            tally.gate(&mut |g| g.cookies_renewed += 1);
                        }
                    }
                }
                Answer::Room(location) => {
                    trouble.get_or_insert(format!("admitted, yet sent to the room ({location}) on request {i}"));
                }
                Answer::Other(code, body) => {
                    trouble.get_or_insert(format!("admitted, the gated path answered {code}: {body}"));
                }
            }
        }
        let last_request = Instant::now();

        if goes_idle {
            // Closed the tab: the slot is held until the gate stops renewing the lease.
            tokio::time::sleep_until((last_request + self.walk.idle_after).into()).await;
            self.note(user, queue, claim_sent);
            tally.released();
            tally.gate(&mut |g| g.idle += 1);
            return trouble.map_or(Ok(()), Err);
        }
        // The slot goes back with the leave below: released first, so the swarm's count
        // never exceeds the server's.
        self.note(user, queue, claim_sent);
        tally.released();
        let left = leave(&self.http, &self.walk.url, queue, &cred).await;
        if let Err(e) = left {
            return Err(trouble.unwrap_or(e));
        }
        tally.left();
        tally.gate(&mut |g| g.left += 1);
        match ask(&self.http, &self.url(path), Some(&cred)).await {
            Answer::Room(_) => tally.gate(&mut |g| g.refused_after_leave += 1),
            Answer::App(code, ..) => {
                tally.gate(&mut |g| g.access_after_leave += 1);
                trouble.get_or_insert(format!("after leaving, the old token still opened the gated path ({code})"));
            }
            Answer::Other(code, body) => {
                trouble.get_or_insert(format!("after leaving, the gated path answered {code}: {body}"));
            }
        }
        if replay {
            match claim(&self.http, &self.walk.url, &self.walk.cookie, queue, ticket, path).await {
                Claimed::Admitted(..) => tally.double_claim(who, "a used ticket was claimed again"),
                Claimed::Refused(400..=499, ..) => tally.reuse_refused(),
                Claimed::Refused(code, _, body) => {
                    trouble.get_or_insert(format!("claiming the used ticket again: unexpected {code} {body}"));
                }
                Claimed::Failed(e) => {
                    trouble.get_or_insert(format!("claiming the used ticket again: {e}"));
                }
            }
        }
        trouble.map_or(Ok(()), Err)
    }

    /// Writes `user`'s window to the journal: from before its claim was sent until now
    /// (it is about to leave, or its idle time has passed).
    fn note(&self, user: &str, queue: &str, claim_sent_us: u64) {
        if let Some(j) = &self.journal {
            let line = serde_json::json!({
                "user": user, "queue": queue, "claimSentUs": claim_sent_us, "insideUntilUs": epoch_us(),
            });
            let mut f = j.lock().unwrap();
            let _ = writeln!(f, "{line}");
        }
    }
}

/// Whom the app said it served.
enum Served {
    /// The users named (X-Queue-User passed on by the proxy, the token's subject).
    Users(Vec<String>),
    /// The answer did not say.
    Unverified,
}

/// The example upstream answers `{"user": <X-Queue-User>, "tokenSub": <the token's sub>}`.
fn served_user(body: Option<&serde_json::Value>) -> Served {
    let Some(b) = body else { return Served::Unverified };
    let users: Vec<String> = ["user", "tokenSub"]
        .iter()
        .filter_map(|k| b[*k].as_str())
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect();
    if users.is_empty() {
        Served::Unverified
    } else {
        Served::Users(users)
    }
}

/// Asks for `url` as a browser would (HTML accepted), with `cred` if any.
pub async fn ask(http: &reqwest::Client, url: &str, cred: Option<&Credential>) -> Answer {
    let mut r = http.get(url).header("accept", "text/html,application/xhtml+xml;q=0.9,*/*;q=0.8");
    if let Some(c) = cred {
        r = c.apply(r);
    }
    let resp = match r.timeout(REQUEST_TIMEOUT).send().await {
        Ok(r) => r,
        Err(e) => return Answer::Other(0, e.to_string()),
    };
    let code = resp.status().as_u16();
    if resp.status().is_redirection() {
        let loc = resp.headers().get("location").and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
        return Answer::Room(loc);
    }
    if resp.status().is_success() {
        let renewed = match cred {
            Some(Credential::Cookie(name, _)) => set_cookie(resp.headers(), name).map(|(v, _)| v),
            _ => None,
        };
        let body = resp.json::<serde_json::Value>().await.ok();
        return Answer::App(code, body, renewed);
    }
    Answer::Other(code, resp.text().await.unwrap_or_default().chars().take(200).collect())
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

    #[test]
    fn the_app_must_say_whom_it_served() {
        let v = serde_json::json!({"user": "u-1", "tokenSub": "u-1"});
        assert!(matches!(served_user(Some(&v)), Served::Users(u) if u == ["u-1", "u-1"]));
        let v = serde_json::json!({"user": null, "path": "/x"});
        assert!(matches!(served_user(Some(&v)), Served::Unverified));
        assert!(matches!(served_user(None), Served::Unverified));
    }
}
