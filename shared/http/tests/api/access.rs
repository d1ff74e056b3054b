//! Identity and isolation: 401 without a valid token, 403 for the wrong role, and another workspace's
//! resources answered exactly like missing ones (404) on every route.

use clinic_http::auth::Role;
use clinic_testkit::app::{token, TestApp};
use serde_json::json;

#[tokio::test]
async fn every_route_of_another_workspace_answers_404() {
    let app = TestApp::new().await;
    let other = app.add_workspace().await;
    let token_b = other.admin.clone();
    let practitioner = app.create_practitioner(&token_b).await;
    let patient = app.create_patient(&token_b, json!({"givenName": "B", "familyName": "Only"})).await;
    let appointment =
        app.book(&token_b, &patient, &practitioner, "2030-03-01T09:00:00Z", "2030-03-01T09:30:00Z").await;
    let (pa, pr, ap) = (
        patient["id"].as_str().unwrap(),
        practitioner["id"].as_str().unwrap(),
        appointment["id"].as_str().unwrap(),
    );
    let token_a = app.workspace.admin.clone();
    let attempts = [
        ("GET", format!("/v1/patients/{pa}"), None),
        ("PATCH", format!("/v1/patients/{pa}"), Some(json!({"givenName": "X"}))),
        ("DELETE", format!("/v1/patients/{pa}"), None),
        ("GET", format!("/v1/patients/{pa}/timeline"), None),
        ("GET", format!("/v1/practitioners/{pr}"), None),
        ("GET", format!("/v1/practitioners/{pr}/timeline"), None),
        ("GET", format!("/v1/appointments/{ap}"), None),
        (
            "POST",
            format!("/v1/appointments/{ap}/reschedule"),
            Some(json!({"startsAt": "2030-03-02T09:00:00Z", "endsAt": "2030-03-02T09:30:00Z"})),
        ),
        ("POST", format!("/v1/appointments/{ap}/cancel"), Some(json!({}))),
        ("POST", format!("/v1/appointments/{ap}/complete"), Some(json!({}))),
        ("GET", format!("/v1/appointments/{ap}/timeline"), None),
    ];
    let events_before = app.count("SELECT 1 FROM events").await;
    for (method, path, body) in attempts {
        let response = app.call(method, &path, Some(&token_a), body).await;
        assert_eq!(response.status, 404, "{method} {path}: {}", response.text);
        assert!(!response.text.contains(pa) && !response.text.contains("Only"), "no data of B leaks");
    }
    // Booking B's patient with A's token: the referenced ids do not exist for A.
    let practitioner_a = app.create_practitioner(&token_a).await;
    let cross = json!({"patientId": pa, "practitionerId": practitioner_a["id"], "startsAt": "2030-03-01T09:00:00Z", "endsAt": "2030-03-01T09:30:00Z"});
    let response = app.call("POST", "/v1/appointments", Some(&token_a), Some(cross)).await;
    assert_eq!((response.status.as_u16(), response.body["field"].as_str()), (422, Some("patientId")));
    assert_eq!(app.count("SELECT 1 FROM events").await, events_before + 1);
    // B's notifications are not A's.
    let listed = app.call("GET", "/v1/notifications", Some(&token_a), None).await;
    assert_eq!(listed.status, 200);
    assert_eq!(listed.body["items"], json!([]));
}

#[tokio::test]
async fn tokens_are_required_and_verified() {
    let app = TestApp::new().await;
    let missing = app.call("GET", "/v1/notifications", None, None).await;
    assert_eq!(missing.status, 401);
    assert_eq!(missing.header("content-type"), Some("application/problem+json"));
    let forged = app.call("GET", "/v1/notifications", Some("not.a.token"), None).await;
    assert_eq!(forged.status, 401);
    let valid_staff = clinic_http::auth::issue_token(
        clinic_testkit::app::TEST_SECRET.as_bytes(),
        app.workspace.id,
        ulid::Ulid::generate(),
        Role::Staff,
        std::time::Duration::from_secs(60),
    )
    .unwrap();
    // A token signed with another secret fails.
    let other_secret = clinic_http::auth::issue_token(
        b"another-secret",
        app.workspace.id,
        ulid::Ulid::generate(),
        Role::Admin,
        std::time::Duration::from_secs(60),
    )
    .unwrap();
    assert_eq!(app.call("GET", "/v1/notifications", Some(&other_secret), None).await.status, 401);
    assert_eq!(app.call("GET", "/v1/notifications", Some(&valid_staff), None).await.status, 200);
}

