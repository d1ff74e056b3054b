//! The notification queue under operator recovery, freshness and slow providers (issue 38 defects 1
//! and 2, issue 39 item 2): a dead notification retried at its ceiling gets a full attempt budget; a
//! notification the current state made stale ends `stale` and is never sent (and an operator retry
//! of it answers 409); a slow provider never sends a row twice nor loses one; the listener host's
//! fast path starts no provider call it cannot finish before its deadline.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use clinic_core::delivery::{
    Accepted, DeliveryConfig, NotifierKind, OutgoingMessage, Provider, ProviderError, Providers, Sender,
};
use clinic_core::error::DomainError;
use clinic_core::events::Envelope;
use clinic_core::ids::{MemberId, NotificationId};
use clinic_core::lease::ActionKind;
use clinic_core::listeners::{self, Listener, ListenerOutcome};
use clinic_core::operator::{ActionRequest, Notifications, OperatedQueue, Operator};
use clinic_core::outbox::{Backoff, Jitter};

use super::support::Fixture;

/// A provider stand-in: records each call (idempotency key and the rendered body), answers after
/// `delay`, and refuses retryably while `failing` is on.
struct Scripted {
    delay: Duration,
    failing: AtomicBool,
    calls: Mutex<Vec<(String, String)>>,
}

impl Scripted {
    fn new(delay: Duration, failing: bool) -> Arc<Scripted> {
        Arc::new(Scripted { delay, failing: AtomicBool::new(failing), calls: Mutex::new(Vec::new()) })
    }

    fn calls(&self) -> Vec<(String, String)> {
        self.calls.lock().unwrap().clone()
    }

    fn set_failing(&self, failing: bool) {
        self.failing.store(failing, Ordering::SeqCst);
    }
}

#[async_trait]
impl Provider for Scripted {
    fn name(&self) -> &'static str {
        "scripted"
    }

    async fn send(&self, message: &OutgoingMessage) -> Result<Accepted, ProviderError> {
        self.calls.lock().unwrap().push((message.idempotency_key.clone(), message.body.clone()));
        tokio::time::sleep(self.delay).await;
        if self.failing.load(Ordering::SeqCst) {
            return Err(ProviderError::retryable("provider_unreachable"));
        }
        Ok(Accepted { provider_message_id: format!("m-{}", message.idempotency_key) })
    }
}

/// Retries due at once, `max_attempts` of them.
fn config(max_attempts: i32) -> DeliveryConfig {
    let mut config = DeliveryConfig::with_notifiers(vec![NotifierKind::Log]);
    config.max_attempts = max_attempts;
    config.backoff =
        Backoff { base: Duration::from_millis(1), cap: Duration::from_millis(2), jitter: Jitter::Equal };
    config
}

fn sender(fx: &Fixture, provider: &Arc<Scripted>, config: DeliveryConfig) -> Sender {
    Sender::new(fx.db.pool.clone(), Providers::both(provider.clone()), config)
}

/// Runs the patient's notice listener for `event` and answers its notification's id.
async fn notified(fx: &Fixture, listener: Listener, event: &Envelope) -> NotificationId {
    let outcome = listeners::run(&fx.db.pool, listener, event).await.unwrap();
    assert_eq!(outcome, ListenerOutcome::Applied { effects: 1 });
    fx.db
        .client()
        .await
        .query_one(
            "SELECT id FROM notifications WHERE event_id = $1 AND listener = $2",
            &[&event.id, &listener.as_str()],
        )
        .await
        .unwrap()
        .get(0)
}

async fn delivery(fx: &Fixture, id: NotificationId) -> (String, i32, Option<String>) {
    let row = fx
        .db
        .client()
        .await
        .query_one("SELECT status, attempts, last_error_code FROM notifications WHERE id = $1", &[&id])
        .await
        .unwrap();
    (row.get(0), row.get(1), row.get(2))
}

/// Steps `sender` until the delivery's status is one of `statuses` (generous bound).
async fn step_until(fx: &Fixture, sender: &Sender, id: NotificationId, statuses: &[&str]) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (status, _, _) = delivery(fx, id).await;
        if statuses.contains(&status.as_str()) {
            return;
        }
        assert!(Instant::now() < deadline, "still {status}, waiting for {statuses:?}");
        sender.step_due().await.unwrap();
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// An operator retry of a delivery, on its own transaction.
async fn retry(fx: &Fixture, id: NotificationId) -> Result<String, DomainError> {
    let mut client = fx.db.client().await;
    let tx = client.transaction().await.unwrap();
    let request = ActionRequest::new(ActionKind::Retry, "contact data fixed", None).unwrap();
    let operator = Operator::member(MemberId::from_ulid(fx.member.ulid()));
    let record = Notifications::perform(&tx, Some(fx.workspace), id, &request, &operator, None).await?;
    tx.commit().await.unwrap();
    Ok(record.status_after)
}

