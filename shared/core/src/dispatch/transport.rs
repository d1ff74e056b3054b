//! How listener workflows are started.
//!
//! Invariants:
//! - [`Transport::start`] answers exactly one result per requested start, in request order; a success
//!   means the workflow will run (SQS accepted the message) or has run (`local`: the listener
//!   committed its receipt). Anything else is an error with a stable code and ids-only text.
//! - Transports hold no database transaction of the dispatcher: they are called between the claim and
//!   the mark, with no transaction open.

use std::sync::Arc;

use async_trait::async_trait;
use deadpool_postgres::Pool;
use futures::{FutureExt, StreamExt};

use crate::events::Envelope;
use crate::listeners::notify::{DeliveryLog, Notifier};
use crate::listeners::{self, Listener, ListenerError, ListenerOutcome};

/// One listener workflow to start for one event.
#[derive(Debug, Clone, Copy)]
pub struct Start<'a> {
    pub envelope: &'a Envelope,
    pub listener: Listener,
}

/// Why a start failed. `permanent` means no retry can help (the row goes `dead` at once);
/// `unavailable` means the transport itself did not answer or refused the whole call (unreachable,
/// timed out, throttling, a breaker open) — nothing about this message — so the attempt is not spent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct StartError {
    pub code: String,
    pub message: String,
    pub permanent: bool,
    pub unavailable: bool,
}

impl StartError {
    /// A per-message failure worth retrying; counts toward the attempt ceiling.
    pub fn retryable(code: impl Into<String>, message: impl Into<String>) -> Self {
        Self { code: code.into(), message: message.into(), permanent: false, unavailable: false }
    }

    /// A per-message failure no retry can help.
    pub fn permanent(code: impl Into<String>, message: impl Into<String>) -> Self {
        Self { code: code.into(), message: message.into(), permanent: true, unavailable: false }
    }

    /// The transport is down or throttling: the row is held without spending its attempt.
    pub fn unavailable(code: impl Into<String>, message: impl Into<String>) -> Self {
        Self { code: code.into(), message: message.into(), permanent: false, unavailable: true }
    }
}

impl From<ListenerError> for StartError {
    fn from(error: ListenerError) -> Self {
        Self {
            code: error.code().to_owned(),
            message: error.message().to_owned(),
            permanent: error.is_permanent(),
            unavailable: false,
        }
    }
}

/// A start's result: the transport's message id when it has one.
pub type StartResult = Result<Option<String>, StartError>;

/// Starts listener workflows.
#[async_trait]
pub trait Transport: Send + Sync {
    /// A short name for logs (`local`, `sqs`, `noop`).
    fn name(&self) -> &'static str;

    /// Starts every requested workflow; one result per start, in order.
    async fn start(&self, starts: &[Start<'_>]) -> Vec<StartResult>;

    /// True when a successful start means the listener already committed its receipt (`local`):
    /// custody ends with the start, so the dispatcher's success path records no start rows.
    fn settles_on_start(&self) -> bool {
        false
    }

    /// True when the broker delivers `listener`'s messages in order per resource (an SQS FIFO
    /// queue): overlapped steps then start one resource's events for it in claim order.
    fn ordered(&self, _listener: Listener) -> bool {
        false
    }
}

/// Runs listeners in this process. A start succeeds only after the listener committed its receipt
/// (with its effects), so the outbox row is marked `dispatched` only once the work is durable.
///
/// Each run is bounded by a timeout (default [`LocalTransport::DEFAULT_RUN_TIMEOUT`], `clinic dev`:
/// `CLINIC_LOCAL_LISTENER_TIMEOUT_MS`): a run still going then is abandoned (its transaction rolls
/// back) and the start fails with the retryable code `listener_timeout`.
#[derive(Clone)]
pub struct LocalTransport {
    pool: Pool,
    notifier: Arc<dyn Notifier>,
    concurrency: usize,
    run_timeout: std::time::Duration,
    /// Sends the first attempt of webhook deliveries right after the fan-out committed.
    webhooks: Option<Arc<crate::webhooks::WebhookSender>>,
}

impl std::fmt::Debug for LocalTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalTransport").field("concurrency", &self.concurrency).finish()
    }
}

impl LocalTransport {
    /// Listeners on `pool` with the built-in delivery log; as many concurrent runs as the pool has
    /// connections (minus one, left for the dispatcher's own marks).
    pub fn new(pool: Pool) -> Self {
        let concurrency = pool.status().max_size.saturating_sub(1).max(1);
        Self {
            pool,
            notifier: Arc::new(DeliveryLog),
            concurrency,
            run_timeout: Self::DEFAULT_RUN_TIMEOUT,
            webhooks: None,
        }
    }

    /// Sends each fan-out's first webhook attempts in-process (`clinic dev`).
    pub fn with_webhooks(mut self, sender: Arc<crate::webhooks::WebhookSender>) -> Self {
        self.webhooks = Some(sender);
        self
    }

    /// Below the default dispatch lease (30 s), so an abandoned run is retried by the same claim.
    pub const DEFAULT_RUN_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

    /// Bounds each listener run by `timeout`.
    pub fn with_run_timeout(mut self, timeout: std::time::Duration) -> Self {
        self.run_timeout = timeout;
        self
    }

    /// Uses another [`Notifier`].
    pub fn with_notifier(mut self, notifier: Arc<dyn Notifier>) -> Self {
        self.notifier = notifier;
        self
    }

    /// Caps the number of listener runs in flight.
    pub fn with_concurrency(mut self, concurrency: usize) -> Self {
        self.concurrency = concurrency.max(1);
        self
    }
}

#[async_trait]
impl Transport for LocalTransport {
    fn name(&self) -> &'static str {
        "local"
    }

    fn settles_on_start(&self) -> bool {
        true
    }

    async fn start(&self, starts: &[Start<'_>]) -> Vec<StartResult> {
        let runs: Vec<futures::future::BoxFuture<'_, StartResult>> =
            starts.iter().map(|start| self.run_one(*start).boxed()).collect();
        futures::stream::iter(runs).buffered(self.concurrency).collect().await
    }
}

impl LocalTransport {
    async fn run_one(&self, start: Start<'_>) -> StartResult {
        #[cfg(feature = "testing")]
        crate::contract::capture::record("local", || {
            serde_json::to_string(start.envelope).unwrap_or_default()
        });
        let run = listeners::run_with(&self.pool, &*self.notifier, start.listener, start.envelope);
        let Ok(result) = tokio::time::timeout(self.run_timeout, run).await else {
            return Err(StartError::retryable(
                "listener_timeout",
                format!(
                    "{} for event {} ran longer than {:?}",
                    start.listener, start.envelope.id, self.run_timeout
                ),
            ));
        };
        match result {
            Ok(ListenerOutcome::Stale { reason }) => {
                tracing::debug!(event_id = %start.envelope.id, listener = %start.listener, reason, "listener skipped stale work");
                Ok(None)
            }
            Ok(outcome) => {
                if let Some(sender) = &self.webhooks {
                    sender.after_listener(start.listener, outcome, start.envelope.id);
                }
                Ok(None)
            }
            Err(error) => Err(StartError::from(error)),
        }
    }
}
