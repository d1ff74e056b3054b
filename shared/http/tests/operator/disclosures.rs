//! Accounting of disclosures (DESIGN.md §6a, issue 12 item 6): every read of a patient's personal
//! fields appends a row in the same transaction — API reads and answers, listener reloads — and
//! `GET /v1/patients/{id}/disclosures` (admin) lists them newest first with a signed cursor.

use super::support::Scene;
use clinic_http::auth::Role;
use clinic_testkit::app::token;
use serde_json::{json, Value};

fn ids(items: &Value) -> Vec<String> {
    items.as_array().unwrap().iter().map(|item| item["id"].as_str().unwrap().to_owned()).collect()
}

fn purposes(items: &Value) -> Vec<(String, String)> {
    items
        .as_array()
        .unwrap()
        .iter()
        .map(|item| {
            (item["purpose"].as_str().unwrap().to_owned(), item["actorKind"].as_str().unwrap().to_owned())
        })
        .collect()
}

/// Every disclosure of the scene's patient, newest first, through the admin route (all pages).
async fn all_pages(scene: &Scene, limit: usize) -> Vec<Value> {
    let admin = scene.app.workspace.admin.clone();
    let patient = scene.patient["id"].as_str().unwrap();
    let mut items = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..100 {
        let mut path = format!("/v1/patients/{patient}/disclosures?limit={limit}");
        if let Some(cursor) = &cursor {
            path.push_str(&format!("&cursor={cursor}"));
        }
        let response = scene.app.call("GET", &path, Some(&admin), None).await;
        assert_eq!(response.status, 200, "{}", response.text);
        items.extend(response.body["items"].as_array().unwrap().iter().cloned());
        match response.body["nextCursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => return items,
        }
    }
    panic!("more than 100 pages");
}

#[tokio::test]
async fn reads_answers_and_listener_reloads_are_accounted_for() {
    let scene = Scene::new().await;
    let app = &scene.app;
    let staff = app.workspace.staff.clone();
    let patient_id = scene.patient["id"].as_str().unwrap().to_owned();
    let appointment_id = scene.appointment["id"].as_str().unwrap().to_owned();
    // Creations answer only what the caller sent: nothing recorded yet.
    assert_eq!(app.count("SELECT 1 FROM patient_disclosures").await, 0);

    let response = app.call("GET", &format!("/v1/patients/{patient_id}"), Some(&staff), None).await;
    assert_eq!(response.status, 200);
    let own = token(app.workspace.id, patient_id.parse().unwrap(), Role::Patient);
    let response = app.call("GET", &format!("/v1/appointments/{appointment_id}"), Some(&own), None).await;
    assert_eq!(response.status, 200);
    let body = json!({"familyName": "Hopper-Murray"});
    let response = app.call("PATCH", &format!("/v1/patients/{patient_id}"), Some(&staff), Some(body)).await;
    assert_eq!(response.status, 200, "{}", response.text);
    // The booking's two listeners reload the appointment (with its reason).
    scene.dispatch_locally().await;
    let path = format!("/v1/appointments/{appointment_id}/cancel");
    let response = app.call("POST", &path, Some(&staff), Some(json!({"reason": "feeling better"}))).await;
    assert_eq!(response.status, 200, "{}", response.text);

    // Reads that fail record nothing: a missing patient, another patient's appointment, a bad id.
    let stranger = token(app.workspace.id, ulid::Ulid::generate(), Role::Patient);
    let missing = ulid::Ulid::generate();
    for (path, who) in [
        (format!("/v1/patients/{missing}"), &staff),
        (format!("/v1/appointments/{missing}"), &staff),
        (format!("/v1/appointments/{appointment_id}"), &stranger),
        ("/v1/patients/not-an-id".to_owned(), &staff),
    ] {
        let response = app.call("GET", &path, Some(who), None).await;
        assert!(response.status.is_client_error(), "{path}: {}", response.status);
    }

    let items = all_pages(&scene, 2).await;
    let listed = Value::Array(items.clone());
    assert_eq!(purposes(&listed)[0], ("POST /v1/appointments/{id}/cancel".to_owned(), "member".to_owned()));
    // The two listener reloads commit in either order.
    let mut listeners: Vec<_> = purposes(&listed)[1..3].to_vec();
    listeners.sort();
    assert_eq!(
        listeners,
        [
            ("patient_booking_confirmation".to_owned(), "system".to_owned()),
            ("practitioner_schedule_change".to_owned(), "system".to_owned()),
        ]
    );
    assert_eq!(
        purposes(&listed)[3..],
        [
            ("PATCH /v1/patients/{id}".to_owned(), "member".to_owned()),
            ("GET /v1/appointments/{id}".to_owned(), "patient".to_owned()),
            ("GET /v1/patients/{id}".to_owned(), "member".to_owned()),
        ]
    );
    assert_eq!(items.len(), 6, "one row per disclosure, none for the failed reads");
    for item in &items {
        assert_eq!(item["patientId"], patient_id.as_str());
        match item["actorKind"].as_str().unwrap() {
            "system" => {
                assert_eq!(item["actorId"], Value::Null);
                assert_eq!(item["eventId"], scene.created.to_string());
            }
            _ => {
                assert!(item["actorId"].is_string());
                assert_eq!(item["eventId"], Value::Null);
            }
        }
    }
    assert_eq!(items[4]["actorId"], patient_id.as_str(), "the patient read its own appointment");

    // Newest first, and the pages neither skip nor repeat rows whatever the page size.
    let one_page = all_pages(&scene, 100).await;
    assert_eq!(ids(&Value::Array(one_page.clone())), ids(&listed));
    let times: Vec<&str> = one_page.iter().map(|item| item["createdAt"].as_str().unwrap()).collect();
    let mut sorted = times.clone();
    sorted.sort_by(|a, b| b.cmp(a));
    assert_eq!(times, sorted);
}

