//! The SQS transport against a local emulator (`moto_server`) and real PostgreSQL: CloudEvents
//! bodies, batching, FIFO attributes and per-queue failures.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use crate::support::sqs_config;
use aws_sdk_sqs::types::{Message, MessageSystemAttributeName};
use clinic_core::dispatch::{Dispatcher, StepOutcome};
use clinic_core::events::Envelope;
use clinic_core::listeners::Listener;
use clinic_sqs::queues::create_queues;
use clinic_sqs::testing::Emulator;
use clinic_sqs::{parse_message, QueueMap, SqsTransport};
use clinic_testkit::TestDb;
use serde_json::Value;

/// A fresh database with `count` booked appointments; returns their `appointment.created` events.
async fn booked(count: usize) -> (TestDb, Vec<Envelope>) {
    clinic_testkit::init_test_logging();
    let db = clinic_testkit::fresh_db().await;
    let events = clinic_testkit::seed::booked_appointments(&db, count).await;
    (db, events)
}

fn listener_attribute(message: &Message) -> Option<String> {
    message.message_attributes()?.get("listener")?.string_value().map(str::to_owned)
}

macro_rules! emulator_or_skip {
    () => {
        match Emulator::start() {
            Some(emulator) => emulator,
            None => return,
        }
    };
}

#[tokio::test]
async fn every_body_is_a_cloudevent_with_the_required_attributes() {
    let emulator = emulator_or_skip!();
    let sqs = emulator.client();
    let queues = create_queues(&sqs, &format!("ce-{}", ulid::Ulid::generate()), false).await.unwrap();
    let (db, events) = booked(12).await;
    let transport = SqsTransport::new(sqs.clone(), queues.clone(), "/clinic");
    let dispatcher = Dispatcher::new(db.pool.clone(), Arc::new(transport), sqs_config());
    let report = dispatcher.drain_once().await.unwrap();
    // 12 starts per listener queue: two SendMessageBatch calls each (10 + 2).
    assert_eq!((report.totals.started, report.totals.failed_starts), (24, 0));
    assert_eq!(report.totals.dispatched, 14);

    let by_id: HashMap<String, &Envelope> = events.iter().map(|e| (e.id.to_string(), e)).collect();
    for listener in [Listener::PatientBookingConfirmation, Listener::PractitionerScheduleChange] {
        let messages = clinic_sqs::testing::receive_all(&sqs, queues.url(listener).unwrap()).await;
        assert_eq!(messages.len(), 12, "{listener}");
        for message in &messages {
            let body = message.body().unwrap();
            for planted in clinic_testkit::seed::PLANTED_TEXT {
                assert!(!body.contains(planted), "{listener} body carries {planted:?}: {body}");
            }
            let json: Value = serde_json::from_str(body).unwrap();
            let envelope = by_id[json["id"].as_str().unwrap()];
            assert_eq!(json["specversion"], "1.0");
            assert_eq!(json["type"], "clinic.appointment.created.v1");
            assert_eq!(json["source"], format!("/clinic/workspaces/{}", envelope.workspace_id));
            assert_eq!(json["subject"], envelope.resource_id.to_string());
            assert_eq!(json["datacontenttype"], "application/json");
            assert_eq!(json["tenantid"], envelope.workspace_id.to_string());
            assert_eq!(json["correlationid"], envelope.correlation_id.to_string());
            assert_eq!(json["causationid"], envelope.causation_id.to_string());
            assert_eq!(json["listener"], listener.as_str());
            let time = chrono::DateTime::parse_from_rfc3339(json["time"].as_str().unwrap()).unwrap();
            assert_eq!(time, envelope.occurred_at);
            assert_eq!(json["data"]["type"], "appointment.created");
            assert_eq!(listener_attribute(message).as_deref(), Some(listener.as_str()));
            // A standard queue used as a fair queue: the message group is the workspace.
            let attributes = message.attributes().unwrap();
            assert_eq!(
                attributes.get(&MessageSystemAttributeName::MessageGroupId).map(String::as_str),
                Some(envelope.workspace_id.to_string().as_str()),
                "{listener}"
            );
            let (parsed_listener, parsed) = parse_message(body).unwrap();
            assert_eq!((parsed_listener, &parsed), (listener, envelope));
        }
    }
}

