//! PHI scan of everything the system stores or sends outside the resource tables.
//!
//! Distinctive names, emails, phone numbers, dates of birth and free-text reasons are planted through
//! the HTTP API (creates, updates, reschedules, cancellations, a deletion with its chained
//! cancellations, idempotent replays, and rejected requests), dispatched over SQS (standard and FIFO
//! queues on the local emulator, with one listener failing its first start so `listener_starts` is
//! written), and every message is run through its listener. Then none of the planted values may occur
//! in: `events`, `event_resources`, `event_outbox`, `listener_starts`, `listener_receipts`,
//! `notifications`, `idempotency_keys`, `outbox_waiters`, the SQS message bodies, message attributes
//! and system attributes, and every captured log line (all `clinic*` targets at TRACE).

use std::sync::Arc;
use std::time::Duration;

use crate::support::sqs_config;
use aws_sdk_sqs::types::Message;
use clinic_core::dispatch::testing::FailingTransport;
use clinic_core::dispatch::{Dispatcher, StartError, Transport};
use clinic_core::listeners::{self, Listener};
use clinic_sqs::queues::create_queues;
use clinic_sqs::testing::Emulator;
use clinic_sqs::{parse_message, QueueMap, SqsTransport};
use clinic_testkit::app::TestApp;
use serde_json::json;

const GIVEN: &str = "Xanthippa";
const FAMILY: &str = "Quillborough";
const EMAIL: &str = "xanthippa.q@planted-phi.test";
const PHONE: &str = "+44 20 7946 0958";
const PHONE_DIGITS: &str = "2079460958";
const NEW_PHONE: &str = "+1 (555) 010-4477";
const DATE_OF_BIRTH: &str = "1961-07-23";
const REASON: &str = "recurrent vestibular migraine";
const RESCHEDULE_GIVEN: &str = "Thaddeusina";
const CANCEL_REASON: &str = "patient admitted to oncology ward";
const PRACTITIONER: &str = "Dr. Ignatius Pemberton-Vale";
const SPECIALTY: &str = "Reproductive endocrinology";
const REJECTED: &str = "Ottoline Fairweather-Smythe";

const PLANTED: &[&str] = &[
    GIVEN,
    FAMILY,
    EMAIL,
    PHONE,
    PHONE_DIGITS,
    NEW_PHONE,
    DATE_OF_BIRTH,
    REASON,
    "vestibular",
    RESCHEDULE_GIVEN,
    CANCEL_REASON,
    "oncology",
    PRACTITIONER,
    "Pemberton",
    SPECIALTY,
    REJECTED,
];

/// Everything received from every listener's queue (removing what was received).
async fn receive_all(client: &aws_sdk_sqs::Client, queues: &QueueMap) -> Vec<Message> {
    let mut messages = Vec::new();
    for listener in Listener::ALL {
        let url = queues.url(*listener).unwrap();
        let batch = clinic_sqs::testing::receive_all(client, url).await;
        for message in &batch {
            if let Some(handle) = message.receipt_handle() {
                client.delete_message().queue_url(url).receipt_handle(handle).send().await.unwrap();
            }
        }
        messages.extend(batch);
    }
    messages
}

/// The whole of a message as text: body, message attributes, system attributes, ids.
fn message_text(message: &Message) -> String {
    format!(
        "{:?}|{:?}|{:?}|{:?}|{:?}",
        message.body(),
        message.message_attributes(),
        message.attributes(),
        message.message_id(),
        message.md5_of_body()
    )
}

