//! The dispatcher Lambda's settings: one tree of the existing config structs, read once by `main`
//! from the environment it captured ([`Settings::read`]).
//!
//! Invariants:
//! - Every environment variable this function uses is read here, once, at start-up; a bad value
//!   stops start-up with an error naming the variable. Nothing below `main` reads the environment.
//! - Conditional reads follow the environment: the sending settings only where `CLINIC_NOTIFIER` is
//!   set (docs/configuration.md lists every name, checked by the clinic CLI's documentation test).

use clinic_core::config::{ConfigError, DatabaseConfig, Env};
use clinic_core::db::SessionTimeouts;
use clinic_core::delivery::SenderSettings;
use clinic_core::dispatch::DispatchConfig;
use clinic_core::telemetry::emf::MetricsMode;
use clinic_core::telemetry::TelemetryConfig;
use clinic_core::webhooks::WebhookConfig;
use clinic_secrets::WebhookKeySources;
use clinic_sqs::{SqsConfig, SqsTimeouts};

use crate::{Housekeeping, Mode};

/// Everything the dispatcher Lambda reads from its environment.
#[derive(Debug, Clone)]
pub struct Settings {
    pub telemetry: TelemetryConfig,
    pub dispatch: DispatchConfig,
    /// One connection per batch in its mark, plus the claim's (default pool size).
    pub database: DatabaseConfig,
    pub db_timeouts: SessionTimeouts,
    pub sqs: SqsConfig,
    pub sqs_timeouts: SqsTimeouts,
    pub webhook_keys: WebhookKeySources,
    /// `CLINIC_AWS_ENDPOINT`: an emulator for Secrets Manager, SES and SNS.
    pub aws_endpoint: Option<String>,
    pub metrics: MetricsMode,
    /// The jobs' settings (no senders yet: `main` adds them once the secrets are read).
    pub housekeeping: Housekeeping,
    /// The `deliver` job's settings, where `CLINIC_NOTIFIER` is set.
    pub delivery: Option<SenderSettings>,
    /// The `webhooks` job's settings (never loopback in Lambda).
    pub webhooks: WebhookConfig,
    pub mode: Mode,
    /// `CLINIC_SCHEMA_BASE_URL` (checked; unset: the default).
    pub schema_base: Option<String>,
}

impl Settings {
    pub fn read(env: &Env) -> Result<Settings, ConfigError> {
        let dispatch = DispatchConfig::read(env)?;
        Ok(Settings {
            telemetry: TelemetryConfig::read(env),
            database: DatabaseConfig::read(env, dispatch.steps_in_flight + 1)?,
            db_timeouts: SessionTimeouts::read(env)?,
            sqs: SqsConfig::read(env)?,
            sqs_timeouts: SqsTimeouts::read(env)?,
            webhook_keys: WebhookKeySources::read_settings(env),
            aws_endpoint: env.var("CLINIC_AWS_ENDPOINT"),
            metrics: MetricsMode::read(env)?,
            housekeeping: Housekeeping::read(env)?,
            delivery: SenderSettings::read_lambda(env)?,
            webhooks: WebhookConfig::read(env, false)?,
            mode: Mode::read(env)?,
            schema_base: clinic_core::contract::read_schema_base(env)?,
            dispatch,
        })
    }
}
