//! Erasure is final (issue 39 item 1; DESIGN.md §6a, §6c): after a patient's deletion commits, nothing
//! writes free text or personal data about that patient again, whoever asks and in whatever order.
//! - staff reschedule, complete and cancel (with or without a reason) of its appointments answer 409
//!   `patient-deleted` and write nothing; the patient's own token sees none of them any more (404, an
//!   empty schedule);
//! - a deleted patient blocks no slot, even before its listener cancelled its future appointments;
//! - the database itself refuses a reason on an appointment of an erased patient and un-deleting;
//! - a cancel with a reason racing the deletion on two connections, in either order, leaves no
//!   reason behind once the deletion committed.

use std::time::Duration;

use clinic_core::appointments::{self, Access, Cancel};
use clinic_core::ids::{AppointmentId, PatientId};
use clinic_core::patients;
use clinic_http::auth::Role;
use clinic_testkit::app::{token, TestApp};
use clinic_testkit::seed::system_ctx;
use serde_json::{json, Value};

const REASON: &str = "Patient disclosed a relapse of an old illness";

/// A patient with one future booked appointment (no reason at booking), and the patient's own token.
async fn patient_with_appointment(app: &TestApp, day: u32) -> (Value, Value, Value, String) {
    let staff = app.workspace.staff.clone();
    let practitioner = app.create_practitioner(&staff).await;
    let patient = app.create_patient(&staff, json!({"givenName": "Erased", "familyName": "Person"})).await;
    let starts_at = format!("2031-03-{day:02}T09:00:00Z");
    let ends_at = format!("2031-03-{day:02}T09:30:00Z");
    let appointment = app.book(&staff, &patient, &practitioner, &starts_at, &ends_at).await;
    let own = token(app.workspace.id, patient["id"].as_str().unwrap().parse().unwrap(), Role::Patient);
    (patient, practitioner, appointment, own)
}

fn uuid_of(value: &Value) -> uuid::Uuid {
    value["id"].as_str().unwrap().parse::<ulid::Ulid>().unwrap().into()
}

/// The appointment's row as a comparable tuple (status, version, times, both reasons).
async fn row(app: &TestApp, appointment: &Value) -> (String, i32, String, Option<String>, Option<String>) {
    let conn = app.db.client().await;
    let row = conn
        .query_one(
            "SELECT status, version, starts_at::text || ends_at::text, reason, cancellation_reason \
             FROM appointments WHERE id = $1",
            &[&uuid_of(appointment)],
        )
        .await
        .unwrap();
    (row.get(0), row.get(1), row.get(2), row.get(3), row.get(4))
}

