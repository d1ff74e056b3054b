//! Logging setup: JSON lines in Lambda (CloudWatch parses them), human-readable text locally.
//!
//! Every log event carries identifiers only — never names, contact details, reasons or tokens; the
//! code that logs is responsible for that, and the PHI scan tests check it.

use tracing_subscriber::EnvFilter;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Json,
    Text,
}

/// Installs the global subscriber (once; later calls are ignored). `RUST_LOG` overrides the level.
pub fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Json => builder.json().flatten_event(true).with_current_span(false).try_init(),
        LogFormat::Text => builder.compact().try_init(),
    };
}