#[tokio::test]
async fn fifo_queues_get_the_resource_as_group_and_event_listener_as_dedup_id() {
    let emulator = emulator_or_skip!();
    let sqs = emulator.client();
    let queues = create_queues(&sqs, &format!("fifo-{}", ulid::Ulid::generate()), true).await.unwrap();
    let (db, events) = booked(1).await;
    let dispatcher = Dispatcher::new(
        db.pool.clone(),
        Arc::new(SqsTransport::new(sqs.clone(), queues.clone(), "/clinic")),
        sqs_config(),
    );
    assert_eq!(dispatcher.drain_once().await.unwrap().totals.started, 2);
    let event = &events[0];
    for listener in [Listener::PatientBookingConfirmation, Listener::PractitionerScheduleChange] {
        let url = queues.url(listener).unwrap();
        assert!(url.ends_with(".fifo"));
        let messages = clinic_sqs::testing::receive_all(&sqs, url).await;
        assert_eq!(messages.len(), 1);
        let attributes = messages[0].attributes().unwrap();
        assert_eq!(attributes[&MessageSystemAttributeName::MessageGroupId], event.resource_id.to_string());
        assert_eq!(
            attributes[&MessageSystemAttributeName::MessageDeduplicationId],
            format!("{}:{}", event.id, listener.as_str())
        );
    }
}

#[tokio::test]
async fn a_failing_queue_fails_only_its_starts_and_the_retry_sends_only_those() {
    let emulator = emulator_or_skip!();
    let sqs = emulator.client();
    let good = create_queues(&sqs, &format!("pf-{}", ulid::Ulid::generate()), false).await.unwrap();
    let broken_url = format!("{}/123456789012/no-such-queue", emulator.endpoint);
    let broken = QueueMap::new(
        Listener::ALL
            .iter()
            .map(|l| {
                let url = if *l == Listener::PractitionerScheduleChange {
                    broken_url.clone()
                } else {
                    good.url(*l).unwrap().to_owned()
                };
                (*l, url)
            })
            .collect(),
    )
    .unwrap();
    let (db, events) = booked(1).await;
    let event = &events[0];
    let first = Dispatcher::new(
        db.pool.clone(),
        Arc::new(SqsTransport::new(sqs.clone(), broken, "/clinic")),
        sqs_config(),
    );
    let StepOutcome::Dispatched(report) = first.step().await.unwrap() else { panic!("idle") };
    assert_eq!((report.started, report.failed_starts, report.retried), (1, 1, 1));
    let client = db.client().await;
    let row = client
        .query_one("SELECT status, last_error_code FROM event_outbox WHERE event_id = $1", &[&event.id])
        .await
        .unwrap();
    assert_eq!(row.get::<_, String>(0), "retry");
    assert!(row.get::<_, String>(1).starts_with("sqs_"), "{:?}", row.get::<_, String>(1));
    let start = client
        .query_one(
            "SELECT listener, transport_message_id FROM listener_starts WHERE event_id = $1",
            &[&event.id],
        )
        .await
        .unwrap();
    assert_eq!(start.get::<_, String>(0), "patient_booking_confirmation");
    assert!(start.get::<_, Option<String>>(1).is_some());

    tokio::time::sleep(Duration::from_millis(120)).await;
    let second = Dispatcher::new(
        db.pool.clone(),
        Arc::new(SqsTransport::new(sqs.clone(), good.clone(), "/clinic")),
        sqs_config(),
    );
    let report = second.drain_once().await.unwrap();
    assert_eq!((report.totals.started, report.totals.dispatched), (1, 1));
    assert_eq!(
        clinic_sqs::testing::receive_all(&sqs, good.url(Listener::PatientBookingConfirmation).unwrap())
            .await
            .len(),
        1
    );
    assert_eq!(
        clinic_sqs::testing::receive_all(&sqs, good.url(Listener::PractitionerScheduleChange).unwrap())
            .await
            .len(),
        1
    );
}
