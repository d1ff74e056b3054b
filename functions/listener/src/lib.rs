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
//! - Delivery fast path: with a [`Sender`] configured, a run that committed a new notification sends
//!   it right after the commit (`delivery::Sender::send_key`). A failure there never fails the
//!   message: the row stays due and the housekeeping `deliver` mode sends it. The fast path starts
//!   no provider call it cannot finish before the message would be abandoned (the provider timeout
//!   plus `SEND_MARGIN` must fit; `Sender::send_key_within`): a call cut off after the provider
//!   accepted the message would leave the row to be sent a second time. Likewise a
//!   `webhook_fan_out` run that created deliveries sends their first attempt before the message is
//!   answered (`WebhookSender::first_attempts`); retries are the housekeeping `webhooks` mode's.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use aws_lambda_events::event::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent, SqsMessage};
use clinic_core::config::ConfigError;
use clinic_core::delivery::Sender;
use clinic_core::listeners::notify::{DeliveryLog, Notifier};
use clinic_core::listeners::{self, Delivery, ListenerError, ListenerOutcome, SourceClaim};
use deadpool_postgres::Pool;
use futures::StreamExt;
use lambda_runtime::{Error, LambdaEvent};

/// The default margin before the invocation deadline (see the crate docs).
pub const DEFAULT_DEADLINE_MARGIN: Duration = Duration::from_millis(3000);

/// Everything an invocation needs, built once per container.
pub struct State {
    pub pool: Pool,
    pub notifier: Arc<dyn Notifier>,
    /// Messages of one batch run at most this many at a time.
    pub concurrency: usize,
    /// Sends a committed notification at once (fast path); `None`: housekeeping sends it.
    pub sender: Option<Sender>,
    /// Sends the first attempt of the webhook deliveries a fan-out just committed (`None`: the
    /// scheduled housekeeping `webhooks` mode sends them).
    pub webhooks: Option<Arc<clinic_core::webhooks::WebhookSender>>,
    /// The CloudEvents source prefix this deployment publishes with (`CLINIC_CLOUDEVENTS_SOURCE`).
    pub source_prefix: String,
    /// No message starts later than this before the invocation deadline.
    pub deadline_margin: Duration,
}

impl State {
    /// The built-in delivery log; as many concurrent runs as the pool has connections; source prefix
    /// `/clinic`; the default deadline margin.
    pub fn new(pool: Pool) -> Self {
        let concurrency = pool.status().max_size.max(1);
        Self {
            pool,
            notifier: Arc::new(DeliveryLog),
            concurrency,
            source_prefix: "/clinic".into(),
            deadline_margin: DEFAULT_DEADLINE_MARGIN,
            sender: None,
            webhooks: None,
        }
    }

    /// [`State::new`] with `CLINIC_CLOUDEVENTS_SOURCE` (default `/clinic`) and
    /// `CLINIC_LISTENER_DEADLINE_MARGIN_MS` (default 3000, 0–60000).
    pub fn from_env(pool: Pool) -> Result<Self, ConfigError> {
        let margin = clinic_core::config::bounded(
            "CLINIC_LISTENER_DEADLINE_MARGIN_MS",
            DEFAULT_DEADLINE_MARGIN.as_millis() as u64,
            0..=60_000,
        )?;
        let source =
            clinic_core::config::var("CLINIC_CLOUDEVENTS_SOURCE").unwrap_or_else(|| "/clinic".into());
        Ok(Self::new(pool).with_source_prefix(source).with_deadline_margin(Duration::from_millis(margin)))
    }

    pub fn with_notifier(mut self, notifier: Arc<dyn Notifier>) -> Self {
        self.notifier = notifier;
        self
    }

    pub fn with_concurrency(mut self, concurrency: usize) -> Self {
        self.concurrency = concurrency.max(1);
        self
    }

    pub fn with_source_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.source_prefix = prefix.into();
        self
    }

    pub fn with_deadline_margin(mut self, margin: Duration) -> Self {
        self.deadline_margin = margin;
        self
    }

    /// Sends a fan-out's first webhook attempts right after its commit.
    pub fn with_webhooks(mut self, sender: Arc<clinic_core::webhooks::WebhookSender>) -> Self {
        self.webhooks = Some(sender);
        self
    }

    /// Sends committed notifications right after the listener's commit.
    pub fn with_sender(mut self, sender: Sender) -> Self {
        self.sender = Some(sender);
        self
    }
}

/// The fast path: a run that recorded a notification sends it now (see the module invariants), but
/// starts no provider call it cannot finish before `until` (the time the run would be abandoned).
async fn send_now(state: &State, outcome: &ListenerOutcome, key: &str, until: Option<SystemTime>) {
    let (Some(sender), ListenerOutcome::Applied { .. }) = (&state.sender, outcome) else { return };
    let sent = match until {
        None => sender.send_key(key).await,
        Some(until) => {
            let budget = until.duration_since(SystemTime::now()).unwrap_or_default();
            sender.send_key_within(key, budget).await
        }
    };
    if let Err(error) = sent {
        tracing::warn!(error = %error, "delivery fast path failed; housekeeping will send it");
    }
}

