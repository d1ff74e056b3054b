//! The HTTP API's settings ([`ApiConfig`]): how callers are authenticated, the keys that seal cursors
//! and tag correlation ids, the readiness cache and where webhook endpoints may point. Read once by
//! the `main` that serves the router (the API Lambda, `clinic dev`, the drills); nothing below reads
//! the environment again.

use std::time::Duration;

use clinic_core::config::{ConfigError, Env};
use clinic_core::delivery::unsubscribe::KEY_SECRET_ARN_VAR as UNSUBSCRIBE_KEY_SECRET_ARN;

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
    pub correlation: crate::correlation::CorrelationKeys,
    /// `GET /readyz`'s cache: at most one database check per interval per process
    /// (`CLINIC_READINESS_INTERVAL_SECS`, default 10, 1–300).
    pub readiness: crate::readiness::Readiness,
    /// The verified claim that names the caller (`CLINIC_SUBJECT_CLAIM`, default `sub`): a ULID or a
    /// UUID. Only read from API Gateway's claims; local tokens always use `sub`.
    pub subject_claim: String,
    /// Where webhook endpoints may point (checked when an endpoint is saved): public https, plus
    /// loopback http only locally with `CLINIC_WEBHOOKS_ALLOW_LOOPBACK_HTTP=1`.
    pub webhook_egress: clinic_core::webhooks::guard::Egress,
    /// The workspaces known to exist: a caller naming another one is refused (cached per process).
    pub workspaces: crate::auth::KnownWorkspaces,
    /// Seals webhook signing secrets on create and rotate (in Lambda the KMS key of
    /// `CLINIC_WEBHOOK_KMS_KEY_ID`, encrypt only; locally the data folder's key file;
    /// `clinic_core::webhooks::secret_box`). `None` (a Lambda without the setting): creating or
    /// rotating an endpoint answers 409, nothing is stored.
    pub webhook_key: Option<clinic_core::webhooks::secret_box::WebhookKey>,
    /// Verifies the one-click unsubscribe tokens of emails (`POST /v1/unsubscribe/{token}`): in
    /// Lambda the secret of `CLINIC_UNSUBSCRIBE_KEY_SECRET_ARN` (its previous version still verifies);
    /// locally `CLINIC_UNSUBSCRIBE_KEY`, else derived from the JWT secret. `None`: every token is
    /// refused.
    pub unsubscribe: Option<clinic_core::delivery::unsubscribe::UnsubscribeKeys>,
    /// The dispatcher's `CLINIC_DISPATCH_MAX_ATTEMPTS` as this process's settings read it (the
    /// operator overview shows it); `None` when the dispatch settings do not parse.
    pub outbox_max_attempts: Option<i32>,
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

/// Where the API Lambda's keys live: Secrets Manager ARNs (never the keys) from its environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyArns {
    /// `CLINIC_CURSOR_KEY_SECRET_ARN` (required): the cursor key.
    pub cursor: String,
    /// `CLINIC_CORRELATION_KEY_SECRET_ARN`: the correlation key (its previous version is still
    /// accepted after a rotation); unset → derived from the cursor key.
    pub correlation: Option<String>,
    /// `CLINIC_UNSUBSCRIBE_KEY_SECRET_ARN`: the one-click unsubscribe key (its previous version is
    /// still accepted after a rotation); unset → unsubscribe links are refused.
    pub unsubscribe: Option<String>,
}

impl KeyArns {
    pub fn read(env: &Env) -> Result<Self, ConfigError> {
        Ok(Self {
            cursor: env.required("CLINIC_CURSOR_KEY_SECRET_ARN")?,
            correlation: env.var("CLINIC_CORRELATION_KEY_SECRET_ARN"),
            unsubscribe: env.var(UNSUBSCRIBE_KEY_SECRET_ARN),
        })
    }
}

/// What the API reads from its environment besides its keys (the Lambda's and `clinic dev`'s alike).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiSettings {
    /// `CLINIC_READINESS_INTERVAL_SECS` (default 10, 1–300): how long a readiness answer is reused.
    pub readiness_interval: Duration,
    /// `CLINIC_SUBJECT_CLAIM` (default `sub`; read in Lambda only, local tokens always use `sub`).
    pub subject_claim: String,
    /// The dispatcher's `CLINIC_DISPATCH_MAX_ATTEMPTS` as this process reads it (the operator
    /// overview shows it); `None` when the dispatch settings do not parse.
    pub outbox_max_attempts: Option<i32>,
}

