//! Queue URLs and client construction, read once at start-up.

use std::collections::HashMap;
use std::time::Duration;

use clinic_core::config::{ConfigError, Env};
use clinic_core::listeners::Listener;

/// The queue of every listener.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueMap(HashMap<Listener, String>);

/// The environment variable naming `listener`'s queue URL: `CLINIC_SQS_QUEUE_URL_<LISTENER>`.
pub fn queue_url_var(listener: Listener) -> String {
    format!("CLINIC_SQS_QUEUE_URL_{}", listener.as_str().to_ascii_uppercase())
}

/// The stem of `listener`'s logical ids in template.yaml (`patient_booking_confirmation` →
/// `PatientBookingConfirmation`: its `…Queue`, `…DeadLetterQueue`, `…Role`, `…Function`, …).
pub fn template_logical_id(listener: Listener) -> String {
    listener
        .as_str()
        .split('_')
        .map(|word| {
            let mut chars = word.chars();
            chars
                .next()
                .map(|first| first.to_ascii_uppercase().to_string() + chars.as_str())
                .unwrap_or_default()
        })
        .collect()
}

impl QueueMap {
    /// Every listener must have a queue: a missing one is an error naming the variable.
    pub fn read(env: &Env) -> Result<Self, ConfigError> {
        Self::from_lookup(|name| env.var(name))
    }

    /// Like [`QueueMap::read`] with another source of variables.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let mut map = HashMap::new();
        for listener in Listener::ALL {
            let name = queue_url_var(*listener);
            let url = lookup(&name).ok_or_else(|| ConfigError::Invalid {
                name: "CLINIC_SQS_QUEUE_URL_<LISTENER>",
                value: String::new(),
                message: format!("{name} is required (one queue per listener)"),
            })?;
            map.insert(*listener, url.trim().to_owned());
        }
        Ok(Self(map))
    }

    /// Builds the map from explicit pairs; every listener must be present.
    pub fn new(queues: HashMap<Listener, String>) -> Result<Self, ConfigError> {
        Self::from_lookup(|name| {
            Listener::ALL.iter().find(|l| queue_url_var(**l) == name).and_then(|l| queues.get(l).cloned())
        })
    }

    pub fn url(&self, listener: Listener) -> Option<&str> {
        self.0.get(&listener).map(String::as_str)
    }
}

/// Everything the SQS transport needs from the environment.
#[derive(Debug, Clone)]
pub struct SqsConfig {
    pub queues: QueueMap,
    /// `CLINIC_CLOUDEVENTS_SOURCE` (default `/clinic`).
    pub source_prefix: String,
    /// `CLINIC_SQS_ENDPOINT` (optional).
    pub endpoint: Option<String>,
}

impl SqsConfig {
    /// The queues, `CLINIC_CLOUDEVENTS_SOURCE` and `CLINIC_SQS_ENDPOINT` (the schema base of the
    /// messages' `dataschema` is the process's, fixed by its `main`).
    pub fn read(env: &Env) -> Result<Self, ConfigError> {
        Ok(Self {
            queues: QueueMap::read(env)?,
            source_prefix: env.var("CLINIC_CLOUDEVENTS_SOURCE").unwrap_or_else(|| "/clinic".into()),
            endpoint: env.var("CLINIC_SQS_ENDPOINT"),
        })
    }
}

/// How long an SQS call may take. Both stay well below the dispatcher's lease
/// (`CLINIC_DISPATCH_LEASE_MS`, 30 s): a hung call ends as an *unavailable* start (the row is held,
/// not buried) long before another dispatcher could take the claim over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SqsTimeouts {
    /// `CLINIC_SQS_OPERATION_TIMEOUT_MS` (default 10000, 100–25000): one operation, retries included.
    pub operation: Duration,
    /// `CLINIC_SQS_ATTEMPT_TIMEOUT_MS` (default 3000, 50–25000): one HTTP attempt of it.
    pub attempt: Duration,
    /// `CLINIC_SQS_CONNECT_TIMEOUT_MS` (default 2000, 50–25000): opening a connection.
    pub connect: Duration,
}

impl Default for SqsTimeouts {
    fn default() -> Self {
        Self {
            operation: Duration::from_secs(10),
            attempt: Duration::from_secs(3),
            connect: Duration::from_secs(2),
        }
    }
}

impl SqsTimeouts {
    pub fn read(env: &Env) -> Result<Self, ConfigError> {
        let timeouts = Self {
            operation: env.millis("CLINIC_SQS_OPERATION_TIMEOUT_MS", 10_000, 100..=25_000)?,
            attempt: env.millis("CLINIC_SQS_ATTEMPT_TIMEOUT_MS", 3_000, 50..=25_000)?,
            connect: env.millis("CLINIC_SQS_CONNECT_TIMEOUT_MS", 2_000, 50..=25_000)?,
        };
        if timeouts.attempt > timeouts.operation {
            return Err(ConfigError::Invalid {
                name: "CLINIC_SQS_ATTEMPT_TIMEOUT_MS",
                value: timeouts.attempt.as_millis().to_string(),
                message: "must not exceed CLINIC_SQS_OPERATION_TIMEOUT_MS".into(),
            });
        }
        Ok(timeouts)
    }
}

/// An SQS client from the standard AWS configuration chain, with an optional endpoint override and
/// the default [`SqsTimeouts`]. Build it once per process.
pub async fn build_client(endpoint: Option<&str>) -> aws_sdk_sqs::Client {
    build_client_with(endpoint, SqsTimeouts::default()).await
}

/// [`build_client`] with explicit timeouts.
pub async fn build_client_with(endpoint: Option<&str>, timeouts: SqsTimeouts) -> aws_sdk_sqs::Client {
    let timeout_config = aws_config::timeout::TimeoutConfig::builder()
        .operation_timeout(timeouts.operation)
        .operation_attempt_timeout(timeouts.attempt)
        .connect_timeout(timeouts.connect)
        .build();
    let mut loader =
        aws_config::defaults(aws_config::BehaviorVersion::latest()).timeout_config(timeout_config);
    if let Some(endpoint) = endpoint {
        loader = loader.endpoint_url(endpoint);
    }
    aws_sdk_sqs::Client::new(&loader.load().await)
}
