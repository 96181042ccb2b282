//! Tracing to stdout: the level from `RUST_LOG` (default `info`), ANSI colours only
//! when stdout is a terminal, lines as text or as JSON objects; and, when the
//! environment names an OTLP endpoint, spans exported as traces ([`crate::telemetry`]).
//!
//! A JSON line is one object: `timestamp` (RFC 3339, UTC), `level`, `target`,
//! `message`, `fields` (the event's other fields), `span` (the innermost span's name)
//! and, inside a span that is being traced, `trace_id` and `span_id` (hex).

use serde_json::{Map, Value};
use std::fmt;
use std::io::IsTerminal;
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::time::{FormatTime, SystemTime};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

/// How log lines look (`--log-format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object a line, for log collectors.
    Json,
}

fn filter() -> EnvFilter {
    EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"))
}

/// Installs the process's subscriber (once; later calls change nothing). `binary`
/// names the service in its traces unless `OTEL_SERVICE_NAME` does.
pub fn init(format: LogFormat, binary: &str) {
    // Traces take spans at info and above, and the Valkey command spans (debug).
    let traced = Targets::new().with_default(LevelFilter::INFO).with_target("queue_client", LevelFilter::DEBUG);
    let otel = crate::telemetry::tracer(binary).map(|t| crate::telemetry::layer(t).with_filter(traced));
    let ansi = std::io::stdout().is_terminal();
    let text =
        (format == LogFormat::Text).then(|| tracing_subscriber::fmt::layer().with_ansi(ansi).with_filter(filter()));
    let json = (format == LogFormat::Json)
        .then(|| tracing_subscriber::fmt::layer().event_format(JsonLines).with_filter(filter()));
    let _ = tracing_subscriber::registry().with(otel).with(text).with(json).try_init();
}

/// The JSON line format (see the module's doc).
pub struct JsonLines;

impl<S, N> FormatEvent<S, N> for JsonLines
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(&self, ctx: &FmtContext<'_, S, N>, mut writer: Writer<'_>, event: &Event<'_>) -> fmt::Result {
        let mut line = Map::new();
        let mut ts = String::new();
        SystemTime.format_time(&mut Writer::new(&mut ts))?;
        line.insert("timestamp".into(), ts.into());
        let meta = event.metadata();
        line.insert("level".into(), meta.level().as_str().into());
        line.insert("target".into(), meta.target().into());
        let mut fields = Fields::default();
        event.record(&mut fields);
        line.insert("message".into(), fields.message.unwrap_or_default().into());
        if !fields.map.is_empty() {
            line.insert("fields".into(), Value::Object(fields.map));
        }
        if let Some(span) = ctx.lookup_current() {
            line.insert("span".into(), span.name().into());
            let ext = span.extensions();
            if let Some(otel) = ext.get::<tracing_opentelemetry::OtelData>() {
                if let (Some(t), Some(s)) = (otel.trace_id(), otel.span_id()) {
                    line.insert("trace_id".into(), t.to_string().into());
                    line.insert("span_id".into(), s.to_string().into());
                }
            }
        }
        writeln!(writer, "{}", Value::Object(line))
    }
}

#[derive(Default)]
struct Fields {
    message: Option<String>,
    map: Map<String, Value>,
}

impl Fields {
    fn put(&mut self, field: &Field, v: Value) {
        if field.name() == "message" {
            self.message = Some(match v {
                Value::String(s) => s,
                other => other.to_string(),
            });
        } else {
            self.map.insert(field.name().to_string(), v);
        }
    }
}

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.put(field, format!("{value:?}").into());
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.put(field, value.into());
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.put(field, value.into());
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.put(field, value.into());
    }
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.put(field, value.into());
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.put(field, value.into());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::trace::TracerProvider as _;
    use std::sync::{Arc, Mutex};

    #[derive(Clone, Default)]
    struct Buf(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn lines(buf: &Buf) -> Vec<Value> {
        let text = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
        text.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"))).collect()
    }

    #[test]
    fn json_lines_with_fields_and_trace_ids_inside_traced_spans() {
        let buf = Buf::default();
        let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder().build();
        let w = buf.clone();
        let subscriber = tracing_subscriber::registry()
            .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("t")))
            .with(tracing_subscriber::fmt::layer().event_format(JsonLines).with_writer(move || w.clone()));
        tracing::subscriber::with_default(subscriber, || {
            tracing::warn!(user = "u-1", n = 3_u64, "outside");
            let span = tracing::info_span!("request");
            let _in = span.enter();
            tracing::info!(ok = true, "inside {}", 1);
        });
        let got = lines(&buf);
        assert_eq!(got.len(), 2, "{got:?}");
        let (out, inside) = (&got[0], &got[1]);
        assert_eq!(out["level"], "WARN");
        assert_eq!(out["message"], "outside");
        assert_eq!(out["fields"]["user"], "u-1");
        assert_eq!(out["fields"]["n"], 3);
        assert!(out["timestamp"].as_str().unwrap().ends_with('Z'), "{out}");
        assert!(out.get("trace_id").is_none(), "{out}");
        assert_eq!(inside["message"], "inside 1");
        assert_eq!(inside["span"], "request");
        assert_eq!(inside["fields"]["ok"], true);
        assert_eq!(inside["target"], module_path!());
        let (t, s) = (inside["trace_id"].as_str().unwrap(), inside["span_id"].as_str().unwrap());
        assert_eq!((t.len(), s.len()), (32, 16), "{inside}");
        assert_ne!(t, "0".repeat(32));
    }
}
