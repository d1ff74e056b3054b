//! Timelines: newest first, keyset pagination with signed cursors, readable after deletion.

use clinic_testkit::app::TestApp;
use serde_json::json;

#[tokio::test]
async fn timeline_is_newest_first_paginates_and_survives_deletion() {
    let app = TestApp::new().await;
    let token = app.workspace.staff.clone();
    let practitioner = app.create_practitioner(&token).await;
    let patient = app.create_patient(&token, json!({"givenName": "T", "familyName": "L"})).await;
    let patient_id = patient["id"].as_str().unwrap().to_owned();
    for day in 1..=4 {
        app.book(
            &token,
            &patient,
            &practitioner,
            &format!("2030-05-0{day}T09:00:00Z"),
            &format!("2030-05-0{day}T09:30:00Z"),
        )
        .await;
    }
    let deleted = app.call("DELETE", &format!("/v1/patients/{patient_id}"), Some(&token), None).await;
    assert_eq!(deleted.status, 204);

    // created + 4 bookings + deleted = 6 events on the patient's timeline (the deletion listener is not
    // running here, so no cancellations yet).
    let path = format!("/v1/patients/{patient_id}/timeline");
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let url = match &cursor {
            Some(cursor) => format!("{path}?limit=4&cursor={cursor}"),
            None => format!("{path}?limit=4"),
        };
        let page = app.call("GET", &url, Some(&token), None).await;
        assert_eq!(page.status, 200, "{}", page.text);
        for item in page.body["items"].as_array().unwrap() {
            seen.push((item["id"].as_str().unwrap().to_owned(), item["type"].as_str().unwrap().to_owned()));
            assert!(item.get("givenName").is_none());
        }
        match page.body["nextCursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => break,
        }
    }
    assert_eq!(seen.len(), 6);
    assert_eq!(seen.first().unwrap().1, "patient.deleted");
    assert_eq!(seen.last().unwrap().1, "patient.created");
    let ids: Vec<&String> = seen.iter().map(|(id, _)| id).collect();
    let mut sorted = ids.clone();
    sorted.sort_by(|a, b| b.cmp(a));
    assert_eq!(ids, sorted, "newest first");

    let practitioner_id = practitioner["id"].as_str().unwrap();
    let practitioner_page =
        app.call("GET", &format!("/v1/practitioners/{practitioner_id}/timeline"), Some(&token), None).await;
    assert_eq!(practitioner_page.body["items"].as_array().unwrap().len(), 5);
}

#[tokio::test]
async fn unknown_timelines_bad_limits_and_foreign_cursors_are_rejected() {
    let app = TestApp::new().await;
    let token = app.workspace.staff.clone();
    let patient = app.create_patient(&token, json!({"givenName": "T", "familyName": "L"})).await;
    let id = patient["id"].as_str().unwrap();
    let never_used = ulid::Ulid::generate();
    assert_eq!(
        app.call("GET", &format!("/v1/patients/{never_used}/timeline"), Some(&token), None).await.status,
        404
    );
    assert_eq!(app.call("GET", "/v1/patients/not-an-id/timeline", Some(&token), None).await.status, 400);
    for limit in ["0", "101", "-1", "ten"] {
        let response =
            app.call("GET", &format!("/v1/patients/{id}/timeline?limit={limit}"), Some(&token), None).await;
        assert_eq!(
            (response.status.as_u16(), response.body["field"].as_str()),
            (400, Some("limit")),
            "limit={limit}"
        );
    }
    for cursor in ["abc", "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", "%00"] {
        let response =
            app.call("GET", &format!("/v1/patients/{id}/timeline?cursor={cursor}"), Some(&token), None).await;
        assert_eq!(
            (response.status.as_u16(), response.body["field"].as_str()),
            (400, Some("cursor")),
            "cursor={cursor}"
        );
    }
    // A genuine cursor of another timeline is not accepted here.
    let other = app.create_patient(&token, json!({"givenName": "O", "familyName": "P"})).await;
    let other_id = other["id"].as_str().unwrap();
    app.call("PATCH", &format!("/v1/patients/{other_id}"), Some(&token), Some(json!({"givenName": "Q"})))
        .await;
    let page =
        app.call("GET", &format!("/v1/patients/{other_id}/timeline?limit=1"), Some(&token), None).await;
    let foreign = page.body["nextCursor"].as_str().unwrap();
    let response =
        app.call("GET", &format!("/v1/patients/{id}/timeline?cursor={foreign}"), Some(&token), None).await;
    assert_eq!(response.status, 400);
}
