//! Prometheus metrics through the `metrics` crate and `metrics-exporter-prometheus`,
//! in the text exposition format.
//!
//! Each [`Registry`] is a recorder of its own rather than the process-wide one, so that
//! several service instances in one process (as the tests run them) count apart. Names
//! are exposed exactly as registered: a counter called `x_total` is `x_total`.

use axum::extract::{MatchedPath, Request, State};
use axum::http::header::CONTENT_TYPE as CONTENT_TYPE_HEADER;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Router;
use metrics::{Key, Label, Level, Metadata, Recorder};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusRecorder};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

pub use metrics::{Counter, Gauge, Histogram};

/// The content type of the text exposition format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The HTTP request histogram: seconds per request by `method`, `uri` (the route
/// pattern, never the raw path, so ids never become label values) and `status`.
pub const HTTP_REQUESTS: &str = "http_server_requests_seconds";

/// Its buckets' upper bounds, in seconds.
pub const HTTP_BUCKETS: [f64; 10] = [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0];

static METADATA: Metadata<'static> = Metadata::new(module_path!(), Level::INFO, Some(module_path!()));

/// The metrics of one service instance. Clones share it.
#[derive(Clone)]
pub struct Registry {
    recorder: Arc<PrometheusRecorder>,
}

impl Default for Registry {
    fn default() -> Self {
        Registry::new(&[])
    }
}

impl Registry {
    /// A registry whose histograms named in `buckets` (and [`HTTP_REQUESTS`]) have
    /// those buckets' upper bounds.
    pub fn new(buckets: &[(&str, &[f64])]) -> Registry {
        let http = [(HTTP_REQUESTS, &HTTP_BUCKETS[..])];
        let builder = http.iter().chain(buckets).fold(PrometheusBuilder::new(), |b, (name, bounds)| {
            b.set_buckets_for_metric(Matcher::Full(name.to_string()), bounds).expect("histogram buckets")
        });
        Registry { recorder: Arc::new(builder.build_recorder()) }
    }

    /// Histogram samples are folded into their buckets at each render; this folds them
    /// every few seconds as well, so that a registry nobody scrapes stays small. Stops
    /// when the last clone of the registry is dropped. Needs a tokio runtime.
    pub fn spawn_upkeep(&self) {
        let recorder: Weak<PrometheusRecorder> = Arc::downgrade(&self.recorder);
        tokio::spawn(async move {
            let mut every = tokio::time::interval(Duration::from_secs(5));
            loop {
                every.tick().await;
                match recorder.upgrade() {
                    Some(r) => r.handle().run_upkeep(),
                    None => return,
                }
            }
        });
    }

    pub fn counter(&self, name: &'static str, help: &'static str) -> Counter {
        self.counter_with(name, help, &[])
    }

