//! Traces over OTLP: with `OTEL_EXPORTER_OTLP_ENDPOINT` (or
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) set, spans go to `{endpoint}/v1/traces` as
//! OTLP/HTTP, protobuf unless `OTEL_EXPORTER_OTLP_PROTOCOL=http/json`; `service.name`
//! is `OTEL_SERVICE_NAME`, else the binary's name. With no endpoint (or
//! `OTEL_SDK_DISABLED=true`) nothing is exported and no tracer is built.
//!
//! Finished spans go into a bounded queue ([`QUEUE_CAPACITY`]) that one background
//! thread drains in batches; a span that finds the queue full is dropped and counted
//! ([`dropped_spans`], exposed as `otel_spans_dropped_total`), so a slow or
//! unreachable collector never blocks or slows a request.

use opentelemetry::trace::TracerProvider as _;
use opentelemetry::Context;
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{SdkTracerProvider, Span, SpanData, SpanExporter, SpanProcessor, Tracer};
use opentelemetry_sdk::Resource;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Spans waiting for export at most; more are dropped.
pub const QUEUE_CAPACITY: usize = 4096;
/// Spans per export request at most.
pub const BATCH_SIZE: usize = 512;
/// How long a span waits for its batch to fill at most.
pub const BATCH_DELAY: Duration = Duration::from_millis(500);

static DROPPED: AtomicU64 = AtomicU64::new(0);
static EXPORTED: AtomicU64 = AtomicU64::new(0);
static PROVIDER: OnceLock<SdkTracerProvider> = OnceLock::new();

/// Spans dropped because the export queue was full (or the exporter gone), since start.
pub fn dropped_spans() -> u64 {
    DROPPED.load(Ordering::Relaxed)
}

/// Spans the collector accepted, since start.
pub fn exported_spans() -> u64 {
    EXPORTED.load(Ordering::Relaxed)
}

/// What the environment asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    pub service_name: String,
    pub protocol: Protocol,
}

/// Reads the standard variables through `var`: `None` when nothing is to be exported
/// (no endpoint, SDK disabled, or a protocol this build does not speak, which is
/// logged).
pub fn settings(binary: &str, var: impl Fn(&str) -> Option<String>) -> Option<Settings> {
    let set = |k: &str| var(k).map(|v| v.trim().to_string()).filter(|v| !v.is_empty());
    if set("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true")) {
        return None;
    }
    set("OTEL_EXPORTER_OTLP_ENDPOINT").or_else(|| set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))?;
    let protocol = match set("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL").or_else(|| set("OTEL_EXPORTER_OTLP_PROTOCOL")) {
        None => Protocol::HttpBinary,
        Some(p) if p == "http/protobuf" => Protocol::HttpBinary,
        Some(p) if p == "http/json" => Protocol::HttpJson,
        Some(p) => {
            eprintln!("OTEL_EXPORTER_OTLP_PROTOCOL={p}: only http/protobuf and http/json are built in; traces off");
            return None;
        }
    };
    Some(Settings { service_name: set("OTEL_SERVICE_NAME").unwrap_or_else(|| binary.to_string()), protocol })
}

/// Builds the process's tracer from the environment, or `None` (nothing exported).
pub(crate) fn tracer(binary: &str) -> Option<Tracer> {
    let s = settings(binary, |k| std::env::var(k).ok())?;
    let exporter = match opentelemetry_otlp::SpanExporter::builder().with_http().with_protocol(s.protocol).build() {
        Ok(e) => e,
        Err(e) => {
            eprintln!("OTLP exporter: {e}; traces off");
            return None;
        }
    };
    opentelemetry::global::set_text_map_propagator(opentelemetry_sdk::propagation::TraceContextPropagator::new());
    let provider = SdkTracerProvider::builder()
        .with_span_processor(BoundedProcessor::new(exporter))
        .with_resource(Resource::builder().with_service_name(s.service_name.clone()).build())
        .build();
    let tracer = provider.tracer(s.service_name);
    let _ = PROVIDER.set(provider);
    Some(tracer)
}

/// Exports what is queued (waiting up to a few seconds) and stops the exporter.
pub fn shutdown() {
    if let Some(p) = PROVIDER.get() {
        let _ = p.shutdown();
    }
}

enum Msg {
    Span(Box<SpanData>),
    Resource(Resource),
    Flush(SyncSender<()>),
}

/// A span processor with a bounded queue that never waits: see the module's doc.
#[derive(Debug)]
pub struct BoundedProcessor {
    tx: Mutex<Option<SyncSender<Msg>>>,
    worker: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl BoundedProcessor {
    pub fn new<E: SpanExporter + 'static>(exporter: E) -> BoundedProcessor {
        BoundedProcessor::with_capacity(exporter, QUEUE_CAPACITY)
    }

    pub fn with_capacity<E: SpanExporter + 'static>(exporter: E, capacity: usize) -> BoundedProcessor {
        let (tx, rx) = mpsc::sync_channel(capacity);
        let worker = std::thread::Builder::new()
            .name("otlp-export".into())
            .spawn(move || drain(exporter, rx))
            .expect("span export thread");
        BoundedProcessor { tx: Mutex::new(Some(tx)), worker: Mutex::new(Some(worker)) }
    }

    fn sender(&self) -> Option<SyncSender<Msg>> {
        self.tx.lock().unwrap().clone()
    }
}

