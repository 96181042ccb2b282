//! The observability stack against the real services: an OTLP/HTTP receiver of our
//! own (decoding with opentelemetry-proto) gets spans from all three services, and
//! Debian's real `prometheus` scrapes them and evaluates every PromQL expression of
//! docker/grafana/dashboards and docker/prometheus/alerts.yml; `promtool` checks and
//! tests the alert rules.

use axum::body::Bytes;
use axum::extract::State;
use axum::routing::post;
use e2e::{client_binary, Stack, StackOptions, ADMIN_TOKEN, WAIT};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use testkit::Backend;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// Spans received, with their resource's service.name.
#[derive(Clone, Default)]
struct Received(Arc<Mutex<Vec<(String, Span)>>>);

impl Received {
    fn of(&self, service: &str) -> Vec<Span> {
        self.0.lock().unwrap().iter().filter(|(s, _)| s == service).map(|(_, s)| s.clone()).collect()
    }
}

async fn traces(State(got): State<Received>, body: Bytes) -> &'static [u8] {
    let req = ExportTraceServiceRequest::decode(body).expect("an OTLP protobuf trace request");
    let mut all = got.0.lock().unwrap();
    for rs in req.resource_spans {
        let name = rs
            .resource
            .iter()
            .flat_map(|r| &r.attributes)
            .find(|a| a.key == "service.name")
            .and_then(|a| match a.value.as_ref()?.value.as_ref()? {
                AnyValue::StringValue(s) => Some(s.clone()),
                _ => None,
            })
            .unwrap_or_default();
        for ss in rs.scope_spans {
            all.extend(ss.spans.into_iter().map(|s| (name.clone(), s)));
        }
    }
    // An empty ExportTraceServiceResponse.
    b""
}

/// A `prometheus` child process; killed when dropped.
struct Prometheus {
    child: Child,
    url: String,
    _dir: TempDir,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        let p = std::env::temp_dir().join(format!("vq-{tag}-{}-{}", std::process::id(), testkit::free_port()));
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn start_prometheus(stack: &Stack) -> Prometheus {
    let dir = TempDir::new("prometheus");
    let rules = repo().join("docker/prometheus/alerts.yml");
    let config = format!(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files:\n  - {}\nscrape_configs:\n\
         \x20 - job_name: queue-api\n    static_configs: [{{targets: ['127.0.0.1:{}']}}]\n\
         \x20 - job_name: queue-manager\n    static_configs: [{{targets: ['127.0.0.1:{}']}}]\n\
         \x20 - job_name: chat-server\n    static_configs: [{{targets: ['127.0.0.1:{}']}}]\n",
        rules.display(),
        stack.api.port,
        stack.manager.port,
        stack.chat.port
    );
    std::fs::write(dir.0.join("prometheus.yml"), config).unwrap();
    let port = testkit::free_port();
    let child = Command::new("prometheus")
        .arg(format!("--config.file={}", dir.0.join("prometheus.yml").display()))
        .arg(format!("--storage.tsdb.path={}", dir.0.join("data").display()))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start prometheus (scripts/install-deps.sh installs it)");
    Prometheus { child, url: format!("http://127.0.0.1:{port}"), _dir: dir }
}

async fn query(prom: &Prometheus, expr: &str) -> Result<Vec<Value>, String> {
    let resp = reqwest::Client::new()
        .get(format!("{}/api/v1/query", prom.url))
        .query(&[("query", expr)])
        .send()
        .await
        .map_err(|e| e.to_string())?;
    let body: Value = resp.json().await.map_err(|e| e.to_string())?;
    if body["status"] != "success" {
        return Err(format!("{}: {}", body["errorType"], body["error"]));
    }
    Ok(body["data"]["result"].as_array().cloned().unwrap_or_default())
}

/// Every PromQL expression of the dashboards: (dashboard, panel title, expr).
fn dashboard_exprs() -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    let dir = repo().join("docker/grafana/dashboards");
    let mut files: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    for f in files {
        let d: Value = serde_json::from_str(&std::fs::read_to_string(&f).unwrap()).unwrap();
        let title = d["title"].as_str().unwrap().to_string();
        for p in d["panels"].as_array().unwrap() {
            for t in p["targets"].as_array().unwrap() {
                if t["datasource"]["type"] == "prometheus" {
                    let e = t["expr"].as_str().unwrap();
                    out.push((title.clone(), p["title"].as_str().unwrap().to_string(), e.to_string()));
                }
            }
        }
    }
    assert!(out.len() >= 20, "{out:?}");
    out
}