    pub fn counter_with(&self, name: &'static str, help: &'static str, labels: &[(&'static str, &str)]) -> Counter {
        self.recorder.describe_counter(name.into(), None, help.into());
        self.recorder.register_counter(&key(name, labels), &METADATA)
    }

    pub fn gauge(&self, name: &'static str, help: &'static str) -> Gauge {
        self.gauge_with(name, help, &[])
    }

    pub fn gauge_with(&self, name: &'static str, help: &'static str, labels: &[(&'static str, &str)]) -> Gauge {
        self.recorder.describe_gauge(name.into(), None, help.into());
        self.recorder.register_gauge(&key(name, labels), &METADATA)
    }

    pub fn histogram(&self, name: &'static str, help: &'static str) -> Histogram {
        self.recorder.describe_histogram(name.into(), None, help.into());
        self.recorder.register_histogram(&key(name, &[]), &METADATA)
    }

    /// The text exposition of the registered series alone.
    pub fn render_series(&self) -> String {
        self.recorder.handle().render()
    }

    /// The text exposition, with the process's own figures and the span exporter's
    /// counts after the registered series.
    pub fn render(&self) -> String {
        let mut text = self.recorder.handle().render();
        process_figures(&mut text);
        text
    }

    /// The text exposition as a `/metrics` response.
    pub fn response(&self) -> Response {
        ([(CONTENT_TYPE_HEADER, CONTENT_TYPE)], self.render()).into_response()
    }

    /// `router` with every request timed into [`HTTP_REQUESTS`].
    pub fn track_http<S: Clone + Send + Sync + 'static>(&self, router: Router<S>) -> Router<S> {
        self.recorder.describe_histogram(
            HTTP_REQUESTS.into(),
            None,
            "HTTP request duration by route (a WebSocket handshake until its upgrade).".into(),
        );
        router.layer(axum::middleware::from_fn_with_state(self.clone(), track))
    }
}

fn key(name: &'static str, labels: &[(&'static str, &str)]) -> Key {
    Key::from_parts(name, labels.iter().map(|(k, v)| Label::new(*k, v.to_string())).collect::<Vec<_>>())
}

/// Appends `process_cpu_seconds_total`, `process_resident_memory_bytes`,
/// `process_open_fds` (from /proc, where there is one) and the span export counters.
fn process_figures(text: &mut String) {
    use std::fmt::Write;
    let mut put = |name: &str, kind: &str, help: &str, v: f64| {
        let _ = write!(text, "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {v}\n");
    };
    if let Ok(stat) = std::fs::read_to_string("/proc/self/stat") {
        // Fields after the command name (which may hold spaces): utime is the 12th, stime the 13th.
        let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
        let f: Vec<&str> = after.split_whitespace().collect();
        if let (Some(u), Some(s)) =
            (f.get(11).and_then(|v| v.parse::<f64>().ok()), f.get(12).and_then(|v| v.parse::<f64>().ok()))
        {
            // Linux reports these in USER_HZ, 100 per second on every architecture.
            put("process_cpu_seconds_total", "counter", "User and system CPU time spent, in seconds.", (u + s) / 100.0);
        }
    }
    if let Ok(status) = std::fs::read_to_string("/proc/self/status") {
        let kb = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:")?.trim().strip_suffix("kB")?.trim().parse::<f64>().ok());
        if let Some(kb) = kb {
            put("process_resident_memory_bytes", "gauge", "Resident memory size in bytes.", kb * 1024.0);
        }
    }
    if let Ok(fds) = std::fs::read_dir("/proc/self/fd") {
        put("process_open_fds", "gauge", "Open file descriptors.", fds.count() as f64);
    }
    put(
        "otel_spans_dropped_total",
        "counter",
        "Spans dropped because the export queue was full or the collector refused them.",
        crate::telemetry::dropped_spans() as f64,
    );
    put(
        "otel_spans_exported_total",
        "counter",
        "Spans the collector accepted.",
        crate::telemetry::exported_spans() as f64,
    );
}

/// The W3C trace context of an incoming request, read from its headers.
struct Headers<'a>(&'a axum::http::HeaderMap);

impl opentelemetry::propagation::Extractor for Headers<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }
    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(|k| k.as_str()).collect()
    }
}

/// The span of one incoming request, as every service makes it (`route`: the route
/// it matched), its parent from a W3C `traceparent` header; None when sampling drops
/// the request (then neither it nor its Valkey commands are traced).
pub fn request_span(method: &str, route: &str, headers: &axum::http::HeaderMap) -> Option<tracing::Span> {
    use tracing_opentelemetry::OpenTelemetrySpanExt;
    let traceparent = headers.get("traceparent").and_then(|v| v.to_str().ok());
    if crate::telemetry::sample_request(traceparent) == Some(false) {
        return None;
    }
    let span = tracing::info_span!(
        "http request",
        otel.name = format!("{method} {route}"),
        otel.kind = "server",
        http.request.method = %method,
        http.route = %route,
        http.response.status_code = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
    );
    if headers.contains_key("traceparent") {
        let parent = opentelemetry::global::get_text_map_propagator(|p| p.extract(&Headers(headers)));
        let _ = span.set_parent(parent);
    }
    Some(span)
}

/// Records the answer's status on a request's span (an error from 500 up).
pub fn end_request_span(span: &tracing::Span, status: axum::http::StatusCode) {
    span.record("http.response.status_code", status.as_u16());
    if status.is_server_error() {
        span.record("otel.status_code", "ERROR");
    }
}

async fn track(State(registry): State<Registry>, req: Request, next: Next) -> Response {
    use tracing::Instrument;
    let route = req.extensions().get::<MatchedPath>().map_or("unmatched".to_string(), |p| p.as_str().to_string());
    let method = req.method().to_string();
    let start = Instant::now();
    let Some(span) = request_span(&method, &route, req.headers()) else {
        // Not traced: no span for the request nor for its Valkey commands.
        let resp = queue_client::untraced(next.run(req)).await;
        registry.record_request(method, route, resp.status(), start);
        return resp;
    };
    let resp = next.run(req).instrument(span.clone()).await;
    end_request_span(&span, resp.status());
    registry.record_request(method, route, resp.status(), start);
    resp
}

