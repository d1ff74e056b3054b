//! Secrets Manager at start-up: what the Lambdas read by ARN instead of finding it in their
//! environment (DESIGN §6c, docs/secret-rotation.md), and the database login they use.
//!
//! - [`iam::IamDbAuth`]: IAM database authentication, a token made for each connection (the
//!   deployed default; no password exists).
//! - [`DbLoginSecret`]: the database login (`{"username", "password"}`, the RDS secret shape), a
//!   [`LoginSource`] that `clinic_core::db::login` reads at start-up and again when PostgreSQL
//!   refuses the password (a rotation needs no restart).
//! - [`Secrets::read`]: one secret string by ARN (the cursor and correlation keys).
//! - [`Secrets::read_versions`]: the `AWSCURRENT` and `AWSPREVIOUS` versions of a secret: the
//!   correlation key and the one-click unsubscribe key ([`unsubscribe_keys`]; the previous one is
//!   still accepted) and the webhook sealing keyring
//!   ([`webhook_key`]: the previous key still opens values sealed before a rotation).
//!
//! Invariants:
//! - Only ARNs live in the environment; the values live in this process's memory only. No error of
//!   this crate carries a secret's value (the ARN and the service's error code at most).
//! - Every call is bounded by the client's timeouts ([`timeouts`]): a start-up never hangs on it.
//! - Nothing here reads the environment; a `main` passes the ARNs and the optional endpoint.

use std::time::Duration;

use aws_config::timeout::TimeoutConfig;
use aws_sdk_secretsmanager::error::ProvideErrorMetadata;
use clinic_core::config::{DatabaseConfig, DbAuth};
use clinic_core::db::login::{BoxFuture, Login, LoginError, LoginSource};
use clinic_core::db::DbLogin;
use clinic_core::delivery::unsubscribe::UnsubscribeKeys;
use clinic_core::webhooks::secret_box::WebhookKey;

pub mod iam;
pub mod kms;

/// Client timeouts: a connection within 3 s, one attempt within 5 s, the whole call within 12 s.
pub fn timeouts() -> TimeoutConfig {
    TimeoutConfig::builder()
        .connect_timeout(Duration::from_secs(3))
        .operation_attempt_timeout(Duration::from_secs(5))
        .operation_timeout(Duration::from_secs(12))
        .build()
}

/// Why a secret could not be read (its ARN and the service's code; never its value).
#[derive(Debug, Clone, thiserror::Error)]
pub enum SecretError {
    #[error("secret {arn}: {code}")]
    Read { arn: String, code: String },
    #[error("secret {arn}: {message}")]
    Invalid { arn: String, message: &'static str },
    #[error("{0}")]
    Login(LoginError),
}

/// The usual AWS configuration with [`timeouts`]; `endpoint` overrides the services' address
/// (tests: moto).
pub async fn load_sdk(endpoint: Option<&str>) -> aws_config::SdkConfig {
    let mut loader = aws_config::defaults(aws_config::BehaviorVersion::latest()).timeout_config(timeouts());
    if let Some(endpoint) = endpoint {
        loader = loader.endpoint_url(endpoint);
    }
    loader.load().await
}

/// A Secrets Manager client.
#[derive(Debug, Clone)]
pub struct Secrets {
    client: aws_sdk_secretsmanager::Client,
    sdk: aws_config::SdkConfig,
}

impl Secrets {
    /// The usual AWS configuration with [`timeouts`]; `endpoint` overrides the service's address
    /// (tests: moto).
    pub async fn connect(endpoint: Option<&str>) -> Secrets {
        Secrets::from_sdk(&load_sdk(endpoint).await)
    }

    /// A client on an already loaded configuration (tests: moto with fixed credentials).
    pub fn from_sdk(sdk: &aws_config::SdkConfig) -> Secrets {
        Secrets { client: aws_sdk_secretsmanager::Client::new(sdk), sdk: sdk.clone() }
    }

    /// The SDK configuration it was made from (region, credentials, timeouts, endpoint): what the
    /// other services a process reads at start-up (IAM tokens, KMS) are made from too.
    pub fn sdk(&self) -> &aws_config::SdkConfig {
        &self.sdk
    }

    pub fn client(&self) -> &aws_sdk_secretsmanager::Client {
        &self.client
    }

    /// The `AWSCURRENT` string of `arn`.
    pub async fn read(&self, arn: &str) -> Result<String, SecretError> {
        self.read_stage(arn, "AWSCURRENT").await?.ok_or_else(|| SecretError::Invalid {
            arn: arn.to_owned(),
            message: "has no current string value",
        })
    }

    /// The `AWSCURRENT` string and, when the secret was rotated, the `AWSPREVIOUS` one.
    pub async fn read_versions(&self, arn: &str) -> Result<(String, Option<String>), SecretError> {
        let current = self.read(arn).await?;
        let previous = self.read_stage(arn, "AWSPREVIOUS").await?;
        Ok((current, previous))
    }

