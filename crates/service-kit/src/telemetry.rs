//! Traces over OTLP: with `OTEL_EXPORTER_OTLP_ENDPOINT` (or
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) set, spans go to `{endpoint}/v1/traces` as
//! OTLP/HTTP, protobuf unless `OTEL_EXPORTER_OTLP_PROTOCOL=http/json`; `service.name`
//! is `OTEL_SERVICE_NAME`, else the binary's name. With no endpoint (or
//! `OTEL_SDK_DISABLED=true`) nothing is exported and no tracer is built.
//!
//! Finished spans go into a bounded lock-free queue ([`QUEUE_CAPACITY`]) that one
//! background thread drains in batches; a span that finds the queue full is dropped and counted
//! ([`dropped_spans`], exposed as `otel_spans_dropped_total`), so a slow or
//! unreachable collector never blocks or slows a request.
//!
//! Sampling (`OTEL_TRACES_SAMPLER`, `OTEL_TRACES_SAMPLER_ARG`, the standard values) is
//! decided for each HTTP request before any of its spans is made
//! ([`sample_request`]): a request that is not kept makes no span at all, neither its
//! own nor its Valkey commands', so a tenth of the traces costs about a tenth of
//! tracing everything. Spans that are not part of a request (the manager's ticks)
//! go through the same sampler inside the SDK.

use crossbeam_queue::ArrayQueue;
use opentelemetry::trace::{Link, SamplingResult, SpanKind, TraceId, TracerProvider as _};
use opentelemetry::{Context, KeyValue};
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{
    Sampler, SdkTracerProvider, ShouldSample, Span, SpanData, SpanExporter, SpanProcessor, Tracer,
};
use opentelemetry_sdk::Resource;
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender};
use std::sync::{Arc, Mutex, OnceLock};
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
static SAMPLING: OnceLock<Sampling> = OnceLock::new();

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

/// Which traces are kept: `OTEL_TRACES_SAMPLER` and `OTEL_TRACES_SAMPLER_ARG`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sampling {
    /// The share of new traces kept (0 to 1).
    pub ratio: f64,
    /// A request that comes with a `traceparent` follows its sampled flag.
    pub parent_based: bool,
}

impl Default for Sampling {
    /// The standard default, `parentbased_always_on`.
    fn default() -> Self {
        Sampling { ratio: 1.0, parent_based: true }
    }
}

/// Reads the sampler through `var`, with the SDK's readings: `always_on`,
/// `always_off`, `traceidratio`, `parentbased_always_on`, `parentbased_always_off`,
/// `parentbased_traceidratio` (a missing or bad ratio is 1); anything else, or
/// nothing, is `parentbased_always_on`.
pub fn sampling(var: impl Fn(&str) -> Option<String>) -> Sampling {
    let ratio = || {
        var("OTEL_TRACES_SAMPLER_ARG")
            .and_then(|r| r.trim().parse::<f64>().ok())
            .filter(|r| r.is_finite())
            .map_or(1.0, |r| r.clamp(0.0, 1.0))
    };
    let (ratio, parent_based) = match var("OTEL_TRACES_SAMPLER").as_deref().map(str::trim) {
        Some("always_on") => (1.0, false),
        Some("always_off") => (0.0, false),
        Some("traceidratio") => (ratio(), false),
        Some("parentbased_always_off") => (0.0, true),
        Some("parentbased_traceidratio") => (ratio(), true),
        _ => (1.0, true),
    };
    Sampling { ratio, parent_based }
}

impl Sampling {
    /// Whether a request is traced, given its `traceparent` header.
    pub fn keeps(&self, traceparent: Option<&str>, draw: impl FnOnce() -> f64) -> bool {
        if self.parent_based {
            if let Some(sampled) = traceparent.and_then(sampled_flag) {
                return sampled;
            }
        }
        self.ratio >= 1.0 || (self.ratio > 0.0 && draw() < self.ratio)
    }

    /// The SDK sampler for spans outside requests.
    fn sampler(&self) -> Sampler {
        let root = Sampler::TraceIdRatioBased(self.ratio);
        if self.parent_based {
            Sampler::ParentBased(Box::new(root))
        } else {
            root
        }
    }
}

/// The sampled flag of a W3C `traceparent` (`00-{trace}-{span}-{flags}`), if well formed.
fn sampled_flag(header: &str) -> Option<bool> {
    let mut parts = header.trim().split('-');
    let (version, trace, span, flags) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    let hex = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_hexdigit());
    if !hex(version, 2) || version == "ff" || !hex(trace, 32) || !hex(span, 16) || !hex(flags, 2) {
        return None;
    }
    if trace.bytes().all(|b| b == b'0') || span.bytes().all(|b| b == b'0') {
        return None;
    }
    Some(u8::from_str_radix(flags, 16).ok()? & 1 == 1)
}

