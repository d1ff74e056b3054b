//! Erasure (DESIGN.md §6a, issue 12 item 5): deleting a patient erases its personal fields and the
//! free-text reasons of its appointments in the same transaction, keeping ids, statuses and times.
//! Values planted through the API are found by a scan of every column of every table before the
//! deletion, and nowhere after it.

use clinic_testkit::app::TestApp;
use serde_json::{json, Value};

const GIVEN: &str = "Eraseminda";
const FAMILY: &str = "Forgetsworth";
const EMAIL: &str = "eraseminda.f@erasure.test";
const PHONE: &str = "+44 20 7946 0199";
const BIRTH: &str = "1917-03-29";
const BOOKED_REASON: &str = "recurring vertigo spells";
const DONE_REASON: &str = "follow-up on thyroid panel";
const CANCELLED_REASON: &str = "acute lumbar pain flare";
const CANCELLATION: &str = "moved abroad for treatment";
const PLANTED: &[&str] =
    &[GIVEN, FAMILY, EMAIL, PHONE, BIRTH, BOOKED_REASON, DONE_REASON, CANCELLED_REASON, CANCELLATION];

/// Every base table of the schema with the planted values found in any of its columns (each row is
/// cast to text, which covers text, json, arrays and dates alike; the text and json columns are
/// also checked one by one, as found in `information_schema`).
async fn scan(app: &TestApp) -> Vec<(String, &'static str)> {
    let client = app.db.client().await;
    let tables = client
        .query(
            "SELECT table_name::text FROM information_schema.tables \
             WHERE table_schema = 'public' AND table_type = 'BASE TABLE' ORDER BY 1",
            &[],
        )
        .await
        .unwrap();
    assert!(tables.len() >= 17, "every table of the schema is scanned: {}", tables.len());
    let mut found = Vec::new();
    for table in &tables {
        let table: String = table.get(0);
        let columns: Vec<String> = client
            .query(
                "SELECT column_name::text FROM information_schema.columns \
                 WHERE table_schema = 'public' AND table_name = $1 \
                   AND (data_type IN ('text', 'character varying', 'character', 'json', 'jsonb', 'ARRAY', 'date'))",
                &[&table],
            )
            .await
            .unwrap()
            .iter()
            .map(|row| row.get(0))
            .collect();
        for value in PLANTED {
            let pattern = format!("%{value}%");
            let whole_row = format!("SELECT count(*) FROM \"{table}\" t WHERE t::text ILIKE $1");
            let mut hits: i64 = client.query_one(&whole_row, &[&pattern]).await.unwrap().get(0);
            for column in &columns {
                let by_column = format!("SELECT count(*) FROM \"{table}\" WHERE \"{column}\"::text ILIKE $1");
                hits += client.query_one(&by_column, &[&pattern]).await.unwrap().get::<_, i64>(0);
            }
            if hits > 0 {
                found.push((table.clone(), *value));
            }
        }
    }
    found
}

async fn book(
    app: &TestApp,
    token: &str,
    patient: &Value,
    practitioner: &Value,
    day: u32,
    reason: &str,
) -> Value {
    let body = json!({
        "patientId": patient["id"], "practitionerId": practitioner["id"],
        "startsAt": format!("2031-02-{day:02}T09:00:00Z"), "endsAt": format!("2031-02-{day:02}T09:30:00Z"),
        "reason": reason,
    });
    let response = app.call("POST", "/v1/appointments", Some(token), Some(body)).await;
    assert_eq!(response.status, 201, "{}", response.text);
    response.body
}

async fn appointment_rows(app: &TestApp) -> Vec<(uuid::Uuid, String, i32, String, String)> {
    let client = app.db.client().await;
    client
        .query(
            "SELECT id, status, version, starts_at::text, created_at::text || updated_at::text \
             FROM appointments ORDER BY id",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| (row.get(0), row.get(1), row.get(2), row.get(3), row.get(4)))
        .collect()
}

