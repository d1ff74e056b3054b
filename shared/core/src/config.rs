//! Configuration: environment variables, parsed once at start-up into typed values.
//!
//! Every variable has a documented default (docs/configuration.md) except the ones a deployment
//! must choose (`DATABASE_URL` in Lambda). A bad value stops start-up with an error naming the variable;
//! nothing is re-read later.

use std::time::Duration;

/// Why a configuration value was rejected.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{name} is required")]
    Missing { name: &'static str },
    #[error("{name}: {message} (got {value:?})")]
    Invalid { name: &'static str, value: String, message: String },
}

/// Reads an environment variable, treating an empty value as unset.
pub fn var(name: &'static str) -> Option<String> {
    std::env::var(name).ok().filter(|value| !value.trim().is_empty())
}

pub fn required(name: &'static str) -> Result<String, ConfigError> {
    var(name).ok_or(ConfigError::Missing { name })
}

/// Parses `name` with `FromStr`, or returns `default` when unset.
pub fn parsed<T>(name: &'static str, default: T) -> Result<T, ConfigError>
where
    T: std::str::FromStr,
    T::Err: std::fmt::Display,
{
    match var(name) {
        None => Ok(default),
        Some(value) => value.trim().parse().map_err(|e: T::Err| ConfigError::Invalid {
            name,
            value,
            message: e.to_string(),
        }),
    }
}

/// A whole number within `range`, or `default` when unset.
pub fn bounded(
    name: &'static str,
    default: u64,
    range: std::ops::RangeInclusive<u64>,
) -> Result<u64, ConfigError> {
    let value = parsed(name, default)?;
    if range.contains(&value) {
        Ok(value)
    } else {
        Err(ConfigError::Invalid {
            name,
            value: value.to_string(),
            message: format!("must be between {} and {}", range.start(), range.end()),
        })
    }
}

/// Database settings shared by every entry point.
#[derive(Debug, Clone)]
pub struct DatabaseConfig {
    pub url: String,
    pub pool_size: usize,
    pub ca_file: Option<String>,
}

impl DatabaseConfig {
    /// `DATABASE_URL` (required), `CLINIC_DB_POOL_SIZE` (default `default_pool`), `CLINIC_DB_CA_FILE`.
    pub fn from_env(default_pool: usize) -> Result<Self, ConfigError> {
        Ok(Self {
            url: required("DATABASE_URL")?,
            pool_size: bounded("CLINIC_DB_POOL_SIZE", default_pool as u64, 1..=256)? as usize,
            ca_file: var("CLINIC_DB_CA_FILE"),
        })
    }
}

/// How the API learns who is calling.
#[derive(Clone)]
pub enum AuthConfig {
    /// Behind API Gateway: its JWT authorizer verified the token; claims come from the request context.
    ApiGatewayClaims,
    /// Locally: the API verifies an HS256 bearer token itself.
    Hs256 { secret: Vec<u8> },
}

impl std::fmt::Debug for AuthConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AuthConfig::ApiGatewayClaims => f.write_str("ApiGatewayClaims"),
            AuthConfig::Hs256 { .. } => f.write_str("Hs256 { secret: <redacted> }"),
        }
    }
}

/// Settings of the HTTP API.
#[derive(Clone)]
pub struct ApiConfig {
    pub auth: AuthConfig,
    /// Signs pagination cursors so that a cursor the server did not issue is rejected.
    pub cursor_key: Vec<u8>,
    /// Tags the correlation ids the API issues (`CLINIC_CORRELATION_KEY`, else derived from the cursor
    /// key; `CLINIC_CORRELATION_KEY_PREVIOUS` during a rotation). Policy: docs/correlation.md.
    pub correlation: crate::http::correlation::CorrelationKeys,
    /// `GET /readyz`'s cache: at most one database check per interval per process
    /// (`CLINIC_READINESS_INTERVAL_SECS`, default 10, 1–300).
    pub readiness: crate::http::readiness::Readiness,
    /// The verified claim that names the caller (`CLINIC_SUBJECT_CLAIM`, default `sub`): a ULID or a
    /// UUID. Only read from API Gateway's claims; local tokens always use `sub`.
    pub subject_claim: String,
    /// Where webhook endpoints may point (checked when an endpoint is saved): public https, plus
    /// loopback http only locally with `CLINIC_WEBHOOKS_ALLOW_LOOPBACK_HTTP=1`.
    pub webhook_egress: crate::webhooks::guard::Egress,
    /// The workspaces known to exist: a caller naming another one is refused (cached per process).
    pub workspaces: crate::http::auth::KnownWorkspaces,
}

