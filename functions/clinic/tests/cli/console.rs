//! `clinic explain`, `clinic outbox bulk …` and `clinic listeners …` against a fresh database: the
//! console's use cases from the shell, with their audit rows.

use std::sync::Arc;

use clinic_core::dispatch::testing::FailingTransport;
use clinic_core::dispatch::{DispatchConfig, Dispatcher, StartError};
use clinic_testkit::app::TestApp;
use serde_json::{json, Value};

/// Exit code, stdout as JSON (`null` when it is not JSON) and stderr of `clinic args…`.
async fn clinic(app: &TestApp, args: &[&str]) -> (i32, Value, String) {
    let output = super::support::clinic(app, args).await;
    (output.code, serde_json::from_str(&output.stdout).unwrap_or(Value::Null), output.stderr)
}

#[tokio::test]
async fn explain_bulk_retry_and_pause_from_the_cli() {
    let app = TestApp::new().await;
    let admin = app.workspace.admin.clone();
    let patient = app.create_patient(&admin, json!({"givenName": "Ada", "familyName": "Lovelace"})).await;
    let practitioner = app.create_practitioner(&admin).await;
    for day in 2..4 {
        let starts = format!("2035-01-{day:02}T09:00:00Z");
        let ends = format!("2035-01-{day:02}T09:30:00Z");
        app.book(&admin, &patient, &practitioner, &starts, &ends).await;
    }
    let failing = FailingTransport::always(StartError::permanent("provider_rejected", "no"));
    let config = DispatchConfig { max_attempts: 3, ..DispatchConfig::default() };
    Dispatcher::new(app.state.pool.clone(), Arc::new(failing), config).drain_once().await.unwrap();
    let dead = app.count("SELECT 1 FROM event_outbox WHERE status = 'dead'").await;
    assert_eq!(dead, 2);

    let event: String = app
        .db
        .client()
        .await
        .query_one("SELECT id FROM events WHERE type = 'appointment.created' ORDER BY id LIMIT 1", &[])
        .await
        .unwrap()
        .get::<_, clinic_core::ids::EventId>(0)
        .to_string();
    let (code, explained, stderr) = clinic(&app, &["explain", &event]).await;
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(explained["publishedName"], "clinic.appointment.created.v1");
    assert_eq!(explained["sections"][2]["rows"][0]["lastErrorCode"], "provider_rejected");
    assert!(!explained.to_string().contains("Lovelace"));

    let base = [
        "outbox",
        "bulk",
        "retry",
        "--actor",
        "ops:cli",
        "--reason",
        "provider back",
        "--error-code",
        "provider_rejected",
    ];
    let (code, dry, stderr) = clinic(&app, &[&base[..], &["--dry-run"]].concat()).await;
    assert_eq!(code, 0, "{stderr}");
    assert_eq!((dry["matched"].clone(), dry["applied"].clone()), (json!(2), json!(0)));
    let (code, applied, stderr) = clinic(&app, &base).await;
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(applied["applied"], 2);
    let audited = app
        .count("SELECT 1 FROM operator_actions WHERE actor = 'ops:cli' AND reason = 'provider back' AND batch_id IS NOT NULL")
        .await;
    assert_eq!(audited, 2);
    let (code, _, stderr) =
        clinic(&app, &["outbox", "bulk", "retry", "--actor", "ops:cli", "--reason", " ", "--status", "dead"])
            .await;
    assert_ne!(code, 0);
    assert!(stderr.contains("reason"), "{stderr}");
    let (code, _, stderr) = clinic(
        &app,
        &[
            "outbox",
            "bulk",
            "replay",
            "--actor",
            "ops:cli",
            "--reason",
            "newer",
            "--listener-only",
            "send_fax",
        ],
    )
    .await;
    assert_ne!(code, 0);
    assert!(stderr.contains("409") && stderr.contains("send_fax"), "{stderr}");

    let workspace = app.workspace.id.to_string();
    let pause = [
        "listeners",
        "pause",
        "patient_reminder",
        "--workspace",
        &workspace,
        "--actor",
        "ops:cli",
        "--reason",
        "bug",
    ];
    let (code, paused, stderr) = clinic(&app, &pause).await;
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(paused["action"], "pause");
    let (code, _, _) = clinic(&app, &pause).await;
    assert_ne!(code, 0, "pausing twice is refused");
    let (_, listed, _) = clinic(&app, &["listeners", "list"]).await;
    assert_eq!(listed["paused"][0]["listener"], "patient_reminder");
    let resume = [
        "listeners",
        "resume",
        "patient_reminder",
        "--workspace",
        &workspace,
        "--actor",
        "ops:cli",
        "--reason",
        "fixed",
    ];
    let (code, resumed, stderr) = clinic(&app, &resume).await;
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(resumed["action"], "resume");
}

#[tokio::test]
async fn rejections_lists_the_recorded_rejections_with_ids_and_codes_only() {
    let app = TestApp::new().await;
    let admin = app.workspace.admin.clone();
    let patient = app.create_patient(&admin, json!({"givenName": "Ada", "familyName": "Lovelace"})).await;
    let practitioner = app.create_practitioner(&admin).await;
    app.book(&admin, &patient, &practitioner, "2035-02-01T09:00:00Z", "2035-02-01T09:30:00Z").await;
    let client = app.db.client().await;
    let id: clinic_core::ids::EventId = client
        .query_one("SELECT id FROM events WHERE type = 'appointment.created'", &[])
        .await
        .unwrap()
        .get(0);
    let stored = clinic_core::events::read::find(&client, id).await.unwrap().unwrap();
    let mut forged = stored.clone();
    forged.id = clinic_core::ids::EventId::generate();
    let listener = clinic_core::listeners::Listener::PatientBookingConfirmation;
    clinic_core::listeners::run(&app.state.pool, listener, &forged).await.unwrap_err();

    let forged_id = forged.id.to_string();
    let (code, listed, stderr) = clinic(&app, &["rejections", "--event-id", &forged_id]).await;
    assert_eq!(code, 0, "{stderr}");
    let items = listed["items"].as_array().unwrap();
    assert_eq!(items.len(), 1, "{listed}");
    assert_eq!(items[0]["reason"], "unknown_event");
    assert_eq!(items[0]["listener"], "patient_booking_confirmation");
    assert_eq!(items[0]["workspaceId"], app.workspace.id.to_string());
    assert!(!listed.to_string().contains("Lovelace"));
    let (_, none, _) = clinic(&app, &["rejections", "--reason", "tenant_mismatch"]).await;
    assert_eq!(none["items"], json!([]));
    let (code, _, stderr) = clinic(&app, &["rejections", "--reason", "nope"]).await;
    assert_ne!(code, 0);
    assert!(stderr.contains("--reason"), "{stderr}");
}