fn drain<E: SpanExporter>(mut exporter: E, rx: Receiver<Msg>) {
    let mut batch: Vec<SpanData> = Vec::with_capacity(BATCH_SIZE);
    let mut since = Instant::now();
    let send = |exporter: &E, batch: &mut Vec<SpanData>| {
        if batch.is_empty() {
            return;
        }
        let n = batch.len() as u64;
        match futures_executor::block_on(exporter.export(std::mem::take(batch))) {
            Ok(()) => EXPORTED.fetch_add(n, Ordering::Relaxed),
            Err(_) => DROPPED.fetch_add(n, Ordering::Relaxed),
        };
    };
    loop {
        let wait = BATCH_DELAY.saturating_sub(since.elapsed());
        match rx.recv_timeout(wait) {
            Ok(Msg::Span(s)) => {
                if batch.is_empty() {
                    since = Instant::now();
                }
                batch.push(*s);
                if batch.len() >= BATCH_SIZE {
                    send(&exporter, &mut batch);
                }
            }
            Ok(Msg::Resource(r)) => exporter.set_resource(&r),
            Ok(Msg::Flush(done)) => {
                send(&exporter, &mut batch);
                let _ = done.send(());
            }
            Err(RecvTimeoutError::Timeout) => {
                send(&exporter, &mut batch);
                since = Instant::now();
            }
            Err(RecvTimeoutError::Disconnected) => {
                send(&exporter, &mut batch);
                let _ = exporter.shutdown();
                return;
            }
        }
    }
}

impl SpanProcessor for BoundedProcessor {
    fn on_start(&self, _span: &mut Span, _cx: &Context) {}

    fn on_end(&self, span: SpanData) {
        if !span.span_context.is_sampled() {
            return;
        }
        let sent = self.sender().map(|tx| tx.try_send(Msg::Span(Box::new(span))));
        if !matches!(sent, Some(Ok(()))) {
            DROPPED.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        let tx = self.sender().ok_or(OTelSdkError::AlreadyShutdown)?;
        let (done, wait) = mpsc::sync_channel(1);
        tx.send(Msg::Flush(done)).map_err(|_| OTelSdkError::AlreadyShutdown)?;
        wait.recv_timeout(Duration::from_secs(5)).map_err(|_| OTelSdkError::Timeout(Duration::from_secs(5)))
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        let flushed = self.force_flush();
        self.tx.lock().unwrap().take();
        if let Some(w) = self.worker.lock().unwrap().take() {
            let deadline = Instant::now() + timeout;
            while !w.is_finished() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        flushed
    }

    fn set_resource(&mut self, resource: &Resource) {
        if let Some(tx) = self.sender() {
            let _ = tx.send(Msg::Resource(resource.clone()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::trace::{Span as _, Tracer as _};
    use std::sync::Arc;

    fn env(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |k| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string())
    }

    #[test]
    fn nothing_without_an_endpoint() {
        assert_eq!(settings("queue-api", env(&[])), None);
        assert_eq!(settings("queue-api", env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", " ")])), None);
        assert_eq!(
            settings(
                "queue-api",
                env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://x:4318"), ("OTEL_SDK_DISABLED", "true")])
            ),
            None
        );
    }

    #[test]
    fn name_and_protocol_from_the_environment() {
        let s = settings("queue-api", env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://x:4318")])).unwrap();
        assert_eq!((s.service_name.as_str(), s.protocol), ("queue-api", Protocol::HttpBinary));
        let s = settings(
            "queue-api",
            env(&[
                ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://x:4318/v1/traces"),
                ("OTEL_SERVICE_NAME", "front"),
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
            ]),
        )
        .unwrap();
        assert_eq!((s.service_name.as_str(), s.protocol), ("front", Protocol::HttpJson));
        let grpc = env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://x:4317"), ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")]);
        assert_eq!(settings("queue-api", grpc), None);
    }

    /// An exporter that says when an export starts and blocks until released,
    /// counting what it got.
    #[derive(Debug, Clone)]
    struct Stuck {
        started: SyncSender<()>,
        release: Arc<Mutex<bool>>,
        got: Arc<AtomicU64>,
    }

    impl SpanExporter for Stuck {
        async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
            let _ = self.started.try_send(());
            for _ in 0..1000 {
                if *self.release.lock().unwrap() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            self.got.fetch_add(batch.len() as u64, Ordering::Relaxed);
            Ok(())
        }
    }

    #[test]
    fn a_stuck_exporter_drops_and_counts_rather_than_waits() {
        let (started, export_started) = mpsc::sync_channel(4);
        let stuck = Stuck { started, release: Arc::default(), got: Arc::default() };
        let provider =
            SdkTracerProvider::builder().with_span_processor(BoundedProcessor::with_capacity(stuck.clone(), 8)).build();
        let tracer = provider.tracer("t");
        tracer.start("first").end();
        // A flush makes the worker export the first span, where it stays stuck.
        let flusher = {
            let p = provider.clone();
            std::thread::spawn(move || p.force_flush())
        };
        export_started.recv_timeout(Duration::from_secs(10)).expect("the export started");
        let before = dropped_spans();
        for _ in 0..100 {
            tracer.start("s").end();
        }
        // The queue holds 8 (7 if the flush request still waits in it: the batch delay
        // may have sent the first span before the flush asked), the rest are dropped.
        let dropped = dropped_spans() - before;
        assert!(dropped == 92 || dropped == 93, "dropped {dropped}");
        *stuck.release.lock().unwrap() = true;
        flusher.join().unwrap().unwrap();
        provider.force_flush().unwrap();
        assert_eq!(stuck.got.load(Ordering::Relaxed) + dropped, 101);
        provider.shutdown().unwrap();
    }
}