#[tokio::test]
async fn the_list_is_for_admins_of_the_workspace_and_survives_erasure() {
    let scene = Scene::new().await;
    let app = &scene.app;
    let admin = app.workspace.admin.clone();
    let staff = app.workspace.staff.clone();
    let patient_id = scene.patient["id"].as_str().unwrap().to_owned();
    let path = format!("/v1/patients/{patient_id}/disclosures");
    assert_eq!(app.call("GET", &format!("/v1/patients/{patient_id}"), Some(&staff), None).await.status, 200);

    assert_eq!(app.call("GET", &path, Some(&staff), None).await.status, 403);
    let own = token(app.workspace.id, patient_id.parse().unwrap(), Role::Patient);
    assert_eq!(app.call("GET", &path, Some(&own), None).await.status, 403);
    let other = app.add_workspace().await;
    assert_eq!(app.call("GET", &path, Some(&other.admin), None).await.status, 404, "another workspace");
    let never = format!("/v1/patients/{}/disclosures", ulid::Ulid::generate());
    assert_eq!(app.call("GET", &never, Some(&admin), None).await.status, 404);
    let response = app.call("GET", &format!("{path}?cursor=forged"), Some(&admin), None).await;
    assert_eq!(response.status, 400);
    assert!(response.text.contains("cursor"), "{}", response.text);
    let response = app.call("GET", &format!("{path}?limit=0"), Some(&admin), None).await;
    assert_eq!(response.status, 400);

    // A cursor of another patient's list is refused.
    let second = app.create_patient(&admin, json!({"givenName": "Ada", "familyName": "King"})).await;
    let second_id = second["id"].as_str().unwrap();
    for _ in 0..2 {
        app.call("GET", &format!("/v1/patients/{second_id}"), Some(&staff), None).await;
    }
    let page =
        app.call("GET", &format!("/v1/patients/{second_id}/disclosures?limit=1"), Some(&admin), None).await;
    let cursor = page.body["nextCursor"].as_str().unwrap().to_owned();
    let response = app.call("GET", &format!("{path}?cursor={cursor}"), Some(&admin), None).await;
    assert_eq!(response.status, 400);

    // After erasure the accounting stays listable (ids only) and nothing in it changed.
    let before = app.call("GET", &path, Some(&admin), None).await;
    assert_eq!(before.body["items"].as_array().unwrap().len(), 1);
    let deleted = app.call("DELETE", &format!("/v1/patients/{patient_id}"), Some(&staff), None).await;
    assert_eq!(deleted.status, 204);
    let after = app.call("GET", &path, Some(&admin), None).await;
    assert_eq!(after.status, 200);
    assert_eq!(after.body, before.body);
}

#[tokio::test]
async fn clinic_app_may_only_insert_and_read_disclosures() {
    let scene = Scene::new().await;
    let app = &scene.app;
    let patient_id = scene.patient["id"].as_str().unwrap().to_owned();
    app.call("GET", &format!("/v1/patients/{patient_id}"), Some(&app.workspace.staff), None).await;
    let role = clinic_core::db::connect_single(&app.db.url_for_role("clinic_app"), None, None).await.unwrap();
    let count: i64 = role.query_one("SELECT count(*) FROM patient_disclosures", &[]).await.unwrap().get(0);
    assert_eq!(count, 1);
    for statement in [
        "UPDATE patient_disclosures SET purpose = 'x'",
        "DELETE FROM patient_disclosures",
        "TRUNCATE patient_disclosures",
    ] {
        let error = role.batch_execute(statement).await.expect_err(statement);
        assert_eq!(
            error.code(),
            Some(&tokio_postgres::error::SqlState::INSUFFICIENT_PRIVILEGE),
            "{statement}: {error:?}"
        );
    }
    // Even the owner is stopped by the append-only triggers.
    let owner = app.db.client().await;
    let error = owner.batch_execute("DELETE FROM patient_disclosures").await.unwrap_err();
    assert!(error.to_string().contains("append-only") || error.as_db_error().is_some(), "{error}");
    assert_eq!(app.count("SELECT 1 FROM patient_disclosures").await, 1);
}

#[tokio::test]
async fn an_idempotent_replay_answers_personal_fields_and_is_accounted_for() {
    let scene = Scene::new().await;
    let app = &scene.app;
    let staff = app.workspace.staff.clone();
    let body = json!({"givenName": "Replay", "familyName": "Accounted"});
    let key = [("idempotency-key", "replay-disclosure-1")];
    let first = app.call_with("POST", "/v1/patients", Some(&staff), Some(body.clone()), &key).await;
    assert_eq!(first.status, 201, "{}", first.text);
    let patient_id = first.body["id"].as_str().unwrap().to_owned();
    let count = |purpose: &'static str| {
        let sql = format!(
            "SELECT 1 FROM patient_disclosures WHERE purpose = '{purpose}' AND patient_id = '{}'",
            uuid::Uuid::from(patient_id.parse::<ulid::Ulid>().unwrap())
        );
        async move { app.count(&sql).await }
    };
    // The creation answered only what the caller sent: nothing recorded.
    assert_eq!(count("idempotent replay").await, 0);
    let replay = app.call_with("POST", "/v1/patients", Some(&staff), Some(body), &key).await;
    assert_eq!(replay.status, 201, "{}", replay.text);
    assert_eq!(replay.body, first.body);
    assert_eq!(count("idempotent replay").await, 1);
}
