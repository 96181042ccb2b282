//! The queue-api side of a journey: enter, then follow the position over server-sent
//! events, falling back to polling `GET /api/queue/status` when the stream cannot be
//! opened or breaks, as the waiting-room page does.

use futures_util::StreamExt;
use queue_client::{Standing, Status};
use std::time::{Duration, Instant};

/// Why a request to queue-api did not give a standing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApiError {
    /// 429: come back after this many seconds.
    RateLimited(u64),
    /// Any other refusal: the status and the body's `error` text.
    Refused(u16, String),
    /// No answer: connection refused, reset, timed out, or an unreadable body.
    Transport(String),
}

impl ApiError {
    /// A failure a person would retry after a moment: no answer, or the server's own
    /// trouble (5xx: Valkey unreachable, shutting down).
    pub fn is_outage(&self) -> bool {
        matches!(self, ApiError::Transport(_) | ApiError::Refused(500..=599, _))
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ApiError::RateLimited(s) => write!(f, "rate limited: retry after {s} s"),
            ApiError::Refused(code, text) => write!(f, "HTTP {code}: {text}"),
            ApiError::Transport(e) => write!(f, "queue-api unreachable: {e}"),
        }
    }
}

impl std::error::Error for ApiError {}

/// What one poll of a standing gave ([`Api::poll_once`]).
#[derive(Debug)]
pub enum Polled {
    /// No longer waiting: promoted, active, or unknown.
    Done(Standing),
    /// Still waiting (told to `on_update`).
    Waiting,
    /// Rate limited; the wait it asked for has passed.
    RateLimited,
    Failed(ApiError),
}

/// How an update reached the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    Entry,
    Stream,
    Poll,
}

/// A queue-api endpoint for one queue, as one person (one client address) sees it.
#[derive(Clone)]
pub struct Api {
    http: reqwest::Client,
    base: String,
    queue: String,
    forwarded_for: Option<String>,
    /// The app's login token, sent on every request ([`Api::with_token`]).
    token: Option<(String, Option<String>)>,
}

/// Challenges solved for one entry before giving up (each 428 brings a fresh one).
const MAX_PROOFS: usize = 3;

/// Each request's own time limit; streams have none (they last as long as the wait).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

impl Api {
    /// `base` like `http://127.0.0.1:8080`. `forwarded_for` sets `X-Forwarded-For` on every
    /// request (a queue-api trusting this client as a proxy, `--trusted-proxies` or
    /// `--trust-proxy`, then limits each address alone).
    pub fn new(http: reqwest::Client, base: &str, queue: &str, forwarded_for: Option<String>) -> Api {
        Api { http, base: base.trim_end_matches('/').to_string(), queue: queue.to_string(), forwarded_for, token: None }
    }

    /// Sends the app's login token with every request: as `Authorization: Bearer`, or in
    /// the cookie `cookie` names (as a browser does, queue-api's `--identity-cookie`).
    pub fn with_token(mut self, token: String, cookie: Option<String>) -> Api {
        self.token = Some((token, cookie));
        self
    }

    /// The HTTP client a swarm shares: pooled connections, no proxy from the environment.
    pub fn http_client() -> reqwest::Client {
        reqwest::Client::builder()
            .no_proxy()
            .connect_timeout(Duration::from_secs(5))
            .pool_max_idle_per_host(256)
            .build()
            .expect("an HTTP client without TLS builds")
    }

    pub fn queue(&self) -> &str {
        &self.queue
    }

    /// The `X-Forwarded-For` this client sends (the person's own address behind a
    /// proxy), if any.
    pub fn forwarded_for(&self) -> Option<&str> {
        self.forwarded_for.as_deref()
    }

    fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let mut r = self.http.request(method, format!("{}{path}", self.base));
        if let Some(ip) = &self.forwarded_for {
            r = r.header("x-forwarded-for", ip);
        }
        match &self.token {
            Some((token, Some(cookie))) => r.header("cookie", format!("{cookie}={token}")),
            Some((token, None)) => r.bearer_auth(token),
            None => r,
        }
    }

    /// A request about one user of this queue (`?userId=&queue=`).
    fn request_for(&self, method: reqwest::Method, path: &str, user: &str) -> reqwest::RequestBuilder {
        self.request(method, path).query(&[("userId", user), ("queue", &self.queue)])
    }

    /// `POST /api/queue/entry`. When the queue asks a proof of work (428 with a
    /// challenge), solves the challenge given and sends the entry again with it.
    pub async fn enter(&self, nickname: &str) -> Result<Standing, ApiError> {
        self.enter_as(nickname, None).await
    }

    /// [`Api::enter`] naming the userId (a UUID): an entry sent again after its answer
    /// was lost moves that same person to the back instead of entering a second one.
    pub async fn enter_as(&self, nickname: &str, user_id: Option<&str>) -> Result<Standing, ApiError> {
        self.enter_with(nickname, user_id, None).await
    }

    /// [`Api::enter_as`] with an access code (`"code"`): the person enters the code's lane.
    pub async fn enter_with(
        &self,
        nickname: &str,
        user_id: Option<&str>,
        code: Option<&str>,
    ) -> Result<Standing, ApiError> {
        let mut body = serde_json::json!({ "nickname": nickname, "queue": self.queue });
        if let Some(id) = user_id {
            body["userId"] = serde_json::json!(id);
        }
        if let Some(code) = code {
            body["code"] = serde_json::json!(code);
        }
        for _ in 0..MAX_PROOFS {
            let r = self.request(reqwest::Method::POST, "/api/queue/entry").json(&body).timeout(REQUEST_TIMEOUT);
            let resp = r.send().await.map_err(transport)?;
            if resp.status().as_u16() != 428 {
                return standing(Ok(resp)).await;
            }
            let refused: serde_json::Value = resp.json().await.map_err(transport)?;
            let given = &refused["challenge"];
            let (Some(challenge), Some(difficulty)) = (given["challenge"].as_str(), given["difficulty"].as_u64())
            else {
                return Err(ApiError::Refused(428, error_text(&refused.to_string())));
            };
            let challenge = challenge.to_string();
            let difficulty = difficulty.min(u64::from(u8::MAX)) as u8;
            let solving = challenge.clone();
            let nonce = tokio::task::spawn_blocking(move || queue_core::pow::solve(&solving, difficulty))
                .await
                .map_err(|e| ApiError::Transport(format!("solving the proof of work: {e}")))?;
            body["pow"] = serde_json::json!({ "challenge": challenge, "nonce": nonce });
        }
        Err(ApiError::Refused(428, format!("proof_required: refused {MAX_PROOFS} solved challenges in a row")))
    }

    /// `GET /api/queue/status`; an unknown user (404) is an `UNKNOWN` standing.
    pub async fn status(&self, user: &str) -> Result<Standing, ApiError> {
        let r = self.request_for(reqwest::Method::GET, "/api/queue/status", user).timeout(REQUEST_TIMEOUT);
        match standing(r.send().await).await {
            Err(ApiError::Refused(404, _)) => Ok(unknown(user)),
            other => other,
        }
    }

    /// `DELETE /api/queue/entry`: gives the place (or an unused ticket) back. `Ok(false)`
    /// when there was nothing to give back (404: already gone, or inside).
    pub async fn leave(&self, user: &str) -> Result<bool, ApiError> {
        let r = self.request_for(reqwest::Method::DELETE, "/api/queue/entry", user).timeout(REQUEST_TIMEOUT);
        let resp = r.send().await.map_err(transport)?;
        match resp.status().as_u16() {
            200 => Ok(true),
            404 => Ok(false),
            _ => Err(refusal(resp).await),
        }
    }

    /// Retries `f` while queue-api answers 429, sleeping as told, until `deadline`.
    pub async fn patiently<T, F, Fut>(&self, deadline: Instant, mut f: F) -> Result<T, ApiError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, ApiError>>,
    {
        loop {
            match f().await {
                Err(ApiError::RateLimited(secs)) if Instant::now() + Duration::from_secs(secs) < deadline => {
                    tokio::time::sleep(Duration::from_secs(secs.max(1))).await
                }
                other => return other,
            }
        }
    }

    /// Follows `user` until promoted (or active, or unknown: dropped, or never there),
    /// calling `on_update` with every waiting standing. Uses the push stream unless
    /// `polling_only`; when the stream cannot be opened or breaks, polls every
    /// `poll_every` instead. Gives up with the last error once `deadline` passes.
    pub async fn follow(
        &self,
        user: &str,
        polling_only: bool,
        poll_every: Duration,
        deadline: Instant,
        mut on_update: impl FnMut(&Standing, Via),
    ) -> Result<Standing, ApiError> {
        if !polling_only {
            // Ended or broke before the end: poll from here on.
            if let Ok(Some(done)) = self.stream(user, deadline, &mut on_update).await {
                return Ok(done);
            }
        }
        let mut last_error = None;
        while Instant::now() < deadline {
            match self.poll_once(user, &mut on_update).await {
                Polled::Done(s) => return Ok(s),
                Polled::Waiting => last_error = None,
                Polled::RateLimited => continue,
                Polled::Failed(e) => last_error = Some(e),
            }
            tokio::time::sleep(poll_every).await;
        }
        Err(last_error.unwrap_or_else(|| ApiError::Transport("gave up waiting: deadline passed".into())))
    }

    /// One poll of `user`'s standing while following it: a waiting standing goes to
    /// `on_update`; a rate limit is slept out here (poll again at once).
    pub async fn poll_once(&self, user: &str, on_update: &mut impl FnMut(&Standing, Via)) -> Polled {
        match self.status(user).await {
            Ok(s) if s.status == Status::Waiting => {
                on_update(&s, Via::Poll);
                Polled::Waiting
            }
            Ok(s) => Polled::Done(s),
            Err(ApiError::RateLimited(secs)) => {
                tokio::time::sleep(Duration::from_secs(secs.max(1))).await;
                Polled::RateLimited
            }
            Err(e) => Polled::Failed(e),
        }
    }

    /// Reads the push stream: `Ok(Some(standing))` at a terminal event, `Ok(None)` when
    /// the stream ended without one (server shutting down), `Err` when it could not be
    /// opened or broke.
    pub async fn stream(
        &self,
        user: &str,
        deadline: Instant,
        on_update: &mut impl FnMut(&Standing, Via),
    ) -> Result<Option<Standing>, ApiError> {
        let r = self.request_for(reqwest::Method::GET, "/api/queue/stream", user).header("accept", "text/event-stream");
        let resp = r.send().await.map_err(transport)?;
        if !resp.status().is_success() {
            return Err(refusal(resp).await);
        }
        let mut body = resp.bytes_stream();
        let mut parser = crate::sse::Parser::default();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let chunk = match tokio::time::timeout(left, body.next()).await {
                Err(_) => return Err(ApiError::Transport("deadline passed while following".into())),
                Ok(None) => return Ok(None),
                Ok(Some(Err(e))) => return Err(transport(e)),
                Ok(Some(Ok(c))) => c,
            };
            for event in parser.push(&chunk) {
                let s: Standing = match serde_json::from_str(&event.data) {
                    Ok(s) => s,
                    Err(e) => return Err(ApiError::Transport(format!("unreadable {} event: {e}", event.name))),
                };
                if event.name == "position" && s.status == Status::Waiting {
                    on_update(&s, Via::Stream);
                } else {
                    return Ok(Some(s));
                }
            }
        }
    }
}

