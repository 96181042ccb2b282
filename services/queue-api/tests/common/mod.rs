//! queue-api served in the test's own process on a free loopback port, for the test
//! files of this folder (each adds the helpers it needs in an `impl Api` of its own).

#![allow(dead_code)]

use serde_json::Value;
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
use tokio::sync::oneshot;

pub struct Api {
    pub base: String,
    pub http: reqwest::Client,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Api {
    /// Serves `config`, ready once its store is connected (or after 10 s).
    pub async fn start(config: queue_api::Config) -> Api {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let (tx, rx) = oneshot::channel();
        let task = tokio::spawn(queue_api::serve(listener, config, async {
            let _ = rx.await;
        }));
        let api = Api { base, http: reqwest::Client::new(), stop: Some(tx), task };
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            let h: Value = api.http.get(api.url("/healthz")).send().await.unwrap().json().await.unwrap();
            if h["valkey"] == "up" {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        api
    }

    /// [`Api::start`] with the back office's `token` and no rate limit.
    pub async fn start_admin(mut config: queue_api::Config, token: &str) -> Api {
        config.admin_token = Some(token.into());
        config.rate_limit = 0.0;
        Api::start(config).await
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// Stops it gracefully (within 10 s).
    pub async fn stop(mut self) {
        let _ = self.stop.take().unwrap().send(());
        tokio::time::timeout(Duration::from_secs(10), self.task).await.expect("graceful shutdown").unwrap().unwrap();
    }
}
