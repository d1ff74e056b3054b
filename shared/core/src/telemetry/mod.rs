//! Logs and traces: JSON lines in Lambda (CloudWatch parses them), human-readable text locally, and
//! OpenTelemetry spans exported over OTLP (HTTP/protobuf) when the OpenTelemetry environment asks for
//! it (docs/tracing.md).
//!
//! Invariants:
//! - Every log event and every span attribute carries identifiers, types, statuses, counts and
//!   durations only — never names, contact details, reasons or tokens; the code that logs is
//!   responsible for that, and the PHI scan tests check the logs and the exported spans.
//! - Spans are exported only when `OTEL_EXPORTER_OTLP_ENDPOINT` or
//!   `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is set (the exporter itself honours the other `OTEL_*`
//!   variables: the traces endpoint, `OTEL_EXPORTER_OTLP_TIMEOUT`, `OTEL_SERVICE_NAME`,
//!   `OTEL_RESOURCE_ATTRIBUTES`). Unset: no OpenTelemetry layer is installed, [`exporting`] is false
//!   and the span helpers ([`spans`]) return before doing any work.
//! - [`flush`] exports every ended span before it returns (bounded by [`FLUSH_TIMEOUT`]); the Lambdas
//!   call it before an invocation returns, since a frozen container exports nothing.
//! - Span and trace ids use the X-Ray format ([`traceparent::new_trace_id`]), valid for OTLP too.

pub mod emf;
pub mod spans;
pub mod traceparent;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

use opentelemetry::trace::{SpanId, TraceId, TracerProvider as _};
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

pub use traceparent::TraceParent;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Json,
    Text,
}

/// The variables whose presence turns the export on (OpenTelemetry's own names).
pub const ENDPOINT_VARIABLES: [&str; 2] =
    ["OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"];

/// What a `main` reads for [`init`]: the log filter and whether spans are exported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TelemetryConfig {
    /// `RUST_LOG` (default `info`; a filter that does not parse falls back to `info`).
    pub log_filter: String,
    /// Whether one of the [`ENDPOINT_VARIABLES`] is set.
    pub export: bool,
}

impl TelemetryConfig {
    pub fn read(env: &crate::config::Env) -> TelemetryConfig {
        let export = ENDPOINT_VARIABLES.iter().any(|name| env.var(name).is_some());
        TelemetryConfig { log_filter: env.var("RUST_LOG").unwrap_or_else(|| "info".into()), export }
    }
}

/// The longest [`flush`] waits for the exporter.
pub const FLUSH_TIMEOUT: Duration = Duration::from_secs(3);

/// The most links one span keeps: a claim batch is at most a few hundred events.
const MAX_LINKS_PER_SPAN: u32 = 1024;

static EXPORTING: AtomicBool = AtomicBool::new(false);
static PROVIDER: OnceLock<SdkTracerProvider> = OnceLock::new();

/// Whether spans go to an OpenTelemetry layer in this process (the span helpers do nothing otherwise).
pub fn exporting() -> bool {
    EXPORTING.load(Ordering::Relaxed)
}

/// Installs the global subscriber (once; later calls are ignored). `RUST_LOG` sets the level of the
/// log lines (not of the exported spans).
/// Must run inside the Tokio runtime when the export is on (the exporter's task is spawned on it).
pub fn init(format: LogFormat, config: &TelemetryConfig) {
    let filter = EnvFilter::try_new(&config.log_filter).unwrap_or_else(|_| EnvFilter::new("info"));
    let logs: Box<dyn Layer<_> + Send + Sync> = match format {
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_writer(std::io::stderr)
            .boxed(),
        LogFormat::Text => tracing_subscriber::fmt::layer().compact().with_writer(std::io::stderr).boxed(),
    };
    let traces = if config.export {
        match otlp_provider() {
            Ok(provider) => Some(layer(&provider)),
            Err(error) => {
                eprintln!("OpenTelemetry export is off: the OTLP exporter could not be built: {error}");
                None
            }
        }
    } else {
        None
    };
    // `RUST_LOG` filters the log lines only: the exported spans have their own filter ([`layer`]).
    let _ = tracing_subscriber::registry().with(logs.with_filter(filter)).with(traces).try_init();
}

/// The OTLP HTTP/protobuf exporter behind a batch processor on the Tokio runtime.
fn otlp_provider() -> Result<SdkTracerProvider, opentelemetry_otlp::ExporterBuildError> {
    use opentelemetry_otlp::{Protocol, WithExportConfig};
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .build()?;
    let processor = opentelemetry_sdk::trace::span_processor_with_async_runtime::BatchSpanProcessor::builder(
        exporter,
        opentelemetry_sdk::runtime::Tokio,
    )
    .build();
    Ok(provider_builder().with_span_processor(processor).build())
}

/// The provider settings every exporter shares: X-Ray ids, the link limit, the resource from the
/// environment (`OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`).
pub fn provider_builder() -> opentelemetry_sdk::trace::TracerProviderBuilder {
    SdkTracerProvider::builder()
        .with_id_generator(XrayIds)
        .with_max_links_per_span(MAX_LINKS_PER_SPAN)
        .with_resource(opentelemetry_sdk::Resource::builder().build())
}

/// The OpenTelemetry layer over `provider` (the one place it is built: production and the testkit's
/// capturing exporter). Keeps `provider` for [`flush`] and turns [`exporting`] on.
///
/// Only this workspace's spans and events (targets `clinic*`, INFO and above) are exported, whatever
/// `RUST_LOG` says: a dependency's debug record becomes a span event, and some print values (the
/// database driver logs statement parameters — names and contact details — at DEBUG).
pub fn layer<S>(provider: &SdkTracerProvider) -> impl Layer<S> + Send + Sync
where
    S: tracing::Subscriber + for<'span> tracing_subscriber::registry::LookupSpan<'span> + Send + Sync,
{
    let _ = PROVIDER.set(provider.clone());
    EXPORTING.store(true, Ordering::Relaxed);
    tracing_opentelemetry::layer()
        .with_tracer(provider.tracer("clinic"))
        .with_location(false)
        .with_threads(false)
        .with_target(false)
        .with_filter(
            tracing_subscriber::filter::Targets::new()
                .with_target("clinic", tracing::Level::INFO)
                .with_default(tracing_subscriber::filter::LevelFilter::OFF),
        )
}

/// Exports every ended span now (no-op when the export is off); bounded by [`FLUSH_TIMEOUT`].
pub async fn flush() {
    let Some(provider) = PROVIDER.get() else { return };
    let provider = provider.clone();
    // The processor's flush blocks its caller until its task on the runtime has exported.
    let flushed = tokio::task::spawn_blocking(move || provider.force_flush());
    if let Ok(Ok(Err(error))) = tokio::time::timeout(FLUSH_TIMEOUT, flushed).await {
        tracing::debug!(error = %error, "span flush failed");
    }
}

/// Trace ids in the X-Ray format (see [`traceparent::new_trace_id`]), random span ids.
#[derive(Debug)]
struct XrayIds;

impl opentelemetry_sdk::trace::IdGenerator for XrayIds {
    fn new_trace_id(&self) -> TraceId {
        TraceId::from_bytes(traceparent::new_trace_id())
    }

    fn new_span_id(&self) -> SpanId {
        SpanId::from_bytes(traceparent::random_span_id())
    }
}