async fn plant_through_the_api(app: &TestApp) {
    let token = app.workspace.staff.clone();
    let practitioner = app
        .call(
            "POST",
            "/v1/practitioners",
            Some(&token),
            Some(json!({"displayName": PRACTITIONER, "specialty": SPECIALTY})),
        )
        .await;
    assert_eq!(practitioner.status, 201, "{}", practitioner.text);
    let practitioner_id = practitioner.body["id"].as_str().unwrap().to_owned();
    let patient_body = json!({"givenName": GIVEN, "familyName": FAMILY, "email": EMAIL, "phone": PHONE, "dateOfBirth": DATE_OF_BIRTH});
    let patient = app
        .call_with(
            "POST",
            "/v1/patients",
            Some(&token),
            Some(patient_body.clone()),
            &[("idempotency-key", "phi-patient")],
        )
        .await;
    assert_eq!(patient.status, 201, "{}", patient.text);
    // An idempotent replay of the same request.
    let replay = app
        .call_with(
            "POST",
            "/v1/patients",
            Some(&token),
            Some(patient_body),
            &[("idempotency-key", "phi-patient")],
        )
        .await;
    assert_eq!(replay.status, 201);
    let patient_id = patient.body["id"].as_str().unwrap().to_owned();
    let updated = app
        .call(
            "PATCH",
            &format!("/v1/patients/{patient_id}"),
            Some(&token),
            Some(json!({"givenName": RESCHEDULE_GIVEN, "phone": NEW_PHONE})),
        )
        .await;
    assert_eq!(updated.status, 200, "{}", updated.text);

    let book = |hour: u32| {
        json!({"patientId": patient_id, "practitionerId": practitioner_id, "reason": REASON,
            "startsAt": format!("2037-03-0{}T{hour:02}:00:00Z", 1 + hour % 5),
            "endsAt": format!("2037-03-0{}T{hour:02}:30:00Z", 1 + hour % 5)})
    };
    let mut appointments = Vec::new();
    for hour in [9, 10, 11] {
        let booked = app.call("POST", "/v1/appointments", Some(&token), Some(book(hour))).await;
        assert_eq!(booked.status, 201, "{}", booked.text);
        appointments.push(booked.body["id"].as_str().unwrap().to_owned());
    }
    // A double booking (409) and a rejected create (422) carrying planted values.
    let clash = app.call("POST", "/v1/appointments", Some(&token), Some(book(9))).await;
    assert_eq!(clash.status, 409, "{}", clash.text);
    let rejected = app
        .call(
            "POST",
            "/v1/patients",
            Some(&token),
            Some(json!({"givenName": REJECTED, "familyName": REJECTED, "email": 7})),
        )
        .await;
    assert_eq!(rejected.status, 422);
    assert!(!rejected.text.contains(REJECTED));

    let rescheduled = app
        .call(
            "POST",
            &format!("/v1/appointments/{}/reschedule", appointments[0]),
            Some(&token),
            Some(json!({"startsAt": "2037-04-01T09:00:00Z", "endsAt": "2037-04-01T09:30:00Z"})),
        )
        .await;
    assert_eq!(rescheduled.status, 200, "{}", rescheduled.text);
    let cancelled = app
        .call(
            "POST",
            &format!("/v1/appointments/{}/cancel", appointments[1]),
            Some(&token),
            Some(json!({"reason": CANCEL_REASON})),
        )
        .await;
    assert_eq!(cancelled.status, 200, "{}", cancelled.text);
    // The resource tables do hold the data before the deletion (the scan looks in the right places).
    let held: Option<String> = app
        .db
        .client()
        .await
        .query_one("SELECT string_agg(t::text, '|') FROM appointments t", &[])
        .await
        .unwrap()
        .get(0);
    assert!(held.unwrap_or_default().contains(REASON));
    // Deleting the patient cancels the remaining future appointments through a listener (chained events)
    // and erases its personal fields and its appointments' reasons (DESIGN.md §6a).
    let deleted = app.call("DELETE", &format!("/v1/patients/{patient_id}"), Some(&token), None).await;
    assert_eq!(deleted.status, 204, "{}", deleted.text);
}