/// Every `expr` of the alert rules (one line, or a folded block after `expr: >`).
fn rule_exprs() -> Vec<String> {
    let text = std::fs::read_to_string(repo().join("docker/prometheus/alerts.yml")).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        let Some(rest) = l.trim_start().strip_prefix("expr:") else { continue };
        let rest = rest.trim();
        if rest == ">" {
            let indent = l.len() - l.trim_start().len();
            let block: Vec<&str> = lines[i + 1..]
                .iter()
                .take_while(|b| b.trim().is_empty() || b.len() - b.trim_start().len() > indent)
                .map(|b| b.trim())
                .collect();
            out.push(block.join(" ").trim().to_string());
        } else {
            out.push(rest.to_string());
        }
    }
    assert_eq!(out.len(), 4, "{out:?}");
    out
}

fn grafana_to_promql(expr: &str) -> String {
    expr.replace("$__rate_interval", "30s").replace("$queue", ".*")
}

/// Panels that must show data once the system has served a crowd.
const CORE_PANELS: [&str; 12] = [
    "Waiting users",
    "Joining users (tickets out)",
    "Current users against soft cap",
    "Promotions per second",
    "Free slot to promotion",
    "Entry and status requests by status code",
    "Entry and status latency",
    "Chat sessions",
    "Chat messages",
    "Valkey up",
    "CPU (cores)",
    "Resident memory",
];