/// A uniform draw in [0, 1) from a per-thread xorshift generator (no lock, no system call).
fn draw() -> f64 {
    thread_local! {
        static STATE: Cell<u64> = Cell::new({
            use std::hash::BuildHasher;
            std::collections::hash_map::RandomState::new().hash_one(std::thread::current().id()) | 1
        });
    }
    STATE.with(|s| {
        let mut x = s.get();
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        s.set(x);
        (x >> 11) as f64 / (1u64 << 53) as f64
    })
}

/// Whether this HTTP request is traced: `None` when the process exports no traces
/// (its spans are then made as usual, for the logs), else the sampler's decision,
/// taken before any of the request's spans is made.
pub fn sample_request(traceparent: Option<&str>) -> Option<bool> {
    Some(SAMPLING.get()?.keeps(traceparent, draw))
}

/// The SDK's sampler: a server span was kept by [`sample_request`] already (a kept
/// request is kept whole); every other span by the configured sampler.
#[derive(Debug, Clone)]
struct RequestsDecided(Sampler);

impl ShouldSample for RequestsDecided {
    fn should_sample(
        &self,
        parent: Option<&Context>,
        trace_id: TraceId,
        name: &str,
        kind: &SpanKind,
        attributes: &[KeyValue],
        links: &[Link],
    ) -> SamplingResult {
        let sampler = if *kind == SpanKind::Server { &Sampler::AlwaysOn } else { &self.0 };
        sampler.should_sample(parent, trace_id, name, kind, attributes, links)
    }
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
    let sampling = sampling(|k| std::env::var(k).ok());
    let _ = SAMPLING.set(sampling);
    let provider = SdkTracerProvider::builder()
        .with_sampler(RequestsDecided(sampling.sampler()))
        .with_span_processor(BoundedProcessor::new(exporter))
        .with_resource(Resource::builder().with_service_name(s.service_name.clone()).build())
        .build();
    let tracer = provider.tracer(s.service_name);
    let _ = PROVIDER.set(provider);
    Some(tracer)
}

/// The tracing layer that turns spans into OpenTelemetry spans, without what costs
/// on every span and says little here: source locations and thread attributes
/// (strings made per span), busy/idle timings (two clock reads on every poll of an
/// instrumented future) and context activation on every enter (nothing in these
/// services reads the OpenTelemetry current context: parents come from the tracing
/// spans, and incoming `traceparent` headers are set as parents explicitly).
pub fn layer<S>(tracer: Tracer) -> tracing_opentelemetry::OpenTelemetryLayer<S, Tracer>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_location(false)
        .with_threads(false)
        .with_tracked_inactivity(false)
        .with_context_activation(false)
}

/// Exports what is queued (waiting up to a few seconds) and stops the exporter.
pub fn shutdown() {
    if let Some(p) = PROVIDER.get() {
        let _ = p.shutdown();
    }
}

/// What the processor tells its worker besides spans (which go through the queue).
enum Control {
    /// A batch is ready: export what is queued.
    Wake,
    Resource(Resource),
    Flush(SyncSender<()>),
}

/// What the processor and its worker share.
#[derive(Debug)]
struct Shared {
    /// Finished spans waiting for export; a full queue drops.
    queue: ArrayQueue<SpanData>,
    /// A `Wake` is on its way or the worker is exporting: no other is sent.
    waking: AtomicBool,
    /// Shut down: spans ending now are dropped.
    closed: AtomicBool,
}

/// A span processor with a bounded queue that never waits: see the module's doc.
///
/// Ending a span pushes it on a lock-free queue and nothing else; the worker is woken
/// once a batch is queued (not once a span: a wake-up per span costs a context switch
/// per span) or when the batch delay passes.
#[derive(Debug)]
pub struct BoundedProcessor {
    shared: Arc<Shared>,
    control: Mutex<Option<SyncSender<Control>>>,
    worker: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl BoundedProcessor {
    pub fn new<E: SpanExporter + 'static>(exporter: E) -> BoundedProcessor {
        BoundedProcessor::with_capacity(exporter, QUEUE_CAPACITY)
    }

    pub fn with_capacity<E: SpanExporter + 'static>(exporter: E, capacity: usize) -> BoundedProcessor {
        let shared = Arc::new(Shared {
            queue: ArrayQueue::new(capacity),
            waking: AtomicBool::new(false),
            closed: AtomicBool::new(false),
        });
        let (tx, rx) = mpsc::sync_channel(16);
        let worker = {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name("otlp-export".into())
                .spawn(move || drain(exporter, &shared, rx))
                .expect("span export thread")
        };
        BoundedProcessor { shared, control: Mutex::new(Some(tx)), worker: Mutex::new(Some(worker)) }
    }

    fn control(&self) -> Option<SyncSender<Control>> {
        self.control.lock().unwrap().clone()
    }
}

