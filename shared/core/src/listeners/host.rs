//! The listener host: what runs listener workflows and what follows their commit, for every
//! transport — the listener Lambda (and the local SQS consumers of `clinic dev` and `clinic chaos`,
//! which call the Lambda's handler) and the local transport of `clinic dev`
//! ([`crate::dispatch::LocalTransport`]). Local runs run what production runs.
//!
//! Invariants:
//! - A run is [`super::deliver`] (the check against the event log, the receipt and the work in ONE
//!   transaction), then ONE after-commit step, awaited before the run answers:
//!   - the notification fast path: a run that applied its work sends the notification it recorded
//!     (key `"{event_id}:{listener}"`) through the delivery [`Sender`];
//!   - the first attempts of the webhook deliveries a fan-out just created
//!     ([`WebhookSender::send_event`]; the webhooks module knows nothing of listeners).
//!
//!   A failure there never fails the run: the rows stay due and the housekeeping `deliver` and
//!   `webhooks` modes (or `clinic dev`'s loops) send them. A host without a sender leaves that part to
//!   them.
//! - Every run is bounded by its [`Deadline`]: none starts at or after its last start, a run still in
//!   its transaction when its time is up is abandoned (rolled back) and reported as such, and the
//!   after-commit step starts no call it cannot finish before that time — the delivery sender's own
//!   rule ([`Sender::send_key_within`]: the provider timeout, the token wait and `SEND_MARGIN`) and the webhook
//!   sender's ([`WebhookSender::step_bound`]: one attempt and its marks). A call cut off after the
//!   provider or the receiver accepted it would leave the row to be sent a second time.
//! - The after-commit step is awaited under the same time bound, but a run whose transaction
//!   committed answers its outcome even when the step is cut off: its work is durable.
//! - At most [`ListenerHost::concurrency`] runs at a time; results come back in input order.
//! - A rejected delivery prints its `Rejected` EMF line here, once, as the host's metrics mode says
//!   (set by the `main` from `CLINIC_METRICS`); nothing below reads the environment.
//! - Logs carry ids and codes only.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use deadpool_postgres::Pool;
use futures::StreamExt;

use super::notify::{DeliveryLog, Notifier};
use super::{Delivery, Listener, ListenerError, ListenerOutcome};
use crate::delivery::Sender;
use crate::telemetry::emf::MetricsMode;
use crate::webhooks::WebhookSender;

/// How long the runs of a host may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deadline {
    /// Each run is over at most this long after it starts (the local transport: below the
    /// dispatcher's lease, so an abandoned run is retried by the same claim).
    PerRun(Duration),
    /// The runs of one batch share the invocation's deadline (the listener Lambda): none starts later
    /// than `deadline − margin`, a run still going at `deadline − margin/2` is abandoned. A batch
    /// without a known deadline is not bounded.
    Invocation { margin: Duration },
}

/// Why a run did not answer an outcome.
#[derive(Debug)]
pub enum RunFailure {
    /// The listener failed (retryable or permanent; a rejection against the event log is permanent).
    Listener(ListenerError),
    /// Not started: its deadline was too near.
    Unstarted,
    /// Started, but still in its transaction when its time was up; abandoned (rolled back).
    Abandoned,
}

/// One run's time bounds (`None` fields: unbounded).
#[derive(Debug, Clone, Copy)]
struct Bounds {
    last_start: Option<SystemTime>,
    until: Option<SystemTime>,
}

/// Runs listener workflows and their after-commit step (see the module invariants).
#[derive(Clone)]
pub struct ListenerHost {
    pool: Pool,
    notifier: Arc<dyn Notifier>,
    sender: Option<Sender>,
    webhooks: Option<Arc<WebhookSender>>,
    concurrency: usize,
    deadline: Deadline,
    metrics: MetricsMode,
}

impl std::fmt::Debug for ListenerHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ListenerHost")
            .field("concurrency", &self.concurrency)
            .field("deadline", &self.deadline)
            .field("sender", &self.sender.is_some())
            .field("webhooks", &self.webhooks.is_some())
            .finish_non_exhaustive()
    }
}

impl ListenerHost {
    /// Listeners on `pool` with the built-in delivery log, no after-commit senders, as many
    /// concurrent runs as the pool has connections, and `deadline`.
    pub fn new(pool: Pool, deadline: Deadline) -> Self {
        let concurrency = pool.status().max_size.max(1);
        Self {
            pool,
            notifier: Arc::new(DeliveryLog),
            sender: None,
            webhooks: None,
            concurrency,
            deadline,
            metrics: MetricsMode::Emf,
        }
    }

    /// Whether a rejection prints its `Rejected` EMF line (`CLINIC_METRICS`; default [`MetricsMode::Emf`]).
    pub fn with_metrics(mut self, mode: MetricsMode) -> Self {
        self.metrics = mode;
        self
    }

    /// Uses another [`Notifier`].
    pub fn with_notifier(mut self, notifier: Arc<dyn Notifier>) -> Self {
        self.notifier = notifier;
        self
    }

    /// Sends committed notifications right after the listener's commit (the fast path).
    pub fn with_sender(mut self, sender: Sender) -> Self {
        self.sender = Some(sender);
        self
    }

    /// Sends a fan-out's first webhook attempts right after its commit.
    pub fn with_webhooks(mut self, sender: Arc<WebhookSender>) -> Self {
        self.webhooks = Some(sender);
        self
    }

