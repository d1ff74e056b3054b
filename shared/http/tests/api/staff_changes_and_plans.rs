//! Practitioner changes (`PATCH /v1/practitioners/{id}` → `practitioner.updated` through the one write
//! path; an inactive practitioner cannot be booked), the PHI scan of the staff lists and the practitioner
//! change, and the indexes that serve the list statements even under a generic plan.

use std::sync::Arc;

use clinic_core::appointments::schedule;
use clinic_core::dispatch::{DispatchConfig, Dispatcher, LocalTransport};
use clinic_core::patients::search;
use clinic_core::practitioners::repo as practitioners;
use clinic_http::auth::Role;
use clinic_testkit::app::{token, TestApp};
use serde_json::json;

#[tokio::test]
async fn a_practitioner_change_bumps_the_version_and_appends_one_practitioner_updated_event() {
    let app = TestApp::new().await;
    let staff = app.workspace.staff.clone();
    let doc = app.create_practitioner(&staff).await;
    let path = format!("/v1/practitioners/{}", doc["id"].as_str().unwrap());
    let changed = app
        .call(
            "PATCH",
            &path,
            Some(&staff),
            Some(json!({"displayName": "Dr. Renamed", "specialty": null, "expectedVersion": 1})),
        )
        .await;
    assert_eq!(changed.status, 200, "{}", changed.text);
    assert_eq!(changed.body["displayName"], "Dr. Renamed");
    assert_eq!(changed.body["specialty"], serde_json::Value::Null);
    assert_eq!(changed.body["active"], true);
    assert_eq!(changed.body["version"], 2);
    let read = app.call("GET", &path, Some(&staff), None).await;
    assert_eq!(read.body, changed.body);
    let conn = app.db.pool.get().await.unwrap();
    let row = conn
        .query_one(
            "SELECT e.resource_version, e.actor_kind, o.status, \
             (SELECT count(*) FROM event_resources r WHERE r.event_id = e.id) \
             FROM events e JOIN event_outbox o ON o.event_id = e.id WHERE e.type = 'practitioner.updated'",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, i32>(0), 2);
    assert_eq!(row.get::<_, &str>(1), "member");
    assert_eq!(row.get::<_, &str>(2), "pending");
    assert_eq!(row.get::<_, i64>(3), 1, "linked to the practitioner's timeline only");
    let timeline = app.call("GET", &format!("{path}/timeline"), Some(&staff), None).await;
    assert_eq!(timeline.body["items"][0]["type"], "practitioner.updated");

    let events_before = app.count("SELECT 1 FROM events").await;
    for (body, status, field) in [
        (json!({"active": false, "expectedVersion": 1}), 409, "expectedVersion"),
        (json!({}), 422, "body"),
        (json!({"expectedVersion": 2}), 422, "body"),
        (json!({"displayName": null}), 422, "displayName"),
        (json!({"displayName": "   "}), 422, "displayName"),
        (json!({"specialty": "x".repeat(201)}), 422, "specialty"),
        (json!({"active": "no"}), 422, "active"),
        (json!({"givenName": "Not a practitioner field"}), 422, "givenName"),
    ] {
        let refused = app.call("PATCH", &path, Some(&staff), Some(body.clone())).await;
        assert_eq!(refused.status, status, "{body}: {}", refused.text);
        assert_eq!(refused.body["field"], field, "{body}: {}", refused.text);
    }
    let missing = format!("/v1/practitioners/{}", ulid::Ulid::generate());
    let not_found = app.call("PATCH", &missing, Some(&staff), Some(json!({"active": false}))).await;
    assert_eq!(not_found.status, 404);
    let patient = token(app.workspace.id, ulid::Ulid::generate(), Role::Patient);
    let forbidden = app.call("PATCH", &path, Some(&patient), Some(json!({"active": false}))).await;
    assert_eq!(forbidden.status, 403);
    assert_eq!(app.count("SELECT 1 FROM events").await, events_before, "refusals wrote nothing");
}

