//! The listener Lambda: SQS messages in, listener workflows run, partial batch failures out.
//!
//! Invariants:
//! - The answer lists exactly the messages that failed (`batchItemFailures`): a malformed body, an
//!   unknown listener, a message rejected against the event log (`clinic_core::listeners::pointer`)
//!   or a permanent listener error fails that message alone (SQS redrive moves it to the queue's
//!   dead-letter queue after `maxReceiveCount`), a retryable error fails it so SQS redelivers it after
//!   the visibility timeout, and a duplicate delivery is a success.
//! - Every message goes through `clinic_core::listeners::deliver` with the CloudEvents `source` it
//!   carried: the same check and the same transaction as the local transport.
//! - The run is bounded by the invocation's deadline: no message is started later than
//!   `deadline − margin` (`CLINIC_LISTENER_DEADLINE_MARGIN_MS`, default 3000), a message still running
//!   at `deadline − margin/2` is abandoned (its transaction rolls back), and both are reported as
//!   failed, so the finished messages of the batch are deleted and only the rest is redelivered.
//!   A `Context` without a deadline (0, as local consumers may pass) is not bounded.
//! - State (the pool, the notifier) is built once per container in `main`; the handler never
//!   connects. Logs carry message ids, event ids and codes only.
//! - Messages run through the one listener host (`clinic_core::listeners::ListenerHost`, with
//!   `Deadline::Invocation`), which `clinic dev`'s local transport uses too: after the commit, ONE
//!   after-commit step, awaited before the message is answered — the delivery fast path (with a
//!   [`Sender`] configured, a run that committed a new notification sends it at once) and a
//!   `webhook_fan_out` run's first webhook attempts (`WebhookSender::send_event`). A failure
//!   there never fails the message: the rows stay due for the housekeeping `deliver` and `webhooks`
//!   modes. The step starts no provider or receiver call it cannot finish before the message would
//!   be abandoned: a call cut off after the provider accepted the message would leave the row to be
//!   sent a second time.

use std::sync::Arc;
use std::time::Duration;

use aws_lambda_events::event::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent, SqsMessage};
use clinic_core::config::{ConfigError, Env};
use clinic_core::delivery::Sender;
use clinic_core::listeners::notify::Notifier;
use clinic_core::listeners::{Deadline, Delivery, ListenerHost, ListenerOutcome, RunFailure, SourceClaim};
use deadpool_postgres::Pool;
use lambda_runtime::{Error, LambdaEvent};

mod settings;

pub use settings::Settings;

/// The default margin before the invocation deadline (see the crate docs).
pub const DEFAULT_DEADLINE_MARGIN: Duration = Duration::from_millis(3000);

/// The handler's own settings: `CLINIC_CLOUDEVENTS_SOURCE` (default `/clinic`) and
/// `CLINIC_LISTENER_DEADLINE_MARGIN_MS` (default 3000, 0–60000).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenerConfig {
    pub source_prefix: String,
    pub deadline_margin: Duration,
}

impl ListenerConfig {
    pub fn read(env: &Env) -> Result<Self, ConfigError> {
        let margin = env.bounded(
            "CLINIC_LISTENER_DEADLINE_MARGIN_MS",
            DEFAULT_DEADLINE_MARGIN.as_millis() as u64,
            0..=60_000,
        )?;
        Ok(Self {
            source_prefix: env.var("CLINIC_CLOUDEVENTS_SOURCE").unwrap_or_else(|| "/clinic".into()),
            deadline_margin: Duration::from_millis(margin),
        })
    }
}

/// Everything an invocation needs, built once per container.
pub struct State {
    /// The pool, the notifier, the after-commit senders, the concurrency and the deadline margin.
    pub host: ListenerHost,
    /// The CloudEvents source prefix this deployment publishes with (`CLINIC_CLOUDEVENTS_SOURCE`).
    pub source_prefix: String,
}

impl State {
    /// The built-in delivery log; as many concurrent runs as the pool has connections; source prefix
    /// `/clinic`; the default deadline margin; no after-commit senders (housekeeping sends).
    pub fn new(pool: Pool) -> Self {
        Self::from_host(ListenerHost::new(pool, Deadline::Invocation { margin: DEFAULT_DEADLINE_MARGIN }))
    }

