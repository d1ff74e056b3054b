//! Configuration: environment variables, parsed once at start-up into typed values.
//!
//! Invariants:
//! - Every variable has a documented default (docs/configuration.md) except the ones a deployment
//!   must choose (`DATABASE_URL` in Lambda). A bad value stops start-up with an error naming the
//!   variable; nothing is re-read later.
//! - [`Env::capture`] is the library's only read of the process environment, and only a `main`
//!   calls it; each config struct's builder (`DispatchConfig::read(&Env)`, …) reads its variables
//!   from that snapshot, and each binary's `Settings::read` calls the builders it needs, once.
//! - A leaf: this module imports nothing from the rest of the crate.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::time::Duration;

/// Why a configuration value was rejected.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{name} is required")]
    Missing { name: &'static str },
    #[error("{name}: {message} (got {value:?})")]
    Invalid { name: &'static str, value: String, message: String },
}

/// A snapshot of the process environment, taken once by a `main` ([`Env::capture`], the only call
/// of `std::env::vars` in the library), with the typed getters every settings builder uses. It
/// records each name asked for, so a test can list the variables a binary reads
/// ([`Env::names_read`]). Tests build one with [`Env::from_pairs`].
#[derive(Debug, Default)]
pub struct Env {
    values: BTreeMap<String, String>,
    read: Mutex<BTreeSet<String>>,
}

impl Env {
    /// The process environment now (values that are not UTF-8 are read lossily).
    pub fn capture() -> Env {
        let values = std::env::vars_os()
            .map(|(name, value)| (name.to_string_lossy().into_owned(), value.to_string_lossy().into_owned()))
            .collect();
        Env { values, read: Mutex::default() }
    }

    /// An environment holding exactly `pairs` (tests).
    pub fn from_pairs<K: Into<String>, V: Into<String>>(pairs: impl IntoIterator<Item = (K, V)>) -> Env {
        let values = pairs.into_iter().map(|(name, value)| (name.into(), value.into())).collect();
        Env { values, read: Mutex::default() }
    }

    /// The same values with `name` set to `value` (tests: the variants that enable conditional reads).
    pub fn with(mut self, name: impl Into<String>, value: impl Into<String>) -> Env {
        self.values.insert(name.into(), value.into());
        self
    }

    /// Every name asked for so far, set or not.
    pub fn names_read(&self) -> BTreeSet<String> {
        self.read.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).clone()
    }

    /// A variable, treating an empty value as unset.
    pub fn var(&self, name: &str) -> Option<String> {
        self.read.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).insert(name.to_owned());
        self.values.get(name).filter(|value| !value.trim().is_empty()).cloned()
    }

    pub fn required(&self, name: &'static str) -> Result<String, ConfigError> {
        self.var(name).ok_or(ConfigError::Missing { name })
    }

    /// Parses `name` with `FromStr`, or returns `default` when unset.
    pub fn parsed<T>(&self, name: &'static str, default: T) -> Result<T, ConfigError>
    where
        T: std::str::FromStr,
        T::Err: std::fmt::Display,
    {
        match self.var(name) {
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
        &self,
        name: &'static str,
        default: u64,
        range: std::ops::RangeInclusive<u64>,
    ) -> Result<u64, ConfigError> {
        let value = self.parsed(name, default)?;
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

    /// Milliseconds within `range` as a `Duration`, or `default` when unset.
    pub fn millis(
        &self,
        name: &'static str,
        default: u64,
        range: std::ops::RangeInclusive<u64>,
    ) -> Result<Duration, ConfigError> {
        self.bounded(name, default, range).map(Duration::from_millis)
    }
}

/// Database settings shared by every entry point.
#[derive(Debug, Clone)]
pub struct DatabaseConfig {
    pub url: String,
    pub pool_size: usize,
    pub ca_file: Option<String>,
    /// Who logs in, when the URL does not say (AWS; see [`crate::db::login`]).
    pub auth: DbAuth,
}

/// How a process logs in to PostgreSQL (docs/secret-rotation.md).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DbAuth {
    /// As `DATABASE_URL` says (local runs and tests).
    Url,
    /// `CLINIC_DB_IAM_USER`: IAM database authentication as that user, a token generated for each
    /// connection (the deployed default; no password exists).
    Iam { user: String },
    /// `CLINIC_DB_SECRET_ARN`: the Secrets Manager secret holding the login (`username`,
    /// `password`), for clusters without IAM authentication.
    Secret { arn: String },
}

impl DbAuth {
    /// The secret's ARN, when the login is read from one.
    pub fn secret_arn(&self) -> Option<&str> {
        match self {
            DbAuth::Secret { arn } => Some(arn),
            DbAuth::Url | DbAuth::Iam { .. } => None,
        }
    }
}

impl DatabaseConfig {
    /// The root certificate(s) of the database's TLS when the connection string names no
    /// `sslrootcert`: `CLINIC_DB_CA_FILE`, else libpq's default `~/.postgresql/root.crt` (under
    /// `HOME`) when that file exists (see docs/configuration.md, "Database TLS").
    pub fn read_ca_file(env: &Env) -> Option<String> {
        env.var("CLINIC_DB_CA_FILE").or_else(|| {
            let path = std::path::Path::new(&env.var("HOME")?).join(".postgresql/root.crt");
            path.is_file().then(|| path.display().to_string())
        })
    }

    /// `DATABASE_URL` (required), `CLINIC_DB_POOL_SIZE` (default `default_pool`), `CLINIC_DB_CA_FILE`,
    /// and at most one of `CLINIC_DB_IAM_USER` and `CLINIC_DB_SECRET_ARN`.
    pub fn read(env: &Env, default_pool: usize) -> Result<Self, ConfigError> {
        let auth = match (env.var("CLINIC_DB_IAM_USER"), env.var("CLINIC_DB_SECRET_ARN")) {
            (None, None) => DbAuth::Url,
            (Some(user), None) => DbAuth::Iam { user },
            (None, Some(arn)) => DbAuth::Secret { arn },
            (Some(_), Some(arn)) => {
                return Err(ConfigError::Invalid {
                    name: "CLINIC_DB_SECRET_ARN",
                    value: arn,
                    message: "must not be set together with CLINIC_DB_IAM_USER: choose IAM authentication or the secret"
                        .into(),
                })
            }
        };
        Ok(Self {
            url: env.required("DATABASE_URL")?,
            pool_size: env.bounded("CLINIC_DB_POOL_SIZE", default_pool as u64, 1..=256)? as usize,
            ca_file: Self::read_ca_file(env),
            auth,
        })
    }
}