impl ApiSettings {
    /// The Lambda's: every field from `env`.
    pub fn read_lambda(env: &Env) -> Result<Self, ConfigError> {
        Ok(Self {
            subject_claim: env.var("CLINIC_SUBJECT_CLAIM").unwrap_or_else(|| "sub".into()),
            ..Self::read_local(env)?
        })
    }

    /// A local process's (`clinic dev`): the subject claim is always `sub`.
    pub fn read_local(env: &Env) -> Result<Self, ConfigError> {
        let seconds = env.bounded("CLINIC_READINESS_INTERVAL_SECS", 10, 1..=300)?;
        Ok(Self {
            readiness_interval: Duration::from_secs(seconds),
            subject_claim: "sub".into(),
            outbox_max_attempts: clinic_core::dispatch::DispatchConfig::read(env)
                .ok()
                .map(|config| config.max_attempts),
        })
    }
}

/// The local keys and egress rule (`clinic dev`, never read in Lambda), checked when read; unset
/// keys are derived from the JWT secret by [`ApiConfig::local`].
#[derive(Clone)]
pub struct LocalKeys {
    /// `CLINIC_CURSOR_KEY` (at least 16 characters).
    pub cursor: Option<Vec<u8>>,
    /// `CLINIC_CORRELATION_KEY` and `CLINIC_CORRELATION_KEY_PREVIOUS` (at least 16 characters each).
    pub correlation: Option<Vec<u8>>,
    pub correlation_previous: Option<Vec<u8>>,
    /// `CLINIC_UNSUBSCRIBE_KEY` (and its previous version).
    pub unsubscribe: Option<clinic_core::delivery::unsubscribe::UnsubscribeKeys>,
    /// `CLINIC_WEBHOOKS_ALLOW_LOOPBACK_HTTP` and the other webhook settings' egress rule.
    pub webhook_egress: clinic_core::webhooks::guard::Egress,
}

impl std::fmt::Debug for LocalKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalKeys").field("webhook_egress", &self.webhook_egress).finish_non_exhaustive()
    }
}

impl LocalKeys {
    pub fn read(env: &Env) -> Result<Self, ConfigError> {
        let key = |name: &'static str| env.var(name).map(|key| secret(name, key)).transpose();
        Ok(Self {
            cursor: key("CLINIC_CURSOR_KEY")?,
            correlation: key("CLINIC_CORRELATION_KEY")?,
            correlation_previous: key("CLINIC_CORRELATION_KEY_PREVIOUS")?,
            unsubscribe: clinic_core::delivery::unsubscribe::UnsubscribeKeys::read_local(env)?,
            webhook_egress: clinic_core::webhooks::WebhookConfig::read(env, true)?.egress,
        })
    }
}

impl Default for LocalKeys {
    /// As read from an empty environment: every key derived from the JWT secret.
    fn default() -> Self {
        Self::read(&Env::default()).expect("the defaults are valid")
    }
}

/// The keys a Lambda's `main` read from Secrets Manager at start-up ([`KeyArns`]).
pub struct LambdaKeys {
    pub cursor: String,
    /// The correlation key's current and previous versions.
    pub correlation: Option<(String, Option<String>)>,
    pub webhook: Option<clinic_core::webhooks::secret_box::WebhookKey>,
    /// The unsubscribe key's current and previous versions.
    pub unsubscribe: Option<(String, Option<String>)>,
}

impl ApiConfig {
    /// Lambda: claims from API Gateway; the keys were read from Secrets Manager by the `main`
    /// ([`KeyArns`]; the cursor and correlation keys at least 16 characters); the rest from `env`.
    pub fn lambda(settings: &ApiSettings, keys: LambdaKeys) -> Result<Self, ConfigError> {
        let cursor_key = secret("CLINIC_CURSOR_KEY_SECRET_ARN", keys.cursor)?;
        let correlation = match keys.correlation {
            Some((current, previous)) => {
                let current = secret("CLINIC_CORRELATION_KEY_SECRET_ARN", current)?;
                let previous =
                    previous.map(|key| secret("CLINIC_CORRELATION_KEY_SECRET_ARN", key)).transpose()?;
                crate::correlation::CorrelationKeys::new(&current, previous.as_deref())
            }
            None => crate::correlation::CorrelationKeys::new(&cursor_key, None),
        };
        let unsubscribe = keys
            .unsubscribe
            .map(|(current, previous)| {
                clinic_core::delivery::unsubscribe::UnsubscribeKeys::from_secrets(
                    UNSUBSCRIBE_KEY_SECRET_ARN,
                    &current,
                    previous.as_deref(),
                )
            })
            .transpose()?;
        Ok(Self {
            auth: AuthConfig::ApiGatewayClaims,
            correlation,
            cursor_key,
            readiness: crate::readiness::Readiness::new(settings.readiness_interval),
            subject_claim: settings.subject_claim.clone(),
            webhook_egress: clinic_core::webhooks::guard::Egress::default(),
            workspaces: Default::default(),
            webhook_key: keys.webhook,
            unsubscribe,
            outbox_max_attempts: settings.outbox_max_attempts,
        })
    }

