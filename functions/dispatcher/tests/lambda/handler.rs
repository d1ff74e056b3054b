//! The dispatcher Lambda's handler, fed a real EventBridge scheduled event: one-pass and drain modes.

use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_lambda_events::event::eventbridge::EventBridgeEvent;
use clinic_core::dispatch::{DispatchConfig, Dispatcher, LocalTransport};
use clinic_core::housekeeping::{JobKind, JobReport};
use clinic_dispatcher::{handle, Housekeeping, Mode, State};
use clinic_testkit::TestDb;
use lambda_runtime::{Context, LambdaEvent};
use serde_json::{json, Value};

fn scheduled_event(detail: Value) -> LambdaEvent<EventBridgeEvent<Value>> {
    let payload = json!({
        "version": "0",
        "id": "53dc4d37-cffa-4f76-80c9-8b7d4a4d2eaa",
        "detail-type": "Scheduled Event",
        "source": "aws.events",
        "account": "123456789012",
        "time": "2026-11-30T00:00:00Z",
        "region": "us-east-1",
        "resources": ["arn:aws:events:us-east-1:123456789012:rule/clinic-dispatcher"],
        "detail": detail
    });
    LambdaEvent::new(serde_json::from_value(payload).unwrap(), Context::default())
}

async fn booked() -> TestDb {
    clinic_testkit::init_test_logging();
    let db = clinic_testkit::fresh_db().await;
    clinic_testkit::seed::booked_appointments(&db, 1).await;
    db
}

fn state(db: &TestDb, window: Duration, mode: Mode) -> State {
    let dispatcher = Dispatcher::new(
        db.pool.clone(),
        Arc::new(LocalTransport::new(db.pool.clone())),
        DispatchConfig { poll_interval: Duration::from_millis(50), ..DispatchConfig::default() },
    )
    .with_listen(db.url.clone(), None);
    State::new(dispatcher, window, mode, Housekeeping::default())
}

async fn notifications(db: &TestDb) -> i64 {
    db.client().await.query_one("SELECT count(*) FROM notifications", &[]).await.unwrap().get(0)
}

#[tokio::test]
async fn a_one_pass_invocation_dispatches_what_is_due_and_returns() {
    let db = booked().await;
    let state = state(&db, Duration::from_secs(50), Mode::Drain);
    let started = Instant::now();
    let answer = handle(&state, scheduled_event(json!({"mode": "once"}))).await.unwrap();
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(answer.mode, Mode::Once);
    assert_eq!((answer.report.totals.dispatched, answer.report.totals.started), (3, 2));
    assert_eq!(notifications(&db).await, 2);
    let json = serde_json::to_value(&answer).unwrap();
    assert_eq!(json["mode"], "once");
    assert_eq!(json["dispatched"], 3);
}

#[tokio::test]
async fn a_drain_invocation_returns_before_its_window_ends() {
    let db = booked().await;
    let window = Duration::from_millis(600);
    let state = state(&db, window, Mode::Drain);
    let started = Instant::now();
    let answer = handle(&state, scheduled_event(json!({}))).await.unwrap();
    let elapsed = started.elapsed();
    assert!(
        elapsed >= Duration::from_millis(500) && elapsed <= window + Duration::from_millis(500),
        "{elapsed:?}"
    );
    assert_eq!(answer.mode, Mode::Drain);
    assert_eq!(answer.report.totals.dispatched, 3);
    assert_eq!(notifications(&db).await, 2);
    // Every drain counts the rows waiting for an operator (the `WaitingForOperator` gauge): none here.
    let waiting = clinic_core::housekeeping::waiting::Waiting::default();
    assert_eq!(answer.waiting, Some(waiting));
    assert_eq!(serde_json::to_value(&answer).unwrap()["waiting"]["webhookDeliveries"], 0);
    // A second invocation reuses the dispatcher (and its LISTEN connection) and finds nothing.
    let again = handle(&state, scheduled_event(json!({}))).await.unwrap();
    assert_eq!(again.report.steps, 0);
}

#[tokio::test]
async fn the_reminders_mode_emits_each_reminder_once_and_the_sweep_mode_runs() {
    let db = booked().await;
    let state = state(&db, Duration::from_secs(1), Mode::Drain);
    let first = handle(&state, scheduled_event(json!({"mode": "reminders"}))).await.unwrap();
    assert_eq!(first.mode, Mode::Job(JobKind::Reminders));
    let Some(JobReport::Reminders(report)) = first.job else { panic!("a reminders report: {first:?}") };
    assert_eq!(report.emitted, 1, "the appointment starts within the 24 h lead");
    let again = handle(&state, scheduled_event(json!({"mode": "reminders"}))).await.unwrap();
    let Some(JobReport::Reminders(report)) = again.job else { panic!("a reminders report: {again:?}") };
    assert_eq!(report.emitted, 0, "a repeated run emits nothing new");
    let reminders: i64 = db
        .client()
        .await
        .query_one("SELECT count(*) FROM events WHERE type = 'appointment.reminder_due'", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(reminders, 1);

    handle(&state, scheduled_event(json!({"mode": "once"}))).await.unwrap();
    let swept = handle(&state, scheduled_event(json!({"mode": "sweep"}))).await.unwrap();
    let Some(JobReport::Sweep(report)) = swept.job else { panic!("a sweep report: {swept:?}") };
    assert!(report.complete);
    assert_eq!(report.outbox_rows, 0, "nothing is older than the retention yet");
}

/// Every job goes through the one interface and is bounded by the invocation's deadline: with less
/// time left than the margin, none starts work, and each report says it stopped early.
#[tokio::test]
async fn a_job_with_no_time_left_before_its_deadline_starts_no_work() {
    let db = booked().await;
    let state = state(&db, Duration::from_secs(1), Mode::Drain);
    let mut event = scheduled_event(json!({"mode": "reminders"}));
    let soon = std::time::SystemTime::now() + Duration::from_secs(1);
    event.context.deadline = soon.duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64;
    for mode in ["reminders", "sweep", "reconcile"] {
        event.payload.detail = json!({ "mode": mode });
        let answer = handle(&state, event.clone()).await.unwrap();
        assert_eq!(answer.mode.as_str(), mode);
        match answer.job {
            Some(JobReport::Reminders(report)) => {
                assert!(report.stopped_at_deadline && report.emitted == 0, "{report:?}")
            }
            Some(JobReport::Sweep(report)) => assert!(!report.complete, "{report:?}"),
            Some(JobReport::Reconcile(report)) => assert!(report.stopped_at_deadline, "{report:?}"),
            other => panic!("{mode}: {other:?}"),
        }
    }
    let reminders: i64 = db
        .client()
        .await
        .query_one("SELECT count(*) FROM events WHERE type = 'appointment.reminder_due'", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(reminders, 0, "the due reminder waits for the next run");
    // Without a deadline the same job does the work.
    let answer = handle(&state, scheduled_event(json!({"mode": "reminders"}))).await.unwrap();
    let Some(JobReport::Reminders(report)) = answer.job else { panic!("{answer:?}") };
    assert_eq!((report.emitted, report.stopped_at_deadline), (1, false));
    assert_eq!(answer.mode, Mode::Job(JobKind::Reminders));
}
