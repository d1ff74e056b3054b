//! The API under concurrent retries and races (issue 12, items 1–3), against real PostgreSQL:
//! - 8 concurrent identical requests with one `Idempotency-Key` (a client's timeout and retries) for
//!   booking, rescheduling and cancelling (each with `expectedVersion`) → exactly one mutation and one
//!   event, 8 equal answers, no 409; the same key with another body → 422, nothing written;
//! - 200 interleaved deletion/booking pairs, the deletion's listener running right after it commits,
//!   never leave a booked appointment of a deleted patient;
//! - a patient's cancel of another patient's appointment answers 404 without waiting for (or taking)
//!   the row's lock.

use std::time::Duration;

use clinic_core::events::read;
use clinic_core::ids::EventId;
use clinic_core::listeners::{self, Listener};
use clinic_http::auth::Role;
use clinic_testkit::app::{token, TestApp, TestResponse};
use futures::future::join_all;
use serde_json::{json, Value};

const RETRIES: usize = 8;

/// Sends the same request `RETRIES` times at once with one idempotency key.
async fn retried(app: &TestApp, path: &str, body: &Value, key: &str) -> Vec<TestResponse> {
    let token = app.workspace.staff.clone();
    let headers = [("idempotency-key", key)];
    join_all((0..RETRIES).map(|_| app.call_with("POST", path, Some(&token), Some(body.clone()), &headers)))
        .await
}

/// Every answer is `status` and the same body.
fn assert_all_equal(responses: &[TestResponse], status: u16, what: &str) -> Value {
    for response in responses {
        assert_eq!(response.status, status, "{what}: {}", response.text);
        assert_eq!(response.body, responses[0].body, "{what}: every retry gets the same answer");
    }
    responses[0].body.clone()
}

async fn events_of_type(app: &TestApp, event_type: &str) -> i64 {
    app.count(&format!("SELECT 1 FROM events WHERE type = '{event_type}'")).await
}

#[tokio::test]
async fn concurrent_retries_with_one_key_mutate_once_and_answer_alike() {
    let app = TestApp::new().await;
    let staff = app.workspace.staff.clone();
    let practitioner = app.create_practitioner(&staff).await;
    let patient = app.create_patient(&staff, json!({"givenName": "Retry", "familyName": "Patient"})).await;

    let booking = json!({
        "patientId": patient["id"], "practitionerId": practitioner["id"],
        "startsAt": "2031-02-03T09:00:00Z", "endsAt": "2031-02-03T09:30:00Z", "reason": "retried",
    });
    let booked = assert_all_equal(&retried(&app, "/v1/appointments", &booking, "book-1").await, 201, "book");
    assert_eq!(events_of_type(&app, "appointment.created").await, 1);
    assert_eq!(app.count("SELECT 1 FROM appointments").await, 1);
    let id = booked["id"].as_str().unwrap().to_owned();

    let move_to = json!({
        "startsAt": "2031-02-04T09:00:00Z", "endsAt": "2031-02-04T09:30:00Z", "expectedVersion": 1,
    });
    let path = format!("/v1/appointments/{id}/reschedule");
    let moved = assert_all_equal(&retried(&app, &path, &move_to, "move-1").await, 200, "reschedule");
    assert_eq!(
        (moved["version"].as_i64(), moved["startsAt"].as_str()),
        (Some(2), Some("2031-02-04T09:00:00Z"))
    );
    assert_eq!(events_of_type(&app, "appointment.rescheduled").await, 1);

    let cancel = json!({"reason": "retried cancel", "expectedVersion": 2});
    let path = format!("/v1/appointments/{id}/cancel");
    let cancelled = assert_all_equal(&retried(&app, &path, &cancel, "cancel-1").await, 200, "cancel");
    assert_eq!((cancelled["version"].as_i64(), cancelled["status"].as_str()), (Some(3), Some("cancelled")));
    assert_eq!(events_of_type(&app, "appointment.cancelled").await, 1);

    // A replay after the fact answers the same as well; another body with a used key is 422.
    let again =
        app.call_with("POST", &path, Some(&staff), Some(cancel), &[("idempotency-key", "cancel-1")]).await;
    assert_eq!((again.status.as_u16(), &again.body), (200, &cancelled));
    let other = json!({"reason": "another cancel", "expectedVersion": 2});
    let refused =
        app.call_with("POST", &path, Some(&staff), Some(other), &[("idempotency-key", "cancel-1")]).await;
    assert_eq!(refused.status, 422, "{}", refused.text);
    assert_eq!(refused.body["field"], "Idempotency-Key");
    assert_eq!(
        app.count("SELECT 1 FROM events").await,
        5,
        "patient, practitioner and three appointment events"
    );
    assert_eq!(app.count("SELECT 1 FROM idempotency_keys").await, 3);
}

