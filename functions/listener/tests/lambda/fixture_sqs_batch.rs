//! Handler tests driven by the committed SQS event `tests/fixtures/sqs_listener_batch.json`: a batch
//! from the `patient_booking_confirmation` queue with two CloudEvents and one poison message (a body
//! typed into the SQS console).
//!
//! The fixture's CloudEvents name events of a database that does not exist here, so the tests keep
//! every record as written (message ids, receipt handles, attributes, queue ARN) and swap only the
//! two valid bodies for the same documents about events committed in a fresh PostgreSQL database.

use aws_lambda_events::event::sqs::SqsEvent;
use clinic_core::events::{read, Envelope, EventType};
use clinic_core::ids::{AppointmentId, EventId};
use clinic_core::listeners::Listener;
use clinic_listener::{handle, State};
use clinic_testkit::app::TestApp;
use lambda_runtime::{Context, LambdaEvent};
use serde_json::{json, Value};

const BATCH: &str = include_str!("../../../../tests/fixtures/sqs_listener_batch.json");
const POISON_MESSAGE_ID: &str = "b3e5a7c9-1d2f-4a6b-8c0d-e2f4a6b8c0d2";

fn fixture() -> SqsEvent {
    serde_json::from_str(BATCH).expect("the fixture is an SQS event")
}

#[test]
fn the_fixture_bodies_are_what_the_sqs_transport_sends() {
    let event = fixture();
    assert_eq!(event.records.len(), 3);
    for record in &event.records {
        assert_eq!(record.event_source.as_deref(), Some("aws:sqs"));
        let body = record.body.as_deref().expect("body");
        let parsed = clinic_sqs::parse_message(body);
        if record.message_id.as_deref() == Some(POISON_MESSAGE_ID) {
            assert!(parsed.is_err(), "the poison body is rejected");
            continue;
        }
        let (listener, envelope) = parsed.expect("a valid clinic CloudEvent");
        assert_eq!(listener, Listener::PatientBookingConfirmation);
        assert_eq!(envelope.event_type, EventType::AppointmentCreated);
        // Re-rendering the envelope gives back the hand-written document (the stack's API is the base
        // of its `dataschema`, CLINIC_SCHEMA_BASE_URL; this test runs with the default base).
        let mut rendered = clinic_sqs::to_cloud_event(&envelope, listener, "/clinic/clinic-prod");
        let written: Value = serde_json::from_str(body).expect("JSON");
        let schema = clinic_core::contract::schema_path(envelope.event_type, envelope.version);
        assert!(written["dataschema"].as_str().unwrap().ends_with(&format!("/{schema}")));
        assert!(rendered.dataschema.ends_with(&format!("/{schema}")));
        rendered.dataschema = written["dataschema"].as_str().unwrap().to_owned();
        assert_eq!(serde_json::to_value(&rendered).expect("JSON"), written);
    }
}

/// The envelope of the single `appointment.created` event of `appointment`.
async fn created_event(app: &TestApp, appointment: &Value) -> Envelope {
    let appointment: AppointmentId = appointment["id"].as_str().expect("id").parse().expect("ULID");
    let conn = app.db.client().await;
    let row = conn
        .query_one(
            "SELECT id FROM events
              WHERE resource_type = 'appointment' AND type = 'appointment.created'
                AND resource_id = $1",
            &[&appointment],
        )
        .await
        .expect("the booking's event");
    let id: EventId = row.get(0);
    read::find(&conn, id).await.expect("read").expect("the event exists")
}

/// The fixture with its valid bodies rewritten for `envelopes` (in record order).
fn batch_for(envelopes: &[Envelope]) -> SqsEvent {
    let mut event = fixture();
    let mut envelopes = envelopes.iter();
    for record in &mut event.records {
        if record.message_id.as_deref() == Some(POISON_MESSAGE_ID) {
            continue;
        }
        let envelope = envelopes.next().expect("one envelope per valid record");
        let document =
            clinic_sqs::to_cloud_event(envelope, Listener::PatientBookingConfirmation, "/clinic/clinic-prod");
        record.body = Some(serde_json::to_string(&document).expect("JSON"));
    }
    event
}

#[tokio::test]
async fn a_fixture_batch_runs_the_listener_and_fails_only_the_poison_message() {
    clinic_testkit::init_test_logging();
    let app = TestApp::new().await;
    let staff = app.workspace.staff.clone();
    let patient = app.create_patient(&staff, json!({ "givenName": "Ada", "familyName": "Lovelace" })).await;
    let practitioner = app.create_practitioner(&staff).await;
    let first =
        app.book(&staff, &patient, &practitioner, "2030-01-07T09:00:00Z", "2030-01-07T09:30:00Z").await;
    let second =
        app.book(&staff, &patient, &practitioner, "2030-01-08T09:00:00Z", "2030-01-08T09:30:00Z").await;
    let envelopes = [created_event(&app, &first).await, created_event(&app, &second).await];

    // As in AWS: the listener connects as the restricted clinic_app role.
    let pool = clinic_core::db::connect_pool(&app.db.url_for_role("clinic_app"), 2, None).expect("pool");
    // The fixture's bodies were published by the stack `clinic-prod` (source `/clinic/clinic-prod/…`).
    let state = State::new(pool).with_source_prefix("/clinic/clinic-prod");

    let answer = handle(&state, LambdaEvent::new(batch_for(&envelopes), Context::default()))
        .await
        .expect("the batch is answered");
    let failed: Vec<&str> =
        answer.batch_item_failures.iter().map(|failure| failure.item_identifier.as_str()).collect();
    assert_eq!(failed, [POISON_MESSAGE_ID], "only the poison message fails");

    let confirmations = "SELECT 1 FROM notifications
                          WHERE listener = 'patient_booking_confirmation'
                            AND recipient_kind = 'patient'";
    assert_eq!(app.count(confirmations).await, 2, "one confirmation per booking");
    for envelope in &envelopes {
        let receipts = format!(
            "SELECT 1 FROM listener_receipts
              WHERE listener = 'patient_booking_confirmation' AND event_id = '{}'",
            envelope.id.uuid()
        );
        assert_eq!(app.count(&receipts).await, 1, "receipt for {}", envelope.id);
    }

    // SQS redelivers the same batch (at-least-once): the effects are not repeated.
    let again = handle(&state, LambdaEvent::new(batch_for(&envelopes), Context::default()))
        .await
        .expect("the batch is answered");
    assert_eq!(again.batch_item_failures.len(), 1);
    assert_eq!(again.batch_item_failures[0].item_identifier, POISON_MESSAGE_ID);
    assert_eq!(app.count(confirmations).await, 2, "a redelivery is a no-op");

    // The answer serializes as Lambda expects it.
    let wire = serde_json::to_value(&again).expect("JSON");
    assert_eq!(wire, json!({ "batchItemFailures": [{ "itemIdentifier": POISON_MESSAGE_ID }] }));
}
