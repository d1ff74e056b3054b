//! PHI scan: distinctive names, contact details and reasons planted through the API appear nowhere
//! outside the resource tables — not in events, links, outbox rows, or captured logs and spans (the
//! request, the dispatcher's claim, start and mark, each listener run).

use std::sync::Arc;

use clinic_core::dispatch::{DispatchConfig, Dispatcher, LocalTransport};
use clinic_testkit::app::TestApp;
use serde_json::json;

const PLANTED: &[&str] = &[
    "Zebulonia",
    "Quixwright",
    "zebulonia.q@planted.test",
    "+1 555 013 3377",
    "persistent migraine aura",
    "changed mind after diagnosis",
];

#[tokio::test]
async fn planted_health_data_stays_in_the_resource_tables() {
    let logs = clinic_testkit::capture_logs();
    let app = TestApp::new().await;
    let token = app.workspace.staff.clone();
    let practitioner = app.create_practitioner(&token).await;
    let patient = app
        .create_patient(&token, json!({"givenName": PLANTED[0], "familyName": PLANTED[1], "email": PLANTED[2], "phone": PLANTED[3]}))
        .await;
    let appointment = app
        .call(
            "POST",
            "/v1/appointments",
            Some(&token),
            Some(json!({"patientId": patient["id"], "practitionerId": practitioner["id"], "startsAt": "2030-06-01T09:00:00Z", "endsAt": "2030-06-01T09:30:00Z", "reason": PLANTED[4]})),
        )
        .await;
    assert_eq!(appointment.status, 201);
    assert_eq!(appointment.body["reason"], PLANTED[4], "the resource itself keeps it");
    let id = appointment.body["id"].as_str().unwrap();
    app.call(
        "POST",
        &format!("/v1/appointments/{id}/cancel"),
        Some(&token),
        Some(json!({"reason": PLANTED[5]})),
    )
    .await;
    // A rejected request with planted values must not echo or log them either.
    let rejected = app
        .call("POST", "/v1/patients", Some(&token), Some(json!({"givenName": PLANTED[0], "familyName": 5})))
        .await;
    assert_eq!(rejected.status, 422);
    assert!(!rejected.text.contains(PLANTED[0]));
    // The listeners run here too, so their spans (and the dispatcher's) are scanned with the rest.
    let dispatcher = Dispatcher::new(
        app.state.pool.clone(),
        Arc::new(LocalTransport::new(app.state.pool.clone())),
        DispatchConfig::default(),
    );
    dispatcher.drain_once().await.unwrap();
    assert_eq!(app.count("SELECT 1 FROM event_outbox WHERE status <> 'dispatched'").await, 0);

    let conn = app.db.pool.get().await.unwrap();
    let dumps = conn
        .query(
            "SELECT 'events', string_agg(t::text, '|') FROM events t \
             UNION ALL SELECT 'event_resources', string_agg(t::text, '|') FROM event_resources t \
             UNION ALL SELECT 'event_outbox', string_agg(t::text, '|') FROM event_outbox t \
             UNION ALL SELECT 'listener_starts', string_agg(t::text, '|') FROM listener_starts t \
             UNION ALL SELECT 'notifications', string_agg(t::text, '|') FROM notifications t \
             UNION ALL SELECT 'idempotency_keys', string_agg(t::text, '|') FROM idempotency_keys t",
            &[],
        )
        .await
        .unwrap();
    let logged = logs.text();
    assert!(!logged.is_empty(), "requests were logged");
    for span in ["request", "dispatch.claim", "dispatch.start", "dispatch.mark", "listener.run"] {
        assert!(logged.contains(&format!("\"name\":\"{span}\"")), "the {span} span was captured and scanned");
    }
    for value in PLANTED {
        for row in &dumps {
            let table: &str = row.get(0);
            let dump: Option<String> = row.get(1);
            assert!(!dump.unwrap_or_default().contains(value), "{value} leaked into {table}");
        }
        assert!(!logged.contains(value), "{value} leaked into the logs");
    }
}
