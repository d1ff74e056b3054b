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

use crate::events::Envelope;
use crate::listeners::notify::Notifier;
use crate::listeners::{
    Deadline, Delivery, Listener, ListenerError, ListenerHost, ListenerOutcome, RunFailure,
};

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

/// Runs listeners in this process, through the one [`ListenerHost`] every transport uses (the run,
/// then its after-commit step: the notification fast path and a fan-out's first webhook attempts,
/// awaited). A start succeeds only after the listener committed its receipt (with its effects), so
/// the outbox row is marked `dispatched` only once the work is durable.
///
/// Each run is bounded by a timeout (default [`LocalTransport::DEFAULT_RUN_TIMEOUT`], `clinic dev`:
/// `CLINIC_LOCAL_LISTENER_TIMEOUT_MS`; [`Deadline::PerRun`]): a run still in its transaction then
/// is abandoned (rolled back) and the start fails with the retryable code `listener_timeout`; the
/// after-commit step starts no call it cannot finish within it.
#[derive(Clone, Debug)]
pub struct LocalTransport {
    host: ListenerHost,
}

impl LocalTransport {
    /// Listeners on `pool` with the built-in delivery log and no after-commit senders; as many
    /// concurrent runs as the pool has connections (minus one, left for the dispatcher's own marks).
    pub fn new(pool: Pool) -> Self {
        let concurrency = pool.status().max_size.saturating_sub(1).max(1);
        let host = ListenerHost::new(pool, Deadline::PerRun(Self::DEFAULT_RUN_TIMEOUT));
        Self { host: host.with_concurrency(concurrency) }
    }

    /// Runs on `host` as it is (its deadline should be [`Deadline::PerRun`]: a local start has no
    /// invocation deadline).
    pub fn from_host(host: ListenerHost) -> Self {
        Self { host }
    }

    /// The host the runs go through.
    pub fn host(&self) -> &ListenerHost {
        &self.host
    }

    /// Whether a rejection prints its `Rejected` EMF line ([`ListenerHost::with_metrics`]).
    pub fn with_metrics(self, mode: crate::telemetry::emf::MetricsMode) -> Self {
        Self { host: self.host.with_metrics(mode) }
    }

    /// Sends each fan-out's first webhook attempts right after its commit (`clinic dev`).
    pub fn with_webhooks(self, sender: Arc<crate::webhooks::WebhookSender>) -> Self {
        Self { host: self.host.with_webhooks(sender) }
    }

    /// Sends each committed notification right after its commit (`clinic dev`'s fast path).
    pub fn with_sender(self, sender: crate::delivery::Sender) -> Self {
        Self { host: self.host.with_sender(sender) }
    }

    /// Below the default dispatch lease (30 s), so an abandoned run is retried by the same claim, and
    /// above what the after-commit step needs with the default settings (a provider call of 10 s
    /// plus its margin; a webhook attempt of 5 + 15 s plus its marks), so local runs take the fast
    /// paths production takes.
    pub const DEFAULT_RUN_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(25);

    /// Bounds each listener run by `timeout`.
    pub fn with_run_timeout(self, timeout: std::time::Duration) -> Self {
        Self { host: self.host.with_deadline(Deadline::PerRun(timeout)) }
    }

    /// Uses another [`Notifier`].
    pub fn with_notifier(self, notifier: Arc<dyn Notifier>) -> Self {
        Self { host: self.host.with_notifier(notifier) }
    }

    /// Caps the number of listener runs in flight.
    pub fn with_concurrency(self, concurrency: usize) -> Self {
        Self { host: self.host.with_concurrency(concurrency) }
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
        #[cfg(feature = "testing")]
        for start in starts {
            crate::contract::capture::record("local", || {
                serde_json::to_string(start.envelope).unwrap_or_default()
            });
        }
        let deliveries: Vec<Delivery<'_>> =
            starts.iter().map(|start| Delivery::local(start.listener, start.envelope)).collect();
        let results = self.host.run_all(&deliveries, None).await;
        starts.iter().zip(results).map(|(start, result)| self.answer(*start, result)).collect()
    }
}

impl LocalTransport {
    fn answer(&self, start: Start<'_>, result: Result<ListenerOutcome, RunFailure>) -> StartResult {
        match result {
            Ok(ListenerOutcome::Stale { reason }) => {
                tracing::debug!(event_id = %start.envelope.id, listener = %start.listener, reason, "listener skipped stale work");
                Ok(None)
            }
            Ok(_) => Ok(None),
            Err(RunFailure::Listener(error)) => Err(StartError::from(error)),
            Err(RunFailure::Abandoned | RunFailure::Unstarted) => {
                let timeout = match self.host.deadline() {
                    Deadline::PerRun(timeout) => timeout,
                    Deadline::Invocation { margin } => margin,
                };
                Err(StartError::retryable(
                    "listener_timeout",
                    format!(
                        "{} for event {} ran longer than {:?}",
                        start.listener, start.envelope.id, timeout
                    ),
                ))
            }
        }
    }
}