    /// Caps the number of runs in flight (at least one).
    pub fn with_concurrency(mut self, concurrency: usize) -> Self {
        self.concurrency = concurrency.max(1);
        self
    }

    pub fn with_deadline(mut self, deadline: Deadline) -> Self {
        self.deadline = deadline;
        self
    }

    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    pub fn concurrency(&self) -> usize {
        self.concurrency
    }

    pub fn deadline(&self) -> Deadline {
        self.deadline
    }

    /// Runs every delivery (at most [`ListenerHost::concurrency`] at a time) within the host's
    /// [`Deadline`]; `invocation` is the batch's deadline when it has one ([`Deadline::Invocation`]).
    /// One result per delivery, in order.
    pub async fn run_all(
        &self,
        deliveries: &[Delivery<'_>],
        invocation: Option<SystemTime>,
    ) -> Vec<Result<ListenerOutcome, RunFailure>> {
        let runs: Vec<_> = deliveries.iter().map(|delivery| self.run(delivery, invocation)).collect();
        futures::stream::iter(runs).buffered(self.concurrency).collect().await
    }

    /// Runs one delivery and its after-commit step within its bounds.
    pub async fn run(
        &self,
        delivery: &Delivery<'_>,
        invocation: Option<SystemTime>,
    ) -> Result<ListenerOutcome, RunFailure> {
        let now = SystemTime::now();
        let bounds = self.bounds(now, invocation);
        if bounds.last_start.is_some_and(|last| now >= last) {
            return Err(RunFailure::Unstarted);
        }
        let run = super::deliver(&self.pool, &*self.notifier, delivery);
        let outcome = match bounds.until {
            None => run.await,
            Some(until) => match tokio::time::timeout(left(until), run).await {
                Ok(result) => result,
                Err(_) => return Err(RunFailure::Abandoned),
            },
        }
        .inspect_err(|error| self.report_rejection(delivery, error))
        .map_err(RunFailure::Listener)?;
        let step = self.after_commit(delivery, outcome, bounds.until);
        match bounds.until {
            None => step.await,
            Some(until) => {
                if tokio::time::timeout(left(until), step).await.is_err() {
                    tracing::warn!(
                        event_id = %delivery.envelope.id,
                        listener = delivery.listener.as_str(),
                        code = "deadline_near",
                        "after-commit step cut off; housekeeping sends what is left"
                    );
                }
            }
        }
        Ok(outcome)
    }

    /// The `Rejected` metric of a rejected delivery (its log line is [`super::pointer`]'s).
    fn report_rejection(&self, delivery: &Delivery<'_>, error: &ListenerError) {
        if let (Some(rejection), MetricsMode::Emf) = (error.rejection(), self.metrics) {
            let now = chrono::Utc::now().timestamp_millis();
            println!("{}", super::pointer::rejected_emf(delivery.listener, rejection, now));
        }
    }

    fn bounds(&self, now: SystemTime, invocation: Option<SystemTime>) -> Bounds {
        match (self.deadline, invocation) {
            (Deadline::PerRun(timeout), _) => Bounds { last_start: None, until: Some(now + timeout) },
            (Deadline::Invocation { .. }, None) => Bounds { last_start: None, until: None },
            (Deadline::Invocation { margin }, Some(deadline)) => Bounds {
                last_start: Some(deadline.checked_sub(margin).unwrap_or(SystemTime::UNIX_EPOCH)),
                until: Some(deadline.checked_sub(margin / 2).unwrap_or(SystemTime::UNIX_EPOCH)),
            },
        }
    }

    /// The one after-commit step: the notification fast path, then a fan-out's first webhook
    /// attempts; neither starts a call it cannot finish before `until`.
    async fn after_commit(
        &self,
        delivery: &Delivery<'_>,
        outcome: ListenerOutcome,
        until: Option<SystemTime>,
    ) {
        if let (Some(sender), ListenerOutcome::Applied { .. }) = (&self.sender, outcome) {
            let key = format!("{}:{}", delivery.envelope.id, delivery.listener.as_str());
            let sent = match until {
                None => sender.send_key(&key).await,
                Some(until) => sender.send_key_within(&key, left(until)).await,
            };
            if let Err(error) = sent {
                tracing::warn!(error = %error, "delivery fast path failed; housekeeping will send it");
            }
        }
        let fan_out = self.webhooks.as_ref().filter(|_| created_deliveries(delivery.listener, outcome));
        if let Some(webhooks) = fan_out {
            let event = delivery.envelope.id;
            if until.is_none_or(|until| left(until) >= webhooks.step_bound()) {
                if let Err(error) = webhooks.send_event(event).await {
                    tracing::warn!(event_id = %event, error = %error,
                        "first webhook attempt failed to run; the scheduled step sends it");
                }
            } else {
                tracing::info!(
                    event_id = %event,
                    "too close to the deadline for a webhook attempt; leaving it to housekeeping"
                );
            }
        }
    }
}

/// The time left until `until` (zero once passed).
fn left(until: SystemTime) -> Duration {
    until.duration_since(SystemTime::now()).unwrap_or_default()
}
/// Whether a run was a fan-out that created webhook deliveries (their first attempts follow).
fn created_deliveries(listener: Listener, outcome: ListenerOutcome) -> bool {
    listener == Listener::WebhookFanOut
        && matches!(outcome, ListenerOutcome::Applied { effects } if effects > 0)
}