fn attr(s: &Span, key: &str) -> Option<String> {
    s.attributes.iter().find(|a| a.key == key).and_then(|a| match a.value.as_ref()?.value.as_ref()? {
        AnyValue::StringValue(v) => Some(v.clone()),
        AnyValue::IntValue(v) => Some(v.to_string()),
        _ => None,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_from_every_service_and_every_panel_and_rule_evaluates() {
    // The OTLP receiver, named to the services through the environment they inherit.
    let got = Received::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let otlp = listener.local_addr().unwrap();
    let app = axum::Router::new().route("/v1/traces", post(traces)).with_state(got.clone());
    tokio::spawn(async move { axum::serve(listener, app).await });
    // SAFETY of the process environment: set before any service starts; nothing in
    // this test binary reads these variables concurrently.
    std::env::set_var("OTEL_EXPORTER_OTLP_ENDPOINT", format!("http://{otlp}"));
    std::env::set_var("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf");
    std::env::remove_var("OTEL_SERVICE_NAME");

    let stack = Stack::start(Backend::Module, StackOptions { soft_cap: 10, ..Default::default() }).await;
    let prom = start_prometheus(&stack);

    // A small crowd through the whole journey: entry, status, streams, chat.
    let swarm = tokio::process::Command::new(client_binary())
        .args(["swarm", "--api", &stack.api.url(), "--chat", &stack.chat.url()])
        .args(["--users", "40", "--rate", "20", "--stay-secs", "1", "--admin-token", ADMIN_TOKEN, "--quiet"])
        .args(["--polling", "0.5", "--timeout-secs", "60"])
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(90), swarm).await.expect("the swarm ends").unwrap();
    assert!(out.status.success(), "swarm: {}", String::from_utf8_lossy(&out.stdout));

    // Spans from all three services, named by their binaries; a request's spans share
    // its trace: the HTTP span, and its Valkey command child. The manager's /metrics
    // span comes only with a Prometheus scrape and spans are exported in batches, so
    // wait for all of them rather than for the first span of each service.
    let services = ["queue-api", "queue-manager", "chat-server"];
    let parent_and_child = |service: &str, server: &str, command: &str| -> Result<(), String> {
        let spans = got.of(service);
        let found = spans.iter().filter(|s| s.name == server).any(|http| {
            spans.iter().any(|c| {
                c.name == command
                    && c.trace_id == http.trace_id
                    && c.parent_span_id == http.span_id
                    && attr(c, "queue").as_deref() == Some("default")
                    && attr(c, "outcome").is_some()
            })
        });
        let names: std::collections::BTreeSet<_> = spans.iter().map(|s| s.name.clone()).collect();
        if found {
            Ok(())
        } else {
            Err(format!("{service}: no {server} span with a {command} child in its trace; spans seen: {names:?}"))
        }
    };
    let all_traced = || -> Result<(), String> {
        for s in services {
            if got.of(s).is_empty() {
                return Err(format!("no spans from {s}"));
            }
        }
        parent_and_child("queue-api", "POST /api/queue/entry", "QUEUE.ENTER")?;
        parent_and_child("queue-api", "GET /api/queue/status", "QUEUE.RANKS")?;
        parent_and_child("chat-server", "GET /gameserver", "TICKET.CLAIM")?;
        parent_and_child("queue-manager", "GET /metrics", "QUEUE.INFO")
    };
    let deadline = Instant::now() + WAIT;
    while Instant::now() < deadline && all_traced().is_err() {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    if let Err(e) = all_traced() {
        panic!("{e}");
    }
    // A caller's traceparent decides: kept (flag 01), the request's spans join the
    // caller's trace under its span; not kept (00), the request makes no span at all.
    let http = reqwest::Client::new();
    let status = |trace: &'static str, flags: &'static str| {
        let http = http.clone();
        let url = format!("{}/api/queue/status?userId=nobody", stack.api.url());
        async move {
            let header = format!("00-{trace}-00f067aa0ba902b7-{flags}");
            let resp = http.get(url).header("traceparent", header).send().await.unwrap();
            assert_eq!(resp.status(), 404, "an unknown user");
        }
    };
    let (kept, dropped) = ("4bf92f3577b34da6a3ce929d0e0e4736", "5bf92f3577b34da6a3ce929d0e0e4737");
    // The unkept one first: spans are exported in the order they end, so any span of
    // it would arrive no later than the kept one's.
    status(dropped, "00").await;
    status(kept, "01").await;
    let hex = |id: &[u8]| id.iter().map(|b| format!("{b:02x}")).collect::<String>();
    let deadline = Instant::now() + WAIT;
    loop {
        let spans = got.of("queue-api");
        let of = |trace: &str| spans.iter().filter(|s| hex(&s.trace_id) == trace).cloned().collect::<Vec<_>>();
        let (in_kept, in_dropped) = (of(kept), of(dropped));
        let server = in_kept.iter().find(|s| s.name == "GET /api/queue/status");
        let child = in_kept.iter().find(|s| s.name == "QUEUE.RANKS");
        if let (Some(server), Some(child)) = (server, child) {
            assert_eq!(hex(&server.parent_span_id), "00f067aa0ba902b7");
            assert_eq!(child.parent_span_id, server.span_id);
            assert!(in_dropped.is_empty(), "an unsampled request made spans: {in_dropped:?}");
            break;
        }
        assert!(Instant::now() < deadline, "no spans of the caller's trace: {in_kept:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let entry = got.of("queue-api").into_iter().find(|s| s.name == "POST /api/queue/entry").unwrap();
    assert_eq!(attr(&entry, "http.response.status_code").as_deref(), Some("200"));

    // Prometheus has scraped every service a few times.
    let deadline = Instant::now() + WAIT;
    let mut scraped = Vec::new();
    while Instant::now() < deadline {
        scraped = query(&prom, "count_over_time(up[1m]) >= 5 and up == 1").await.unwrap_or_default();
        if scraped.len() == 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert_eq!(scraped.len(), 3, "targets up and scraped: {scraped:?}");

    let mut failures = Vec::new();
    for (dashboard, panel, expr) in dashboard_exprs() {
        match query(&prom, &grafana_to_promql(&expr)).await {
            Err(e) => failures.push(format!("{dashboard} / {panel}: {expr}: {e}")),
            Ok(r) if r.is_empty() && CORE_PANELS.contains(&panel.as_str()) => {
                failures.push(format!("{dashboard} / {panel}: {expr}: no data"))
            }
            Ok(_) => {}
        }
    }
    for expr in rule_exprs() {
        if let Err(e) = query(&prom, &expr).await {
            failures.push(format!("alert rule {expr}: {e}"));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
    // Healthy system: no alert fires.
    let firing = query(&prom, "ALERTS{alertstate=\"firing\"}").await.unwrap();
    assert!(firing.is_empty(), "{firing:?}");
    // Each service exposes its process figures.
    for job in services {
        let rss = query(&prom, &format!("process_resident_memory_bytes{{job=\"{job}\"}}")).await.unwrap();
        assert_eq!(rss.len(), 1, "{job}: {rss:?}");
    }
}

#[test]
fn alert_rules_pass_promtool() {
    let dir = repo().join("docker/prometheus");
    for args in [&["check", "rules", "alerts.yml"][..], &["test", "rules", "alerts.test.yml"]] {
        let out = Command::new("promtool")
            .args(args)
            .current_dir(&dir)
            .output()
            .expect("run promtool (scripts/install-deps.sh installs it)");
        assert!(
            out.status.success(),
            "promtool {args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