    /// Local: `jwt_secret` (`CLINIC_JWT_SECRET`) verifies bearer tokens and stands in for every
    /// key `keys` does not set (the cursor key; the correlation key derives from the cursor key; the
    /// unsubscribe key derives from it); `webhook_key` is the local key (the caller loaded it from
    /// the data folder).
    pub fn local(
        settings: &ApiSettings,
        keys: &LocalKeys,
        jwt_secret: &str,
        webhook_key: clinic_core::webhooks::secret_box::WebhookKey,
    ) -> Result<Self, ConfigError> {
        let cursor_key = keys.cursor.clone().unwrap_or_else(|| jwt_secret.as_bytes().to_vec());
        let auth = AuthConfig::Hs256 { secret: jwt_secret.as_bytes().to_vec() };
        let correlation = crate::correlation::CorrelationKeys::new(
            keys.correlation.as_deref().unwrap_or(&cursor_key),
            keys.correlation_previous.as_deref(),
        );
        let unsubscribe = keys.unsubscribe.clone().unwrap_or_else(|| {
            clinic_core::delivery::unsubscribe::UnsubscribeKeys::new(jwt_secret.as_bytes(), None)
        });
        Ok(Self {
            auth,
            cursor_key,
            correlation,
            readiness: crate::readiness::Readiness::new(settings.readiness_interval),
            subject_claim: "sub".into(),
            webhook_egress: keys.webhook_egress,
            workspaces: Default::default(),
            webhook_key: Some(webhook_key),
            unsubscribe: Some(unsubscribe),
            outbox_max_attempts: settings.outbox_max_attempts,
        })
    }
}

/// A secret of at least 16 characters (its value is never shown in the error; `name` is the setting
/// that names it).
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

#[cfg(test)]
mod tests {
    use clinic_core::ids::{CorrelationId, WorkspaceId};

    use super::*;

    fn keys(correlation: Option<(&str, Option<&str>)>) -> LambdaKeys {
        LambdaKeys {
            cursor: "cursor-key-from-the-secret-0123".into(),
            correlation: correlation.map(|(current, previous)| (current.into(), previous.map(Into::into))),
            webhook: None,
            unsubscribe: None,
        }
    }

    #[test]
    fn the_lambda_keys_come_from_the_secrets_and_the_previous_correlation_key_still_verifies() {
        let workspace = Some(WorkspaceId::generate());
        let id = CorrelationId::generate();
        let before = ApiConfig::lambda(
            &ApiSettings::read_lambda(&Env::default()).unwrap(),
            keys(Some(("correlation-key-old-0123", None))),
        )
        .unwrap();
        let issued = before.correlation.issue(workspace, id);
        let after = ApiConfig::lambda(
            &ApiSettings::read_lambda(&Env::default()).unwrap(),
            keys(Some(("correlation-key-new-0123", Some("correlation-key-old-0123")))),
        )
        .unwrap();
        assert_eq!(
            after.correlation.verify(workspace, &issued),
            Some(id),
            "the previous version is accepted"
        );
        assert_ne!(after.correlation.issue(workspace, id), issued, "the current version issues");
        assert_eq!(after.cursor_key, b"cursor-key-from-the-secret-0123");
        assert!(after.webhook_key.is_none());
        // Without a correlation secret the key is derived from the cursor key.
        let derived =
            ApiConfig::lambda(&ApiSettings::read_lambda(&Env::default()).unwrap(), keys(None)).unwrap();
        assert_eq!(derived.correlation.verify(workspace, &issued), None);
        // A short secret is refused, naming the setting and never the value.
        let mut short = keys(None);
        short.cursor = "tiny".into();
        let error = ApiConfig::lambda(&ApiSettings::read_lambda(&Env::default()).unwrap(), short)
            .unwrap_err()
            .to_string();
        assert!(error.contains("CLINIC_CURSOR_KEY_SECRET_ARN") && !error.contains("tiny"), "{error}");
    }
}