impl std::fmt::Debug for ApiConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiConfig")
            .field("auth", &self.auth)
            .field("readiness", &self.readiness)
            .field("subject_claim", &self.subject_claim)
            .finish_non_exhaustive()
    }
}

impl ApiConfig {
    /// Lambda: claims from API Gateway; `CLINIC_CURSOR_KEY` (at least 16 bytes) signs cursors.
    pub fn lambda_from_env() -> Result<Self, ConfigError> {
        let cursor_key = cursor_key()?;
        Ok(Self {
            auth: AuthConfig::ApiGatewayClaims,
            correlation: correlation_keys(&cursor_key)?,
            cursor_key,
            readiness: readiness()?,
            subject_claim: var("CLINIC_SUBJECT_CLAIM").unwrap_or_else(|| "sub".into()),
            webhook_egress: crate::webhooks::guard::Egress::default(),
            workspaces: Default::default(),
        })
    }

    /// Local: `CLINIC_JWT_SECRET` verifies bearer tokens (and signs cursors unless `CLINIC_CURSOR_KEY`).
    pub fn local(jwt_secret: &str) -> Result<Self, ConfigError> {
        let cursor_key = match var("CLINIC_CURSOR_KEY") {
            Some(_) => cursor_key()?,
            None => jwt_secret.as_bytes().to_vec(),
        };
        let auth = AuthConfig::Hs256 { secret: jwt_secret.as_bytes().to_vec() };
        let correlation = correlation_keys(&cursor_key)?;
        let webhook_egress = crate::webhooks::WebhookConfig::from_env(true)?.egress;
        Ok(Self {
            auth,
            cursor_key,
            correlation,
            readiness: readiness()?,
            subject_claim: "sub".into(),
            webhook_egress,
            workspaces: Default::default(),
        })
    }
}

/// `CLINIC_READINESS_INTERVAL_SECS` (default 10, 1–300): how long a readiness answer is reused.
fn readiness() -> Result<crate::http::readiness::Readiness, ConfigError> {
    let seconds = bounded("CLINIC_READINESS_INTERVAL_SECS", 10, 1..=300)?;
    Ok(crate::http::readiness::Readiness::new(Duration::from_secs(seconds)))
}

fn cursor_key() -> Result<Vec<u8>, ConfigError> {
    secret("CLINIC_CURSOR_KEY", required("CLINIC_CURSOR_KEY")?)
}

/// A secret of at least 16 characters (its value is never shown in the error).
fn secret(name: &'static str, key: String) -> Result<Vec<u8>, ConfigError> {
    if key.len() < 16 {
        return Err(ConfigError::Invalid {
            name,
            value: "<redacted>".into(),
            message: "must be at least 16 characters".into(),
        });
    }
    Ok(key.into_bytes())
}

/// `CLINIC_CORRELATION_KEY` (at least 16 characters; unset → derived from the cursor key) and, during
/// a rotation, `CLINIC_CORRELATION_KEY_PREVIOUS`, still accepted but no longer issued.
fn correlation_keys(cursor_key: &[u8]) -> Result<crate::http::correlation::CorrelationKeys, ConfigError> {
    let current = match var("CLINIC_CORRELATION_KEY") {
        Some(key) => secret("CLINIC_CORRELATION_KEY", key)?,
        None => cursor_key.to_vec(),
    };
    let previous = var("CLINIC_CORRELATION_KEY_PREVIOUS")
        .map(|key| secret("CLINIC_CORRELATION_KEY_PREVIOUS", key))
        .transpose()?;
    Ok(crate::http::correlation::CorrelationKeys::new(&current, previous.as_deref()))
}

/// Milliseconds from the environment as a `Duration`.
pub fn millis(
    name: &'static str,
    default: u64,
    range: std::ops::RangeInclusive<u64>,
) -> Result<Duration, ConfigError> {
    bounded(name, default, range).map(Duration::from_millis)
}
