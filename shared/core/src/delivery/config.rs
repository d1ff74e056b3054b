//! Delivery settings, parsed once from the environment (documented in docs/delivery.md).

use std::path::PathBuf;
use std::time::Duration;

use crate::config::{ConfigError, Env};
use crate::lease::rate::Pace;
use crate::lease::{Backoff, Jitter, RetryPolicy};

/// What happens to a delivery whose sender died after calling the provider and before marking the
/// row (`uncertain`: the provider may or may not have accepted it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UncertainPolicy {
    /// Send again, with the same idempotency key (the default: a missed cancellation notice or
    /// reminder is worse than a duplicate one).
    Resend,
    /// Leave it `uncertain` for an operator to `retry` or `discard`.
    Hold,
}

impl std::str::FromStr for UncertainPolicy {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        match text {
            "resend" => Ok(UncertainPolicy::Resend),
            "hold" => Ok(UncertainPolicy::Hold),
            _ => Err("expected `resend` or `hold`".into()),
        }
    }
}

/// The providers chosen with `CLINIC_NOTIFIER` (a comma-separated list).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotifierKind {
    /// Email through Amazon SES v2.
    Ses,
    /// SMS through Amazon SNS.
    Sns,
    /// Both channels as files under [`DeliveryConfig::file_dir`].
    File,
    /// Both channels accepted and logged (ids only); nothing leaves the process.
    Log,
}

impl NotifierKind {
    /// Parses `ses`, `sns`, `file`, `log` or a list such as `ses,sns`.
    pub fn parse_list(text: &str) -> Result<Vec<NotifierKind>, String> {
        let mut kinds = Vec::new();
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let kind = match part {
                "ses" => NotifierKind::Ses,
                "sns" => NotifierKind::Sns,
                "file" => NotifierKind::File,
                "log" => NotifierKind::Log,
                _ => return Err("expected a list of `ses`, `sns`, `file`, `log`".into()),
            };
            if !kinds.contains(&kind) {
                kinds.push(kind);
            }
        }
        if kinds.is_empty() {
            return Err("names no notifier".into());
        }
        Ok(kinds)
    }
}

/// Rows claimed per sender step by default: 5 × the 10 s provider timeout stays below the 60 s lease
/// ([`DeliveryConfig::validate`]).
pub const DEFAULT_BATCH: i64 = 5;

/// The longest wait for a provider's token by default (counted in [`DeliveryConfig::validate`]).
pub const PACE_WAIT: Duration = Duration::from_secs(1);

/// How the sender claims, retries and decides.
#[derive(Debug, Clone)]
pub struct DeliveryConfig {
    /// Rows claimed per step.
    pub batch: i64,
    /// How long a claim is held; a sender that has not marked by then is presumed dead.
    pub lease: Duration,
    /// Bound on each provider call (kept below the lease).
    pub provider_timeout: Duration,
    /// Attempts before a retryable failure becomes `dead`.
    pub max_attempts: i32,
    pub backoff: Backoff,
    pub uncertain: UncertainPolicy,
    /// The email sender identity (`From:`), e.g. `Clinic <no-reply@clinic.example>`.
    pub email_from: String,
    /// The SMS sender id (may be empty: the provider's default).
    pub sms_sender_id: String,
    pub notifiers: Vec<NotifierKind>,
    /// Where the file notifier writes.
    pub file_dir: PathBuf,
    /// How often an idle in-process sender looks for due rows.
    pub poll: Duration,
    /// The providers' shared rates (a token bucket each in PostgreSQL); a provider not listed is
    /// not paced (`file`, `log`).
    pub pace: Vec<Pace>,
    /// The longest a send waits for its provider's token before its row is held instead.
    pub pace_wait: Duration,
    /// After a throttling answer the provider runs at this share of its rate …
    pub throttle_factor: f64,
    /// … for this long.
    pub throttle_period: Duration,
    /// How a claim orders due rows: fair (always, in a deployment); oldest-first only for the
    /// bench's comparison (not read from the environment).
    pub claim_order: crate::lease::sql::ClaimOrder,
    /// Makes the one-click unsubscribe link of emails of optional kinds (RFC 8058); `None`: emails
    /// carry no link (no public base URL or no key is configured). Set by the `main`, which reads the
    /// key ([`super::unsubscribe::UnsubscribeLinks::configure`]).
    pub unsubscribe: Option<super::unsubscribe::UnsubscribeLinks>,
    /// `CLINIC_DELIVERY_REGION`: the region of the SES/SNS clients (unset: the AWS SDK's own
    /// environment decides).
    pub provider_region: Option<String>,
}

