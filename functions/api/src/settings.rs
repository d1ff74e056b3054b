//! The API Lambda's settings: one tree of the existing config structs, read once by `main` from the
//! environment it captured ([`Settings::read`]).
//!
//! Invariants:
//! - Every environment variable this function uses is read here, once, at start-up; a bad value
//!   stops start-up with an error naming the variable. Nothing below `main` reads the environment
//!   (docs/configuration.md lists every name, checked by the clinic CLI's documentation test).

use clinic_core::config::{ConfigError, DatabaseConfig, Env};
use clinic_core::db::SessionTimeouts;
use clinic_core::telemetry::TelemetryConfig;
use clinic_http::{ApiSettings, KeyArns};
use clinic_secrets::WebhookKeySources;

/// Everything the API Lambda reads from its environment.
#[derive(Debug, Clone)]
pub struct Settings {
    pub telemetry: TelemetryConfig,
    /// Default pool size 2.
    pub database: DatabaseConfig,
    pub db_timeouts: SessionTimeouts,
    /// Where the keys live (Secrets Manager ARNs).
    pub arns: KeyArns,
    /// The webhook keys: the KMS key that seals, and an older keyring where one is still configured.
    pub webhook_keys: WebhookKeySources,
    /// `CLINIC_AWS_ENDPOINT`: an emulator for Secrets Manager.
    pub aws_endpoint: Option<String>,
    pub api: ApiSettings,
    /// `CLINIC_SCHEMA_BASE_URL` (checked; unset: the default): the `dataschema` of the events the
    /// API writes.
    pub schema_base: Option<String>,
}

impl Settings {
    pub fn read(env: &Env) -> Result<Settings, ConfigError> {
        Ok(Settings {
            telemetry: TelemetryConfig::read(env),
            database: DatabaseConfig::read(env, 2)?,
            db_timeouts: SessionTimeouts::read(env)?,
            arns: KeyArns::read(env)?,
            webhook_keys: WebhookKeySources::read_settings(env),
            aws_endpoint: env.var("CLINIC_AWS_ENDPOINT"),
            api: ApiSettings::read_lambda(env)?,
            schema_base: clinic_core::contract::read_schema_base(env)?,
        })
    }
}
