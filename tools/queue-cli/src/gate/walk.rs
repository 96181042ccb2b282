//! A gate walked through by a swarm's users: the gate itself (its address, a client
//! that follows no redirects, the journal), and each user's visit: sent to the room
//! while unadmitted, the claim, the requests inside checked against whom the app
//! says it served, leaving or going idle, the old cookie tried after leaving.

use super::requests::{ask, claim, fetch, http_client, leave, Answer, Claimed, Credential, Reply};
use super::{GateWalk, Tally};
use std::io::Write;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

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

    /// Asks for the gated path as someone unadmitted: it must either send them to the
    /// room of `queue`, to come back to the gated path, or (the gate's straight pass on
    /// an idle queue) let them in on that very request, setting the admission cookie
    /// and passing on whom it admitted.
    /// `forwarded_for`: the person's address as a proxy in front would tell it (the
    /// gate's straight pass is limited per address).
    pub(crate) async fn arrive(
        &self,
        tally: &dyn Tally,
        queue: &str,
        forwarded_for: Option<&str>,
    ) -> Result<Arrival, String> {
        let sent_us = epoch_us();
        let reply = self.first_request(None, forwarded_for).await?;
        if let Some(location) = reply.location {
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
            return Ok(Arrival::Room);
        }
        if !(200..300).contains(&reply.code) {
            return Err(format!("the gated path answered {}: {}", reply.code, reply.text));
        }
        // Let through: only as an admission, with the cookie set and the person named.
        match reply.pass() {
            Ok((user, token)) => {
                tally.gate(&mut |g| {
                    g.straight_through += 1;
                    g.app_answered += 1;
                });
                Ok(Arrival::Straight { user, token, sent_us })
            }
            Err(what) => {
                tally.gate(&mut |g| g.passed_unadmitted += 1);
                Err(format!("the gated path answered {} to someone unadmitted, {what}", reply.code))
            }
        }
    }

    /// The gated path asked for as a browser would (see [`fetch`]), the admission
    /// cookie read from the answer.
    async fn first_request(&self, cred: Option<&Credential>, forwarded_for: Option<&str>) -> Result<Reply, String> {
        fetch(&self.http, &self.url(&self.walk.path), cred, forwarded_for, Some(&self.walk.cookie))
            .await
            .map_err(|e| format!("the gated path did not answer: {e}"))
    }

    /// Inside after a straight pass (see [`Arrival::Straight`]): the requests to the
    /// gated path with the cookie the pass set, then leaving or going idle, as after a
    /// claim.
    pub(crate) async fn stay_after_pass(
        &self,
        tally: &dyn Tally,
        who: usize,
        seed: u64,
        queue: &str,
        pass: (&str, &str, u64),
        stay: Duration,
    ) -> Result<(), String> {
        let (user, token, sent_us) = pass;
        let (goes_idle, bearer) = self.dice(seed, who);
        tally.admitted(who);
        tally.gate(&mut |g| g.bearer_users += u64::from(bearer));
        let cred = self.credential(bearer, token.to_string());
        let trouble = self.inside(tally, user, &cred, stay).await;
        self.go(tally, user, queue, &cred, sent_us, goes_idle, trouble).await
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
        let (goes_idle, bearer) = self.dice(seed, who);
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
        let cred = self.credential(bearer, token);
        let trouble = self.inside(tally, user, &cred, stay).await;
        let trouble = self.go(tally, user, queue, &cred, claim_sent, goes_idle, trouble).await.err();
        // An idle person still holds the session: only a used ticket is tried again.
        if replay && !goes_idle {
            match claim(&self.http, &self.walk.url, &self.walk.cookie, queue, ticket, path).await {
                Claimed::Admitted(..) => tally.double_claim(who, "a used ticket was claimed again"),
                Claimed::Refused(400..=499, ..) => tally.reuse_refused(),
                Claimed::Refused(code, _, body) => {
                    return Err(trouble.unwrap_or(format!("claiming the used ticket again: unexpected {code} {body}")));
                }
                Claimed::Failed(e) => return Err(trouble.unwrap_or(format!("claiming the used ticket again: {e}"))),
            }
        }
        trouble.map_or(Ok(()), Err)
    }

    /// Whether user `who` goes idle instead of leaving, and sends its token as a
    /// bearer token: the same dice for a claim and a straight pass.
    fn dice(&self, seed: u64, who: usize) -> (bool, bool) {
        use rand::{Rng, SeedableRng};
        let mut dice = rand::rngs::StdRng::seed_from_u64(seed ^ (who as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let goes_idle = dice.random_bool(self.walk.idle.clamp(0.0, 1.0));
        let bearer = dice.random_bool(self.walk.bearer.clamp(0.0, 1.0));
        (goes_idle, bearer)
    }

    fn credential(&self, bearer: bool, token: String) -> Credential {
        if bearer {
            Credential::Bearer(token)
        } else {
            Credential::Cookie(self.walk.cookie.clone(), token)
        }
    }

    /// The requests to the gated path while inside, spread over `stay`, each checked
    /// against whom the app says it served: the first trouble seen, if any.
    async fn inside(&self, tally: &dyn Tally, user: &str, cred: &Credential, stay: Duration) -> Option<String> {
        let path = &self.walk.path;
        let mut cred = cred.clone();
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
        trouble
    }

    /// Leaves at /gate/leave (and checks that the cookie no longer opens the gated
    /// path) or goes idle; the window from `sent_us` goes to the journal. Err: the first
    /// trouble, `trouble` (from inside) before any seen here.
    #[allow(clippy::too_many_arguments)]
    async fn go(
        &self,
        tally: &dyn Tally,
        user: &str,
        queue: &str,
        cred: &Credential,
        sent_us: u64,
        goes_idle: bool,
        mut trouble: Option<String>,
    ) -> Result<(), String> {
        let last_request = Instant::now();
        let claim_sent = sent_us;
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
        let left = leave(&self.http, &self.walk.url, queue, cred).await;
        if let Err(e) = left {
            return Err(trouble.unwrap_or(e));
        }
        tally.left();
        tally.gate(&mut |g| g.left += 1);
        let again_sent = epoch_us();
        match self.first_request(Some(cred), None).await {
            Ok(Reply { location: Some(_), .. }) => tally.gate(&mut |g| g.refused_after_leave += 1),
            Ok(reply) if (200..300).contains(&reply.code) => match reply.pass() {
                // The old token is dead, and the queue idle: a new straight pass, as
                // anyone without a token gets (a new person, a new cookie). Left at
                // once, so that its slot comes back.
                Ok((someone, token)) if someone != user => {
                    tally.gate(&mut |g| {
                        g.passed_again_after_leave += 1;
                        g.app_answered += 1;
                    });
                    let again = Credential::Cookie(self.walk.cookie.clone(), token);
                    self.note(&someone, queue, again_sent);
                    if let Err(e) = leave(&self.http, &self.walk.url, queue, &again).await {
                        trouble.get_or_insert(format!("leaving the pass given after leaving: {e}"));
                    }
                }
                _ => {
                    tally.gate(&mut |g| g.access_after_leave += 1);
                    trouble.get_or_insert(format!(
                        "after leaving, the old token still opened the gated path ({})",
                        reply.code
                    ));
                }
            },
            Ok(reply) => {
                trouble.get_or_insert(format!("after leaving, the gated path answered {}: {}", reply.code, reply.text));
            }
            Err(e) => {
                trouble.get_or_insert(format!("after leaving: {e}"));
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

impl Reply {
    /// A straight pass: the admission cookie set (with its flags) and the app told of
    /// one person: (that person, the token). Err: what is missing.
    fn pass(&self) -> Result<(String, String), String> {
        let users = match served_user(self.body.as_ref()) {
            Served::Users(users) if users.iter().all(|u| *u == users[0]) => users,
            Served::Users(users) => return Err(format!("serving {users:?}")),
            Served::Unverified => return Err("without saying whom it served".into()),
        };
        match &self.cookie {
            None => Err("without an admission cookie".into()),
            Some((_, false)) => Err("with an admission cookie lacking HttpOnly or SameSite=Lax".into()),
            Some((t, _)) if t.is_empty() => Err("clearing the admission cookie".into()),
            Some((t, true)) => Ok((users[0].clone(), t.clone())),
        }
    }
}

/// How an unadmitted person's first request for the gated path ended.
pub(crate) enum Arrival {
    /// Sent to the waiting room.
    Room,
    /// Let straight in (nobody waiting and a slot free): the person the app was told
    /// of, the admission token set, and when the request was sent (microseconds since
    /// the epoch, for the journal).
    Straight { user: String, token: String, sent_us: u64 },
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_app_must_say_whom_it_served() {
        let v = serde_json::json!({"user": "u-1", "tokenSub": "u-1"});
        assert!(matches!(served_user(Some(&v)), Served::Users(u) if u == ["u-1", "u-1"]));
        let v = serde_json::json!({"user": null, "path": "/x"});
        assert!(matches!(served_user(Some(&v)), Served::Unverified));
        assert!(matches!(served_user(None), Served::Unverified));
    }
}
