//! The listener Lambda: SQS messages in, listener workflows run, partial batch failures out.
//!
//! Invariants:
//! - The answer lists exactly the messages that failed (`batchItemFailures`): a malformed body, an
//!   unknown listener or a permanent listener error fails that message alone (SQS redrive moves it to
//!   the queue's dead-letter queue after `maxReceiveCount`), a retryable error fails it so SQS
//!   redelivers it after the visibility timeout, and a duplicate delivery is a success.
//! - State (the pool, the notifier) is built once per container in `main`; the handler never
//!   connects. Logs carry message ids, event ids and codes only.
//! - Delivery fast path: with a [`Sender`] configured, a run that committed a new notification sends
//!   it right after the commit (`delivery::Sender::send_key`). A failure there never fails the
//!   message: the row stays due and the housekeeping `deliver` mode sends it.

use std::sync::Arc;

use aws_lambda_events::event::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent, SqsMessage};
use clinic_core::delivery::Sender;
use clinic_core::listeners::notify::{DeliveryLog, Notifier};
use clinic_core::listeners::{self, ListenerError, ListenerOutcome};
use deadpool_postgres::Pool;
use futures::StreamExt;
use lambda_runtime::{Error, LambdaEvent};

/// Everything an invocation needs, built once per container.
pub struct State {
    pub pool: Pool,
    pub notifier: Arc<dyn Notifier>,
    /// Messages of one batch run at most this many at a time.
    pub concurrency: usize,
    /// Sends a committed notification at once (fast path); `None`: housekeeping sends it.
    pub sender: Option<Sender>,
}

impl State {
    /// The built-in delivery log; as many concurrent runs as the pool has connections.
    pub fn new(pool: Pool) -> Self {
        let concurrency = pool.status().max_size.max(1);
        Self { pool, notifier: Arc::new(DeliveryLog), concurrency, sender: None }
    }

    /// Sends committed notifications right after the listener's commit.
    pub fn with_sender(mut self, sender: Sender) -> Self {
        self.sender = Some(sender);
        self
    }
}

/// The fast path: a run that recorded a notification sends it now (see the module invariants).
async fn send_now(state: &State, outcome: &ListenerOutcome, key: &str) {
    let (Some(sender), ListenerOutcome::Applied { .. }) = (&state.sender, outcome) else { return };
    if let Err(error) = sender.send_key(key).await {
        tracing::warn!(error = %error, "delivery fast path failed; housekeeping will send it");
    }
}

/// Why one message failed.
#[derive(Debug)]
enum MessageFailure {
    Unreadable(&'static str),
    Listener(ListenerError),
}

async fn run_message(state: &State, message: &SqsMessage) -> Result<ListenerOutcome, MessageFailure> {
    let body = message.body.as_deref().ok_or(MessageFailure::Unreadable("empty_message"))?;
    let (listener, envelope) =
        clinic_sqs::parse_message(body).map_err(|e| MessageFailure::Unreadable(e.code()))?;
    let result = listeners::run_with(&state.pool, &*state.notifier, listener, &envelope).await;
    if let Ok(outcome) = &result {
        send_now(state, outcome, &format!("{}:{}", envelope.id, listener.as_str())).await;
    }
    result.map_err(MessageFailure::Listener).inspect(|outcome| {
        tracing::info!(
            message_id = message.message_id.as_deref().unwrap_or(""),
            event_id = %envelope.id,
            event_type = envelope.event_type.as_str(),
            listener = listener.as_str(),
            outcome = outcome.as_str(),
            "listener ran"
        );
    })
}

/// Runs one message, keeping its id beside the result (a named function, so the future is `Send`
/// for any borrow and the handler can be spawned by local consumers too).
async fn run_identified<'a>(
    state: &'a State,
    message: &'a SqsMessage,
) -> (Option<&'a str>, Result<ListenerOutcome, MessageFailure>) {
    (message.message_id.as_deref(), run_message(state, message).await)
}

/// Runs every message of the batch; answers the ids of those that failed.
pub async fn handle(state: &State, event: LambdaEvent<SqsEvent>) -> Result<SqsBatchResponse, Error> {
    let records = &event.payload.records;
    let results: Vec<(Option<&str>, Result<ListenerOutcome, MessageFailure>)> = futures::stream::iter(
        records.iter().map(|message| run_identified(state, message)).collect::<Vec<_>>(),
    )
    .buffered(state.concurrency.max(1))
    .collect()
    .await;
    let mut response = SqsBatchResponse::default();
    for (message_id, result) in results {
        let Err(failure) = result else { continue };
        let message_id = message_id.unwrap_or("");
        match &failure {
            MessageFailure::Unreadable(code) => {
                tracing::error!(message_id, code, "message cannot be run; it fails alone (redrive to DLQ)");
            }
            MessageFailure::Listener(error) if error.is_permanent() => {
                tracing::error!(message_id, code = error.code(), error = %error, "listener failed permanently");
            }
            MessageFailure::Listener(error) => {
                tracing::warn!(message_id, code = error.code(), error = %error, "listener failed; SQS will redeliver");
            }
        }
        if message_id.is_empty() {
            // Without an id the failure cannot be reported per message: fail the whole batch.
            return Err("an SQS message without a message id failed".into());
        }
        let mut item = BatchItemFailure::default();
        item.item_identifier = message_id.to_owned();
        response.batch_item_failures.push(item);
    }
    Ok(response)
}
