//! Every mutation commits its change, exactly one event, its links and one outbox row — or nothing.

use clinic_testkit::app::TestApp;
use serde_json::{json, Value};

async fn totals(app: &TestApp) -> (i64, i64, i64) {
    (
        app.count("SELECT 1 FROM events").await,
        app.count("SELECT 1 FROM event_resources").await,
        app.count("SELECT 1 FROM event_outbox").await,
    )
}

async fn event_of(app: &TestApp, resource_id: &str, event_type: &str) -> (i64, i64) {
    let conn = app.db.pool.get().await.unwrap();
    let id = resource_id.parse::<ulid::Ulid>().unwrap();
    let rows = conn
        .query(
            "SELECT e.id, (SELECT count(*) FROM event_resources r WHERE r.event_id = e.id), \
                    (SELECT count(*) FROM event_outbox o WHERE o.event_id = e.id AND o.status = 'pending') \
             FROM events e WHERE e.resource_id = $1 AND e.type = $2",
            &[&uuid::Uuid::from(id), &event_type],
        )
        .await
        .unwrap();
    assert_eq!(rows.len(), 1, "exactly one {event_type} event");
    (rows[0].get(1), rows[0].get(2))
}

fn patient_body() -> Value {
    json!({ "givenName": "Ada", "familyName": "Lovelace", "email": "ada@example.test", "dateOfBirth": "1990-01-31" })
}

#[tokio::test]
async fn each_mutation_writes_its_change_one_event_its_links_and_one_outbox_row() {
    let app = TestApp::new().await;
    let token = app.workspace.staff.clone();
    let practitioner = app.create_practitioner(&token).await;
    assert_eq!(event_of(&app, practitioner["id"].as_str().unwrap(), "practitioner.created").await, (1, 1));

    let patient = app.create_patient(&token, patient_body()).await;
    assert_eq!(patient["version"], 1);
    let patient_id = patient["id"].as_str().unwrap().to_owned();
    assert_eq!(event_of(&app, &patient_id, "patient.created").await, (1, 1));

    let patched = app
        .call(
            "PATCH",
            &format!("/v1/patients/{patient_id}"),
            Some(&token),
            Some(json!({"phone": "+1 555 0100", "expectedVersion": 1})),
        )
        .await;
    assert_eq!(patched.status, 200, "{}", patched.text);
    assert_eq!(patched.body["version"], 2);
    assert_eq!(event_of(&app, &patient_id, "patient.updated").await, (1, 1));

    let appointment =
        app.book(&token, &patient, &practitioner, "2030-01-01T09:00:00Z", "2030-01-01T09:30:00Z").await;
    let appointment_id = appointment["id"].as_str().unwrap().to_owned();
    assert_eq!(appointment["status"], "booked");
    // An appointment event links the appointment, its patient and its practitioner.
    assert_eq!(event_of(&app, &appointment_id, "appointment.created").await, (3, 1));

    let path = format!("/v1/appointments/{appointment_id}");
    let moved = app
        .call("POST", &format!("{path}/reschedule"), Some(&token), Some(json!({"startsAt": "2030-01-02T09:00:00Z", "endsAt": "2030-01-02T09:30:00Z", "expectedVersion": 1})))
        .await;
    assert_eq!(moved.status, 200, "{}", moved.text);
    assert_eq!(moved.body["version"], 2);
    assert_eq!(event_of(&app, &appointment_id, "appointment.rescheduled").await, (3, 1));

    let done = app.call("POST", &format!("{path}/complete"), Some(&token), Some(json!({}))).await;
    assert_eq!(done.status, 200, "{}", done.text);
    assert_eq!(done.body["status"], "completed");
    assert_eq!(done.body["version"], 3);
    assert_eq!(event_of(&app, &appointment_id, "appointment.completed").await, (3, 1));

    let second =
        app.book(&token, &patient, &practitioner, "2030-01-03T09:00:00Z", "2030-01-03T09:30:00Z").await;
    let second_id = second["id"].as_str().unwrap();
    let cancelled = app
        .call(
            "POST",
            &format!("/v1/appointments/{second_id}/cancel"),
            Some(&token),
            Some(json!({"reason": "feels better"})),
        )
        .await;
    assert_eq!(cancelled.status, 200, "{}", cancelled.text);
    assert_eq!(cancelled.body["status"], "cancelled");
    assert_eq!(event_of(&app, second_id, "appointment.cancelled").await, (3, 1));

    let deleted = app.call("DELETE", &format!("/v1/patients/{patient_id}"), Some(&token), None).await;
    assert_eq!(deleted.status, 204, "{}", deleted.text);
    assert_eq!(event_of(&app, &patient_id, "patient.deleted").await, (1, 1));
    assert_eq!(app.call("GET", &format!("/v1/patients/{patient_id}"), Some(&token), None).await.status, 404);

    // 9 mutations: 9 events, 9 outbox rows, 1+1+1+3+3+3+3+3+1 links.
    assert_eq!(totals(&app).await, (9, 19, 9));
}