fn unknown(user: &str) -> Standing {
    Standing {
        status: Status::Unknown,
        rank: 0,
        user_id: user.to_string(),
        nickname: None,
        ticket_id: None,
        estimated_wait_seconds: None,
        opens_at: None,
        lane: None,
    }
}

fn transport(e: reqwest::Error) -> ApiError {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(&e);
    while let Some(s) = source {
        text = format!("{text}: {s}");
        source = s.source();
    }
    ApiError::Transport(text)
}

async fn refusal(resp: reqwest::Response) -> ApiError {
    let code = resp.status().as_u16();
    if code == 429 {
        let secs =
            resp.headers().get("retry-after").and_then(|v| v.to_str().ok()).and_then(|v| v.parse().ok()).unwrap_or(1);
        return ApiError::RateLimited(secs);
    }
    let body = resp.text().await.unwrap_or_default();
    ApiError::Refused(code, error_text(&body))
}

/// The services' error bodies are `{"error": code, "message": text}`: the text, else
/// the body as it came.
pub fn error_text(body: &str) -> String {
    let v = serde_json::from_str::<serde_json::Value>(body).unwrap_or_default();
    match (v["error"].as_str(), v["message"].as_str()) {
        (Some(code), Some(text)) => format!("{code}: {text}"),
        (None, Some(text)) | (Some(text), None) => text.to_string(),
        (None, None) => body.to_string(),
    }
}

async fn standing(sent: reqwest::Result<reqwest::Response>) -> Result<Standing, ApiError> {
    let resp = sent.map_err(transport)?;
    if !resp.status().is_success() {
        return Err(refusal(resp).await);
    }
    resp.json().await.map_err(transport)
}
