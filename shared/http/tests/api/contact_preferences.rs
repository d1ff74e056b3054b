//! Contact preferences on the patient (issue 40 item 1, DESIGN §5e): changed by staff and by the
//! patient's own token, each change one `patient.updated` event naming the changed fields only, bad
//! input a 4xx naming the field with nothing written.

use clinic_http::auth::Role;
use clinic_testkit::app::{token, TestApp};
use serde_json::{json, Value};

async fn latest_event(app: &TestApp, staff: &str, id: &str) -> Value {
    let timeline = app.call("GET", &format!("/v1/patients/{id}/timeline"), Some(staff), None).await;
    assert_eq!(timeline.status, 200, "{}", timeline.text);
    timeline.body["items"][0].clone()
}

#[tokio::test]
async fn staff_and_the_patient_change_contact_preferences_one_event_each_with_field_names_only() {
    let app = TestApp::new().await;
    let staff = app.workspace.staff.clone();
    let me = app.create_patient(&staff, json!({"givenName": "Ada", "familyName": "Lovelace"})).await;
    let id = me["id"].as_str().unwrap().to_owned();
    // The defaults: both channels consented, no opt-out, the workspace's zone.
    assert_eq!(me["contactChannels"], json!(["email", "sms"]));
    assert_eq!((me["contactOptOuts"].clone(), me["timeZone"].clone()), (json!([]), Value::Null));

    let changed = app
        .call(
            "PATCH",
            &format!("/v1/patients/{id}"),
            Some(&staff),
            Some(json!({"contactChannels": ["sms"], "timeZone": "America/New_York"})),
        )
        .await;
    assert_eq!(changed.status, 200, "{}", changed.text);
    assert_eq!(changed.body["contactChannels"], json!(["sms"]));
    assert_eq!(changed.body["timeZone"], "America/New_York");
    let event = latest_event(&app, &staff, &id).await;
    assert_eq!(event["type"], "patient.updated");
    assert_eq!(event["changedFields"], json!(["contactChannels", "timeZone"]));
    assert!(!event.to_string().contains("New_York"), "names only: {event}");
    assert_eq!(event["actor"]["kind"], "member");

    // The patient's own token: its contact preferences, nothing else.
    let me_id: ulid::Ulid = id.parse().unwrap();
    let patient = token(app.workspace.id, me_id, Role::Patient);
    let own = app
        .call(
            "PATCH",
            &format!("/v1/patients/{id}"),
            Some(&patient),
            Some(json!({"contactOptOuts": ["reminder", "reminder"], "contactChannels": ["sms"]})),
        )
        .await;
    assert_eq!(own.status, 200, "{}", own.text);
    assert_eq!(own.body["contactOptOuts"], json!(["reminder"]));
    assert_eq!(own.body["version"], 3);
    let event = latest_event(&app, &staff, &id).await;
    // The unchanged channel list is not named.
    assert_eq!(event["changedFields"], json!(["contactOptOuts"]));
    assert_eq!(event["actor"], json!({"kind": "patient", "id": id}));

    let other = app.create_patient(&staff, json!({"givenName": "Someone", "familyName": "Else"})).await;
    let events = app.count("SELECT 1 FROM events").await;
    let name = app
        .call(
            "PATCH",
            &format!("/v1/patients/{id}"),
            Some(&patient),
            Some(json!({"contactOptOuts": [], "givenName": "Eve"})),
        )
        .await;
    assert_eq!(name.status, 403, "a patient changes only contact preferences: {}", name.text);
    let theirs = app
        .call(
            "PATCH",
            &format!("/v1/patients/{}", other["id"].as_str().unwrap()),
            Some(&patient),
            Some(json!({"contactOptOuts": ["reminder"]})),
        )
        .await;
    assert_eq!(theirs.status, 404, "another patient looks missing: {}", theirs.text);
    assert_eq!(app.count("SELECT 1 FROM events").await, events);
}

#[tokio::test]
async fn bad_contact_preferences_answer_a_problem_naming_the_field_and_write_nothing() {
    let app = TestApp::new().await;
    let staff = app.workspace.staff.clone();
    let me = app.create_patient(&staff, json!({"givenName": "Ada", "familyName": "Lovelace"})).await;
    let path = format!("/v1/patients/{}", me["id"].as_str().unwrap());
    let events = app.count("SELECT 1 FROM events").await;
    let cases = [
        (json!({"contactChannels": ["fax"]}), "contactChannels"),
        (json!({"contactChannels": "email"}), "contactChannels"),
        (json!({"contactChannels": null}), "contactChannels"),
        (json!({"contactChannels": [1]}), "contactChannels"),
        (json!({"contactOptOuts": ["marketing"]}), "contactOptOuts"),
        (json!({"contactOptOuts": {"reminder": true}}), "contactOptOuts"),
        (json!({"timeZone": "Mars/Olympus_Mons"}), "timeZone"),
        (json!({"timeZone": 7}), "timeZone"),
    ];
    for (body, field) in cases {
        let response = app.call("PATCH", &path, Some(&staff), Some(body.clone())).await;
        assert!(
            response.status.is_client_error() && response.text.contains(field),
            "{body}: {} {}",
            response.status,
            response.text
        );
    }
    assert_eq!(app.count("SELECT 1 FROM events").await, events);
    let unchanged = app.call("GET", &path, Some(&staff), None).await;
    assert_eq!(unchanged.body["version"], 1);
}
