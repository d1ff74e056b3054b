//! The HTTP API's settings ([`ApiConfig`]): how callers are authenticated, the keys that seal cursors
//! and tag correlation ids, the readiness cache and where webhook endpoints may point. Read once by
//! the `main` that serves the router (the API Lambda, `clinic dev`, the drills); nothing below reads
//! the environment again.

use std::time::Duration;

use clinic_core::config::{bounded, required, var, ConfigError};
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
    pub fn from_env() -> Result<Self, ConfigError> {
        Ok(Self {
            cursor: required("CLINIC_CURSOR_KEY_SECRET_ARN")?,
            correlation: var("CLINIC_CORRELATION_KEY_SECRET_ARN"),
            unsubscribe: var(UNSUBSCRIBE_KEY_SECRET_ARN),
        })
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
    /// ([`KeyArns`]; the cursor and correlation keys at least 16 characters).
    pub fn lambda_from_env(keys: LambdaKeys) -> Result<Self, ConfigError> {
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
            readiness: readiness()?,
            subject_claim: var("CLINIC_SUBJECT_CLAIM").unwrap_or_else(|| "sub".into()),
            webhook_egress: clinic_core::webhooks::guard::Egress::default(),
            workspaces: Default::default(),
            webhook_key: keys.webhook,
            unsubscribe,
        })
    }

    /// Local: `CLINIC_JWT_SECRET` verifies bearer tokens (and signs cursors unless `CLINIC_CURSOR_KEY`);
    /// `webhook_key` is the local key (the caller loaded it from the data folder).
    pub fn local(
        jwt_secret: &str,
        webhook_key: clinic_core::webhooks::secret_box::WebhookKey,
    ) -> Result<Self, ConfigError> {
        let cursor_key = match var("CLINIC_CURSOR_KEY") {
            Some(_) => cursor_key()?,
            None => jwt_secret.as_bytes().to_vec(),
        };
        let auth = AuthConfig::Hs256 { secret: jwt_secret.as_bytes().to_vec() };
        let correlation = correlation_keys(&cursor_key)?;
        let webhook_egress = clinic_core::webhooks::WebhookConfig::from_env(true)?.egress;
        let unsubscribe =
            clinic_core::delivery::unsubscribe::UnsubscribeKeys::local_from_env(jwt_secret.as_bytes())?;
        Ok(Self {
            auth,
            cursor_key,
            correlation,
            readiness: readiness()?,
            subject_claim: "sub".into(),
            webhook_egress,
            workspaces: Default::default(),
            webhook_key: Some(webhook_key),
            unsubscribe: Some(unsubscribe),
        })
    }
}

/// `CLINIC_READINESS_INTERVAL_SECS` (default 10, 1–300): how long a readiness answer is reused.
fn readiness() -> Result<crate::readiness::Readiness, ConfigError> {
    let seconds = bounded("CLINIC_READINESS_INTERVAL_SECS", 10, 1..=300)?;
    Ok(crate::readiness::Readiness::new(Duration::from_secs(seconds)))
}

fn cursor_key() -> Result<Vec<u8>, ConfigError> {
    secret("CLINIC_CURSOR_KEY", required("CLINIC_CURSOR_KEY")?)
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

/// `CLINIC_CORRELATION_KEY` (at least 16 characters; unset → derived from the cursor key) and, during
/// a rotation, `CLINIC_CORRELATION_KEY_PREVIOUS`, still accepted but no longer issued.
fn correlation_keys(cursor_key: &[u8]) -> Result<crate::correlation::CorrelationKeys, ConfigError> {
    let current = match var("CLINIC_CORRELATION_KEY") {
        Some(key) => secret("CLINIC_CORRELATION_KEY", key)?,
        None => cursor_key.to_vec(),
    };
    let previous = var("CLINIC_CORRELATION_KEY_PREVIOUS")
        .map(|key| secret("CLINIC_CORRELATION_KEY_PREVIOUS", key))
        .transpose()?;
    Ok(crate::correlation::CorrelationKeys::new(&current, previous.as_deref()))
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
        let before = ApiConfig::lambda_from_env(keys(Some(("correlation-key-old-0123", None)))).unwrap();
        let issued = before.correlation.issue(workspace, id);
        let after = ApiConfig::lambda_from_env(keys(Some((
            "correlation-key-new-0123",
            Some("correlation-key-old-0123"),
        ))))
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
        let derived = ApiConfig::lambda_from_env(keys(None)).unwrap();
        assert_eq!(derived.correlation.verify(workspace, &issued), None);
        // A short secret is refused, naming the setting and never the value.
        let mut short = keys(None);
        short.cursor = "tiny".into();
        let error = ApiConfig::lambda_from_env(short).unwrap_err().to_string();
        assert!(error.contains("CLINIC_CURSOR_KEY_SECRET_ARN") && !error.contains("tiny"), "{error}");
    }
}
