//! Identity (issue 39 item 4; DESIGN.md §6c): a verified token whose workspace does not exist is
//! refused (403 `unknown-workspace`) on every route that needs a caller, reads included, and writes
//! nothing; routes that need no caller answer as before.

use clinic_core::ids::WorkspaceId;
use clinic_http::auth::Role;
use clinic_testkit::app::{token, TestApp};
use serde_json::json;

#[tokio::test]
async fn a_token_for_a_workspace_that_does_not_exist_is_refused() {
    let app = TestApp::new().await;
    let ghost = WorkspaceId::generate();
    for role in [Role::Admin, Role::Staff, Role::Patient] {
        let forged = token(ghost, ulid::Ulid::generate(), role);
        for (method, path, body) in [
            ("GET", "/v1/appointments?from=2031-01-01T00:00:00Z&to=2031-01-02T00:00:00Z".to_owned(), None),
            ("GET", format!("/v1/patients/{}", ulid::Ulid::generate()), None),
            ("POST", "/v1/patients".to_owned(), Some(json!({"givenName": "Ghost", "familyName": "Writer"}))),
        ] {
            let response = app.call(method, &path, Some(&forged), body).await;
            assert_eq!(response.status, 403, "{role:?} {method} {path}: {}", response.text);
            assert_eq!(response.body["type"], "urn:clinic:problem:unknown-workspace", "{}", response.text);
        }
    }
    // Routes that need no caller do not look the workspace up (liveness never touches the database).
    let forged = token(ghost, ulid::Ulid::generate(), Role::Admin);
    assert_eq!(app.call("GET", "/healthz", Some(&forged), None).await.status, 200);
    assert_eq!(app.count("SELECT 1 FROM patients").await, 0);
    assert_eq!(app.count("SELECT 1 FROM patient_disclosures").await, 0);
    // The real workspace still answers.
    let response = app
        .call(
            "GET",
            "/v1/appointments?from=2031-01-01T00:00:00Z&to=2031-01-02T00:00:00Z",
            Some(&app.workspace.staff),
            None,
        )
        .await;
    assert_eq!(response.status, 200, "{}", response.text);
}