#[tokio::test]
async fn rejected_mutations_write_nothing() {
    let app = TestApp::new().await;
    let token = app.workspace.staff.clone();
    let practitioner = app.create_practitioner(&token).await;
    let patient = app.create_patient(&token, patient_body()).await;
    app.book(&token, &patient, &practitioner, "2030-01-01T09:00:00Z", "2030-01-01T10:00:00Z").await;
    let before = totals(&app).await;

    let overlapping = json!({
        "patientId": patient["id"], "practitionerId": practitioner["id"],
        "startsAt": "2030-01-01T09:30:00Z", "endsAt": "2030-01-01T10:30:00Z",
    });
    let response = app.call("POST", "/v1/appointments", Some(&token), Some(overlapping)).await;
    assert_eq!(response.status, 409, "{}", response.text);
    assert_eq!(response.body["type"], "urn:clinic:problem:double-booked");

    let back_to_back = json!({
        "patientId": patient["id"], "practitionerId": practitioner["id"],
        "startsAt": "2030-01-01T10:00:00Z", "endsAt": "2030-01-01T10:30:00Z",
    });
    let after_back_to_back = {
        let response = app.call("POST", "/v1/appointments", Some(&token), Some(back_to_back)).await;
        assert_eq!(response.status, 201, "back-to-back is allowed: {}", response.text);
        totals(&app).await
    };
    assert_eq!(after_back_to_back.0, before.0 + 1);

    let invalid = [
        json!({"givenName": "A"}),
        json!({"givenName": "A", "familyName": 7}),
        json!({"givenName": "A", "familyName": "B", "nickname": "x"}),
        json!({"givenName": "A", "familyName": "B", "dateOfBirth": "31/01/1990"}),
        json!({"givenName": "A", "familyName": "B", "email": "not-an-email"}),
        json!({"givenName": "A\u{0}", "familyName": "B"}),
    ];
    for body in invalid {
        let response = app.call("POST", "/v1/patients", Some(&token), Some(body.clone())).await;
        assert_eq!(response.status, 422, "{body}: {}", response.text);
        assert!(response.body["field"].is_string(), "names the field: {}", response.text);
        assert_eq!(response.header("content-type"), Some("application/problem+json"));
    }
    let ends_before_starts = json!({
        "patientId": patient["id"], "practitionerId": practitioner["id"],
        "startsAt": "2030-02-01T10:00:00Z", "endsAt": "2030-02-01T10:00:00Z",
    });
    let response = app.call("POST", "/v1/appointments", Some(&token), Some(ends_before_starts)).await;
    assert_eq!((response.status.as_u16(), response.body["field"].as_str()), (422, Some("endsAt")));
    let not_utc = json!({
        "patientId": patient["id"], "practitionerId": practitioner["id"],
        "startsAt": "2030-02-01T10:00:00+01:00", "endsAt": "2030-02-01T11:00:00Z",
    });
    let response = app.call("POST", "/v1/appointments", Some(&token), Some(not_utc)).await;
    assert_eq!((response.status.as_u16(), response.body["field"].as_str()), (422, Some("startsAt")));
    let bad_id = json!({
        "patientId": "not-a-ulid", "practitionerId": practitioner["id"],
        "startsAt": "2030-02-01T10:00:00Z", "endsAt": "2030-02-01T11:00:00Z",
    });
    let response = app.call("POST", "/v1/appointments", Some(&token), Some(bad_id)).await;
    assert_eq!((response.status.as_u16(), response.body["field"].as_str()), (422, Some("patientId")));

    let malformed = app
        .send(
            axum::http::Request::post("/v1/patients")
                .header("authorization", format!("Bearer {token}"))
                .header("content-type", "application/json")
                .body(axum::body::Body::from("{\"givenName\": "))
                .unwrap(),
        )
        .await;
    assert_eq!(malformed.status, 400);
    let huge = "x".repeat(70 * 1024);
    let too_large = app
        .call("POST", "/v1/patients", Some(&token), Some(json!({"givenName": huge, "familyName": "B"})))
        .await;
    assert_eq!(too_large.status, 413);

    let stale = app
        .call(
            "PATCH",
            &format!("/v1/patients/{}", patient["id"].as_str().unwrap()),
            Some(&token),
            Some(json!({"givenName": "Z", "expectedVersion": 9})),
        )
        .await;
    assert_eq!(stale.status, 409);
    assert_eq!(totals(&app).await, after_back_to_back, "no rejected request wrote anything");
}

