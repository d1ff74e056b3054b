//! Who is notified, and the file provider `clinic dev` uses: a staff member is never notified of
//! their own change; a patient who cancels their own appointment still gets the confirmation; the
//! file provider writes one readable `.eml` per notification, named by its idempotency key.

use std::sync::Arc;

use clinic_core::delivery::{DeliveryConfig, FileProvider, NotifierKind, Providers, Sender};
use clinic_core::events::Envelope;
use clinic_core::listeners::{self, Listener, ListenerOutcome};
use clinic_http::auth::Role;
use clinic_testkit::app::{token, TestApp};
use serde_json::{json, Value};

async fn event(app: &TestApp, event_type: &str, appointment: &Value) -> Envelope {
    let id: ulid::Ulid = appointment["id"].as_str().unwrap().parse().unwrap();
    let conn = app.db.client().await;
    let row = conn
        .query_one(
            "SELECT id FROM events WHERE type = $1 AND resource_id = $2",
            &[&event_type, &uuid::Uuid::from(id)],
        )
        .await
        .unwrap();
    clinic_core::events::read::find(&conn, row.get(0)).await.unwrap().unwrap()
}

async fn booked(app: &TestApp, token: &str) -> (Value, Value, Value) {
    let patient = app
        .create_patient(
            &app.workspace.staff,
            json!({"givenName": "Ada", "familyName": "Lovelace", "email": "ada@example.test"}),
        )
        .await;
    let practitioner = app.create_practitioner(&app.workspace.staff).await;
    let appointment =
        app.book(token, &patient, &practitioner, "2027-03-02T09:00:00Z", "2027-03-02T09:30:00Z").await;
    (patient, practitioner, appointment)
}

#[tokio::test]
async fn a_staff_member_is_never_notified_of_their_own_change() {
    let app = TestApp::new().await;
    let member = ulid::Ulid::generate();
    let conn = app.db.client().await;
    conn.execute(
        "INSERT INTO members (id, workspace_id, role, display_name) VALUES ($1, $2, 'staff', 'Dr. Self')",
        &[&uuid::Uuid::from(member), &app.workspace.id],
    )
    .await
    .unwrap();
    let own = token(app.workspace.id, member, Role::Staff);
    let (_, practitioner, appointment) = booked(&app, &own).await;
    let practitioner_id: ulid::Ulid = practitioner["id"].as_str().unwrap().parse().unwrap();
    conn.execute(
        "UPDATE practitioners SET member_id = $1, email = 'self@example.test' WHERE id = $2",
        &[&uuid::Uuid::from(member), &uuid::Uuid::from(practitioner_id)],
    )
    .await
    .unwrap();
    let created = event(&app, "appointment.created", &appointment).await;
    let pool = &app.state.pool;
    let outcome = listeners::run(pool, Listener::PractitionerScheduleChange, &created).await.unwrap();
    assert_eq!(outcome, ListenerOutcome::Stale { reason: "own_change" });
    assert_eq!(app.count("SELECT 1 FROM notifications WHERE recipient_kind = 'practitioner'").await, 0);

    // Another staff member's cancellation of the same appointment is notified.
    let path = format!("/v1/appointments/{}/cancel", appointment["id"].as_str().unwrap());
    let cancelled = app.call("POST", &path, Some(&app.workspace.staff), Some(json!({}))).await;
    assert_eq!(cancelled.status, 200, "{}", cancelled.text);
    let cancelled = event(&app, "appointment.cancelled", &appointment).await;
    let outcome = listeners::run(pool, Listener::PractitionerScheduleChange, &cancelled).await.unwrap();
    assert_eq!(outcome, ListenerOutcome::Applied { effects: 1 });
}

#[tokio::test]
async fn a_patient_cancelling_their_own_appointment_gets_the_confirmation_as_a_file() {
    let app = TestApp::new().await;
    let (patient, _, appointment) = booked(&app, &app.workspace.staff.clone()).await;
    let patient_id: ulid::Ulid = patient["id"].as_str().unwrap().parse().unwrap();
    let own = token(app.workspace.id, patient_id, Role::Patient);
    let path = format!("/v1/appointments/{}/cancel", appointment["id"].as_str().unwrap());
    let cancelled = app.call("POST", &path, Some(&own), Some(json!({}))).await;
    assert_eq!(cancelled.status, 200, "{}", cancelled.text);
    let cancelled = event(&app, "appointment.cancelled", &appointment).await;
    let outcome =
        listeners::run(&app.state.pool, Listener::PatientCancellationNotice, &cancelled).await.unwrap();
    assert_eq!(outcome, ListenerOutcome::Applied { effects: 1 });

    let dir = std::env::temp_dir().join(format!("clinic-mail-{}", ulid::Ulid::generate()));
    let mut config = DeliveryConfig::with_notifiers(vec![NotifierKind::File]);
    config.file_dir = dir.clone();
    let providers = Providers::both(Arc::new(FileProvider::new(&dir)));
    let sender = Sender::new(app.state.pool.clone(), providers, config);
    assert_eq!(sender.send_due(5).await.unwrap().sent, 1);
    let file = dir.join(format!("{}_patient_cancellation_notice.eml", cancelled.id));
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(text.contains("To: ada@example.test\r\n"), "{text}");
    assert!(text.contains("X-Clinic-Template: appointment.cancellation_notice"));
    assert!(text.contains("Tuesday 2 March 2027, 09:00 UTC"), "default zone UTC: {text}");
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1, "no temporary file left behind");
    std::fs::remove_dir_all(&dir).unwrap();
}