    /// The string of `arn` at `stage`; `None` when no version carries that label.
    async fn read_stage(&self, arn: &str, stage: &str) -> Result<Option<String>, SecretError> {
        let answer = self.client.get_secret_value().secret_id(arn).version_stage(stage).send().await;
        match answer {
            Ok(value) => Ok(value.secret_string),
            Err(error) => {
                let code = error.code().unwrap_or("unreachable").to_owned();
                // A secret that was never rotated has no AWSPREVIOUS version.
                if stage != "AWSCURRENT" && code == "ResourceNotFoundException" {
                    return Ok(None);
                }
                Err(SecretError::Read { arn: arn.to_owned(), code })
            }
        }
    }
}

/// The database login in a secret of the RDS shape: JSON with `username` and `password` (other
/// fields, such as `host`, are ignored: the connection string names the server).
#[derive(Debug, Clone)]
pub struct DbLoginSecret {
    secrets: Secrets,
    arn: String,
}

impl DbLoginSecret {
    pub fn new(secrets: Secrets, arn: impl Into<String>) -> DbLoginSecret {
        DbLoginSecret { secrets, arn: arn.into() }
    }
}

#[derive(serde::Deserialize)]
struct LoginFields {
    username: String,
    password: String,
}

/// Parses the RDS secret shape (errors name the ARN, never the text).
pub fn parse_login(arn: &str, text: &str) -> Result<Login, SecretError> {
    let fields: LoginFields = serde_json::from_str(text).map_err(|_| SecretError::Invalid {
        arn: arn.to_owned(),
        message: "must be JSON with string fields `username` and `password`",
    })?;
    if fields.username.is_empty() || fields.password.is_empty() {
        return Err(SecretError::Invalid {
            arn: arn.to_owned(),
            message: "`username` and `password` must not be empty",
        });
    }
    Ok(Login::new(fields.username, fields.password))
}

impl LoginSource for DbLoginSecret {
    fn fetch(&self) -> BoxFuture<'_, Result<Login, LoginError>> {
        Box::pin(async move {
            let text = self.secrets.read(&self.arn).await.map_err(|e| LoginError(e.to_string()))?;
            parse_login(&self.arn, &text).map_err(|e| LoginError(e.to_string()))
        })
    }
}

/// The database login of `arn`, read now (start-up) and again when PostgreSQL refuses it.
pub async fn database_login(secrets: &Secrets, arn: &str) -> Result<DbLogin, LoginError> {
    DbLogin::start(DbLoginSecret::new(secrets.clone(), arn)).await
}

/// The webhook sealing keyring of `arn`: its current version seals, its previous one (after a
/// rotation) still opens until the rows are re-sealed.
pub async fn webhook_key(secrets: &Secrets, arn: &str) -> Result<WebhookKey, SecretError> {
    let (current, previous) = secrets.read_versions(arn).await?;
    WebhookKey::from_secret_text(&current, previous.as_deref())
        .map_err(|_| SecretError::Invalid { arn: arn.to_owned(), message: "is not a usable webhook key" })
}

/// The one-click unsubscribe keys of `arn`: its current version signs and verifies, its previous one
/// (after a rotation) still verifies the links of emails sent before it.
pub async fn unsubscribe_keys(secrets: &Secrets, arn: &str) -> Result<UnsubscribeKeys, SecretError> {
    let (current, previous) = secrets.read_versions(arn).await?;
    UnsubscribeKeys::from_secrets("CLINIC_UNSUBSCRIBE_KEY_SECRET_ARN", &current, previous.as_deref())
        .map_err(|_| SecretError::Invalid { arn: arn.to_owned(), message: "must be at least 16 characters" })
}

/// The unsubscribe keys of `arn` when one is configured (a sender's start-up), read through a
/// client of its own; `None` without one.
pub async fn unsubscribe_keys_at(
    arn: Option<&str>,
    endpoint: Option<&str>,
) -> Result<Option<UnsubscribeKeys>, SecretError> {
    match arn {
        Some(arn) => unsubscribe_keys(&Secrets::connect(endpoint).await, arn).await.map(Some),
        None => Ok(None),
    }
}

/// The database login as `auth` says: an IAM token per connection, or the secret's login (read
/// now and again when PostgreSQL refuses it); `None` when the URL holds the login.
pub async fn database_login_as(
    secrets: &Secrets,
    database: &DatabaseConfig,
) -> Result<Option<DbLogin>, SecretError> {
    match &database.auth {
        DbAuth::Url => Ok(None),
        DbAuth::Iam { user } => {
            let tokens =
                iam::IamDbAuth::from_sdk(secrets.sdk(), &database.url, database.ca_file.as_deref(), user)
                    .map_err(SecretError::Login)?;
            DbLogin::start(tokens).await.map(Some).map_err(SecretError::Login)
        }
        DbAuth::Secret { arn } => database_login(secrets, arn)
            .await
            .map(Some)
            .map_err(|error| SecretError::Read { arn: arn.to_owned(), code: error.0 }),
    }
}

