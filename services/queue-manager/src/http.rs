//! The HTTP side: `/metrics` (Prometheus) and `/healthz`.

use crate::{metrics, ManagerState};
use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::{Json, Router};
use serde::Serialize;
use std::sync::Arc;

/// The routes, over shared state, each request timed into `http_server_requests_seconds`
/// (and traced). Needs a tokio runtime.
pub fn app(state: Arc<ManagerState>) -> Router {
    state.http.spawn_upkeep();
    let router = Router::new().route("/metrics", get(metrics_text)).route("/healthz", get(healthz));
    state.http.track_http(router).with_state(state)
}

/// `/healthz`: alive (always 200, standby or not), whether leading, whether Valkey answers.
#[derive(Debug, Serialize)]
pub struct Healthz {
    /// Always `ok`: the process serves.
    pub status: &'static str,
    /// Whether this replica holds the lease and promotes.
    pub leader: bool,
    /// `up` or `down`: whether Valkey answered the last call; `refused` while Valkey
    /// refuses this user a permission the manager needs (named in `refused`).
    pub valkey: &'static str,
    /// The permission Valkey refused lately, as the server said it (absent if none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
}

async fn healthz(State(state): State<Arc<ManagerState>>) -> Json<Healthz> {
    let refused = state.client.get().and_then(|c| c.refused_permission());
    let valkey = match (&refused, state.valkey_up()) {
        (Some(_), _) => "refused",
        (None, true) => "up",
        (None, false) => "down",
    };
    Json(Healthz { status: "ok", leader: state.is_leader(), valkey, refused })
}

async fn metrics_text(State(state): State<Arc<ManagerState>>) -> impl IntoResponse {
    let snapshot = state.snapshot().await;
    let mut text = metrics::render(&snapshot);
    text.push_str(&state.http.render());
    ([(CONTENT_TYPE, metrics::CONTENT_TYPE)], text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Config;
    use axum::body::Body;
    use axum::http::{Request, StatusCode};
    use tower::ServiceExt;

    async fn get(app: Router, path: &str) -> (StatusCode, String, String) {
        let response = app.oneshot(Request::get(path).body(Body::empty()).unwrap()).await.unwrap();
        let status = response.status();
        let ctype = response.headers().get(CONTENT_TYPE).map(|v| v.to_str().unwrap().to_string()).unwrap_or_default();
        let body = axum::body::to_bytes(response.into_body(), 1 << 20).await.unwrap();
        (status, ctype, String::from_utf8(body.to_vec()).unwrap())
    }

    #[tokio::test]
    async fn healthz_before_connecting() {
        let state = Arc::new(ManagerState::new(Config::local("redis://127.0.0.1:1/")));
        let (status, ctype, body) = get(app(state), "/healthz").await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(ctype, "application/json");
        assert_eq!(body, r#"{"status":"ok","leader":false,"valkey":"down"}"#);
    }

    #[tokio::test]
    async fn metrics_before_connecting() {
        let state = Arc::new(ManagerState::new(Config::local("redis://127.0.0.1:1/")));
        let (status, ctype, body) = get(app(state.clone()), "/metrics").await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(ctype, metrics::CONTENT_TYPE);
        assert_eq!(metrics::value(&body, "queue_manager_is_leader", None), Some(0.0));
        assert_eq!(metrics::value(&body, "queue_manager_valkey_up", None), Some(0.0));
        let (status, _, _) = get(app(state.clone()), "/nothing").await;
        assert_eq!(status, StatusCode::NOT_FOUND);
        let (_, _, body) = get(app(state), "/metrics").await;
        for line in [
            "http_server_requests_seconds_count{method=\"GET\",uri=\"/metrics\",status=\"200\"} 1\n",
            "http_server_requests_seconds_count{method=\"GET\",uri=\"unmatched\",status=\"404\"} 1\n",
            "# TYPE process_cpu_seconds_total counter\n",
            "# TYPE process_resident_memory_bytes gauge\n",
        ] {
            assert!(body.contains(line), "{line:?} missing from:\n{body}");
        }
        assert_eq!(body.matches("# TYPE process_cpu_seconds_total ").count(), 1);
    }
}
