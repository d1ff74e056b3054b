//! The drills' settings: `main` captures the environment once and reads it into the `clinic`
//! binary's tree (installed for the code the drills share with `clinic dev`) and this one
//! ([`Settings::read`], [`current`]); nothing below `main` reads the environment.
//!
//! Invariants:
//! - The variables here are the drills' own (a parent drill sets them for the child processes it
//!   starts), not the service's configuration; docs/benchmarks.md and docs/chaos.md name them.
//! - `chaos` sets the defaults its in-process services need (`RUST_LOG`, `CLINIC_METRICS`, the
//!   emulator's credentials) in the process environment before the capture, so its children inherit
//!   them too ([`crate::chaos::prepare_environment`]).

use std::sync::OnceLock;

use clinic_core::config::{ConfigError, Env};
use clinic_core::telemetry::TelemetryConfig;

/// Everything the drills read from their environment besides the `clinic` tree.
#[derive(Debug)]
pub struct Settings {
    pub telemetry: TelemetryConfig,
    /// `RUST_LOG` as set (the bench's processes default to `warn`).
    pub rust_log: Option<String>,
    /// `CLINIC_BENCH_DATABASE_URL`: the bench server child's database.
    pub bench_database_url: Option<String>,
    /// `CLINIC_BENCH_DISPATCHER_BIN`: the dispatcher Lambda binary of the bench's Lambda section.
    pub dispatcher_bin: Option<String>,
    /// `CLINIC_CHAOS_FAIL_EVENT` / `CLINIC_CHAOS_FAIL_LISTENER`: the chaos dispatcher child's planted
    /// failure.
    pub chaos_fail_event: Option<String>,
    pub chaos_fail_listener: Option<String>,
    /// `CLINIC_CHAOS_TRANSPORT` (`sqs`: the dispatcher child publishes to SQS, with the SQS settings).
    pub chaos_sqs: Option<Result<clinic_sqs::SqsConfig, ConfigError>>,
}

impl Settings {
    pub fn read(env: &Env) -> Settings {
        let sqs = env.var(crate::chaos::TRANSPORT_VAR).as_deref() == Some("sqs");
        Settings {
            telemetry: TelemetryConfig::read(env),
            rust_log: env.var("RUST_LOG"),
            bench_database_url: env.var("CLINIC_BENCH_DATABASE_URL"),
            dispatcher_bin: env.var("CLINIC_BENCH_DISPATCHER_BIN"),
            chaos_fail_event: env.var(crate::chaos::FAIL_EVENT_VAR),
            chaos_fail_listener: env.var(crate::chaos::FAIL_LISTENER_VAR),
            chaos_sqs: sqs.then(|| clinic_sqs::SqsConfig::read(env)),
        }
    }
}

static SETTINGS: OnceLock<Settings> = OnceLock::new();

/// Installs the process's settings (`main`, once, first).
pub fn install(settings: Settings) {
    let _ = SETTINGS.set(settings);
}

/// The installed settings.
///
/// # Panics
/// When `main` did not install them: a programming error.
pub fn current() -> &'static Settings {
    SETTINGS.get().expect("settings::install runs first, in main")
}