#[tokio::test]
async fn concurrent_different_bodies_with_one_key_run_one_and_refuse_the_rest() {
    let app = TestApp::new().await;
    let staff = app.workspace.staff.clone();
    let headers = [("idempotency-key", "mixed-1")];
    let bodies: Vec<Value> =
        (0..RETRIES).map(|i| json!({"givenName": format!("Body{}", i % 2), "familyName": "Mixed"})).collect();
    let responses = join_all(
        bodies
            .iter()
            .map(|body| app.call_with("POST", "/v1/patients", Some(&staff), Some(body.clone()), &headers)),
    )
    .await;
    let created: Vec<&TestResponse> = responses.iter().filter(|r| r.status == 201).collect();
    let refused = responses.iter().filter(|r| r.status == 422).count();
    assert_eq!(created.len() + refused, RETRIES, "only 201 or 422: {responses:?}");
    assert_eq!(
        (created.len(), refused),
        (RETRIES / 2, RETRIES / 2),
        "the winner's body replays, the other is refused"
    );
    assert!(created.iter().all(|r| r.body == created[0].body), "every winner answers the one patient");
    assert_eq!(events_of_type(&app, "patient.created").await, 1);
    assert_eq!(app.count("SELECT 1 FROM patients").await, 1);
}

#[tokio::test]
async fn patch_and_delete_take_the_same_unit_of_work() {
    let app = TestApp::new().await;
    let staff = app.workspace.staff.clone();
    let patient = app.create_patient(&staff, json!({"givenName": "Patch", "familyName": "Me"})).await;
    let path = format!("/v1/patients/{}", patient["id"].as_str().unwrap());
    let headers = [("idempotency-key", "patch-1")];
    let change = json!({"givenName": "Patched", "expectedVersion": 1});
    let patched = join_all(
        (0..RETRIES).map(|_| app.call_with("PATCH", &path, Some(&staff), Some(change.clone()), &headers)),
    )
    .await;
    let patched = assert_all_equal(&patched, 200, "patch");
    assert_eq!((patched["version"].as_i64(), patched["givenName"].as_str()), (Some(2), Some("Patched")));
    assert_eq!(events_of_type(&app, "patient.updated").await, 1);

    let headers = [("idempotency-key", "delete-1")];
    let deleted =
        join_all((0..RETRIES).map(|_| app.call_with("DELETE", &path, Some(&staff), None, &headers))).await;
    assert!(deleted.iter().all(|r| r.status == 204), "{deleted:?}");
    assert_eq!(events_of_type(&app, "patient.deleted").await, 1);
}

/// The patient.deleted event of `patient` (the delete has committed).
async fn deleted_event(app: &TestApp, patient: &str) -> EventId {
    let uuid: uuid::Uuid = patient.parse::<ulid::Ulid>().unwrap().into();
    let conn = app.db.pool.get().await.unwrap();
    conn.query_one("SELECT id FROM events WHERE type = 'patient.deleted' AND resource_id = $1", &[&uuid])
        .await
        .unwrap()
        .get(0)
}

