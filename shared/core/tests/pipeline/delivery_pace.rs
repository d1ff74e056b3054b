//! Priority by kind and the provider's pace (issue 41 items 2 and 3) on real PostgreSQL: a
//! cancellation or same-day change is claimed before older routine notices, within and across
//! clinics; a provider that answers "throttled" holds the row (its attempt given back) and never
//! walks it to `dead`.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use clinic_core::delivery::{
    Accepted, DeliveryConfig, NotifierKind, OutgoingMessage, Provider, ProviderError, Providers, Sender,
};
use clinic_core::events::Envelope;
use clinic_core::ids::WorkspaceId;
use clinic_core::lease::rate::Pace;
use clinic_core::listeners::{self, Listener, ListenerOutcome};
use clinic_core::outbox::{Backoff, Jitter};
use clinic_core::workspaces;

use super::fair_claim::due_notifications;
use super::support::Fixture;

async fn notify(fx: &Fixture, listener: Listener, event: &Envelope) {
    let outcome = listeners::run(&fx.db.pool, listener, event).await.unwrap();
    assert_eq!(outcome, ListenerOutcome::Applied { effects: 1 });
}

/// The templates of the rows claimed so far (an attempt counted), in no order.
async fn claimed_templates(fx: &Fixture) -> Vec<String> {
    let rows = fx
        .db
        .client()
        .await
        .query("SELECT template FROM notifications WHERE attempts > 0 ORDER BY template", &[])
        .await
        .unwrap();
    rows.iter().map(|row| row.get(0)).collect()
}

/// Fast retries and holds, `max_attempts` attempts, `batch` rows a claim.
fn config(max_attempts: i32, batch: i64) -> DeliveryConfig {
    let mut config = DeliveryConfig::with_notifiers(vec![NotifierKind::Log]);
    config.max_attempts = max_attempts;
    config.batch = batch;
    config.backoff =
        Backoff { base: Duration::from_millis(1), cap: Duration::from_millis(2), jitter: Jitter::Equal };
    config
}

#[tokio::test]
async fn a_cancellation_and_a_same_day_change_are_claimed_before_older_routine_notices() {
    let fx = Fixture::new().await;
    // Another clinic's routine reminders, older than everything below.
    let other = WorkspaceId::generate();
    workspaces::insert_workspace(&fx.db.client().await, other, "Other clinic").await.unwrap();
    due_notifications(&fx, other, "appointment.reminder", 5, 600.0).await;
    // This clinic: six booking confirmations (routine), then one cancellation, one reschedule to
    // this afternoon (same day) and one to next week (not same day).
    let patient = fx.create_patient().await;
    let practitioner = fx.create_practitioner().await;
    let booked = fx.book_many(patient, practitioner, 30, 6).await;
    for (_, created) in &booked {
        notify(&fx, Listener::PatientBookingConfirmation, created).await;
    }
    let cancelled = fx.cancel(booked[0].0).await;
    notify(&fx, Listener::PatientCancellationNotice, &cancelled).await;
    let next_week = fx.reschedule(booked[1].0, 170).await;
    notify(&fx, Listener::PatientRescheduleNotice, &next_week).await;
    let same_day = fx.reschedule(booked[2].0, 3).await;
    notify(&fx, Listener::PatientRescheduleNotice, &same_day).await;

    let sender = Sender::new(fx.db.pool.clone(), Providers::default(), config(6, 2));
    let report = sender.step_due().await.unwrap();

    assert_eq!(report.claimed, 2, "{report:?}");
    assert_eq!(
        claimed_templates(&fx).await,
        ["appointment.cancellation_notice", "appointment.reschedule_notice"],
        "the urgent kinds go first, whatever their age and whoever else waits"
    );
    let same_day_claimed: i64 = fx
        .db
        .client()
        .await
        .query_one("SELECT attempts::bigint FROM notifications WHERE event_id = $1", &[&same_day.id])
        .await
        .unwrap()
        .get(0);
    assert_eq!(same_day_claimed, 1, "the same-day reschedule, not next week's");
}

/// A provider stand-in that answers every call "throttled" and counts the calls.
struct Throttling {
    calls: Mutex<usize>,
}

#[async_trait]
impl Provider for Throttling {
    fn name(&self) -> &'static str {
        "throttling"
    }

    async fn send(&self, _message: &OutgoingMessage) -> Result<Accepted, ProviderError> {
        *self.calls.lock().unwrap() += 1;
        Err(ProviderError::retryable("provider_throttled"))
    }
}