fn drain<E: SpanExporter>(mut exporter: E, shared: &Shared, rx: Receiver<Control>) {
    // Exports everything queued, a batch at a time.
    let export_all = |exporter: &E| {
        loop {
            let batch: Vec<SpanData> = std::iter::from_fn(|| shared.queue.pop()).take(BATCH_SIZE).collect();
            if batch.is_empty() {
                break;
            }
            let n = batch.len() as u64;
            match futures_executor::block_on(exporter.export(batch)) {
                Ok(()) => EXPORTED.fetch_add(n, Ordering::Relaxed),
                Err(_) => DROPPED.fetch_add(n, Ordering::Relaxed),
            };
            if (n as usize) < BATCH_SIZE {
                break;
            }
        }
        shared.waking.store(false, Ordering::Release);
    };
    loop {
        match rx.recv_timeout(BATCH_DELAY) {
            Ok(Control::Wake) | Err(RecvTimeoutError::Timeout) => export_all(&exporter),
            Ok(Control::Resource(r)) => exporter.set_resource(&r),
            Ok(Control::Flush(done)) => {
                export_all(&exporter);
                let _ = done.send(());
            }
            Err(RecvTimeoutError::Disconnected) => {
                export_all(&exporter);
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
        let shared = &self.shared;
        if shared.closed.load(Ordering::Relaxed) || shared.queue.push(span).is_err() {
            DROPPED.fetch_add(1, Ordering::Relaxed);
            return;
        }
        if shared.queue.len() >= BATCH_SIZE && !shared.waking.swap(true, Ordering::AcqRel) {
            if let Some(tx) = self.control() {
                let _ = tx.try_send(Control::Wake);
            }
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        let tx = self.control().ok_or(OTelSdkError::AlreadyShutdown)?;
        let (done, wait) = mpsc::sync_channel(1);
        tx.send(Control::Flush(done)).map_err(|_| OTelSdkError::AlreadyShutdown)?;
        wait.recv_timeout(Duration::from_secs(5)).map_err(|_| OTelSdkError::Timeout(Duration::from_secs(5)))
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        let flushed = self.force_flush();
        self.shared.closed.store(true, Ordering::Relaxed);
        self.control.lock().unwrap().take();
        if let Some(w) = self.worker.lock().unwrap().take() {
            let deadline = Instant::now() + timeout;
            while !w.is_finished() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        flushed
    }

    fn set_resource(&mut self, resource: &Resource) {
        if let Some(tx) = self.control() {
            let _ = tx.send(Control::Resource(resource.clone()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::trace::{Span as _, Tracer as _};

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

    #[test]
    fn sampler_from_the_environment() {
        let on = Sampling { ratio: 1.0, parent_based: true };
        assert_eq!(sampling(env(&[])), on);
        assert_eq!(sampling(env(&[("OTEL_TRACES_SAMPLER", "nonsense")])), on);
        assert_eq!(
            sampling(env(&[("OTEL_TRACES_SAMPLER", "always_off")])),
            Sampling { ratio: 0.0, parent_based: false }
        );
        let tenth = env(&[("OTEL_TRACES_SAMPLER", "parentbased_traceidratio"), ("OTEL_TRACES_SAMPLER_ARG", "0.1")]);
        assert_eq!(sampling(tenth), Sampling { ratio: 0.1, parent_based: true });
        let bad = env(&[("OTEL_TRACES_SAMPLER", "traceidratio"), ("OTEL_TRACES_SAMPLER_ARG", "lots")]);
        assert_eq!(sampling(bad), Sampling { ratio: 1.0, parent_based: false });
        let over = env(&[("OTEL_TRACES_SAMPLER", "traceidratio"), ("OTEL_TRACES_SAMPLER_ARG", "7")]);
        assert_eq!(sampling(over).ratio, 1.0);
    }

    #[test]
    fn a_request_follows_its_parent_else_the_ratio() {
        let kept = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        let not_kept = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00";
        let tenth = Sampling { ratio: 0.1, parent_based: true };
        assert!(tenth.keeps(Some(kept), || 0.99));
        assert!(!tenth.keeps(Some(not_kept), || 0.0));
        // A malformed header counts as none.
        for bad in [
            "",
            "00-xyz",
            "00-00000000000000000000000000000000-b7ad6b7169203331-01",
            "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        ] {
            assert!(tenth.keeps(Some(bad), || 0.05), "{bad}");
            assert!(!tenth.keeps(Some(bad), || 0.5), "{bad}");
        }
        // Not parent-based: the ratio alone.
        let ratio_only = Sampling { ratio: 0.1, parent_based: false };
        assert!(!ratio_only.keeps(Some(kept), || 0.5));
        assert!(Sampling { ratio: 1.0, parent_based: false }.keeps(Some(not_kept), || 0.999));
        assert!(!Sampling { ratio: 0.0, parent_based: true }.keeps(None, || 0.0));
        // The draw is uniform enough: a tenth of 100,000 within 3%.
        let kept = (0..100_000).filter(|_| tenth.keeps(None, draw)).count();
        assert!((9_700..=10_300).contains(&kept), "{kept}");
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
        // The queue holds 8, the rest are dropped.
        let dropped = dropped_spans() - before;
        assert_eq!(dropped, 92);
        *stuck.release.lock().unwrap() = true;
        flusher.join().unwrap().unwrap();
        provider.force_flush().unwrap();
        assert_eq!(stuck.got.load(Ordering::Relaxed) + dropped, 101);
        provider.shutdown().unwrap();
    }
}