#[tokio::test]
async fn an_inactive_practitioner_cannot_be_booked_until_reactivated() {
    let app = TestApp::new().await;
    let staff = app.workspace.staff.clone();
    let doc = app.create_practitioner(&staff).await;
    let patient = app.create_patient(&staff, json!({"givenName": "Ina", "familyName": "Active"})).await;
    let kept = app.book(&staff, &patient, &doc, "2031-05-01T09:00:00Z", "2031-05-01T09:30:00Z").await;
    let path = format!("/v1/practitioners/{}", doc["id"].as_str().unwrap());
    let off = app.call("PATCH", &path, Some(&staff), Some(json!({"active": false}))).await;
    assert_eq!(off.status, 200, "{}", off.text);
    assert_eq!(off.body["active"], false);

    let (appointments, events) =
        (app.count("SELECT 1 FROM appointments").await, app.count("SELECT 1 FROM events").await);
    let body = json!({"patientId": patient["id"], "practitionerId": doc["id"],
        "startsAt": "2031-05-02T09:00:00Z", "endsAt": "2031-05-02T09:30:00Z"});
    let refused = app
        .call_with(
            "POST",
            "/v1/appointments",
            Some(&staff),
            Some(body.clone()),
            &[("idempotency-key", "inactive-1")],
        )
        .await;
    assert_eq!(refused.status, 409, "{}", refused.text);
    assert_eq!(refused.body["type"], "urn:clinic:problem:practitioner-inactive");
    assert_eq!(refused.body["field"], "practitionerId");
    assert_eq!(app.count("SELECT 1 FROM appointments").await, appointments, "nothing booked");
    assert_eq!(app.count("SELECT 1 FROM events").await, events, "no event");
    assert_eq!(app.count("SELECT 1 FROM idempotency_keys").await, 0, "the refused key is not kept");
    // Existing appointments stay readable and can still be cancelled.
    let kept_path = format!("/v1/appointments/{}", kept["id"].as_str().unwrap());
    assert_eq!(app.call("GET", &kept_path, Some(&staff), None).await.status, 200);

    let on = app.call("PATCH", &path, Some(&staff), Some(json!({"active": true}))).await;
    assert_eq!(on.body["version"], 3);
    let booked = app
        .call_with("POST", "/v1/appointments", Some(&staff), Some(body), &[("idempotency-key", "inactive-1")])
        .await;
    assert_eq!(booked.status, 201, "{}", booked.text);
    let cancelled = app.call("POST", &format!("{kept_path}/cancel"), Some(&staff), Some(json!({}))).await;
    assert_eq!(cancelled.status, 200, "{}", cancelled.text);
}

const GIVEN: &str = "Philomena";
const FAMILY: &str = "Drinkwater-Quayle";
const EMAIL: &str = "philomena.dq@planted-phi.test";
const REASON: &str = "suspected hereditary angioedema";
const PRACTITIONER: &str = "Dr. Evander Whitlock-Sorensen";
const SPECIALTY: &str = "Paediatric immunology";

#[tokio::test]
async fn nothing_the_staff_lists_read_or_the_practitioner_change_wrote_reaches_events_outbox_or_logs() {
    let logs = clinic_testkit::capture_logs();
    let app = TestApp::new().await;
    let staff = app.workspace.staff.clone();
    let doc = app.create_practitioner(&staff).await;
    let doc_path = format!("/v1/practitioners/{}", doc["id"].as_str().unwrap());
    let changed = app
        .call(
            "PATCH",
            &doc_path,
            Some(&staff),
            Some(json!({"displayName": PRACTITIONER, "specialty": SPECIALTY})),
        )
        .await;
    assert_eq!(changed.status, 200, "{}", changed.text);
    let patient =
        app.create_patient(&staff, json!({"givenName": GIVEN, "familyName": FAMILY, "email": EMAIL})).await;
    let body = json!({"patientId": patient["id"], "practitionerId": doc["id"], "reason": REASON,
        "startsAt": "2031-06-01T09:00:00Z", "endsAt": "2031-06-01T09:30:00Z"});
    assert_eq!(app.call("POST", "/v1/appointments", Some(&staff), Some(body)).await.status, 201);
    // The reads: the planted values travel in query strings and answers, paged with cursors.
    for path in [
        "/v1/patients?q=Drinkwater&limit=1".to_owned(),
        "/v1/patients?q=philo".to_owned(),
        "/v1/appointments?from=2031-06-01T00:00:00Z&to=2031-06-02T00:00:00Z&limit=1".to_owned(),
        "/v1/practitioners?limit=1".to_owned(),
    ] {
        let listed = app.call("GET", &path, Some(&staff), None).await;
        assert_eq!(listed.status, 200, "{path}: {}", listed.text);
        let next = listed.body["nextCursor"].as_str().unwrap_or_default();
        assert!(!next.to_lowercase().contains("drinkwater") && !next.to_lowercase().contains("philo"));
    }
    let dispatcher = Dispatcher::new(
        app.state.pool.clone(),
        Arc::new(LocalTransport::new(app.state.pool.clone())),
        DispatchConfig::default(),
    );
    dispatcher.drain_once().await.unwrap();
    assert_eq!(app.count("SELECT 1 FROM event_outbox WHERE status <> 'dispatched'").await, 0);
    assert!(app.count("SELECT 1 FROM patient_disclosures").await >= 3, "the reads were accounted for");

    let conn = app.db.pool.get().await.unwrap();
    let mut dumps = Vec::new();
    for table in [
        "events",
        "event_resources",
        "event_outbox",
        "listener_starts",
        "listener_receipts",
        "notifications",
        "idempotency_keys",
        "patient_disclosures",
    ] {
        let dump: Option<String> = conn
            .query_one(&format!("SELECT string_agg(t::text, '|') FROM {table} t"), &[])
            .await
            .unwrap()
            .get(0);
        dumps.push((table.to_owned(), dump.unwrap_or_default().to_lowercase()));
    }
    let logged = logs.text();
    assert!(logged.contains("/v1/patients"), "the list requests were logged (by route)");
    dumps.push(("captured logs".to_owned(), logged.to_lowercase()));
    for planted in [
        GIVEN,
        FAMILY,
        "drinkwater",
        EMAIL,
        REASON,
        "angioedema",
        PRACTITIONER,
        "whitlock",
        SPECIALTY,
        "philo",
    ] {
        for (place, dump) in &dumps {
            assert!(!dump.contains(&planted.to_lowercase()), "{planted:?} leaked into {place}");
        }
    }
}