#[tokio::test]
async fn bookings_racing_deletions_never_leave_a_booked_appointment_of_a_deleted_patient() {
    const PAIRS: usize = 200;
    let app = TestApp::new().await;
    let staff = app.workspace.staff.clone();
    let practitioner = app.create_practitioner(&staff).await;
    let mut patients = Vec::with_capacity(PAIRS);
    for i in 0..PAIRS {
        let patient =
            app.create_patient(&staff, json!({"givenName": format!("Race{i}"), "familyName": "Pair"})).await;
        patients.push(patient["id"].as_str().unwrap().to_owned());
    }
    let start = chrono::DateTime::parse_from_rfc3339("2032-01-01T08:00:00Z").unwrap();
    let (mut booked, mut refused) = (0, 0);
    for (i, patient) in patients.iter().enumerate() {
        let starts_at = start + chrono::Duration::minutes(30 * i as i64);
        let ends_at = starts_at + chrono::Duration::minutes(30);
        let body = json!({
            "patientId": patient, "practitionerId": practitioner["id"],
            "startsAt": starts_at.to_rfc3339(), "endsAt": ends_at.to_rfc3339(),
        });
        let book = app.call("POST", "/v1/appointments", Some(&staff), Some(body));
        // The deletion, then its listener at once: the moment a booking that read the patient
        // without a lock would slip in behind it.
        let delete = async {
            let response = app.call("DELETE", &format!("/v1/patients/{patient}"), Some(&staff), None).await;
            assert_eq!(response.status, 204, "{}", response.text);
            let event = deleted_event(&app, patient).await;
            let envelope = read::find(&app.db.pool.get().await.unwrap(), event).await.unwrap().unwrap();
            listeners::run(&app.state.pool, Listener::CancelFutureAppointments, &envelope).await.unwrap();
        };
        // Alternate which of the two starts first.
        let booking = if i % 2 == 0 { tokio::join!(book, delete).0 } else { tokio::join!(delete, book).1 };
        match booking.status.as_u16() {
            201 => booked += 1,
            422 => {
                assert_eq!(booking.body["field"], "patientId", "{}", booking.text);
                refused += 1;
            }
            other => panic!("booking answered {other}: {}", booking.text),
        }
    }
    let stranded = app
        .count(
            "SELECT 1 FROM appointments a JOIN patients p ON p.id = a.patient_id \
             WHERE p.deleted_at IS NOT NULL AND a.status = 'booked'",
        )
        .await;
    println!("{PAIRS} pairs: {booked} booked then cancelled by the deletion, {refused} refused");
    assert_eq!(stranded, 0, "booked appointments of deleted patients ({booked} booked, {refused} refused)");
    assert_eq!(booked + refused, PAIRS);
}

#[tokio::test]
async fn a_patients_cancel_of_another_patients_appointment_neither_waits_nor_locks() {
    let app = TestApp::new().await;
    let staff = app.workspace.staff.clone();
    let practitioner = app.create_practitioner(&staff).await;
    let me = app.create_patient(&staff, json!({"givenName": "Me", "familyName": "Patient"})).await;
    let other = app.create_patient(&staff, json!({"givenName": "Other", "familyName": "Patient"})).await;
    let theirs =
        app.book(&staff, &other, &practitioner, "2031-06-01T09:00:00Z", "2031-06-01T09:30:00Z").await;
    let theirs_id = theirs["id"].as_str().unwrap();
    let me_id: ulid::Ulid = me["id"].as_str().unwrap().parse().unwrap();
    let patient = token(app.workspace.id, me_id, Role::Patient);

    // Someone holds the other patient's appointment locked for the whole probe.
    let mut holder = app.db.pool.get().await.unwrap();
    let tx = holder.transaction().await.unwrap();
    let uuid: uuid::Uuid = theirs_id.parse::<ulid::Ulid>().unwrap().into();
    tx.execute("SELECT 1 FROM appointments WHERE id = $1 FOR UPDATE", &[&uuid]).await.unwrap();

    let path = format!("/v1/appointments/{theirs_id}/cancel");
    let never_used = format!("/v1/appointments/{}/cancel", ulid::Ulid::generate());
    // A bound, not a sleep: a request that waited for the lock would wait until the holder commits.
    let bound = Duration::from_secs(30);
    let probe = tokio::time::timeout(bound, app.call("POST", &path, Some(&patient), Some(json!({}))))
        .await
        .expect("the cancel did not wait for another patient's row lock");
    let missing = app.call("POST", &never_used, Some(&patient), Some(json!({}))).await;
    assert_eq!(probe.status, 404, "{}", probe.text);
    let shape = |r: &TestResponse| {
        let mut body = r.body.clone();
        body.as_object_mut().map(|o| o.remove("instance"));
        (r.status, body)
    };
    assert_eq!(shape(&probe), shape(&missing), "another patient's appointment looks missing");
    tx.rollback().await.unwrap();
    let read = app.call("GET", &format!("/v1/appointments/{theirs_id}"), Some(&patient), None).await;
    assert_eq!(
        shape(&read),
        shape(&app.call("GET", &never_used.replace("/cancel", ""), Some(&patient), None).await)
    );
    assert_eq!(app.count("SELECT 1 FROM appointments WHERE status = 'booked'").await, 1);
}