/// Why one message failed.
#[derive(Debug)]
enum MessageFailure {
    Unreadable(&'static str),
    Listener(ListenerError),
    /// Not started: the invocation deadline was too near.
    Unstarted,
    /// Started, but still running when the deadline came near; abandoned (rolled back).
    Abandoned,
}

/// When to stop starting messages and when to abandon running ones (`None`: no deadline known).
#[derive(Debug, Clone, Copy)]
struct Bounds {
    stop_starting: SystemTime,
    abandon: SystemTime,
}

impl Bounds {
    fn of(context: &lambda_runtime::Context, margin: Duration) -> Option<Bounds> {
        if context.deadline == 0 {
            return None;
        }
        let deadline = context.deadline();
        Some(Bounds {
            stop_starting: deadline.checked_sub(margin).unwrap_or(SystemTime::UNIX_EPOCH),
            abandon: deadline.checked_sub(margin / 2).unwrap_or(SystemTime::UNIX_EPOCH),
        })
    }
}

/// When SQS accepted the message (its `SentTimestamp` attribute, milliseconds since the epoch).
fn sent_at(message: &SqsMessage) -> Option<chrono::DateTime<chrono::Utc>> {
    let millis = message.attributes.get("SentTimestamp")?.parse::<i64>().ok()?;
    chrono::DateTime::from_timestamp_millis(millis)
}

/// Runs one message; `until` is when it would be abandoned (`None`: no deadline known).
async fn run_message(
    state: &State,
    message: &SqsMessage,
    until: Option<SystemTime>,
) -> Result<ListenerOutcome, MessageFailure> {
    let body = message.body.as_deref().ok_or(MessageFailure::Unreadable("empty_message"))?;
    let (listener, event) =
        clinic_sqs::parse_cloud_event(body).map_err(|e| MessageFailure::Unreadable(e.code()))?;
    let delivery = Delivery {
        listener,
        envelope: &event.data,
        source: Some(SourceClaim { claimed: &event.source, prefix: &state.source_prefix }),
        transport: "sqs",
        message_id: message.message_id.as_deref(),
        sent_at: sent_at(message),
    };
    let result = listeners::deliver(&state.pool, &*state.notifier, &delivery).await;
    if let Ok(outcome) = &result {
        send_now(state, outcome, &format!("{}:{}", event.data.id, listener.as_str()), until).await;
        if let Some(webhooks) = &state.webhooks {
            webhooks.first_attempts(listener, *outcome, event.data.id).await;
        }
    }
    result.map_err(MessageFailure::Listener).inspect(|outcome| {
        tracing::info!(
            message_id = message.message_id.as_deref().unwrap_or(""),
            event_id = %event.data.id,
            event_type = event.data.event_type.as_str(),
            listener = listener.as_str(),
            outcome = outcome.as_str(),
            "listener ran"
        );
    })
}

/// Runs one message within `bounds`, keeping its id beside the result (a named function, so the
/// future is `Send` for any borrow and the handler can be spawned by local consumers too).
async fn run_identified<'a>(
    state: &'a State,
    message: &'a SqsMessage,
    bounds: Option<Bounds>,
) -> (Option<&'a str>, Result<ListenerOutcome, MessageFailure>) {
    let id = message.message_id.as_deref();
    let Some(bounds) = bounds else { return (id, run_message(state, message, None).await) };
    let now = SystemTime::now();
    if now >= bounds.stop_starting {
        return (id, Err(MessageFailure::Unstarted));
    }
    let left = bounds.abandon.duration_since(now).unwrap_or_default();
    match tokio::time::timeout(left, run_message(state, message, Some(bounds.abandon))).await {
        Ok(result) => (id, result),
        Err(_) => (id, Err(MessageFailure::Abandoned)),
    }
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
            MessageFailure::Listener(error) if error.is_permanent() => {
                Verdict::Permanent { code: error.code(), rejected: error.rejection().is_some() }
            }
            MessageFailure::Listener(error) => Verdict::Retry { code: error.code() },
            MessageFailure::Unstarted | MessageFailure::Abandoned => Verdict::Retry { code: "deadline_near" },
        }
    }
}

/// Runs every message of the batch (at most `state.concurrency` at a time, within the deadline) and
/// answers each message's id with its verdict, in batch order. Logs each failure once.
pub async fn run_batch(state: &State, event: &LambdaEvent<SqsEvent>) -> Vec<(Option<String>, Verdict)> {
    let bounds = Bounds::of(&event.context, state.deadline_margin);
    let records = &event.payload.records;
    let results: Vec<(Option<&str>, Result<ListenerOutcome, MessageFailure>)> = futures::stream::iter(
        records.iter().map(|message| run_identified(state, message, bounds)).collect::<Vec<_>>(),
    )
    .buffered(state.concurrency.max(1))
    .collect()
    .await;
    let mut verdicts = Vec::with_capacity(results.len());
    let mut unstarted = 0usize;
    for (message_id, result) in results {
        let failure = match result {
            Ok(outcome) => {
                verdicts.push((message_id.map(str::to_owned), Verdict::Done(outcome)));
                continue;
            }
            Err(failure) => failure,
        };
        let id = message_id.unwrap_or("");
        match &failure {
            MessageFailure::Unreadable(code) => {
                tracing::error!(
                    message_id = id,
                    code,
                    "message cannot be run; it fails alone (redrive to DLQ)"
                );
            }
            // A rejection was logged once, with its ids and code, where it was decided.
            MessageFailure::Listener(error) if error.rejection().is_some() => {}
            MessageFailure::Listener(error) if error.is_permanent() => {
                tracing::error!(message_id = id, code = error.code(), error = %error, "listener failed permanently");
            }
            MessageFailure::Listener(error) => {
                tracing::warn!(message_id = id, code = error.code(), error = %error, "listener failed; SQS will redeliver");
            }
            MessageFailure::Unstarted => unstarted += 1,
            MessageFailure::Abandoned => {
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
