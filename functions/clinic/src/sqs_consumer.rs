//! Local SQS consumers for `clinic dev` and `clinic chaos`: what the Lambda event source mapping does
//! in AWS, in this process. Each consumer long-polls one queue, hands a received batch to the
//! listener Lambda's own handler (`clinic_listener::run_batch`, so the messages of a batch run
//! concurrently, checked against the event log and bounded by a deadline exactly as in Lambda), and
//! deletes the messages that did not fail.
//!
//! Invariants:
//! - A batch is received with a visibility timeout ([`ConsumerOptions::visibility`]) longer than the
//!   batch may take: the handler's deadline is set `deadline_slack` before it, so a message is never
//!   redelivered to a second consumer while the first still runs it.
//! - A retryable failure is made visible again after [`ConsumerOptions::retry_after`] (a short
//!   redelivery delay; Lambda would wait for the visibility timeout); a permanent one is deleted
//!   when `dead_letter` is set (what redrive to the dead-letter queue amounts to here), else left for
//!   the queue's own redrive policy.
//! - Every SQS call is bounded by [`ConsumerOptions::call_timeout`]; a failed delete means a
//!   redelivery, which the listener's receipt absorbs.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_lambda_events::event::sqs::{SqsEvent, SqsMessage};
use aws_sdk_sqs::types::Message;
use clinic_listener::{State, Verdict};
use tokio::sync::watch;

/// How a local consumer receives, runs and settles messages.
#[derive(Debug, Clone, Copy)]
pub struct ConsumerOptions {
    /// Visibility timeout of a received batch (seconds).
    pub visibility: i32,
    /// The handler's deadline is this long before the visibility timeout ends.
    pub deadline_slack: Duration,
    /// Long-poll wait of a receive (seconds; 0 = short polling).
    pub wait_seconds: i32,
    /// Pause after an empty receive.
    pub idle_pause: Duration,
    /// A retryable failure becomes visible again after this long (`None`: after the visibility
    /// timeout, as in Lambda).
    pub retry_after: Option<Duration>,
    /// Delete permanently failed messages (no redrive policy on the queue).
    pub dead_letter: bool,
    /// Bound of every SQS call.
    pub call_timeout: Duration,
}

impl Default for ConsumerOptions {
    fn default() -> Self {
        Self {
            visibility: 60,
            deadline_slack: Duration::from_secs(10),
            wait_seconds: 1,
            idle_pause: Duration::ZERO,
            retry_after: None,
            dead_letter: false,
            call_timeout: Duration::from_secs(30),
        }
    }
}

/// Told about every message a consumer ran (and about failed receives).
pub trait Observe: Send + Sync {
    fn verdict(&self, _message: &Message, _verdict: &Verdict) {}
    fn receive_failed(&self) {}
}

/// Observes nothing.
pub struct Quiet;
impl Observe for Quiet {}