#[tokio::test]
async fn the_appointments_of_a_deleted_patient_refuse_every_change_and_block_no_slot() {
    let app = TestApp::new().await;
    let staff = app.workspace.staff.clone();
    let (patient, practitioner, appointment, own) = patient_with_appointment(&app, 3).await;
    let deleted = app
        .call("DELETE", &format!("/v1/patients/{}", patient["id"].as_str().unwrap()), Some(&staff), None)
        .await;
    assert_eq!(deleted.status, 204, "{}", deleted.text);
    // The deletion's listener has not run: the future appointment is still booked.
    let before = row(&app, &appointment).await;
    assert_eq!(before.0, "booked");
    let events_before = app.count("SELECT 1 FROM events").await;

    let id = appointment["id"].as_str().unwrap();
    let changes = [
        ("reschedule", json!({"startsAt": "2031-04-01T09:00:00Z", "endsAt": "2031-04-01T09:30:00Z"})),
        ("complete", json!({})),
        ("cancel", json!({"reason": REASON})),
        ("cancel", json!({})),
    ];
    for (action, body) in changes {
        let path = format!("/v1/appointments/{id}/{action}");
        let response = app.call("POST", &path, Some(&staff), Some(body.clone())).await;
        assert_eq!(response.status, 409, "staff {action} {body}: {}", response.text);
        assert_eq!(response.body["type"], "urn:clinic:problem:patient-deleted", "{action}");
        let response = app.call("POST", &path, Some(&app.workspace.admin), Some(body)).await;
        assert_eq!(response.status, 409, "admin {action}: {}", response.text);
    }
    // The patient's own token sees nothing of it any more: like a missing id, and an empty schedule.
    let cancel = format!("/v1/appointments/{id}/cancel");
    let response = app.call("POST", &cancel, Some(&own), Some(json!({"reason": REASON}))).await;
    assert_eq!(response.status, 404, "own cancel: {}", response.text);
    let response = app.call("GET", &format!("/v1/appointments/{id}"), Some(&own), None).await;
    assert_eq!(response.status, 404, "own read: {}", response.text);
    let schedule = "/v1/appointments?from=2031-03-01T00:00:00Z&to=2031-03-30T00:00:00Z";
    let response = app.call("GET", schedule, Some(&own), None).await;
    assert_eq!(response.status, 200, "{}", response.text);
    assert_eq!(response.body["items"], json!([]), "a deleted patient's token lists nothing");

    // Nothing was written.
    assert_eq!(row(&app, &appointment).await, before);
    assert_eq!(app.count("SELECT 1 FROM events").await, events_before);
    assert_eq!(
        app.count(&format!("SELECT 1 FROM appointments WHERE cancellation_reason = '{REASON}'")).await,
        0
    );

    // Staff still read it (without reasons), and the slot is free for another patient.
    let response = app.call("GET", &format!("/v1/appointments/{id}"), Some(&staff), None).await;
    assert_eq!(response.status, 200, "{}", response.text);
    let other = app.create_patient(&staff, json!({"givenName": "Next", "familyName": "Patient"})).await;
    let body = json!({
        "patientId": other["id"], "practitionerId": practitioner["id"],
        "startsAt": "2031-03-03T09:00:00Z", "endsAt": "2031-03-03T09:30:00Z",
    });
    let response = app.call("POST", "/v1/appointments", Some(&staff), Some(body)).await;
    assert_eq!(response.status, 201, "a deleted patient blocks no slot: {}", response.text);
}

#[tokio::test]
async fn the_database_refuses_a_reason_for_an_erased_patient_and_un_deleting() {
    let app = TestApp::new().await;
    let staff = app.workspace.staff.clone();
    let (patient, _, appointment, _) = patient_with_appointment(&app, 4).await;
    let response = app
        .call("DELETE", &format!("/v1/patients/{}", patient["id"].as_str().unwrap()), Some(&staff), None)
        .await;
    assert_eq!(response.status, 204, "{}", response.text);

    // As the application's role, bypassing every check of the code.
    let conn = app.state.pool.get().await.unwrap();
    let appointment = uuid_of(&appointment);
    let patient = uuid_of(&patient);
    let refused = [
        (
            "UPDATE appointments SET cancellation_reason = 'relapse', status = 'cancelled' WHERE id = $1",
            appointment,
        ),
        ("UPDATE appointments SET reason = 'relapse' WHERE id = $1", appointment),
        ("UPDATE appointments SET status = 'completed' WHERE id = $1", appointment),
        ("UPDATE patients SET deleted_at = NULL WHERE id = $1", patient),
        ("UPDATE patients SET given_name = 'Back' WHERE id = $1", patient),
    ];
    for (statement, id) in refused {
        let error = conn.execute(statement, &[&id]).await.expect_err(statement);
        let db = error.as_db_error().unwrap_or_else(|| panic!("{statement}: {error}"));
        assert!(
            db.constraint() == Some("patient_erased")
                || db.code() == &tokio_postgres::error::SqlState::INSUFFICIENT_PRIVILEGE,
            "{statement}: {db:?}"
        );
    }
    // The chained cancellation (no reason) is what remains allowed.
    let cancelled = conn
        .execute(
            "UPDATE appointments SET status = 'cancelled', version = version + 1 WHERE id = $1",
            &[&appointment],
        )
        .await
        .unwrap();
    assert_eq!(cancelled, 1);
    assert_eq!(app.count("SELECT 1 FROM patients WHERE deleted_at IS NULL AND given_name IS NULL").await, 0);
}