/// Where a process's webhook keys come from (each optional): the keyring's Secrets Manager secret
/// (`CLINIC_WEBHOOK_KEY_SECRET_ARN`: seals without a key service, else opens older values only) and
/// the KMS key that seals (`CLINIC_WEBHOOK_KMS_KEY_ID`; the deployed default).
#[derive(Debug, Clone, Default)]
pub struct WebhookKeySources {
    pub keyring_arn: Option<String>,
    pub kms_key_id: Option<String>,
}

impl WebhookKeySources {
    /// `CLINIC_WEBHOOK_KEY_SECRET_ARN` and `CLINIC_WEBHOOK_KMS_KEY_ID` (a `main` calls this).
    pub fn read_settings(env: &clinic_core::config::Env) -> WebhookKeySources {
        use clinic_core::webhooks::secret_box::{KEY_SECRET_ARN_VAR, KMS_KEY_VAR};
        WebhookKeySources { keyring_arn: env.var(KEY_SECRET_ARN_VAR), kms_key_id: env.var(KMS_KEY_VAR) }
    }

    fn is_empty(&self) -> bool {
        self.keyring_arn.is_none() && self.kms_key_id.is_none()
    }

    /// The webhook keys these sources name; `None` when they name none (this process seals and
    /// opens nothing).
    pub async fn read(&self, secrets: &Secrets) -> Result<Option<WebhookKey>, SecretError> {
        let ring = match &self.keyring_arn {
            Some(arn) => Some(webhook_key(secrets, arn).await?),
            None => None,
        };
        let service = self.kms_key_id.as_ref().map(|id| {
            std::sync::Arc::new(kms::KmsKeys::new(secrets.sdk(), id))
                as std::sync::Arc<dyn clinic_core::webhooks::secret_box::KeyService>
        });
        Ok(match (ring, service) {
            (ring, None) => ring,
            (Some(ring), Some(service)) => Some(ring.with_service(service)),
            (None, Some(service)) => Some(WebhookKey::service_only(service)),
        })
    }
}

/// What every Lambda may need at start-up, each only when configured (at once): the database
/// login ([`database_login_as`]) and the webhook keys ([`WebhookKeySources`]). Neither: no AWS call
/// at all. `endpoint` overrides the services' address (`CLINIC_AWS_ENDPOINT`: an emulator).
#[derive(Debug, Default)]
pub struct StartupSecrets {
    pub login: Option<DbLogin>,
    pub webhook_key: Option<WebhookKey>,
}

impl StartupSecrets {
    pub async fn read(
        database: &DatabaseConfig,
        webhook: &WebhookKeySources,
        endpoint: Option<&str>,
    ) -> Result<StartupSecrets, SecretError> {
        if database.auth == DbAuth::Url && webhook.is_empty() {
            return Ok(StartupSecrets::default());
        }
        StartupSecrets::read_with(&Secrets::connect(endpoint).await, database, webhook).await
    }

    /// [`StartupSecrets::read`] with a client the caller made already (the API reads its own keys
    /// with it too): one SDK configuration per process.
    pub async fn read_with(
        secrets: &Secrets,
        database: &DatabaseConfig,
        webhook: &WebhookKeySources,
    ) -> Result<StartupSecrets, SecretError> {
        let login = database_login_as(secrets, database);
        let (login, webhook_key) = futures::future::try_join(login, webhook.read(secrets)).await?;
        Ok(StartupSecrets { login, webhook_key })
    }

    /// The pool of `database`, logging in as read (connections open lazily: no I/O here).
    pub fn connect_pool(
        &self,
        database: &DatabaseConfig,
        timeouts: &clinic_core::db::SessionTimeouts,
    ) -> Result<deadpool_postgres::Pool, clinic_core::db::DbError> {
        clinic_core::db::connect_pool_as(
            &database.url,
            database.pool_size,
            database.ca_file.as_deref(),
            self.login.as_ref(),
            timeouts,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_login_secret_is_parsed_without_showing_it() {
        let login = parse_login("arn:x", r#"{"username":"u","password":"p4ss","host":"h"}"#).unwrap();
        assert_eq!(login.user(), "u");
        let error = parse_login("arn:x", r#"{"username":"u","password":"s3cr3t-but-no-brace""#).unwrap_err();
        assert!(!error.to_string().contains("s3cr3t"), "{error}");
        assert!(parse_login("arn:x", r#"{"username":"u","password":""}"#).is_err());
    }
}
