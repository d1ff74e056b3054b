//! The listener Lambda's handler, fed real SQS event JSON: partial batch failures, duplicates, and
//! the whole path commit → dispatcher (SQS, against `moto_server`) → listener → notification.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use aws_lambda_events::event::sqs::SqsEvent;
use clinic_core::db::Tx;
use clinic_core::dispatch::{DispatchConfig, Dispatcher};
use clinic_core::events::Envelope;
use clinic_core::listeners::notify::{NewNotification, Notified, Notifier, NotifyError};
use clinic_core::listeners::Listener;
use clinic_listener::{handle, State};
use clinic_sqs::queues::create_queues;
use clinic_sqs::testing::Emulator;
use clinic_sqs::{to_cloud_event, SqsTransport};
use clinic_testkit::TestDb;
use lambda_runtime::{Context, LambdaEvent};
use serde_json::{json, Value};

async fn booked() -> (TestDb, Envelope) {
    clinic_testkit::init_test_logging();
    let db = clinic_testkit::fresh_db().await;
    let event = clinic_testkit::seed::booked_appointments(&db, 1).await.remove(0);
    (db, event)
}

/// An SQS event as Lambda delivers it, one record per `(message id, body, listener attribute)`.
fn sqs_event(records: &[(String, String, &str)]) -> LambdaEvent<SqsEvent> {
    let records: Vec<Value> = records
        .iter()
        .map(|(id, body, listener)| {
            json!({
                "messageId": id,
                "receiptHandle": format!("AQEB{id}"),
                "body": body,
                "attributes": {
                    "ApproximateReceiveCount": "1",
                    "SentTimestamp": "1764460800000",
                    "SenderId": "AIDAEXAMPLE",
                    "ApproximateFirstReceiveTimestamp": "1764460800001"
                },
                "messageAttributes": {
                    "listener": {"stringValue": listener, "stringListValues": [], "binaryListValues": [], "dataType": "String"}
                },
                "md5OfBody": "e4e68fb7bd0e697a0ae8f1bb342846b3",
                "eventSource": "aws:sqs",
                "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:clinic-listener",
                "awsRegion": "us-east-1"
            })
        })
        .collect();
    let payload: SqsEvent = serde_json::from_value(json!({ "Records": records })).unwrap();
    LambdaEvent::new(payload, Context::default())
}

fn body(envelope: &Envelope, listener: Listener) -> String {
    serde_json::to_string(&to_cloud_event(envelope, listener, "/clinic")).unwrap()
}

fn failed_ids(response: &aws_lambda_events::event::sqs::SqsBatchResponse) -> Vec<String> {
    let mut ids: Vec<String> =
        response.batch_item_failures.iter().map(|f| f.item_identifier.clone()).collect();
    ids.sort();
    ids
}

async fn count(db: &TestDb, query: &str) -> i64 {
    db.client().await.query_one(query, &[]).await.unwrap().get(0)
}

#[tokio::test]
async fn a_batch_with_malformed_messages_reports_exactly_those_ids() {
    let (db, event) = booked().await;
    let state = State::new(db.pool.clone());
    let mut unknown: Value = serde_json::from_str(&body(&event, Listener::PatientReminder)).unwrap();
    unknown["listener"] = json!("send_fax");
    let batch = sqs_event(&[
        (
            "m1-good".into(),
            body(&event, Listener::PatientBookingConfirmation),
            "patient_booking_confirmation",
        ),
        ("m2-not-json".into(), "{\"specversion\": \"1.0\", oops".into(), "patient_booking_confirmation"),
        ("m3-unknown-listener".into(), unknown.to_string(), "send_fax"),
        ("m4-not-routed".into(), body(&event, Listener::PatientReminder), "patient_reminder"),
        (
            "m5-good".into(),
            body(&event, Listener::PractitionerScheduleChange),
            "practitioner_schedule_change",
        ),
    ]);
    let response = handle(&state, batch).await.unwrap();
    assert_eq!(failed_ids(&response), ["m2-not-json", "m3-unknown-listener", "m4-not-routed"]);
    assert_eq!(count(&db, "SELECT count(*) FROM notifications").await, 2);
}

/// A provider that is down.
struct Down;

#[async_trait]
impl Notifier for Down {
    async fn notify(&self, _: &Tx<'_>, _: &NewNotification) -> Result<Notified, NotifyError> {
        Err(NotifyError::Provider {
            code: "ses_throttled".into(),
            message: "throttled".into(),
            retryable: true,
        })
    }
}

#[tokio::test]
async fn a_retryable_failure_is_reported_and_a_redelivery_then_succeeds() {
    let (db, event) = booked().await;
    let down = State::new(db.pool.clone()).with_notifier(Arc::new(Down)).with_concurrency(2);
    let records = [(
        "r1".to_owned(),
        body(&event, Listener::PatientBookingConfirmation),
        "patient_booking_confirmation",
    )];
    let response = handle(&down, sqs_event(&records)).await.unwrap();
    assert_eq!(failed_ids(&response), ["r1"]);
    // Nothing was committed, not even the receipt.
    assert_eq!(count(&db, "SELECT count(*) FROM listener_receipts").await, 0);

    let up = State::new(db.pool.clone());
    assert!(handle(&up, sqs_event(&records)).await.unwrap().batch_item_failures.is_empty());
    // A duplicate redelivery is a success too.
    assert!(handle(&up, sqs_event(&records)).await.unwrap().batch_item_failures.is_empty());
    assert_eq!(count(&db, "SELECT count(*) FROM notifications").await, 1);
}

#[tokio::test]
async fn end_to_end_over_sqs_commit_dispatch_listen_notify_and_duplicates_are_no_ops() {
    let Some(emulator) = Emulator::start() else { return };
    let sqs = emulator.client();
    let queues = create_queues(&sqs, &format!("e2e-{}", ulid::Ulid::generate()), false).await.unwrap();
    let (db, event) = booked().await;
    let config = DispatchConfig { lease: Duration::from_secs(5), ..DispatchConfig::default() };
    let transport = SqsTransport::new(sqs.clone(), queues.clone(), "/clinic");
    let dispatcher = Dispatcher::new(db.pool.clone(), Arc::new(transport), config);
    assert_eq!(dispatcher.drain_once().await.unwrap().totals.started, 2);

    let mut records = Vec::new();
    for listener in [Listener::PatientBookingConfirmation, Listener::PractitionerScheduleChange] {
        for message in clinic_sqs::testing::receive_all(&sqs, queues.url(listener).unwrap()).await {
            records.push((
                message.message_id().unwrap().to_owned(),
                message.body().unwrap().to_owned(),
                listener.as_str(),
            ));
        }
    }
    assert_eq!(records.len(), 2);
    let state = State::new(db.pool.clone());
    assert!(handle(&state, sqs_event(&records)).await.unwrap().batch_item_failures.is_empty());
    assert!(handle(&state, sqs_event(&records)).await.unwrap().batch_item_failures.is_empty());
    let rows = db
        .client()
        .await
        .query(
            "SELECT listener, template FROM notifications WHERE event_id = $1 ORDER BY listener",
            &[&event.id],
        )
        .await
        .unwrap();
    let got: Vec<(String, String)> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
    assert_eq!(
        got,
        [
            ("patient_booking_confirmation".into(), "appointment.booking_confirmation".into()),
            ("practitioner_schedule_change".into(), "appointment.schedule_change.booked".into()),
        ]
    );
    let status: String = db
        .client()
        .await
        .query_one("SELECT status FROM event_outbox WHERE event_id = $1", &[&event.id])
        .await
        .unwrap()
        .get(0);
    assert_eq!(status, "dispatched");
}
