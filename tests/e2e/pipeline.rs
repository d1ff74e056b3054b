//! The whole pipeline through the public surface: an HTTP request commits, the dispatcher claims the
//! outbox row, the local transport runs each listener, and the effect (a notification, a cascaded
//! cancellation) is there exactly once — even when everything is delivered twice.

mod webhooks;

use std::sync::Arc;

use clinic_core::dispatch::{DispatchConfig, Dispatcher, LocalTransport};
use clinic_testkit::app::TestApp;
use serde_json::{json, Value};

fn dispatcher(app: &TestApp) -> Dispatcher {
    let transport = Arc::new(LocalTransport::new(app.state.pool.clone()));
    Dispatcher::new(app.state.pool.clone(), transport, DispatchConfig::default())
}

async fn notifications(app: &TestApp) -> Vec<(String, String)> {
    let response = app.call("GET", "/v1/notifications?limit=100", Some(&app.workspace.staff), None).await;
    assert_eq!(response.status, 200, "{}", response.text);
    response.body["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|item| {
            (
                item["template"].as_str().unwrap().to_owned(),
                item["recipientKind"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

#[tokio::test]
async fn booking_through_http_reaches_every_listener_once() {
    let app = TestApp::new().await;
    let staff = app.workspace.staff.clone();
    let practitioner = app.create_practitioner(&staff).await;
    let patient = app.create_patient(&staff, json!({"givenName": "E", "familyName": "Two"})).await;
    let appointment =
        app.book(&staff, &patient, &practitioner, "2030-07-01T09:00:00Z", "2030-07-01T09:30:00Z").await;
    let dispatcher = dispatcher(&app);
    let report = dispatcher.drain_once().await.unwrap();
    assert_eq!(report.totals.dispatched, 3, "practitioner, patient, appointment events");

    let mut sent = notifications(&app).await;
    sent.sort();
    assert_eq!(
        sent,
        vec![
            ("appointment.booking_confirmation".to_owned(), "patient".to_owned()),
            ("appointment.schedule_change.booked".to_owned(), "practitioner".to_owned()),
        ]
    );
    // Every outbox row is dispatched and every listener of the booking left a receipt.
    assert_eq!(app.count("SELECT 1 FROM event_outbox WHERE status <> 'dispatched'").await, 0);
    assert_eq!(app.count("SELECT 1 FROM listener_receipts").await, 2);

    // Redelivering everything (as an operator replay or an SQS redelivery would) changes nothing.
    app.db
        .pool
        .get()
        .await
        .unwrap()
        .execute("UPDATE event_outbox SET status = 'pending', available_at = now()", &[])
        .await
        .unwrap();
    let again = dispatcher.drain_once().await.unwrap();
    assert_eq!(again.totals.dispatched, 3);
    assert_eq!(notifications(&app).await.len(), 2);

    let id = appointment["id"].as_str().unwrap();
    let cancelled =
        app.call("POST", &format!("/v1/appointments/{id}/cancel"), Some(&staff), Some(json!({}))).await;
    assert_eq!(cancelled.status, 200);
    dispatcher.drain_once().await.unwrap();
    assert_eq!(notifications(&app).await.len(), 4, "cancellation notices to patient and practitioner");
}

#[tokio::test]
async fn deleting_a_patient_cancels_future_appointments_through_the_listener() {
    let app = TestApp::new().await;
    let staff = app.workspace.staff.clone();
    let practitioner = app.create_practitioner(&staff).await;
    let patient = app.create_patient(&staff, json!({"givenName": "Gone", "familyName": "Soon"})).await;
    let future: Vec<Value> = vec![
        app.book(&staff, &patient, &practitioner, "2031-01-01T09:00:00Z", "2031-01-01T09:30:00Z").await,
        app.book(&staff, &patient, &practitioner, "2031-01-02T09:00:00Z", "2031-01-02T09:30:00Z").await,
    ];
    let patient_id = patient["id"].as_str().unwrap();
    // A chain the client started with an earlier request: it sends back the id the API issued then.
    let earlier = app.call("GET", &format!("/v1/patients/{patient_id}"), Some(&staff), None).await;
    let issued = earlier.header("x-correlation-id").expect("an issued correlation id").to_owned();
    let correlation = issued.split_once('.').expect("<ULID>.<tag>").0.to_owned();
    let deleted = app
        .call_with(
            "DELETE",
            &format!("/v1/patients/{patient_id}"),
            Some(&staff),
            None,
            &[("x-correlation-id", &issued)],
        )
        .await;
    assert_eq!(deleted.status, 204);
    assert_eq!(deleted.header("x-correlation-id"), Some(issued.as_str()), "its own id is accepted back");
    dispatcher(&app).drain_once().await.unwrap();

    for appointment in &future {
        let id = appointment["id"].as_str().unwrap();
        let now = app.call("GET", &format!("/v1/appointments/{id}"), Some(&staff), None).await;
        assert_eq!(now.body["status"], "cancelled");
        let timeline = app.call("GET", &format!("/v1/appointments/{id}/timeline"), Some(&staff), None).await;
        let newest = &timeline.body["items"][0];
        assert_eq!(newest["type"], "appointment.cancelled");
        assert_eq!(newest["actor"]["kind"], "system");
        assert_eq!(newest["correlationId"], correlation.as_str(), "the chain keeps its correlation id");
    }
    let timeline = app.call("GET", &format!("/v1/patients/{patient_id}/timeline"), Some(&staff), None).await;
    assert_eq!(timeline.status, 200, "a deleted patient's timeline stays readable");
    assert_eq!(app.count("SELECT 1 FROM events WHERE type = 'appointment.cancelled'").await, 2);
}