#[tokio::test]
async fn a_throttling_provider_never_walks_a_notification_to_dead() {
    let fx = Fixture::new().await;
    let patient = fx.create_patient().await;
    let practitioner = fx.create_practitioner().await;
    let (_, created) = fx.book(patient, practitioner, 30).await;
    notify(&fx, Listener::PatientBookingConfirmation, &created).await;
    let provider = Arc::new(Throttling { calls: Mutex::new(0) });
    let mut config = config(2, 5);
    config.pace.push(Pace::new("throttling", "test-region", 1000.0));
    let sender = Sender::new(fx.db.pool.clone(), Providers::both(provider.clone()), config);

    // Three times the attempt ceiling of provider calls, each answered "throttled".
    let deadline = Instant::now() + Duration::from_secs(30);
    while *provider.calls.lock().unwrap() < 6 {
        assert!(Instant::now() < deadline, "the held row was not offered again");
        sender.step_due().await.unwrap();
        tokio::time::sleep(Duration::from_millis(5)).await;
    }

    let row = fx
        .db
        .client()
        .await
        .query_one(
            "SELECT status, attempts, last_error_code FROM notifications WHERE event_id = $1",
            &[&created.id],
        )
        .await
        .unwrap();
    let (status, attempts, code): (String, i32, Option<String>) = (row.get(0), row.get(1), row.get(2));
    assert_eq!(status, "retry", "held, not dead");
    assert_eq!(attempts, 0, "a throttled call gives its attempt back");
    assert_eq!(code.as_deref(), Some("provider_throttled"));

    // Every throttling answer slowed the provider's shared bucket, for a while.
    let bucket = fx
        .db
        .client()
        .await
        .query_one(
            "SELECT throttled, slow_factor, slowed_until > now() FROM provider_rate_buckets \
             WHERE provider = 'throttling' AND region = 'test-region'",
            &[],
        )
        .await
        .unwrap();
    let (throttled, factor, slowed): (i64, f64, bool) = (bucket.get(0), bucket.get(1), bucket.get(2));
    assert!(throttled >= 6, "{throttled}");
    assert_eq!(factor, 0.5);
    assert!(slowed);
}

/// A provider stand-in that accepts every call and notes when it came.
struct Accepting {
    calls: Mutex<Vec<Instant>>,
}

#[async_trait]
impl Provider for Accepting {
    fn name(&self) -> &'static str {
        "paced"
    }

    async fn send(&self, message: &OutgoingMessage) -> Result<Accepted, ProviderError> {
        self.calls.lock().unwrap().push(Instant::now());
        Ok(Accepted { provider_message_id: format!("m-{}", message.notification_id) })
    }
}

#[tokio::test]
async fn two_senders_share_one_provider_rate_held_in_postgres() {
    let fx = Fixture::new().await;
    let patient = fx.create_patient().await;
    let practitioner = fx.create_practitioner().await;
    for (_, created) in fx.book_many(patient, practitioner, 30, 30).await {
        notify(&fx, Listener::PatientBookingConfirmation, &created).await;
    }
    let provider = Arc::new(Accepting { calls: Mutex::new(Vec::new()) });
    let mut config = config(6, 5);
    // 10 a second, no saved-up burst: 30 sends take at least 2.9 s whoever makes them.
    config.pace.push(Pace { burst: 1.0, ..Pace::new("paced", "test-region", 10.0) });
    let senders: Vec<Sender> = (0..2)
        .map(|_| Sender::new(fx.db.pool.clone(), Providers::both(provider.clone()), config.clone()))
        .collect();
    let started = Instant::now();
    let deadline = started + Duration::from_secs(60);
    let sent = "SELECT count(*) FROM notifications WHERE status = 'sent'";
    let runs = senders.iter().map(|sender| {
        let fx = &fx;
        async move {
            while fx.count(sent).await < 30 {
                assert!(Instant::now() < deadline, "not all sent within a minute");
                sender.step_due().await.unwrap();
            }
        }
    });
    futures::future::join_all(runs).await;

    let calls = provider.calls.lock().unwrap().clone();
    assert_eq!(calls.len(), 30, "each sent once");
    let spread = calls.iter().max().unwrap().duration_since(*calls.iter().min().unwrap());
    assert!(spread >= Duration::from_millis(2_600), "30 calls at 10/s took only {spread:?}");
    assert_eq!(
        fx.count("SELECT count(*) FROM notifications WHERE attempts <> 1").await,
        0,
        "waiting for a token spends no attempt"
    );
}