async fn scan(fifo: bool) {
    let Some(emulator) = Emulator::start() else {
        return;
    };
    let logs = clinic_testkit::capture_logs();
    let app = TestApp::new().await;
    let client = emulator.client();
    let prefix = format!("phi-{}", ulid::Ulid::generate().to_string().to_lowercase());
    let queues = create_queues(&client, &prefix, fifo).await.unwrap();
    let sqs: Arc<dyn Transport> = Arc::new(SqsTransport::new(client.clone(), queues.clone(), "/clinic"));

    plant_through_the_api(&app).await;

    // First pass: one listener's starts fail, so the dispatcher records the starts that succeeded.
    let failing = FailingTransport::only(
        vec![Listener::PractitionerScheduleChange],
        StartError::retryable("probe_unavailable", "probe outage"),
        sqs.clone(),
    );
    let first = Dispatcher::new(app.state.pool.clone(), Arc::new(failing), sqs_config());
    let report = first.drain_once().await.unwrap();
    assert!(report.totals.retried > 0, "{report:?}");
    assert!(app.count("SELECT 1 FROM listener_starts").await > 0, "listener_starts was written");

    let dispatcher = Dispatcher::new(app.state.pool.clone(), sqs, sqs_config());
    let mut sent = Vec::new();
    let mut ran = 0;
    // Waits on progress, with a generous bound: rows in retry are made due at once instead of
    // sleeping past their backoff (a fixed short sleep failed on a busy machine).
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while std::time::Instant::now() < deadline {
        app.state
            .pool
            .get()
            .await
            .unwrap()
            .execute("UPDATE event_outbox SET available_at = now() WHERE status = 'retry'", &[])
            .await
            .unwrap();
        dispatcher.drain_once().await.unwrap();
        let messages = receive_all(&client, &queues).await;
        if messages.is_empty()
            && app.count("SELECT 1 FROM event_outbox WHERE status <> 'dispatched'").await == 0
        {
            break;
        }
        for message in &messages {
            let (listener, envelope) = parse_message(message.body().unwrap()).unwrap();
            listeners::run(&app.state.pool, listener, &envelope).await.unwrap();
            ran += 1;
        }
        sent.extend(messages);
    }
    assert_eq!(app.count("SELECT 1 FROM event_outbox WHERE status <> 'dispatched'").await, 0);
    assert!(sent.len() >= 10, "messages were sent ({})", sent.len());
    assert!(ran >= 10);
    assert!(app.count("SELECT 1 FROM notifications").await >= 5, "listeners notified");
    assert!(
        app.count("SELECT 1 FROM events WHERE type = 'appointment.cancelled' AND actor_kind = 'system'")
            .await
            >= 1,
        "the deletion's listener cancelled future appointments"
    );

    let conn = app.db.pool.get().await.unwrap();
    let tables = [
        "events",
        "event_resources",
        "event_outbox",
        "listener_starts",
        "listener_receipts",
        "notifications",
        "idempotency_keys",
        "outbox_waiters",
    ];
    let mut dumps = Vec::new();
    for table in tables {
        let dump: Option<String> = conn
            .query_one(&format!("SELECT string_agg(t::text, '|') FROM {table} t"), &[])
            .await
            .unwrap()
            .get(0);
        dumps.push((table.to_string(), dump.unwrap_or_default()));
    }
    for message in &sent {
        dumps.push((format!("SQS message {:?}", message.message_id()), message_text(message)));
    }
    let logged = logs.text();
    assert!(logged.contains("outbox transition"), "the dispatcher's facts were captured");
    dumps.push(("captured logs".into(), logged));
    // The deletion erased the reasons from the resource tables too.
    let appointments: Option<String> =
        conn.query_one("SELECT string_agg(t::text, '|') FROM appointments t", &[]).await.unwrap().get(0);
    assert!(!appointments.unwrap_or_default().contains(REASON));
    for value in PLANTED {
        for (place, dump) in &dumps {
            assert!(!dump.contains(value), "{value:?} leaked into {place}");
            assert!(
                !dump.to_lowercase().contains(&value.to_lowercase()),
                "{value:?} (any case) leaked into {place}"
            );
        }
    }
}

#[tokio::test]
async fn nothing_planted_reaches_events_outbox_messages_or_logs_over_standard_queues() {
    scan(false).await;
}

#[tokio::test]
async fn nothing_planted_reaches_events_outbox_messages_or_logs_over_fifo_queues() {
    scan(true).await;
}