/// Each check of a booking answers for itself, with the field it names, whatever the appointment's
/// insert would have done (unknown row: foreign key; overlap: exclusion; a deleted or another
/// workspace's row: accepted), and a refused booking keeps neither rows nor its idempotency key.
#[tokio::test]
async fn a_booking_refused_by_a_check_answers_the_check_and_writes_nothing() {
    let app = TestApp::new().await;
    let staff = app.workspace.staff.clone();
    let practitioner = app.create_practitioner(&staff).await;
    let patient = app.create_patient(&staff, patient_body()).await;
    let deleted = app.create_patient(&staff, patient_body()).await;
    let path = format!("/v1/patients/{}", deleted["id"].as_str().unwrap());
    assert_eq!(app.call("DELETE", &path, Some(&staff), None).await.status, 204);
    let other = app.add_workspace().await;
    let foreign_patient = app.create_patient(&other.staff, patient_body()).await;
    let foreign_practitioner = app.create_practitioner(&other.staff).await;
    app.book(&staff, &patient, &practitioner, "2030-03-01T09:00:00Z", "2030-03-01T10:00:00Z").await;
    let before = (totals(&app).await, app.count("SELECT 1 FROM appointments").await);
    let unknown = ulid::Ulid::generate().to_string();

    // (patient, practitioner, slot start, the status and the member of the answer that names why).
    let unknown_patient = (422, "field", "patientId");
    let unknown_practitioner = (422, "field", "practitionerId");
    let cases = [
        (json!(unknown), practitioner["id"].clone(), "2030-03-02T09:00:00Z", unknown_patient),
        (json!(unknown), practitioner["id"].clone(), "2030-03-01T09:00:00Z", unknown_patient),
        (deleted["id"].clone(), practitioner["id"].clone(), "2030-03-02T09:00:00Z", unknown_patient),
        (foreign_patient["id"].clone(), practitioner["id"].clone(), "2030-03-02T09:00:00Z", unknown_patient),
        (patient["id"].clone(), json!(unknown), "2030-03-02T09:00:00Z", unknown_practitioner),
        // Both checks go out together; the patient's answers first.
        (deleted["id"].clone(), json!(unknown), "2030-03-02T09:00:00Z", unknown_patient),
        (
            patient["id"].clone(),
            foreign_practitioner["id"].clone(),
            "2030-03-02T09:00:00Z",
            unknown_practitioner,
        ),
        (
            patient["id"].clone(),
            practitioner["id"].clone(),
            "2030-03-01T09:30:00Z",
            (409, "type", "urn:clinic:problem:double-booked"),
        ),
    ];
    for (index, (patient_id, practitioner_id, starts_at, (status, member, expected))) in
        cases.into_iter().enumerate()
    {
        let ends_at = starts_at.replace("T09:", "T10:");
        let body = json!({"patientId": patient_id, "practitionerId": practitioner_id,
            "startsAt": starts_at, "endsAt": ends_at});
        let key = format!("refused-{index}");
        let response = app
            .call_with("POST", "/v1/appointments", Some(&staff), Some(body), &[("idempotency-key", &key)])
            .await;
        assert_eq!(response.status, status, "case {index}: {}", response.text);
        assert_eq!(response.body[member], expected, "case {index}: {}", response.text);
    }

    assert_eq!((totals(&app).await, app.count("SELECT 1 FROM appointments").await), before);
    assert_eq!(app.count("SELECT 1 FROM idempotency_keys").await, 0, "no refused key is kept");
    let booked =
        app.book(&staff, &patient, &practitioner, "2030-03-02T09:00:00Z", "2030-03-02T10:00:00Z").await;
    assert_eq!(booked["status"], "booked", "the connection is usable after every refusal");
}