impl Registry {
    /// One request served outside the router (a service's own HTTP path) into
    /// [`HTTP_REQUESTS`], as [`Registry::track_http`] records those of the router.
    pub fn record_http(&self, method: &str, route: &str, status: axum::http::StatusCode, start: Instant) {
        self.record_request(method.to_string(), route.to_string(), status, start);
    }

    /// One request into [`HTTP_REQUESTS`].
    fn record_request(&self, method: String, route: String, status: axum::http::StatusCode, start: Instant) {
        let labels = vec![
            Label::new("method", method),
            Label::new("uri", route),
            Label::new("status", status.as_u16().to_string()),
        ];
        self.recorder.register_histogram(&Key::from_parts(HTTP_REQUESTS, labels), &METADATA).record(start.elapsed());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::routing::get;
    use tower::ServiceExt;

    #[test]
    fn names_and_labels_as_registered() {
        let r = Registry::new(&[("size_bytes", &[32.0, 64.0])]);
        let c = r.counter("things_total", "Things.");
        c.increment(2);
        let _untouched = r.counter("untouched_total", "Never counted.");
        r.gauge("open_now", "Open.").set(3.0);
        r.gauge_with("per_queue", "By queue.", &[("queue", "a\"b")]).set(-1.0);
        r.counter_with("by_reason_total", "By reason.", &[("reason", "full")]).absolute(7);
        let h = r.histogram("size_bytes", "Sizes.");
        for v in [10.0, 40.0, 1000.0] {
            h.record(v);
        }
        let text = r.render();
        for line in [
            "# HELP things_total Things.",
            "# TYPE things_total counter",
            "things_total 2\n",
            "untouched_total 0\n",
            "# TYPE open_now gauge",
            "open_now 3\n",
            "per_queue{queue=\"a\\\"b\"} -1\n",
            "by_reason_total{reason=\"full\"} 7\n",
            "# TYPE size_bytes histogram",
            "size_bytes_bucket{le=\"32\"} 1\n",
            "size_bytes_bucket{le=\"64\"} 2\n",
            "size_bytes_bucket{le=\"+Inf\"} 3\n",
            "size_bytes_sum 1050\n",
            "size_bytes_count 3\n",
        ] {
            assert!(text.contains(line), "{line:?} missing from:\n{text}");
        }
    }

    #[test]
    fn registries_count_apart() {
        let (a, b) = (Registry::default(), Registry::default());
        a.counter("n_total", "N.").increment(1);
        assert!(a.render().contains("n_total 1\n"));
        assert!(!b.render().contains("n_total"));
    }

    #[test]
    fn process_figures_and_span_counts() {
        let text = Registry::default().render();
        for name in ["process_cpu_seconds_total", "otel_spans_dropped_total", "otel_spans_exported_total"] {
            assert!(text.contains(&format!("# TYPE {name} counter\n{name} ")), "{name} missing from:\n{text}");
        }
        let rss: f64 = text
            .lines()
            .find_map(|l| l.strip_prefix("process_resident_memory_bytes "))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no resident memory in:\n{text}"));
        assert!(rss > 1e5, "{rss}");
    }

    #[tokio::test]
    async fn http_requests_by_route_pattern() {
        let r = Registry::default();
        let app = r.track_http(Router::new().route("/users/{id}", get(|| async { "ok" })));
        for path in ["/users/1", "/users/2", "/nowhere"] {
            app.clone().oneshot(axum::http::Request::get(path).body(Body::empty()).unwrap()).await.unwrap();
        }
        let text = r.render();
        for line in [
            "# TYPE http_server_requests_seconds histogram",
            "http_server_requests_seconds_count{method=\"GET\",uri=\"/users/{id}\",status=\"200\"} 2\n",
            "http_server_requests_seconds_bucket{method=\"GET\",uri=\"/users/{id}\",status=\"200\",le=\"5\"} 2\n",
            "http_server_requests_seconds_count{method=\"GET\",uri=\"unmatched\",status=\"404\"} 1\n",
        ] {
            assert!(text.contains(line), "{line:?} missing from:\n{text}");
        }
        let resp = r.response();
        assert_eq!(resp.headers()[CONTENT_TYPE_HEADER], CONTENT_TYPE);
    }
}