#[tokio::test]
async fn a_dead_notification_retried_at_its_ceiling_gets_a_full_attempt_budget() {
    let fx = Fixture::new().await;
    let patient = fx.create_patient().await;
    let practitioner = fx.create_practitioner().await;
    let (_, created) = fx.book(patient, practitioner, 30).await;
    let id = notified(&fx, Listener::PatientBookingConfirmation, &created).await;
    let provider = Scripted::new(Duration::ZERO, true);
    let sender = sender(&fx, &provider, config(3));
    step_until(&fx, &sender, id, &["dead"]).await;
    assert_eq!(provider.calls().len(), 3);
    assert_eq!(delivery(&fx, id).await.1, 3);

    assert_eq!(retry(&fx, id).await.unwrap(), "pending");
    assert_eq!(delivery(&fx, id).await.1, 0, "a fresh budget");
    step_until(&fx, &sender, id, &["dead"]).await;
    assert_eq!(provider.calls().len(), 6, "the retried delivery got three more tries, not one");

    // A sent delivery cannot be retried: 409 naming why, nothing written.
    provider.set_failing(false);
    assert_eq!(retry(&fx, id).await.unwrap(), "pending");
    step_until(&fx, &sender, id, &["sent"]).await;
    match retry(&fx, id).await {
        Err(DomainError::Conflict(why)) => assert!(why.contains("sent"), "{why}"),
        other => panic!("{other:?}"),
    }
}

/// Fails the first send of `id` (it waits in `retry`), then lets `change` happen, then lets the
/// sender run until the row is final.
async fn fail_once_then(
    fx: &Fixture,
    id: NotificationId,
    change: impl std::future::Future<Output = ()>,
) -> Arc<Scripted> {
    let provider = Scripted::new(Duration::ZERO, true);
    let sender = sender(fx, &provider, config(6));
    sender.step_due().await.unwrap();
    assert_eq!(delivery(fx, id).await.0, "retry", "waiting in retry (provider unreachable)");
    change.await;
    provider.set_failing(false);
    step_until(fx, &sender, id, &["stale", "sent", "dead"]).await;
    provider
}