    /// Runs on `host` (its deadline should be [`Deadline::Invocation`]); source prefix `/clinic`.
    pub fn from_host(host: ListenerHost) -> Self {
        Self { host, source_prefix: "/clinic".into() }
    }

    /// Runs on `host` (built by the caller: the Lambda's, or `clinic dev`'s with its senders) with
    /// `config`'s source prefix and deadline margin.
    pub fn configured(host: ListenerHost, config: &ListenerConfig) -> Self {
        Self::from_host(host)
            .with_source_prefix(config.source_prefix.clone())
            .with_deadline_margin(config.deadline_margin)
    }

    pub fn with_notifier(self, notifier: Arc<dyn Notifier>) -> Self {
        Self { host: self.host.with_notifier(notifier), ..self }
    }

    pub fn with_concurrency(self, concurrency: usize) -> Self {
        Self { host: self.host.with_concurrency(concurrency), ..self }
    }

    pub fn with_source_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.source_prefix = prefix.into();
        self
    }

    pub fn with_deadline_margin(self, margin: Duration) -> Self {
        Self { host: self.host.with_deadline(Deadline::Invocation { margin }), ..self }
    }

    /// Sends a fan-out's first webhook attempts right after its commit.
    pub fn with_webhooks(self, sender: Arc<clinic_core::webhooks::WebhookSender>) -> Self {
        Self { host: self.host.with_webhooks(sender), ..self }
    }

    /// Sends committed notifications right after the listener's commit.
    pub fn with_sender(self, sender: Sender) -> Self {
        Self { host: self.host.with_sender(sender), ..self }
    }
}