#[tokio::test]
async fn a_failure_after_the_event_insert_rolls_everything_back() {
    let app = TestApp::new().await;
    let ctx = clinic_core::context::Ctx {
        workspace_id: app.workspace.id,
        cause: clinic_core::events::Cause {
            actor: clinic_core::events::Actor::System,
            correlation_id: clinic_core::ids::CorrelationId::generate(),
            causation_id: clinic_core::ids::RequestId::generate().into(),
            idempotency_key: None,
            trace: None,
        },
    };
    let mut conn = app.state.pool.get().await.unwrap();
    let tx = conn.transaction().await.unwrap();
    let command = clinic_core::patients::NewPatient::try_from(patient_body()).unwrap();
    clinic_core::patients::create(&tx, &ctx, command).await.unwrap();
    // Injected fault after the event, links and outbox row were written on this transaction.
    assert!(tx.execute("SELECT 1 / 0", &[]).await.is_err());
    drop(tx);
    drop(conn);
    assert_eq!(totals(&app).await, (0, 0, 0));
    assert_eq!(app.count("SELECT 1 FROM patients").await, 0);
}

#[tokio::test]
async fn the_event_log_is_append_only() {
    let app = TestApp::new().await;
    app.create_practitioner(&app.workspace.staff).await;
    let conn = app.db.pool.get().await.unwrap();
    for statement in [
        "UPDATE events SET version = 2",
        "DELETE FROM events",
        "UPDATE event_resources SET resource_type = 'patient'",
        "DELETE FROM event_resources",
        "TRUNCATE events CASCADE",
    ] {
        let error = conn.execute(statement, &[]).await.expect_err(statement);
        assert!(
            error.to_string().contains("append-only") || error.as_db_error().is_some(),
            "{statement}: {error}"
        );
    }
    // Even without the triggers, the application role lacks the privilege.
    let app_role =
        clinic_core::db::connect_single(&app.db.url_for_role("clinic_app"), None, None).await.unwrap();
    app_role.batch_execute("SET session_replication_role = replica").await.expect_err("needs superuser");
    let denied = app_role.execute("DELETE FROM events", &[]).await.expect_err("no DELETE privilege");
    assert_eq!(denied.code(), Some(&tokio_postgres::error::SqlState::INSUFFICIENT_PRIVILEGE));
    assert_eq!(app.count("SELECT 1 FROM events").await, 1);
}

#[tokio::test]
async fn idempotency_key_replays_and_rejects_a_different_body() {
    let app = TestApp::new().await;
    let token = app.workspace.staff.clone();
    let headers = [("idempotency-key", "create-ada-1")];
    let first = app.call_with("POST", "/v1/patients", Some(&token), Some(patient_body()), &headers).await;
    assert_eq!(first.status, 201);
    let again = app.call_with("POST", "/v1/patients", Some(&token), Some(patient_body()), &headers).await;
    assert_eq!(again.status, 201);
    assert_eq!(again.body, first.body);
    assert_eq!(app.count("SELECT 1 FROM events").await, 1);

    let mut other = patient_body();
    other["givenName"] = json!("Grace");
    let conflict = app.call_with("POST", "/v1/patients", Some(&token), Some(other), &headers).await;
    assert_eq!(conflict.status, 422);
    assert_eq!(conflict.body["field"], "Idempotency-Key");
    assert_eq!(app.count("SELECT 1 FROM events").await, 1);

    // Concurrent requests with one key create one patient.
    let racing = [("idempotency-key", "race-1")];
    let (a, b) = tokio::join!(
        app.call_with("POST", "/v1/patients", Some(&token), Some(patient_body()), &racing),
        app.call_with("POST", "/v1/patients", Some(&token), Some(patient_body()), &racing),
    );
    assert_eq!((a.status.as_u16(), b.status.as_u16()), (201, 201));
    assert_eq!(a.body["id"], b.body["id"]);
    assert_eq!(app.count("SELECT 1 FROM events").await, 2);
}