#[tokio::test]
async fn a_booking_confirmation_waiting_in_retry_is_not_sent_after_the_appointment_was_cancelled() {
    let fx = Fixture::new().await;
    let patient = fx.create_patient().await;
    let practitioner = fx.create_practitioner().await;
    let (appointment, created) = fx.book(patient, practitioner, 30).await;
    let id = notified(&fx, Listener::PatientBookingConfirmation, &created).await;
    let provider = fail_once_then(&fx, id, async {
        fx.cancel(appointment).await;
    })
    .await;
    let (status, _, code) = delivery(&fx, id).await;
    assert_eq!(status, "stale", "never sent once the appointment was cancelled");
    assert_eq!(code.as_deref(), Some("appointment_not_booked"));
    assert_eq!(provider.calls().len(), 1, "only the failed try reached the provider");

    // An operator retry of the stale notification answers 409 naming why and writes nothing.
    match retry(&fx, id).await {
        Err(DomainError::Conflict(why)) => assert!(why.contains("stale"), "{why}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(delivery(&fx, id).await.0, "stale");
    let audit: i64 = fx
        .db
        .client()
        .await
        .query_one("SELECT count(*) FROM operator_actions WHERE notification_id = $1", &[&id])
        .await
        .unwrap()
        .get(0);
    assert_eq!(audit, 0);
}

#[tokio::test]
async fn a_reminder_is_not_sent_with_the_old_time_after_a_reschedule() {
    let fx = Fixture::new().await;
    let patient = fx.create_patient().await;
    let practitioner = fx.create_practitioner().await;
    let (appointment, _) = fx.book(patient, practitioner, 10).await;
    let report = clinic_core::housekeeping::reminders::run(
        &fx.db.pool,
        Duration::from_secs(24 * 3600),
        chrono::Utc::now(),
    )
    .await
    .unwrap();
    assert_eq!(report.emitted, 1);
    let client = fx.db.client().await;
    let event_id = client
        .query_one("SELECT id FROM events WHERE type = 'appointment.reminder_due'", &[])
        .await
        .unwrap()
        .get(0);
    let reminder = clinic_core::events::read::find(&client, event_id).await.unwrap().unwrap();
    let id = notified(&fx, Listener::PatientReminder, &reminder).await;
    let provider = fail_once_then(&fx, id, async {
        fx.reschedule(appointment, 40).await;
    })
    .await;
    let (status, _, code) = delivery(&fx, id).await;
    assert_eq!(status, "stale", "the reminder for the old time is never sent");
    assert_eq!(code.as_deref(), Some("appointment_changed"));
    assert_eq!(provider.calls().len(), 1);
}

#[tokio::test]
async fn a_slow_provider_under_a_short_lease_sends_no_row_twice_and_loses_none() {
    let fx = Fixture::new().await;
    let patient = fx.create_patient().await;
    let practitioner = fx.create_practitioner().await;
    let booked = fx.book_many(patient, practitioner, 30, 6).await;
    for (_, created) in &booked {
        notified(&fx, Listener::PatientBookingConfirmation, created).await;
    }
    // Each answer takes 400 ms; a batch of six sent one after another outlives a 1 s lease.
    let provider = Scripted::new(Duration::from_millis(400), false);
    let mut slow = config(6);
    slow.batch = 6;
    slow.lease = Duration::from_secs(1);
    slow.provider_timeout = Duration::from_millis(800);
    let senders: Vec<Sender> = (0..2).map(|_| sender(&fx, &provider, slow.clone())).collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    let finals = "SELECT count(*) FROM notifications WHERE status IN ('sent', 'dead', 'stale')";
    let runs = senders.into_iter().map(|sender| {
        let fx = &fx;
        async move {
            while fx.count(finals).await < 6 {
                assert!(Instant::now() < deadline, "deliveries still open after a minute");
                sender.step_due().await.unwrap();
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    });
    futures::future::join_all(runs).await;
    assert_eq!(fx.count("SELECT count(*) FROM notifications WHERE status = 'sent'").await, 6, "none lost");
    let mut keys: Vec<String> = provider.calls().into_iter().map(|(key, _)| key).collect();
    keys.sort();
    let sent = keys.len();
    keys.dedup();
    assert_eq!(sent, keys.len(), "a row was sent twice: {sent} calls for {} rows", keys.len());
}

#[tokio::test]
async fn a_fast_path_send_too_close_to_its_deadline_starts_no_provider_call() {
    let fx = Fixture::new().await;
    let patient = fx.create_patient().await;
    let practitioner = fx.create_practitioner().await;
    let (_, created) = fx.book(patient, practitioner, 30).await;
    let id = notified(&fx, Listener::PatientBookingConfirmation, &created).await;
    let key = format!("{}:{}", created.id, Listener::PatientBookingConfirmation.as_str());
    let provider = Scripted::new(Duration::ZERO, false);
    let sender = sender(&fx, &provider, config(6));
    // 10 s provider timeout: a call started with 5 s left could be cut off after the provider
    // accepted the message.
    let report = sender.send_key_within(&key, Duration::from_secs(5)).await.unwrap();
    assert_eq!(report.claimed, 0);
    assert!(provider.calls().is_empty());
    assert_eq!(delivery(&fx, id).await, ("pending".to_owned(), 0, None), "left due, nothing spent");
    let report = sender.send_key_within(&key, Duration::from_secs(30)).await.unwrap();
    assert_eq!((report.claimed, report.sent), (1, 1));
}

/// The listener host's after-commit step, through the local transport: a committed notification is
/// sent right after the listener's commit when the provider call fits in the run's bound, and left
/// due (no call, nothing spent) when it does not — the delivery sender's own deadline rule.
#[tokio::test]
async fn the_local_transport_sends_right_after_the_commit_only_when_the_call_fits_its_bound() {
    use clinic_core::dispatch::{LocalTransport, Start, Transport};
    let fx = Fixture::new().await;
    let patient = fx.create_patient().await;
    let practitioner = fx.create_practitioner().await;
    let booked = fx.book_many(patient, practitioner, 30, 2).await;
    let listener = Listener::PatientBookingConfirmation;
    let provider = Scripted::new(Duration::ZERO, false);
    // The provider timeout is 10 s (plus the 2 s margin): a 5 s run bound cannot hold the call.
    let tight = LocalTransport::new(fx.db.pool.clone())
        .with_sender(sender(&fx, &provider, config(6)))
        .with_run_timeout(Duration::from_secs(5));
    assert!(tight.start(&[Start { envelope: &booked[0].1, listener }]).await[0].is_ok());
    assert!(provider.calls().is_empty(), "no provider call it could not finish");
    assert_eq!(
        fx.count("SELECT count(*) FROM notifications WHERE status = 'pending' AND attempts = 0").await,
        1
    );
    // The default bound (25 s) holds it: sent before the start answers.
    let roomy = LocalTransport::new(fx.db.pool.clone()).with_sender(sender(&fx, &provider, config(6)));
    assert!(roomy.start(&[Start { envelope: &booked[1].1, listener }]).await[0].is_ok());
    let key = format!("{}:{}", booked[1].1.id, listener.as_str());
    assert_eq!(provider.calls().into_iter().map(|(key, _)| key).collect::<Vec<_>>(), [key]);
    assert_eq!(fx.count("SELECT count(*) FROM notifications WHERE status = 'sent'").await, 1);
}