/// Why one message failed.
#[derive(Debug)]
enum MessageFailure {
    Unreadable(&'static str),
    Run(RunFailure),
}

/// When SQS accepted the message (its `SentTimestamp` attribute, milliseconds since the epoch).
fn sent_at(message: &SqsMessage) -> Option<chrono::DateTime<chrono::Utc>> {
    let millis = message.attributes.get("SentTimestamp")?.parse::<i64>().ok()?;
    chrono::DateTime::from_timestamp_millis(millis)
}

/// What the handler decided for one message of a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The listener ran (applied, stale or duplicate): delete the message.
    Done(ListenerOutcome),
    /// Trying again can help (database, provider, a lock, the deadline): redeliver it.
    Retry { code: &'static str },
    /// It can never run (unreadable, rejected against the event log, a permanent listener error):
    /// redrive sends it to the dead-letter queue. `rejected` when the event log refused it.
    Permanent { code: &'static str, rejected: bool },
}

impl Verdict {
    pub fn is_failure(&self) -> bool {
        !matches!(self, Verdict::Done(_))
    }
}

impl From<MessageFailure> for Verdict {
    fn from(failure: MessageFailure) -> Self {
        match failure {
            MessageFailure::Unreadable(code) => Verdict::Permanent { code, rejected: false },
            MessageFailure::Run(RunFailure::Listener(error)) if error.is_permanent() => {
                Verdict::Permanent { code: error.code(), rejected: error.rejection().is_some() }
            }
            MessageFailure::Run(RunFailure::Listener(error)) => Verdict::Retry { code: error.code() },
            MessageFailure::Run(RunFailure::Unstarted | RunFailure::Abandoned) => {
                Verdict::Retry { code: "deadline_near" }
            }
        }
    }
}

/// Runs every message of the batch through the host (at most its concurrency at a time, within the
/// invocation's deadline) and answers each message's id with its verdict, in batch order. Logs each
/// failure once.
pub async fn run_batch(state: &State, event: &LambdaEvent<SqsEvent>) -> Vec<(Option<String>, Verdict)> {
    let invocation = (event.context.deadline != 0).then(|| event.context.deadline());
    let records = &event.payload.records;
    let parsed: Vec<Result<(clinic_core::listeners::Listener, clinic_sqs::CloudEvent), &'static str>> =
        records.iter().map(parse).collect();
    let deliveries: Vec<Delivery<'_>> = records
        .iter()
        .zip(&parsed)
        .filter_map(|(message, parsed)| {
            let (listener, event) = parsed.as_ref().ok()?;
            Some(Delivery {
                listener: *listener,
                envelope: &event.data,
                source: Some(SourceClaim { claimed: &event.source, prefix: &state.source_prefix }),
                transport: "sqs",
                message_id: message.message_id.as_deref(),
                sent_at: sent_at(message),
            })
        })
        .collect();
    let mut ran = state.host.run_all(&deliveries, invocation).await.into_iter().zip(deliveries.iter());
    let mut verdicts = Vec::with_capacity(records.len());
    let mut unstarted = 0usize;
    for (message, parsed) in records.iter().zip(&parsed) {
        let message_id = message.message_id.as_deref();
        let id = message_id.unwrap_or("");
        let failure = match parsed {
            Err(code) => MessageFailure::Unreadable(code),
            Ok(_) => match ran.next() {
                Some((Ok(outcome), delivery)) => {
                    tracing::info!(
                        message_id = id,
                        event_id = %delivery.envelope.id,
                        event_type = delivery.envelope.event_type.as_str(),
                        listener = delivery.listener.as_str(),
                        outcome = outcome.as_str(),
                        "listener ran"
                    );
                    verdicts.push((message_id.map(str::to_owned), Verdict::Done(outcome)));
                    continue;
                }
                Some((Err(failure), _)) => MessageFailure::Run(failure),
                // The host answers one result per delivery; a missing one is retried, not lost.
                None => MessageFailure::Run(RunFailure::Unstarted),
            },
        };
        match &failure {
            MessageFailure::Unreadable(code) => {
                tracing::error!(
                    message_id = id,
                    code,
                    "message cannot be run; it fails alone (redrive to DLQ)"
                );
            }
            // A rejection was logged once, with its ids and code, where it was decided.
            MessageFailure::Run(RunFailure::Listener(error)) if error.rejection().is_some() => {}
            MessageFailure::Run(RunFailure::Listener(error)) if error.is_permanent() => {
                tracing::error!(message_id = id, code = error.code(), error = %error, "listener failed permanently");
            }
            MessageFailure::Run(RunFailure::Listener(error)) => {
                tracing::warn!(message_id = id, code = error.code(), error = %error, "listener failed; SQS will redeliver");
            }
            MessageFailure::Run(RunFailure::Unstarted) => unstarted += 1,
            MessageFailure::Run(RunFailure::Abandoned) => {
                tracing::warn!(
                    message_id = id,
                    code = "deadline_near",
                    "listener abandoned near the deadline; SQS will redeliver"
                );
            }
        }
        verdicts.push((message_id.map(str::to_owned), failure.into()));
    }
    if unstarted > 0 {
        tracing::warn!(
            unstarted,
            code = "deadline_near",
            "messages not started before the invocation deadline; SQS will redeliver them"
        );
    }
    verdicts
}

/// A message's listener and CloudEvent, or the code saying why it cannot be run.
fn parse(
    message: &SqsMessage,
) -> Result<(clinic_core::listeners::Listener, clinic_sqs::CloudEvent), &'static str> {
    let body = message.body.as_deref().ok_or("empty_message")?;
    clinic_sqs::parse_cloud_event(body).map_err(|e| e.code())
}

/// Runs every message of the batch; answers the ids of those that failed.
pub async fn handle(state: &State, event: LambdaEvent<SqsEvent>) -> Result<SqsBatchResponse, Error> {
    let mut response = SqsBatchResponse::default();
    for (message_id, verdict) in run_batch(state, &event).await {
        if !verdict.is_failure() {
            continue;
        }
        let Some(message_id) = message_id.filter(|id| !id.is_empty()) else {
            // Without an id the failure cannot be reported per message: fail the whole batch.
            return Err("an SQS message without a message id failed".into());
        };
        let mut item = BatchItemFailure::default();
        item.item_identifier = message_id;
        response.batch_item_failures.push(item);
    }
    Ok(response)
}
