//! The listener Lambda treats a message as an untrusted pointer (every reason code, each message
//! failing alone, one log line and one `Rejected` metric each) and bounds its run by the invocation
//! deadline (unstarted messages reported as failed, finished ones not).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
use clinic_core::appointments::{self, AppointmentStatus};
use clinic_core::events::{Envelope, EventType};
use clinic_core::ids::{AppointmentId, EventId, WorkspaceId};
use clinic_core::listeners::{Listener, Rejection};
use clinic_listener::{handle, State};
use clinic_sqs::{to_cloud_event, CloudEvent};
use clinic_testkit::TestDb;
use lambda_runtime::{Context, LambdaEvent};
use serde_json::json;

fn batch(records: &[(&str, String)], context: Context) -> LambdaEvent<SqsEvent> {
    let records: Vec<_> = records
        .iter()
        .map(|(id, body)| {
            json!({
                "messageId": id, "receiptHandle": format!("AQEB{id}"), "body": body,
                "attributes": {"ApproximateReceiveCount": "1", "SentTimestamp": "1764460800000",
                               "SenderId": "AIDAEXAMPLE", "ApproximateFirstReceiveTimestamp": "1764460800001"},
                "messageAttributes": {}, "md5OfBody": "e4e68fb7bd0e697a0ae8f1bb342846b3",
                "eventSource": "aws:sqs", "awsRegion": "us-east-1",
                "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:clinic-listener"
            })
        })
        .collect();
    LambdaEvent::new(serde_json::from_value(json!({ "Records": records })).unwrap(), context)
}

fn cloud_event(envelope: &Envelope, listener: Listener) -> CloudEvent {
    to_cloud_event(envelope, listener, "/clinic")
}

fn body(event: &CloudEvent) -> String {
    serde_json::to_string(event).unwrap()
}

fn failed(response: &SqsBatchResponse) -> Vec<String> {
    let mut ids: Vec<String> =
        response.batch_item_failures.iter().map(|f| f.item_identifier.clone()).collect();
    ids.sort();
    ids
}

async fn count(db: &TestDb, query: &str) -> i64 {
    db.client().await.query_one(query, &[]).await.unwrap().get(0)
}

/// A forged body whose attributes agree with its own `data` (so the parser accepts it) but not
/// with the event log.
fn forged(envelope: &Envelope, listener: Listener, source_prefix: &str) -> String {
    body(&to_cloud_event(envelope, listener, source_prefix))
}

#[tokio::test]
async fn every_forged_or_altered_message_fails_alone_with_its_reason_and_changes_nothing() {
    clinic_testkit::init_test_logging();
    let logs = clinic_testkit::capture_logs();
    let db = clinic_testkit::fresh_db().await;
    let mut booked = clinic_testkit::seed::booked_appointments(&db, 2).await;
    let (created, other) = (booked.remove(0), booked.remove(0));
    let client = db.client().await;
    let appointment = AppointmentId::from_ulid(created.resource_id);
    let patient =
        appointments::repo::find(&client, created.workspace_id, appointment).await.unwrap().unwrap();

    // A forged patient.deleted for the real patient of a real workspace, with an id that exists nowhere.
    let mut deletion = created.clone();
    deletion.id = EventId::generate();
    deletion.event_type = EventType::PatientDeleted;
    deletion.resource_type = clinic_core::events::ResourceType::Patient;
    deletion.resource_id = patient.patient_id.ulid();
    let mut tenant = created.clone();
    tenant.workspace_id = WorkspaceId::generate();
    let mut retyped = created.clone();
    retyped.event_type = EventType::AppointmentCancelled;
    let mut subject = created.clone();
    subject.resource_id = other.resource_id;
    let mut version = created.clone();
    version.resource_version += 7;

    let cases: Vec<(&str, String, Rejection)> = vec![
        (
            "f-unknown",
            forged(&deletion, Listener::CancelFutureAppointments, "/clinic"),
            Rejection::UnknownEvent,
        ),
        (
            "f-tenant",
            forged(&tenant, Listener::PatientBookingConfirmation, "/clinic"),
            Rejection::TenantMismatch,
        ),
        ("f-type", forged(&retyped, Listener::PatientCancellationNotice, "/clinic"), Rejection::TypeMismatch),
        (
            "f-subject",
            forged(&subject, Listener::PatientBookingConfirmation, "/clinic"),
            Rejection::SubjectMismatch,
        ),
        (
            "f-version",
            forged(&version, Listener::PatientBookingConfirmation, "/clinic"),
            Rejection::VersionMismatch,
        ),
        (
            "f-source",
            forged(&created, Listener::PatientBookingConfirmation, "/elsewhere"),
            Rejection::SourceMismatch,
        ),
        ("f-routing", forged(&created, Listener::PatientReminder, "/clinic"), Rejection::ListenerNotRouted),
    ];
    assert_eq!(cases.len(), Rejection::ALL.len(), "one case per reason code");
    let mut records: Vec<(&str, String)> = cases.iter().map(|(id, body, _)| (*id, body.clone())).collect();
    records.push(("genuine", body(&cloud_event(&created, Listener::PatientBookingConfirmation))));

    let state = State::new(db.pool.clone());
    let response = handle(&state, batch(&records, Context::default())).await.unwrap();
    let mut expected: Vec<String> = cases.iter().map(|(id, _, _)| id.to_string()).collect();
    expected.sort();
    assert_eq!(failed(&response), expected, "every forgery fails alone; the genuine message succeeds");

    // Only the genuine message acted: one receipt, one notification, the appointment still booked.
    assert_eq!(count(&db, "SELECT count(*) FROM listener_receipts").await, 1);
    assert_eq!(count(&db, "SELECT count(*) FROM notifications").await, 1);
    let again = appointments::repo::find(&client, created.workspace_id, appointment).await.unwrap().unwrap();
    assert_eq!(again.status, AppointmentStatus::Booked);
    assert_eq!(count(&db, "SELECT count(*) FROM events WHERE type = 'appointment.cancelled'").await, 0);

    // One structured line per rejection, with the message id and the code.
    let lines = logs.json_lines();
    for (id, _, reason) in &cases {
        let matching = lines
            .iter()
            .filter(|line| line["fields"]["message_id"] == *id && line["fields"]["code"] == reason.as_str())
            .count();
        assert_eq!(matching, 1, "{id}: {reason:?}\n{}", logs.text());
    }
}