/// The plan of `statement` under a generic plan (parameters unknown), with sequential scans off so a
/// tiny test table still shows which index can serve the statement.
async fn generic_plan(app: &TestApp, statement: &str, types: &str, args: &str) -> String {
    let conn = app.db.pool.get().await.unwrap();
    conn.batch_execute(&format!(
        "SET enable_seqscan = off; SET plan_cache_mode = force_generic_plan; \
         PREPARE probe ({types}) AS {statement}"
    ))
    .await
    .unwrap();
    let rows = conn.query(&format!("EXPLAIN EXECUTE probe ({args})"), &[]).await.unwrap();
    conn.batch_execute("DEALLOCATE probe; RESET enable_seqscan; RESET plan_cache_mode").await.unwrap();
    rows.iter().map(|row| row.get::<_, String>(0)).collect::<Vec<_>>().join("\n")
}

#[tokio::test]
async fn every_list_statement_is_served_by_its_index_under_a_generic_plan() {
    let app = TestApp::new().await;
    let ws = format!("'{}'", uuid::Uuid::from(app.workspace.id.ulid()));
    let id = format!("'{}'", uuid::Uuid::new_v4());
    let (t0, t1) = ("'2031-01-01T00:00:00Z'", "'2031-01-08T00:00:00Z'");
    let schedule_args = format!("{ws}, {t0}, {id}, {t1}, NULL, 51");
    let cases = [
        (
            schedule::IN_WORKSPACE,
            "uuid, timestamptz, uuid, timestamptz, text, bigint",
            schedule_args.clone(),
            &["appointments_schedule_idx"][..],
        ),
        (
            schedule::OF_PRACTITIONER,
            "uuid, timestamptz, uuid, timestamptz, text, bigint, uuid, uuid",
            format!("{schedule_args}, {id}, NULL"),
            &["appointments_practitioner_schedule_idx"][..],
        ),
        (
            schedule::OF_PATIENT,
            "uuid, timestamptz, uuid, timestamptz, text, bigint, uuid",
            format!("{schedule_args}, {id}"),
            &["appointments_patient_schedule_idx"][..],
        ),
        (
            search::SEARCH,
            "uuid, text, text, text, uuid, date, bigint",
            format!("{ws}, 'ma', 'mb', 'ma', {id}, NULL, 51"),
            &["patients_family_prefix_idx", "patients_given_prefix_idx"][..],
        ),
        (
            practitioners::LIST,
            "uuid, uuid, boolean, bigint",
            format!("{ws}, {id}, NULL, 51"),
            &["practitioners_list_idx"][..],
        ),
    ];
    for (statement, types, args, indexes) in cases {
        let plan = generic_plan(&app, statement, types, &args).await;
        for index in indexes {
            assert!(plan.contains(index), "{index} not used:\n{plan}");
        }
        let sorts = plan
            .lines()
            .any(|line| line.trim_start().trim_start_matches("->").trim_start().starts_with("Sort  ("));
        assert!(!plan.contains("Seq Scan") && !sorts, "no scan or sort of its own:\n{plan}");
    }
}
