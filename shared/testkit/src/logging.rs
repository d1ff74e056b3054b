//! Test logging: one global subscriber per test process (see the crate's `//!`), and windows on the
//! captured log for tests that scan it.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};

use tracing_subscriber::filter::{filter_fn, FilterExt, LevelFilter, Targets};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

use crate::env_flag;

/// Whether the capture layer records (turned on by the first [`capture_logs`]).
static CAPTURING: AtomicBool = AtomicBool::new(false);
/// Everything captured so far, JSON lines.
static CAPTURED: Mutex<Vec<u8>> = Mutex::new(Vec::new());
/// Whether this crate's subscriber became the global default.
static INSTALLED: OnceLock<bool> = OnceLock::new();

/// Installs the process-wide subscriber once. Returns whether it is ours.
fn install_subscriber() -> bool {
    *INSTALLED.get_or_init(|| {
        let capture = tracing_subscriber::fmt::layer()
            .json()
            .with_current_span(true)
            .with_span_list(true)
            // Every span's close is a line of its own, with its fields: the scans see every span.
            .with_span_events(tracing_subscriber::fmt::format::FmtSpan::CLOSE)
            .with_writer(|| CaptureWriter)
            .with_filter(
                Targets::new()
                    .with_target("clinic", LevelFilter::TRACE)
                    .with_default(LevelFilter::INFO)
                    .and(filter_fn(|_| CAPTURING.load(Ordering::Relaxed))),
            );
        let print = env_flag("TEST_LOG").then(|| {
            let filter = EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| EnvFilter::new("info,clinic=debug,clinic_core=debug"));
            tracing_subscriber::fmt::layer().with_test_writer().with_filter(filter)
        });
        // The spans as OpenTelemetry exports them (attributes, events, links), through the one
        // production layer (`clinic_core::telemetry::layer`), written into the same capture.
        let provider =
            clinic_core::telemetry::provider_builder().with_simple_exporter(CaptureExporter).build();
        let exported = clinic_core::telemetry::layer(&provider)
            .with_filter(filter_fn(|_| CAPTURING.load(Ordering::Relaxed)));
        tracing_subscriber::registry().with(capture).with(exported).with(print).try_init().is_ok()
    })
}

/// Prints logs to the test output when `TEST_LOG=1`; otherwise tests stay quiet. Idempotent, and
/// harmless if another subscriber is already installed.
pub fn init_test_logging() {
    install_subscriber();
}

/// Starts capturing every log line and every closed span of this process (JSON, `clinic*` at TRACE,
/// others at INFO), and every span as the OpenTelemetry layer exports it (one `{"exported": …}` line
/// per span: name, ids, parent, attributes, events and links), so a
/// test can scan them, e.g. for planted health data. Lines from tests running concurrently are
/// included, which only makes such a scan stricter.
///
/// Panics if a different global subscriber was installed first (a scan of nothing would pass).
pub fn capture_logs() -> CapturedLogs {
    assert!(
        install_subscriber(),
        "testkit: capture_logs needs the testkit's global tracing subscriber, but another one was \
         installed first; call clinic_testkit::init_test_logging() instead of installing one"
    );
    CAPTURING.store(true, Ordering::SeqCst);
    CapturedLogs { start: lock_captured().len() }
}

/// A window on the captured log, from the moment [`capture_logs`] was called.
#[derive(Debug)]
pub struct CapturedLogs {
    start: usize,
}

impl CapturedLogs {
    /// Everything logged since [`capture_logs`], one JSON object per line.
    pub fn text(&self) -> String {
        let captured = lock_captured();
        String::from_utf8_lossy(&captured[self.start.min(captured.len())..]).into_owned()
    }

    /// Whether `needle` occurs in anything logged since [`capture_logs`].
    pub fn contains(&self, needle: &str) -> bool {
        self.text().contains(needle)
    }

    /// The captured lines parsed as JSON (lines that fail to parse are skipped).
    pub fn json_lines(&self) -> Vec<serde_json::Value> {
        self.text().lines().filter_map(|line| serde_json::from_str(line).ok()).collect()
    }
}

fn lock_captured() -> std::sync::MutexGuard<'static, Vec<u8>> {
    CAPTURED.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

struct CaptureWriter;

impl Write for CaptureWriter {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        lock_captured().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Writes each exported span into the capture as one JSON line `{"exported": {...}}`.
#[derive(Debug)]
struct CaptureExporter;

impl opentelemetry_sdk::trace::SpanExporter for CaptureExporter {
    async fn export(
        &self,
        batch: Vec<opentelemetry_sdk::trace::SpanData>,
    ) -> opentelemetry_sdk::error::OTelSdkResult {
        let mut captured = lock_captured();
        for span in batch {
            let attributes =
                |pairs: &[opentelemetry::KeyValue]| -> serde_json::Map<String, serde_json::Value> {
                    pairs
                        .iter()
                        .map(|kv| (kv.key.to_string(), serde_json::Value::String(kv.value.to_string())))
                        .collect()
                };
            let line = serde_json::json!({ "exported": {
                "name": span.name,
                "traceId": span.span_context.trace_id().to_string(),
                "spanId": span.span_context.span_id().to_string(),
                "parentSpanId": span.parent_span_id.to_string(),
                "attributes": attributes(&span.attributes),
                "events": span.events.iter().map(|event| serde_json::json!({
                    "name": event.name, "attributes": attributes(&event.attributes),
                })).collect::<Vec<_>>(),
                "links": span.links.iter().map(|link| serde_json::json!({
                    "traceId": link.span_context.trace_id().to_string(),
                    "spanId": link.span_context.span_id().to_string(),
                    "attributes": attributes(&link.attributes),
                })).collect::<Vec<_>>(),
            }});
            captured.extend_from_slice(line.to_string().as_bytes());
            captured.push(b'\n');
        }
        Ok(())
    }
}