impl DeliveryConfig {
    /// The lease queue's retry policy for notifications: this backoff up to `max_attempts`.
    pub fn retry_policy(&self) -> RetryPolicy {
        RetryPolicy::backoff(self.backoff, self.max_attempts)
    }

    /// Defaults for a deployment with `notifiers`.
    pub fn with_notifiers(notifiers: Vec<NotifierKind>) -> Self {
        Self {
            batch: DEFAULT_BATCH,
            lease: Duration::from_secs(60),
            provider_timeout: Duration::from_secs(10),
            max_attempts: 6,
            backoff: Backoff {
                base: Duration::from_secs(30),
                cap: Duration::from_secs(1800),
                jitter: Jitter::Equal,
            },
            uncertain: UncertainPolicy::Resend,
            email_from: "Clinic <no-reply@clinic.invalid>".into(),
            sms_sender_id: String::new(),
            notifiers,
            file_dir: PathBuf::from(".local/outbox-mail"),
            poll: Duration::from_millis(100),
            pace: Vec::new(),
            pace_wait: PACE_WAIT,
            throttle_factor: 0.5,
            throttle_period: Duration::from_secs(60),
            claim_order: crate::lease::sql::ClaimOrder::Fair,
            unsubscribe: None,
            provider_region: None,
        }
    }

    /// The shared rate of the provider named `provider`, if it is paced.
    pub fn pace_of(&self, provider: &str) -> Option<&Pace> {
        self.pace.iter().find(|pace| pace.provider == provider)
    }

    /// Refuses a configuration under which a provider call could run under an expired lease: one
    /// call must end well within the lease, and a batch sent one row after another must end before
    /// the lease of its claim does (`batch × (provider_timeout + pace_wait) < lease`), or its last rows would be
    /// found expired by another claim and sent twice.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.provider_timeout >= self.lease {
            return Err(ConfigError::Invalid {
                name: "CLINIC_DELIVERY_TIMEOUT_SECS",
                value: self.provider_timeout.as_secs().to_string(),
                message: "must be below CLINIC_DELIVERY_LEASE_SECS".into(),
            });
        }
        // What an SMS may say (DESIGN §5e): a template that breaks a rule is refused at start-up.
        super::sms::check_templates().map_err(|message| ConfigError::Invalid {
            name: "templates",
            value: "sms".into(),
            message,
        })?;
        let batch = u32::try_from(self.batch.max(1)).unwrap_or(u32::MAX);
        let worst = (self.provider_timeout + self.pace_wait).saturating_mul(batch);
        if worst >= self.lease {
            return Err(ConfigError::Invalid {
                name: "CLINIC_DELIVERY_BATCH",
                value: self.batch.to_string(),
                message: format!(
                    "{} rows × (CLINIC_DELIVERY_TIMEOUT_SECS {} s + the pace wait) = {} s must be below \
                     CLINIC_DELIVERY_LEASE_SECS {} s: a batch's last rows would be sent after their \
                     lease ended; lower the batch or the timeout, or raise the lease",
                    self.batch,
                    self.provider_timeout.as_secs(),
                    worst.as_secs(),
                    self.lease.as_secs()
                ),
            });
        }
        Ok(())
    }

    /// `CLINIC_NOTIFIER` (default `default_notifier`), `CLINIC_DELIVERY_*`, `CLINIC_EMAIL_FROM`,
    /// `CLINIC_SMS_SENDER_ID`, `CLINIC_DELIVERY_DIR`.
    pub fn read(env: &Env, default_notifier: &str) -> Result<Self, ConfigError> {
        let raw = env.var("CLINIC_NOTIFIER").unwrap_or_else(|| default_notifier.to_owned());
        let notifiers = NotifierKind::parse_list(&raw).map_err(|message| ConfigError::Invalid {
            name: "CLINIC_NOTIFIER",
            value: raw.clone(),
            message,
        })?;
        let mut config = Self::with_notifiers(notifiers);
        config.batch = env.bounded("CLINIC_DELIVERY_BATCH", DEFAULT_BATCH as u64, 1..=100)? as i64;
        config.lease = Duration::from_secs(env.bounded("CLINIC_DELIVERY_LEASE_SECS", 60, 5..=900)?);
        config.provider_timeout =
            Duration::from_secs(env.bounded("CLINIC_DELIVERY_TIMEOUT_SECS", 10, 1..=300)?);
        config.validate()?;
        config.max_attempts = env.bounded("CLINIC_DELIVERY_MAX_ATTEMPTS", 6, 1..=100)? as i32;
        config.backoff.base =
            Duration::from_millis(env.bounded("CLINIC_DELIVERY_BACKOFF_BASE_MS", 30_000, 1..=3_600_000)?);
        config.backoff.cap =
            Duration::from_secs(env.bounded("CLINIC_DELIVERY_BACKOFF_CAP_SECS", 1800, 1..=86_400)?);
        config.uncertain = env.parsed("CLINIC_DELIVERY_UNCERTAIN", UncertainPolicy::Resend)?;
        if let Some(from) = env.var("CLINIC_EMAIL_FROM") {
            config.email_from = from;
        }
        config.sms_sender_id = env.var("CLINIC_SMS_SENDER_ID").unwrap_or_default();
        if let Some(dir) = env.var("CLINIC_DELIVERY_DIR") {
            config.file_dir = PathBuf::from(dir);
        }
        config.poll = Duration::from_millis(env.bounded("CLINIC_DELIVERY_POLL_MS", 100, 10..=60_000)?);
        config.provider_region = env.var("CLINIC_DELIVERY_REGION");
        let region = config
            .provider_region
            .clone()
            .or_else(|| env.var("AWS_REGION"))
            .unwrap_or_else(|| "local".into());
        let ses = env.bounded("CLINIC_SES_RATE", 14, 1..=10_000)? as f64;
        let sns = env.bounded("CLINIC_SNS_RATE", 20, 1..=10_000)? as f64;
        config.pace = vec![Pace::new("ses", region.clone(), ses), Pace::new("sns", region, sns)];
        Ok(config)
    }
}