/// Polls until some session of the test database waits for a lock, or `done` says the other side
/// finished (a generous bound; never a fixed sleep).
async fn until_blocked_or_done(app: &TestApp, done: impl Fn() -> bool) {
    let conn = app.db.client().await;
    for _ in 0..400 {
        let waiting: i64 = conn
            .query_one(
                "SELECT count(*) FROM pg_stat_activity \
                 WHERE datname = current_database() AND wait_event_type = 'Lock'",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        if waiting > 0 || done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("the racing transaction neither waited for a lock nor finished within 10 s");
}

fn cancel_with_reason() -> Cancel {
    Cancel::try_from(json!({"reason": REASON})).unwrap()
}

#[tokio::test]
async fn a_cancel_racing_the_deletion_stores_no_reason_whichever_commits_first() {
    let app = TestApp::new().await;
    let workspace = app.workspace.id;
    for cancel_first in [true, false] {
        let (patient, _, appointment, _) =
            patient_with_appointment(&app, if cancel_first { 5 } else { 6 }).await;
        let patient_id: PatientId = patient["id"].as_str().unwrap().parse().unwrap();
        let appointment_id: AppointmentId = appointment["id"].as_str().unwrap().parse().unwrap();
        let ctx = system_ctx(workspace);
        let mut first = app.state.pool.get().await.unwrap();
        let first_tx = first.transaction().await.unwrap();
        let pool = app.state.pool.clone();
        let second_ctx = ctx;
        let finished = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = finished.clone();
        if cancel_first {
            // Connection 1 holds the cancel (its reason written, not committed); connection 2 deletes.
            appointments::cancel(&first_tx, &ctx, Access::Workspace, appointment_id, cancel_with_reason())
                .await
                .expect("the cancel runs first");
            let deletion = tokio::spawn(async move {
                let mut conn = pool.get().await.unwrap();
                let tx = conn.transaction().await.unwrap();
                let outcome = patients::delete(&tx, &second_ctx, patient_id, None).await;
                let committed = match outcome {
                    Ok(_) => tx.commit().await.map_err(|error| error.to_string()),
                    Err(error) => Err(error.to_string()),
                };
                flag.store(true, std::sync::atomic::Ordering::SeqCst);
                committed
            });
            until_blocked_or_done(&app, || finished.load(std::sync::atomic::Ordering::SeqCst)).await;
            first_tx.commit().await.unwrap();
            deletion.await.unwrap().expect("the deletion commits after the cancel");
        } else {
            // Connection 1 holds the deletion (not committed); connection 2 cancels with a reason.
            patients::delete(&first_tx, &ctx, patient_id, None).await.expect("the deletion runs first");
            let cancel = tokio::spawn(async move {
                let mut conn = pool.get().await.unwrap();
                let tx = conn.transaction().await.unwrap();
                let outcome = appointments::cancel(
                    &tx,
                    &second_ctx,
                    Access::Workspace,
                    appointment_id,
                    cancel_with_reason(),
                )
                .await;
                let committed = match outcome {
                    Ok(_) => {
                        tx.commit().await.map(|_| "committed".to_owned()).map_err(|error| error.to_string())
                    }
                    Err(error) => Err(error.to_string()),
                };
                flag.store(true, std::sync::atomic::Ordering::SeqCst);
                committed
            });
            until_blocked_or_done(&app, || finished.load(std::sync::atomic::Ordering::SeqCst)).await;
            first_tx.commit().await.unwrap();
            let outcome = cancel.await.unwrap();
            let refusal = outcome.expect_err("a cancel after the erasure is refused");
            assert!(refusal.contains("deleted"), "{refusal}");
        }
        let (status, _, _, reason, cancellation_reason) = row(&app, &appointment).await;
        assert_eq!(
            (reason, cancellation_reason),
            (None, None),
            "cancel first: {cancel_first}: no reason survives the erasure (status {status})"
        );
        assert_eq!(
            app.count(&format!("SELECT 1 FROM appointments WHERE cancellation_reason = '{REASON}'")).await,
            0
        );
    }
}
