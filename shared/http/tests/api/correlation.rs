//! Correlation ids under the written policy (docs/correlation.md): the API issues them, tagged for the
//! caller's workspace, and accepts back only its own; anything else is replaced, never echoed and
//! never stored.

use clinic_testkit::app::{TestApp, TestResponse};
use serde_json::json;

/// The correlation id an answer's `X-Correlation-Id` names: `<ULID>.<tag>` → the ULID.
fn issued_id(response: &TestResponse) -> ulid::Ulid {
    let header = response.header("x-correlation-id").expect("every answer carries X-Correlation-Id");
    let (id, tag) = header.split_once('.').unwrap_or_else(|| panic!("{header:?} is not <ULID>.<tag>"));
    assert_eq!(tag.len(), 22, "{header:?}");
    id.parse().unwrap_or_else(|_| panic!("{header:?} does not start with a ULID"))
}

async fn events_correlated_by(app: &TestApp, id: ulid::Ulid) -> i64 {
    app.count(&format!("SELECT 1 FROM events WHERE correlation_id = '{}'", uuid::Uuid::from(id))).await
}

async fn create_practitioner(app: &TestApp, token: &str, correlation: Option<&str>) -> TestResponse {
    let headers: Vec<(&str, &str)> =
        correlation.map(|value| ("x-correlation-id", value)).into_iter().collect();
    let body = json!({ "displayName": "Dr. Chain" });
    let response = app.call_with("POST", "/v1/practitioners", Some(token), Some(body), &headers).await;
    assert_eq!(response.status, 201, "{}", response.text);
    response
}

#[tokio::test]
async fn an_id_the_api_issued_comes_back_and_chains_the_events() {
    let app = TestApp::new().await;
    let first = create_practitioner(&app, &app.workspace.staff, None).await;
    let chain = first.header("x-correlation-id").unwrap().to_owned();
    let id = issued_id(&first);
    assert_eq!(events_correlated_by(&app, id).await, 1);

    // The same workspace sends it back (another member of it too): the id is kept and answered as is.
    let second = create_practitioner(&app, &app.workspace.staff, Some(&chain)).await;
    assert_eq!(second.header("x-correlation-id"), Some(chain.as_str()));
    let third = create_practitioner(&app, &app.workspace.admin, Some(&format!(" {chain} "))).await;
    assert_eq!(third.header("x-correlation-id"), Some(chain.as_str()));
    assert_eq!(events_correlated_by(&app, id).await, 3, "the three events form one chain");
    // The timeline shows the chain's id.
    let practitioner = second.body["id"].as_str().unwrap();
    let timeline = app
        .call("GET", &format!("/v1/practitioners/{practitioner}/timeline"), Some(&app.workspace.staff), None)
        .await;
    assert_eq!(timeline.body["items"][0]["correlationId"], id.to_string());
}

#[tokio::test]
async fn a_forged_foreign_or_client_made_id_is_replaced_and_never_stored() {
    let app = TestApp::new().await;
    let other = app.add_workspace().await;
    let ours = create_practitioner(&app, &app.workspace.staff, None).await;
    let ours_header = ours.header("x-correlation-id").unwrap().to_owned();
    let theirs = create_practitioner(&app, &other.staff, None).await;
    let theirs_header = theirs.header("x-correlation-id").unwrap().to_owned();
    let anonymous = app.call("GET", "/healthz", None, None).await;
    let anonymous_header = anonymous.header("x-correlation-id").unwrap().to_owned();
    let own_ulid = ulid::Ulid::generate();
    let own_uuid = "67e55044-10b1-426f-9247-bb680e5fe0c8";
    // Our id with the other workspace's tag: a tag is bound to its id and its workspace.
    let spliced = format!("{}.{}", issued_id(&ours), theirs_header.split_once('.').unwrap().1);
    // Our own id with a tag of the right shape that we did not issue.
    let forged = format!("{}.{}", issued_id(&ours), "A".repeat(22));

    let cases = [
        ("another workspace's issued id", theirs_header.clone(), Some(issued_id(&theirs))),
        ("an id issued to an unauthenticated request", anonymous_header.clone(), Some(issued_id(&anonymous))),
        ("a spliced tag", spliced, Some(issued_id(&ours))),
        ("a forged tag", forged, Some(issued_id(&ours))),
        ("a client's own ULID", own_ulid.to_string(), Some(own_ulid)),
        (
            "a client's own UUID",
            own_uuid.to_owned(),
            Some(ulid::Ulid::from(own_uuid.parse::<uuid::Uuid>().unwrap())),
        ),
        ("client text", "Jane Doe, oncology follow-up".to_owned(), None),
    ];
    for (what, sent, names) in cases {
        let before = match names {
            Some(id) => events_correlated_by(&app, id).await,
            None => 0,
        };
        let response = create_practitioner(&app, &app.workspace.staff, Some(&sent)).await;
        let answered = response.header("x-correlation-id").unwrap();
        assert_ne!(answered, sent, "{what} is not echoed");
        assert_ne!(answered, ours_header, "{what}: a fresh id, not one of the workspace's earlier chains");
        let fresh = issued_id(&response);
        assert_eq!(events_correlated_by(&app, fresh).await, 1, "{what}: the event carries the fresh id");
        if let Some(id) = names {
            assert_ne!(fresh, id, "{what}");
            assert_eq!(events_correlated_by(&app, id).await, before, "{what} joined no chain");
        }
        // The fresh id is the caller's own from now on.
        let again = create_practitioner(&app, &app.workspace.staff, Some(answered)).await;
        assert_eq!(issued_id(&again), fresh, "{what}: the replacement is accepted back");
    }
    assert_eq!(events_correlated_by(&app, issued_id(&theirs)).await, 1, "the other chain is untouched");
}

#[tokio::test]
async fn every_answer_carries_an_issued_id_even_refusals() {
    let app = TestApp::new().await;
    let junk = app.call_with("GET", "/healthz", None, None, &[("x-correlation-id", "<script>")]).await;
    assert_ne!(junk.header("x-correlation-id"), Some("<script>"));
    issued_id(&junk);
    let unknown = app.call("GET", "/nowhere", None, None).await;
    assert_eq!(unknown.status, 404);
    issued_id(&unknown);
    let bad_token = app.call("GET", "/v1/practitioners", Some("not-a-token"), None).await;
    assert_eq!(bad_token.status, 401);
    issued_id(&bad_token);
    let invalid = app
        .call("POST", "/v1/practitioners", Some(&app.workspace.staff), Some(json!({ "displayName": "" })))
        .await;
    assert_eq!(invalid.status, 422);
    issued_id(&invalid);
}
