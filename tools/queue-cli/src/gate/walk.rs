//! A gate walked through by a swarm's users: the gate itself (its address, a client
//! that follows no redirects, the journal), and each user's visit: sent to the room
//! while unadmitted, the claim, the requests inside checked against whom the app
//! says it served, leaving or going idle, the old cookie tried after leaving.

use super::requests::{ask, claim, http_client, leave, Answer, Claimed, Credential};
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