fn context_with_deadline(deadline: SystemTime) -> Context {
    let mut context = Context::default();
    context.deadline = deadline.duration_since(UNIX_EPOCH).unwrap().as_millis() as u64;
    context
}

#[tokio::test]
async fn near_the_deadline_no_message_is_started_and_all_are_reported_failed() {
    let db = clinic_testkit::fresh_db().await;
    let events = clinic_testkit::seed::booked_appointments(&db, 3).await;
    let records: Vec<(String, String)> = events
        .iter()
        .enumerate()
        .map(|(i, e)| (format!("late-{i}"), body(&cloud_event(e, Listener::PatientBookingConfirmation))))
        .collect();
    let records: Vec<(&str, String)> = records.iter().map(|(id, b)| (id.as_str(), b.clone())).collect();
    let state = State::new(db.pool.clone()).with_deadline_margin(Duration::from_secs(3));
    // 1 s left: inside the 3 s margin.
    let near = context_with_deadline(SystemTime::now() + Duration::from_secs(1));
    let response = handle(&state, batch(&records, near)).await.unwrap();
    assert_eq!(failed(&response), ["late-0", "late-1", "late-2"]);
    assert_eq!(count(&db, "SELECT count(*) FROM listener_receipts").await, 0);

    // With time to spare the same batch runs in full, and nothing is reported failed.
    let ample = context_with_deadline(SystemTime::now() + Duration::from_secs(120));
    let response = handle(&state, batch(&records, ample)).await.unwrap();
    assert!(response.batch_item_failures.is_empty(), "{:?}", failed(&response));
    assert_eq!(count(&db, "SELECT count(*) FROM listener_receipts").await, 3);
}

#[tokio::test]
async fn a_message_blocked_past_the_deadline_fails_alone_and_finished_ones_are_kept() {
    let db = clinic_testkit::fresh_db().await;
    let events = clinic_testkit::seed::booked_appointments(&db, 2).await;
    // Another session is inserting the first message's receipt and has not committed: the run of
    // that message blocks on the receipt's row lock.
    let mut blocker = db.client().await;
    let tx = blocker.transaction().await.unwrap();
    tx.execute(
        "INSERT INTO listener_receipts (listener, event_id) VALUES ('patient_booking_confirmation', $1)",
        &[&events[0].id],
    )
    .await
    .unwrap();

    let records = vec![
        ("blocked", body(&cloud_event(&events[0], Listener::PatientBookingConfirmation))),
        ("free", body(&cloud_event(&events[1], Listener::PatientBookingConfirmation))),
    ];
    // A margin of 4 s and a deadline 6 s away: the blocked run is abandoned after about 4 s.
    let state = State::new(db.pool.clone()).with_deadline_margin(Duration::from_secs(4)).with_concurrency(2);
    let context = context_with_deadline(SystemTime::now() + Duration::from_secs(6));
    let response = handle(&state, batch(&records, context)).await.unwrap();
    tx.rollback().await.unwrap();
    assert_eq!(failed(&response), ["blocked"], "the finished message is not redelivered");
    // The abandoned run left nothing behind (its transaction rolled back).
    let receipts: Vec<uuid::Uuid> = db
        .client()
        .await
        .query("SELECT event_id FROM listener_receipts", &[])
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert_eq!(receipts, [events[1].id.uuid()]);
    assert_eq!(count(&db, "SELECT count(*) FROM notifications").await, 1);
}