/// A Lambda's sending settings (the `deliver` job, the listeners' fast path), read only where
/// `CLINIC_NOTIFIER` names the providers: the delivery settings (default `ses,sns`), the ARN of the
/// unsubscribe key's secret (`CLINIC_UNSUBSCRIBE_KEY_SECRET_ARN`) and the links' settings.
#[derive(Debug, Clone)]
pub struct SenderSettings {
    pub config: DeliveryConfig,
    pub unsubscribe_key_arn: Option<String>,
    pub links: super::unsubscribe::LinkSettings,
}

impl SenderSettings {
    /// `None` when `CLINIC_NOTIFIER` is unset (the process sends nothing).
    pub fn read_lambda(env: &Env) -> Result<Option<Self>, ConfigError> {
        if env.var("CLINIC_NOTIFIER").is_none() {
            return Ok(None);
        }
        Ok(Some(Self {
            config: DeliveryConfig::read(env, "ses,sns")?,
            unsubscribe_key_arn: env.var(super::unsubscribe::KEY_SECRET_ARN_VAR),
            links: super::unsubscribe::LinkSettings::read(env)?,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notifier_lists_parse() {
        assert_eq!(NotifierKind::parse_list("ses,sns").unwrap(), [NotifierKind::Ses, NotifierKind::Sns]);
        assert_eq!(NotifierKind::parse_list(" file ").unwrap(), [NotifierKind::File]);
        assert!(NotifierKind::parse_list("fax").is_err());
        assert!(NotifierKind::parse_list(",").is_err());
        assert_eq!("hold".parse::<UncertainPolicy>(), Ok(UncertainPolicy::Hold));
        assert!("maybe".parse::<UncertainPolicy>().is_err());
    }

    #[test]
    fn a_batch_that_can_outlive_its_lease_is_refused() {
        let mut config = DeliveryConfig::with_notifiers(vec![NotifierKind::Log]);
        assert!(config.validate().is_ok(), "the defaults fit");
        config.batch = 10;
        let error = config.validate().unwrap_err().to_string();
        assert!(error.contains("CLINIC_DELIVERY_BATCH") && error.contains("110 s"), "{error}");
        config.batch = 1;
        config.provider_timeout = config.lease;
        let error = config.validate().unwrap_err().to_string();
        assert!(error.contains("CLINIC_DELIVERY_TIMEOUT_SECS"), "{error}");
    }
}
