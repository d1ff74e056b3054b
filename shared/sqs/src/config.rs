//! Queue URLs and client construction, read once at start-up.

use std::collections::HashMap;

use clinic_core::config::{var, ConfigError};
use clinic_core::listeners::Listener;

/// The queue of every listener.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueMap(HashMap<Listener, String>);

/// The environment variable naming `listener`'s queue URL: `CLINIC_SQS_QUEUE_URL_<LISTENER>`.
pub fn queue_url_var(listener: Listener) -> String {
    format!("CLINIC_SQS_QUEUE_URL_{}", listener.as_str().to_ascii_uppercase())
}

impl QueueMap {
    /// Every listener must have a queue: a missing one is an error naming the variable.
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_lookup(|name| std::env::var(name).ok().filter(|v| !v.trim().is_empty()))
    }

    /// Like [`QueueMap::from_env`] with another source of variables (tests).
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
    pub fn from_env() -> Result<Self, ConfigError> {
        Ok(Self {
            queues: QueueMap::from_env()?,
            source_prefix: var("CLINIC_CLOUDEVENTS_SOURCE").unwrap_or_else(|| "/clinic".into()),
            endpoint: var("CLINIC_SQS_ENDPOINT"),
        })
    }
}

/// An SQS client from the standard AWS configuration chain, with an optional endpoint override.
/// Build it once per process.
pub async fn build_client(endpoint: Option<&str>) -> aws_sdk_sqs::Client {
    let mut loader = aws_config::defaults(aws_config::BehaviorVersion::latest());
    if let Some(endpoint) = endpoint {
        loader = loader.endpoint_url(endpoint);
    }
    aws_sdk_sqs::Client::new(&loader.load().await)
}
