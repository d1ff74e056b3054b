//! Handler test driven by the committed EventBridge event `tests/fixtures/eventbridge_scheduled_tick.json`
//! (what the template's `rate(1 minute)` rule delivers), over the real SQS transport against the local
//! SQS emulator (`moto_server`; `tests/run` starts one) and a fresh PostgreSQL database.
//!
//! One booking commits `appointment.created`; the tick drains the outbox, and each of the event's two
//! listeners receives one CloudEvent on its own queue.

use std::sync::Arc;
use std::time::Duration;

use aws_lambda_events::event::eventbridge::EventBridgeEvent;
use clinic_core::dispatch::{DispatchConfig, Dispatcher};
use clinic_core::events::EventType;
use clinic_core::ids::EventId;
use clinic_core::listeners::{listeners, Listener};
use clinic_dispatcher::{handle, Housekeeping, Mode, State};
use clinic_sqs::queues::create_queues;
use clinic_sqs::testing::Emulator;
use clinic_sqs::SqsTransport;
use clinic_testkit::app::TestApp;
use lambda_runtime::{Context, LambdaEvent};
use serde_json::{json, Value};

const TICK: &str = include_str!("../../../../tests/fixtures/eventbridge_scheduled_tick.json");

fn tick() -> LambdaEvent<EventBridgeEvent<Value>> {
    let payload: EventBridgeEvent<Value> =
        serde_json::from_str(TICK).expect("the fixture is an EventBridge event");
    LambdaEvent::new(payload, Context::default())
}

#[test]
fn the_fixture_is_a_scheduled_event_without_a_mode() {
    let event = tick().payload;
    assert_eq!(event.source, "aws.events");
    assert_eq!(event.detail_type, "Scheduled Event");
    // A rule's schedule cannot set `detail`: the function's configured mode (drain) applies.
    assert_eq!(event.detail, json!({}));
}

#[tokio::test]
async fn a_scheduled_tick_sends_each_listener_its_cloud_event_over_sqs() {
    clinic_testkit::init_test_logging();
    let Some(emulator) = Emulator::start() else {
        eprintln!("!!! SKIPPING: no SQS emulator (run through tests/run)");
        return;
    };
    let sqs = emulator.client();
    let prefix = format!("fixture-tick-{}", EventId::generate());
    let queues = create_queues(&sqs, &prefix, false).await.expect("queues on the emulator");

    let app = TestApp::new().await;
    let staff = app.workspace.staff.clone();
    let patient = app.create_patient(&staff, json!({ "givenName": "Ada", "familyName": "Lovelace" })).await;
    let practitioner = app.create_practitioner(&staff).await;
    let appointment =
        app.book(&staff, &patient, &practitioner, "2030-01-07T09:00:00Z", "2030-01-07T09:30:00Z").await;

    // As in AWS: the restricted clinic_app role, the SQS transport, the configured drain mode.
    let url = app.db.url_for_role("clinic_app");
    let pool = clinic_core::db::connect_pool(&url, 2, None).expect("pool");
    let transport = SqsTransport::new(sqs.clone(), queues.clone(), "/clinic/clinic-prod");
    let dispatcher = Dispatcher::new(
        pool,
        Arc::new(transport),
        DispatchConfig { poll_interval: Duration::from_millis(50), ..DispatchConfig::default() },
    )
    .with_listen(url, None);
    let state = State::new(dispatcher, Duration::from_secs(1), Mode::Drain, Housekeeping::default());

    let answer = handle(&state, tick()).await.expect("the tick is answered");
    assert_eq!(answer.mode, Mode::Drain);
    assert_eq!(answer.report.errors, 0);
    // patient.created and practitioner.created have no listeners; appointment.created has two.
    assert_eq!(answer.report.totals.dispatched, 3, "{answer:?}");
    assert_eq!(app.count("SELECT 1 FROM event_outbox WHERE status <> 'dispatched'").await, 0);

    let expected = listeners(EventType::AppointmentCreated);
    assert_eq!(expected, [Listener::PatientBookingConfirmation, Listener::PractitionerScheduleChange]);
    for listener in Listener::ALL {
        let url = queues.url(*listener).expect("every listener has a queue");
        let messages = clinic_sqs::testing::receive_all(&sqs, url).await;
        if !expected.contains(listener) {
            assert!(messages.is_empty(), "{listener} got nothing");
            continue;
        }
        assert_eq!(messages.len(), 1, "{listener} got exactly one message");
        let message = &messages[0];
        let attribute = message
            .message_attributes()
            .and_then(|attributes| attributes.get("listener"))
            .and_then(|value| value.string_value());
        assert_eq!(attribute, Some(listener.as_str()));
        let (named, envelope) =
            clinic_sqs::parse_message(message.body().expect("body")).expect("a clinic CloudEvent");
        assert_eq!(named, *listener);
        assert_eq!(envelope.event_type, EventType::AppointmentCreated);
        assert_eq!(envelope.resource_id.to_string(), appointment["id"].as_str().unwrap());
        assert_eq!(envelope.workspace_id, app.workspace.id);

        let dispatched = format!(
            "SELECT 1 FROM event_outbox WHERE event_id = '{}' AND status = 'dispatched'",
            envelope.id.uuid()
        );
        assert_eq!(app.count(&dispatched).await, 1, "{listener}'s event is dispatched");
    }

    // The next tick finds nothing due and sends nothing more.
    let again = handle(&state, tick()).await.expect("the tick is answered");
    assert_eq!(again.report.totals.dispatched, 0);
}
