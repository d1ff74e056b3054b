//! `clinic deliveries …` against a fresh database: a provider outage buries a delivery, the CLI lists
//! it, refuses a blank reason (recording nothing), retries it with an audit row, and `send` delivers
//! it through the file provider; a sent delivery cannot be discarded.

use clinic_core::listeners::{self, Listener};
use clinic_testkit::app::TestApp;
use serde_json::json;

use super::support::{clinic_with, Output};

/// `clinic` with the emulator's dummy AWS credentials and `env`.
async fn clinic(app: &TestApp, env: &[(&str, &str)], args: &[&str]) -> Output {
    let mut all =
        vec![("AWS_ACCESS_KEY_ID", "test"), ("AWS_SECRET_ACCESS_KEY", "test"), ("AWS_REGION", "us-east-1")];
    all.extend_from_slice(env);
    clinic_with(app, &all, args).await
}

#[tokio::test]
async fn a_buried_delivery_is_listed_retried_with_an_audit_row_and_sent() {
    let app = TestApp::new().await;
    let token = app.workspace.staff.clone();
    let patient = app
        .create_patient(
            &token,
            json!({"givenName": "Cli", "familyName": "Plant", "email": "cli@example.test"}),
        )
        .await;
    let practitioner = app.create_practitioner(&token).await;
    app.book(&token, &patient, &practitioner, "2027-04-06T10:00:00Z", "2027-04-06T10:30:00Z").await;
    let conn = app.db.client().await;
    let id =
        conn.query_one("SELECT id FROM events WHERE type = 'appointment.created'", &[]).await.unwrap().get(0);
    let event = clinic_core::events::read::find(&conn, id).await.unwrap().unwrap();
    listeners::run(&app.state.pool, Listener::PatientBookingConfirmation, &event).await.unwrap();

    // SES at a closed port, one attempt: dead with the provider's code.
    let outage = [
        ("CLINIC_NOTIFIER", "ses"),
        ("CLINIC_AWS_ENDPOINT", "http://127.0.0.1:9"),
        ("CLINIC_DELIVERY_MAX_ATTEMPTS", "1"),
    ];
    let report = clinic(&app, &outage, &["deliveries", "send"]).await.json();
    assert_eq!(report["dead"], 1, "{report}");
    let listed = clinic(&app, &[], &["deliveries", "list", "--status", "dead"]).await;
    let items = listed.json()["items"].clone();
    assert_eq!(items.as_array().unwrap().len(), 1);
    assert_eq!(items[0]["lastErrorCode"], "provider_unreachable");
    assert!(!listed.stdout.contains("cli@example.test") && !listed.stdout.contains("Plant"));
    let delivery = items[0]["id"].as_str().unwrap().to_owned();

    // Recover by filter (issue 38 item 1): a dry run counts it and changes nothing; a flag of
    // another queue's filter is refused by name.
    let args =
        ["deliveries", "bulk", "retry", "--status", "dead", "--actor", "ops:test", "--reason", "count"];
    let dry = clinic(&app, &[], &[&args[..], &["--dry-run"]].concat()).await.json();
    assert_eq!(
        (dry["queue"].as_str(), dry["matched"].as_i64(), dry["sample"][0].as_str()),
        (Some("notifications"), Some(1), Some(delivery.as_str())),
        "{dry}"
    );
    let foreign = ["--endpoint-id", "01J00000000000000000000000"];
    let refused = clinic(&app, &[], &[&args[..], &foreign].concat()).await;
    assert_ne!(refused.code, 0);
    assert!(refused.stderr.contains("endpointId"), "{}", refused.stderr);
    assert_eq!(app.count("SELECT 1 FROM operator_actions").await, 0, "a dry run records nothing");

    let blank =
        clinic(&app, &[], &["deliveries", "retry", &delivery, "--actor", "ops:test", "--reason", " "]).await;
    assert_ne!(blank.code, 0);
    assert_eq!(app.count("SELECT 1 FROM operator_actions").await, 0, "a refusal records nothing");
    let args = ["deliveries", "retry", &delivery, "--actor", "ops:test", "--reason", "provider fixed"];
    let retried = clinic(&app, &[], &args).await.json();
    assert_eq!(
        (retried["statusBefore"].as_str(), retried["statusAfter"].as_str()),
        (Some("dead"), Some("pending"))
    );
    assert_eq!(
        app.count("SELECT 1 FROM operator_actions WHERE notification_id IS NOT NULL AND actor = 'ops:test'")
            .await,
        1
    );

    let dir = std::env::temp_dir().join(format!("clinic-cli-mail-{}", ulid::Ulid::generate()));
    let files = [("CLINIC_NOTIFIER", "file"), ("CLINIC_DELIVERY_DIR", dir.to_str().unwrap())];
    assert_eq!(clinic(&app, &files, &["deliveries", "send"]).await.json()["sent"], 1);
    let file = dir.join(format!("{}_patient_booking_confirmation.eml", event.id));
    assert!(std::fs::read_to_string(&file).unwrap().contains("To: cli@example.test"));
    let args = ["deliveries", "discard", &delivery, "--actor", "ops:test", "--reason", "late"];
    let refused = clinic(&app, &[], &args).await;
    assert_ne!(refused.code, 0, "a sent delivery cannot be discarded");
    assert!(refused.stderr.contains("refused"), "{}", refused.stderr);
    std::fs::remove_dir_all(&dir).unwrap();
}
