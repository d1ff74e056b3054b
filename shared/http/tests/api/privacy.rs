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

/// Issue 43 item 3: the spans of a whole booking → dispatch → listeners → notification and webhook
/// run, as the OpenTelemetry layer exports them (attributes, events, links), carry ids only; the
/// caller's token, a webhook URL's query and a forged `traceparent` appear nowhere. The booking's
/// handling spans link to the trace the request committed it in.
#[tokio::test]
async fn exported_spans_of_a_booking_run_carry_ids_only_and_link_to_the_committing_trace() {
    use clinic_core::delivery::{DeliveryConfig, FileProvider, NotifierKind, Providers, Sender};
    use clinic_core::webhooks::{guard::Egress, WebhookConfig, WebhookSender};

    let logs = clinic_testkit::capture_logs();
    let mut app = TestApp::new().await;
    app.state.api.webhook_egress = Egress { allow_loopback_http: true };
    app.router = clinic_http::router(app.state.clone());
    let (token, admin) = (app.workspace.staff.clone(), app.workspace.admin.clone());
    // Nothing listens on port 1: the first attempt fails at once, and its POST span is still exported.
    let secret_url = "http://127.0.0.1:1/hook?token=plantedwebhooktoken";
    let endpoint = app
        .call(
            "POST",
            "/v1/webhooks/endpoints",
            Some(&admin),
            Some(json!({"url": secret_url, "eventTypes": ["appointment.created"]})),
        )
        .await;
    assert_eq!(endpoint.status, 201, "{}", endpoint.text);
    let practitioner = app.create_practitioner(&token).await;
    let patient = app
        .create_patient(&token, json!({"givenName": PLANTED[0], "familyName": PLANTED[1], "email": PLANTED[2], "phone": PLANTED[3]}))
        .await;
    let caller = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let booked = app
        .call_with(
            "POST",
            "/v1/appointments",
            Some(&token),
            Some(json!({"patientId": patient["id"], "practitionerId": practitioner["id"], "startsAt": "2030-06-01T09:00:00Z", "endsAt": "2030-06-01T09:30:00Z", "reason": PLANTED[4]})),
            &[("traceparent", caller), ("idempotency-key", "book-zebulonia-quixwright")],
        )
        .await;
    assert_eq!(booked.status, 201, "{}", booked.text);
    // A forged header is ignored (never a 4xx) and never stored.
    let forged = app
        .call_with(
            "POST",
            &format!("/v1/appointments/{}/cancel", booked.body["id"].as_str().unwrap()),
            Some(&token),
            Some(json!({"reason": PLANTED[5]})),
            &[("traceparent", "00-Zebulonia-Quixwright-01")],
        )
        .await;
    assert_eq!(forged.status, 200, "{}", forged.text);

    let webhooks = Arc::new(WebhookSender::new(
        app.state.pool.clone(),
        WebhookConfig { egress: Egress { allow_loopback_http: true }, ..WebhookConfig::default() },
        clinic_testkit::webhook_key(),
        Arc::new(|payload: clinic_core::webhooks::Payload<'_>| match payload {
            clinic_core::webhooks::Payload::Event { envelope, .. } => serde_json::to_vec(
                &clinic_core::contract::cloudevent::to_published_event(envelope, "/clinic"),
            )
            .unwrap_or_default(),
            clinic_core::webhooks::Payload::Heartbeat(_) => Vec::new(),
        }),
    ));
    let transport = LocalTransport::new(app.state.pool.clone()).with_webhooks(webhooks);
    let dispatcher = Dispatcher::new(app.state.pool.clone(), Arc::new(transport), DispatchConfig::default());
    dispatcher.drain_once().await.unwrap();
    let dir = std::env::temp_dir().join(format!("clinic-trace-mail-{}", ulid::Ulid::generate()));
    let mut config = DeliveryConfig::with_notifiers(vec![NotifierKind::File]);
    config.file_dir = dir.clone();
    let sender =
        Sender::new(app.state.pool.clone(), Providers::both(Arc::new(FileProvider::new(&dir))), config);
    assert!(sender.send_due(10).await.unwrap().sent >= 1, "a notification was sent");
    let _ = std::fs::remove_dir_all(&dir);

    let conn = app.db.pool.get().await.unwrap();
    let stored: Vec<Option<String>> = conn
        .query("SELECT traceparent FROM events WHERE type LIKE 'appointment.%' ORDER BY id", &[])
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert_eq!(stored.len(), 2, "booked and cancelled");
    let booking_trace = stored[0].clone().expect("the booking stored its trace");
    assert_eq!(&booking_trace[3..35], &caller[3..35], "the caller's trace is continued");
    let cancel_trace = stored[1].clone().expect("a fresh trace for the forged header");
    assert_ne!(&cancel_trace[3..35], &caller[3..35]);

    let exported: Vec<serde_json::Value> =
        logs.json_lines().into_iter().filter_map(|line| line.get("exported").cloned()).collect();
    let named = |name: &str| exported.iter().filter(|span| span["name"] == name).collect::<Vec<_>>();
    for name in [
        "request",
        "transaction",
        "dispatch.claim",
        "dispatch.start",
        "listener.run",
        "webhook.post",
        "provider.send",
    ] {
        assert!(!named(name).is_empty(), "the {name} span was exported and scanned");
    }
    let trace_id = &booking_trace[3..35];
    let linked_to_booking = |span: &&&serde_json::Value| {
        span["links"].as_array().unwrap().iter().any(|link| link["traceId"] == trace_id)
    };
    for name in ["dispatch.claim", "dispatch.start", "listener.run", "webhook.post"] {
        let spans = named(name);
        let span = spans
            .iter()
            .find(linked_to_booking)
            .unwrap_or_else(|| panic!("a {name} span links to the booking's trace"));
        if name != "webhook.post" {
            let wait = if name == "listener.run" { "queue.wait_ms" } else { "outbox.wait_ms" };
            assert!(span["attributes"].get(wait).is_some(), "{name} carries {wait}: {span}");
        }
    }
    // The notification above is sent by a `deliver`-style run (send_due), not a listener's fast path:
    // its provider call still links to the trace that committed its event (the cancellation; the
    // booking's confirmation went stale when the appointment was cancelled).
    let cancel_trace_id = &cancel_trace[3..35];
    assert!(
        named("provider.send").iter().any(|span| span["links"]
            .as_array()
            .unwrap()
            .iter()
            .any(|link| link["traceId"] == cancel_trace_id)),
        "a provider.send span links to the committing trace of its event"
    );
    assert!(
        named("request").iter().any(|span| span["traceId"] == trace_id),
        "the booking's request span is in the caller's trace"
    );
    let text = logs.text();
    let mut secrets: Vec<&str> = PLANTED.to_vec();
    secrets.extend([token.as_str(), "plantedwebhooktoken", "book-zebulonia-quixwright"]);
    for value in secrets {
        if let Some(line) = text.lines().find(|line| line.contains(value)) {
            panic!("{value} leaked into the logs or the exported spans: {line}");
        }
    }
}
