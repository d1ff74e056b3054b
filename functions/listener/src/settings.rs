//! The listener Lambda's settings: one tree of the existing config structs, read once by `main` from
//! the environment it captured ([`Settings::read`]).
//!
//! Invariants:
//! - Every environment variable this function uses is read here, once, at start-up; a bad value
//!   stops start-up with an error naming the variable. Nothing below `main` reads the environment.
//! - Conditional reads follow the environment: the sending settings only where `CLINIC_NOTIFIER` is
//!   set (docs/configuration.md lists every name, checked by the clinic CLI's documentation test).

use clinic_core::config::{ConfigError, DatabaseConfig, Env};
use clinic_core::db::SessionTimeouts;
use clinic_core::delivery::SenderSettings;
use clinic_core::telemetry::emf::MetricsMode;
use clinic_core::telemetry::TelemetryConfig;
use clinic_core::webhooks::WebhookConfig;
use clinic_secrets::WebhookKeySources;

use crate::ListenerConfig;

/// Everything the listener Lambda reads from its environment.
#[derive(Debug, Clone)]
pub struct Settings {
    pub telemetry: TelemetryConfig,
    /// Default pool size 4.
    pub database: DatabaseConfig,
    pub db_timeouts: SessionTimeouts,
    pub webhook_keys: WebhookKeySources,
    /// `CLINIC_AWS_ENDPOINT`: an emulator for Secrets Manager, SES and SNS.
    pub aws_endpoint: Option<String>,
    /// Whether a rejected message prints its `Rejected` EMF line.
    pub metrics: MetricsMode,
    pub listener: ListenerConfig,
    /// The delivery fast path's settings, where `CLINIC_NOTIFIER` is set.
    pub delivery: Option<SenderSettings>,
    /// The first webhook attempts' settings (never loopback in Lambda).
    pub webhooks: WebhookConfig,
    /// `CLINIC_SCHEMA_BASE_URL` (checked; unset: the default).
    pub schema_base: Option<String>,
}

impl Settings {
    pub fn read(env: &Env) -> Result<Settings, ConfigError> {
        Ok(Settings {
            telemetry: TelemetryConfig::read(env),
            database: DatabaseConfig::read(env, 4)?,
            db_timeouts: SessionTimeouts::read(env)?,
            webhook_keys: WebhookKeySources::read_settings(env),
            aws_endpoint: env.var("CLINIC_AWS_ENDPOINT"),
            metrics: MetricsMode::read(env)?,
            listener: ListenerConfig::read(env)?,
            delivery: SenderSettings::read_lambda(env)?,
            webhooks: WebhookConfig::read(env, false)?,
            schema_base: clinic_core::contract::read_schema_base(env)?,
        })
    }
}