#[tokio::test]
async fn deleting_a_patient_erases_its_personal_fields_and_reasons_everywhere() {
    let app = TestApp::new().await;
    let staff = app.workspace.staff.clone();
    let practitioner = app.create_practitioner(&staff).await;
    let patient = app
        .create_patient(
            &staff,
            json!({"givenName": GIVEN, "familyName": FAMILY, "email": EMAIL, "phone": PHONE, "dateOfBirth": BIRTH}),
        )
        .await;
    let id = patient["id"].as_str().unwrap().to_owned();
    book(&app, &staff, &patient, &practitioner, 3, BOOKED_REASON).await;
    let done = book(&app, &staff, &patient, &practitioner, 4, DONE_REASON).await;
    let cancelled = book(&app, &staff, &patient, &practitioner, 5, CANCELLED_REASON).await;
    let path = format!("/v1/appointments/{}/complete", done["id"].as_str().unwrap());
    assert_eq!(app.call("POST", &path, Some(&staff), Some(json!({}))).await.status, 200);
    let path = format!("/v1/appointments/{}/cancel", cancelled["id"].as_str().unwrap());
    let response = app.call("POST", &path, Some(&staff), Some(json!({"reason": CANCELLATION}))).await;
    assert_eq!(response.status, 200, "{}", response.text);
    // Another patient's data is not touched.
    let other = app.create_patient(&staff, json!({"givenName": "Keepme", "familyName": "Intact"})).await;
    book(&app, &staff, &other, &practitioner, 6, "keep this reason").await;

    // The scan sees every planted value before the deletion (so it can fail).
    let before = scan(&app).await;
    for value in PLANTED {
        assert!(before.iter().any(|(_, found)| found == value), "scan finds {value} before: {before:?}");
    }
    let timeline_before = app.call("GET", &format!("/v1/patients/{id}/timeline"), Some(&staff), None).await;
    assert_eq!(timeline_before.status, 200);
    let rows_before = appointment_rows(&app).await;

    let response = app.call("DELETE", &format!("/v1/patients/{id}"), Some(&staff), None).await;
    assert_eq!(response.status, 204, "{}", response.text);

    assert_eq!(scan(&app).await, Vec::new(), "no planted value is left in any table");
    // Ids, statuses, versions and times stay: the rows are the same rows.
    assert_eq!(appointment_rows(&app).await, rows_before);
    let erased = app
        .count(&format!(
            "SELECT 1 FROM patients WHERE id = '{}' AND deleted_at IS NOT NULL AND given_name IS NULL \
             AND family_name IS NULL AND email IS NULL AND phone IS NULL AND date_of_birth IS NULL",
            uuid::Uuid::from(id.parse::<ulid::Ulid>().unwrap())
        ))
        .await;
    assert_eq!(erased, 1, "the row stays, erased");
    assert_eq!(app.count("SELECT 1 FROM appointments WHERE reason = 'keep this reason'").await, 1);
    assert_eq!(app.count("SELECT 1 FROM patients WHERE given_name = 'Keepme'").await, 1);

    // The patient answers like a missing one; its appointments answer without reasons.
    for (method, body) in [("GET", None), ("PATCH", Some(json!({"givenName": "Back"}))), ("DELETE", None)] {
        let response = app.call(method, &format!("/v1/patients/{id}"), Some(&staff), body).await;
        assert_eq!(response.status, 404, "{method}: {}", response.text);
    }
    let path = format!("/v1/appointments/{}", cancelled["id"].as_str().unwrap());
    let response = app.call("GET", &path, Some(&staff), None).await;
    assert_eq!(response.status, 200);
    assert_eq!(response.body["status"], "cancelled");
    assert_eq!(response.body["reason"], Value::Null);
    assert_eq!(response.body["cancellationReason"], Value::Null);

    // The timeline stays whole: every earlier event, plus the deletion.
    let timeline = app.call("GET", &format!("/v1/patients/{id}/timeline"), Some(&staff), None).await;
    assert_eq!(timeline.status, 200);
    let before_items = timeline_before.body["items"].as_array().unwrap();
    let items = timeline.body["items"].as_array().unwrap();
    assert_eq!(items.len(), before_items.len() + 1);
    assert_eq!(items[0]["type"], "patient.deleted");
    assert_eq!(&items[1..], &before_items[..]);
}

#[tokio::test]
async fn a_failed_deletion_erases_nothing() {
    let app = TestApp::new().await;
    let staff = app.workspace.staff.clone();
    let practitioner = app.create_practitioner(&staff).await;
    let patient = app.create_patient(&staff, json!({"givenName": GIVEN, "familyName": FAMILY})).await;
    book(&app, &staff, &patient, &practitioner, 7, BOOKED_REASON).await;
    let id = patient["id"].as_str().unwrap();
    // A patient token may not delete: nothing is erased.
    let patient_token =
        clinic_testkit::app::token(app.workspace.id, id.parse().unwrap(), clinic_http::auth::Role::Patient);
    let response = app.call("DELETE", &format!("/v1/patients/{id}"), Some(&patient_token), None).await;
    assert_eq!(response.status, 403, "{}", response.text);
    assert_eq!(app.count(&format!("SELECT 1 FROM patients WHERE given_name = '{GIVEN}'")).await, 1);
    assert_eq!(app.count(&format!("SELECT 1 FROM appointments WHERE reason = '{BOOKED_REASON}'")).await, 1);
}