#[tokio::test]
async fn patients_read_and_cancel_only_their_own_appointments() {
    let app = TestApp::new().await;
    let staff = app.workspace.staff.clone();
    let practitioner = app.create_practitioner(&staff).await;
    let me = app.create_patient(&staff, json!({"givenName": "Me", "familyName": "Patient"})).await;
    let someone = app.create_patient(&staff, json!({"givenName": "Someone", "familyName": "Else"})).await;
    let mine = app.book(&staff, &me, &practitioner, "2030-04-01T09:00:00Z", "2030-04-01T09:30:00Z").await;
    let theirs =
        app.book(&staff, &someone, &practitioner, "2030-04-01T10:00:00Z", "2030-04-01T10:30:00Z").await;
    let me_id: ulid::Ulid = me["id"].as_str().unwrap().parse().unwrap();
    let patient = token(app.workspace.id, me_id, Role::Patient);
    let (mine_id, theirs_id) = (mine["id"].as_str().unwrap(), theirs["id"].as_str().unwrap());

    assert_eq!(app.call("GET", &format!("/v1/patients/{me_id}"), Some(&patient), None).await.status, 200);
    assert_eq!(
        app.call("GET", &format!("/v1/appointments/{mine_id}"), Some(&patient), None).await.status,
        200
    );
    // Another patient's records look exactly like missing ones.
    let not_theirs = [
        ("GET", format!("/v1/patients/{}", someone["id"].as_str().unwrap()), None),
        ("GET", format!("/v1/appointments/{theirs_id}"), None),
        ("POST", format!("/v1/appointments/{theirs_id}/cancel"), Some(json!({}))),
    ];
    let events_before = app.count("SELECT 1 FROM events").await;
    for (method, path, body) in not_theirs {
        let response = app.call(method, &path, Some(&patient), body).await;
        assert_eq!(response.status, 404, "{method} {path}: {}", response.text);
    }
    assert_eq!(app.count("SELECT 1 FROM events").await, events_before);
    let forbidden = [
        (
            "POST",
            format!("/v1/appointments/{mine_id}/reschedule"),
            Some(json!({"startsAt": "2030-04-02T09:00:00Z", "endsAt": "2030-04-02T09:30:00Z"})),
        ),
        ("POST", format!("/v1/appointments/{mine_id}/complete"), Some(json!({}))),
        ("PATCH", format!("/v1/patients/{me_id}"), Some(json!({"givenName": "X"}))),
        ("DELETE", format!("/v1/patients/{me_id}"), None),
        ("POST", "/v1/patients".to_string(), Some(json!({"givenName": "X", "familyName": "Y"}))),
        ("POST", "/v1/appointments".to_string(), Some(json!({}))),
        ("POST", "/v1/practitioners".to_string(), Some(json!({"displayName": "X"}))),
        ("GET", format!("/v1/practitioners/{}", practitioner["id"].as_str().unwrap()), None),
        ("GET", format!("/v1/patients/{me_id}/timeline"), None),
        ("GET", "/v1/notifications".to_string(), None),
    ];
    let events_before = app.count("SELECT 1 FROM events").await;
    for (method, path, body) in forbidden {
        let response = app.call(method, &path, Some(&patient), body).await;
        assert_eq!(response.status, 403, "{method} {path}: {}", response.text);
    }
    assert_eq!(app.count("SELECT 1 FROM events").await, events_before);

    let cancelled = app
        .call("POST", &format!("/v1/appointments/{mine_id}/cancel"), Some(&patient), Some(json!({})))
        .await;
    assert_eq!(cancelled.status, 200, "{}", cancelled.text);
    let actor = app
        .count(&format!(
            "SELECT 1 FROM events WHERE type = 'appointment.cancelled' AND actor_kind = 'patient' AND actor_id = '{}'",
            uuid::Uuid::from(me_id)
        ))
        .await;
    assert_eq!(actor, 1);
}