/// Consumes `queue_url` until `stop` turns true.
pub async fn consume(
    client: aws_sdk_sqs::Client,
    queue_url: String,
    state: Arc<State>,
    options: ConsumerOptions,
    observer: Arc<dyn Observe>,
    mut stop: watch::Receiver<bool>,
) {
    while !*stop.borrow() {
        let receive = client
            .receive_message()
            .queue_url(&queue_url)
            .max_number_of_messages(10)
            .visibility_timeout(options.visibility)
            .wait_time_seconds(options.wait_seconds)
            .message_attribute_names("All")
            .send();
        let received = tokio::select! {
            received = tokio::time::timeout(options.call_timeout, receive) => received,
            _ = stop.changed() => break,
        };
        let messages = match received {
            Ok(Ok(output)) => output.messages.unwrap_or_default(),
            _ => {
                observer.receive_failed();
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        };
        if messages.is_empty() {
            tokio::time::sleep(options.idle_pause).await;
            continue;
        }
        run_and_settle(&client, &queue_url, &state, options, &*observer, messages).await;
    }
}

/// The Lambda invocation of one batch: its deadline ends `deadline_slack` before the visibility.
fn invocation(messages: &[Message], options: ConsumerOptions) -> lambda_runtime::LambdaEvent<SqsEvent> {
    let mut event = SqsEvent::default();
    for message in messages {
        let mut record = SqsMessage::default();
        record.message_id = message.message_id.clone();
        record.receipt_handle = message.receipt_handle.clone();
        record.body = message.body.clone();
        event.records.push(record);
    }
    let budget = Duration::from_secs(options.visibility.max(1) as u64).saturating_sub(options.deadline_slack);
    let deadline = SystemTime::now() + budget.max(Duration::from_secs(1));
    let mut context = lambda_runtime::Context::default();
    context.deadline = deadline.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
    lambda_runtime::LambdaEvent::new(event, context)
}

async fn run_and_settle(
    client: &aws_sdk_sqs::Client,
    queue_url: &str,
    state: &State,
    options: ConsumerOptions,
    observer: &dyn Observe,
    messages: Vec<Message>,
) {
    let verdicts = clinic_listener::run_batch(state, &invocation(&messages, options)).await;
    let mut finished = Vec::new();
    let mut retry = Vec::new();
    for (index, (message, (_, verdict))) in messages.iter().zip(&verdicts).enumerate() {
        observer.verdict(message, verdict);
        let Some(handle) = message.receipt_handle() else { continue };
        let settle = match verdict {
            Verdict::Done(_) => true,
            Verdict::Permanent { .. } => options.dead_letter,
            Verdict::Retry { .. } => {
                retry.push(handle.to_owned());
                false
            }
        };
        if settle {
            let entry = aws_sdk_sqs::types::DeleteMessageBatchRequestEntry::builder()
                .id(index.to_string())
                .receipt_handle(handle)
                .build();
            finished.extend(entry.ok());
        }
    }
    if !finished.is_empty() {
        let delete = client.delete_message_batch().queue_url(queue_url).set_entries(Some(finished)).send();
        let _ = tokio::time::timeout(options.call_timeout, delete).await;
    }
    if let Some(after) = options.retry_after {
        for handle in retry {
            let visible = client
                .change_message_visibility()
                .queue_url(queue_url)
                .receipt_handle(handle)
                .visibility_timeout(after.as_secs() as i32)
                .send();
            let _ = tokio::time::timeout(options.call_timeout, visible).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use clinic_core::listeners::Listener;

    use super::*;

    /// Records every verdict by message body's listener.
    #[derive(Default)]
    struct Seen(Mutex<Vec<Verdict>>);

    impl Observe for Seen {
        fn verdict(&self, _message: &Message, verdict: &Verdict) {
            self.0.lock().unwrap().push(verdict.clone());
        }
    }

    async fn depth(client: &aws_sdk_sqs::Client, url: &str) -> u64 {
        let answer = client
            .get_queue_attributes()
            .queue_url(url)
            .attribute_names(aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessages)
            .attribute_names(aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
            .send()
            .await
            .unwrap();
        answer.attributes().unwrap().values().map(|v| v.parse::<u64>().unwrap()).sum()
    }

    #[tokio::test]
    async fn a_consumer_runs_genuine_messages_and_drops_forged_ones_without_effect() {
        let Some(emulator) = clinic_sqs::testing::Emulator::start() else { return };
        let sqs = emulator.client();
        let prefix = format!("consumer-{}", ulid::Ulid::generate().to_string().to_lowercase());
        let queues = clinic_sqs::queues::create_queues(&sqs, &prefix, false).await.unwrap();
        let db = clinic_testkit::fresh_db().await;
        let event = clinic_testkit::seed::booked_appointments(&db, 1).await.remove(0);
        let listener = Listener::PatientBookingConfirmation;
        let url = queues.url(listener).unwrap().to_owned();
        let mut forged = event.clone();
        forged.id = clinic_core::ids::EventId::generate();
        for envelope in [&event, &forged] {
            let body =
                serde_json::to_string(&clinic_sqs::to_cloud_event(envelope, listener, "/clinic")).unwrap();
            sqs.send_message().queue_url(&url).message_body(body).send().await.unwrap();
        }
        let state = Arc::new(State::new(db.pool.clone()));
        let seen = Arc::new(Seen::default());
        let options = ConsumerOptions { wait_seconds: 0, dead_letter: true, ..ConsumerOptions::default() };
        let (stop, stopped) = watch::channel(false);
        let observer: Arc<dyn Observe> = seen.clone();
        let consumer = tokio::spawn(consume(sqs.clone(), url.clone(), state, options, observer, stopped));
        // Wait on progress: both messages judged and the queue empty (bounded generously).
        let until = std::time::Instant::now() + Duration::from_secs(60);
        while seen.0.lock().unwrap().len() < 2 || depth(&sqs, &url).await > 0 {
            assert!(std::time::Instant::now() < until, "the consumer made no progress");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let _ = stop.send(true);
        consumer.await.unwrap();
        let mut verdicts = seen.0.lock().unwrap().clone();
        verdicts.sort_by_key(|v| format!("{v:?}"));
        assert_eq!(
            verdicts,
            [
                Verdict::Done(clinic_core::listeners::ListenerOutcome::Applied { effects: 1 }),
                Verdict::Permanent { code: "unknown_event", rejected: true },
            ]
        );
        let client = db.client().await;
        let receipts: i64 =
            client.query_one("SELECT count(*) FROM listener_receipts", &[]).await.unwrap().get(0);
        let notifications: i64 =
            client.query_one("SELECT count(*) FROM notifications", &[]).await.unwrap().get(0);
        assert_eq!((receipts, notifications), (1, 1));
    }
}
