//! Handler tests driven by real API Gateway HTTP API (payload v2) events from `tests/fixtures/`.
//!
//! Each test parses a committed event the way the Lambda runtime does (`lambda_http::request`),
//! sends it through [`clinic_api::app`] (the router with the authorizer-claims adapter) and checks the
//! answer and the rows in a fresh PostgreSQL database, connected as the restricted `clinic_app` role
//! as in AWS.

use axum::http::StatusCode;
use clinic_core::db::connect_pool;
use clinic_core::ids::{CorrelationId, MemberId, PatientId, WorkspaceId};
use clinic_core::workspaces;
use clinic_http::correlation::CorrelationKeys;
use clinic_http::readiness::Readiness;
use clinic_http::AppState;
use clinic_http::{ApiConfig, AuthConfig};
use clinic_testkit::TestDb;
use http_body_util::BodyExt;
use serde_json::Value;
use tower::ServiceExt;

const CREATE_PATIENT: &str = include_str!("../../../../tests/fixtures/apigw_v2_create_patient.json");
const NO_AUTHORIZER: &str = include_str!("../../../../tests/fixtures/apigw_v2_no_authorizer.json");
const HEALTHZ: &str = include_str!("../../../../tests/fixtures/apigw_v2_healthz.json");
const READYZ: &str = include_str!("../../../../tests/fixtures/apigw_v2_readyz.json");
/// A Cognito access token's claims (UUID `sub`, `client_id`, `token_use`, `cognito:groups` …) plus the
/// `workspace_id` and `role` a pre-token-generation trigger adds.
const COGNITO_CREATE_PATIENT: &str =
    include_str!("../../../../tests/fixtures/apigw_v2_cognito_create_patient.json");

/// The Lambda configuration: claims come from API Gateway; cursors are signed with a test key.
fn lambda_state(db: &TestDb) -> AppState {
    let pool = connect_pool(&db.url_for_role("clinic_app"), 2, None).expect("pool");
    AppState {
        pool,
        api: ApiConfig {
            auth: AuthConfig::ApiGatewayClaims,
            cursor_key: b"fixture-cursor-key-0123456789".to_vec(),
            correlation: CorrelationKeys::new(b"fixture-correlation-key-0123", None),
            readiness: Readiness::new(std::time::Duration::from_secs(10)),
            subject_claim: "sub".into(),
            webhook_egress: Default::default(),
            workspaces: Default::default(),
            webhook_key: Some(clinic_testkit::webhook_key()),
            unsubscribe: None,
            outbox_max_attempts: Some(10),
        },
    }
}

/// A claim of the fixture's authorizer context.
fn claim(fixture: &str, name: &str) -> String {
    let event: Value = serde_json::from_str(fixture).expect("fixture is JSON");
    event["requestContext"]["authorizer"]["jwt"]["claims"][name]
        .as_str()
        .unwrap_or_else(|| panic!("fixture has no claim {name}"))
        .to_owned()
}

/// Seeds the workspace and the member named by the fixture's claims (a ULID or a UUID `sub`).
async fn seed_caller(db: &TestDb, fixture: &str) -> (WorkspaceId, MemberId) {
    let workspace: WorkspaceId = claim(fixture, "workspace_id").parse().expect("workspace id");
    let sub = claim(fixture, "sub");
    let member = match sub.parse::<MemberId>() {
        Ok(member) => member,
        Err(_) => MemberId::from_uuid(sub.parse::<uuid::Uuid>().expect("sub is a ULID or a UUID")),
    };
    let conn = db.client().await;
    workspaces::insert_workspace(&conn, workspace, "Fixture Clinic").await.expect("workspace");
    workspaces::insert_member(&conn, member, workspace, &claim(fixture, "role"), "Front desk")
        .await
        .expect("member");
    (workspace, member)
}

/// Runs one fixture through the Lambda app; answers status, headers and the JSON body.
async fn invoke(state: AppState, fixture: &str) -> (StatusCode, axum::http::HeaderMap, Value) {
    let request = lambda_http::request::from_str(fixture).expect("fixture is an API Gateway event");
    let response = clinic_api::app(state).oneshot(request).await.expect("the router never fails");
    let status = response.status();
    let headers = response.headers().clone();
    let bytes = response.into_body().collect().await.expect("body").to_bytes();
    let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    (status, headers, body)
}

#[tokio::test]
async fn jwt_claims_from_the_authorizer_create_a_patient_and_its_event() {
    clinic_testkit::init_test_logging();
    let db = clinic_testkit::fresh_db().await;
    let (workspace, member) = seed_caller(&db, CREATE_PATIENT).await;

    let (status, headers, body) = invoke(lambda_state(&db), CREATE_PATIENT).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(body["workspaceId"], workspace.to_string());
    assert_eq!(body["givenName"], "Ada");
    assert_eq!(body["version"], 1);
    // The fixture sends its own ULID as X-Correlation-Id: not an id this API issued, so it is replaced
    // by a fresh one (docs/correlation.md), answered as `<ULID>.<tag>`.
    let answered = headers.get("x-correlation-id").and_then(|v| v.to_str().ok()).expect("answered");
    assert!(!answered.starts_with("01JF3Z9Q5S7V9X1Z3B5D7F9H1K"), "a client's own id is not echoed");
    let (issued, tag) = answered.split_once('.').expect("an issued id is <ULID>.<tag>");
    assert_eq!(tag.len(), 22);
    let issued: CorrelationId = issued.parse().expect("the issued id is a ULID");

    let patient: PatientId = body["id"].as_str().expect("id").parse().expect("ULID");
    let conn = db.client().await;
    let row = conn
        .query_one("SELECT workspace_id, given_name, version FROM patients WHERE id = $1", &[&patient])
        .await
        .expect("the patient row exists");
    assert_eq!(row.get::<_, WorkspaceId>(0), workspace);
    assert_eq!(row.get::<_, String>(1), "Ada");
    assert_eq!(row.get::<_, i32>(2), 1);

    let events = conn
        .query(
            "SELECT e.type, e.actor_kind, e.actor_id, e.workspace_id, e.resource_version,
                    e.correlation_id = $2 AS same_correlation, o.status::text
               FROM events e JOIN event_outbox o ON o.event_id = e.id
              WHERE e.resource_type = 'patient' AND e.resource_id = $1",
            &[&patient, &issued],
        )
        .await
        .expect("events");
    assert_eq!(events.len(), 1, "exactly one event, with its outbox row");
    let event = &events[0];
    assert_eq!(event.get::<_, String>(0), "patient.created");
    assert_eq!(event.get::<_, String>(1), "member");
    assert_eq!(event.get::<_, MemberId>(2), member, "actor = the JWT subject");
    assert_eq!(event.get::<_, WorkspaceId>(3), workspace);
    assert_eq!(event.get::<_, i32>(4), 1);
    assert!(event.get::<_, bool>(5), "the issued correlation id is carried into the event");
    assert_eq!(event.get::<_, String>(6), "pending");
}

#[tokio::test]
async fn a_request_without_authorizer_claims_is_401_and_writes_nothing() {
    clinic_testkit::init_test_logging();
    let db = clinic_testkit::fresh_db().await;
    seed_caller(&db, CREATE_PATIENT).await;

    let (status, headers, body) = invoke(lambda_state(&db), NO_AUTHORIZER).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    assert_eq!(headers.get("content-type").and_then(|v| v.to_str().ok()), Some("application/problem+json"));
    assert!(headers.contains_key("x-correlation-id"));

    let conn = db.client().await;
    for table in ["patients", "events", "event_outbox"] {
        let count: i64 =
            conn.query_one(&format!("SELECT count(*) FROM {table}"), &[]).await.expect("count").get(0);
        assert_eq!(count, 0, "{table} stays empty");
    }
}

#[tokio::test]
async fn healthz_is_liveness_and_readyz_reaches_the_database() {
    clinic_testkit::init_test_logging();
    let db = clinic_testkit::fresh_db().await;
    let (status, _, body) = invoke(lambda_state(&db), HEALTHZ).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body, serde_json::json!({"status": "ok"}), "liveness says nothing of the database");
    let (status, _, body) = invoke(lambda_state(&db), READYZ).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["database"], "ok");
}

#[tokio::test]
async fn a_cognito_access_token_with_a_uuid_sub_is_the_member_of_that_id() {
    clinic_testkit::init_test_logging();
    let db = clinic_testkit::fresh_db().await;
    let (workspace, member) = seed_caller(&db, COGNITO_CREATE_PATIENT).await;
    let sub: uuid::Uuid = claim(COGNITO_CREATE_PATIENT, "sub").parse().expect("Cognito's sub is a UUID");
    assert_eq!(claim(COGNITO_CREATE_PATIENT, "token_use"), "access");

    let (status, _, body) = invoke(lambda_state(&db), COGNITO_CREATE_PATIENT).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(body["workspaceId"], workspace.to_string());
    let conn = db.client().await;
    let row = conn
        .query_one("SELECT actor_kind, actor_id FROM events WHERE type = 'patient.created'", &[])
        .await
        .expect("one patient.created event");
    assert_eq!(row.get::<_, String>(0), "member");
    assert_eq!(row.get::<_, uuid::Uuid>(1), sub, "the actor is the Cognito user's UUID");
    assert_eq!(row.get::<_, MemberId>(1), member);

    // The subject can come from another claim: one holding a ULID member id.
    let mut state = lambda_state(&db);
    state.api.subject_claim = "custom:member_id".into();
    let (status, _, _) = invoke(state.clone(), COGNITO_CREATE_PATIENT).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "the configured claim is missing");
    let mut event: Value = serde_json::from_str(COGNITO_CREATE_PATIENT).unwrap();
    let claims = &mut event["requestContext"]["authorizer"]["jwt"]["claims"];
    claims["custom:member_id"] = Value::String(member.to_string());
    claims["sub"] = Value::String("not-an-id".into());
    let (status, _, body) = invoke(state, &event.to_string()).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
}

#[test]
fn fixtures_carry_the_jwt_claims_the_api_reads() {
    let request = lambda_http::request::from_str(CREATE_PATIENT).expect("fixture parses");
    let context =
        request.extensions().get::<lambda_http::request::RequestContext>().expect("request context");
    let lambda_http::request::RequestContext::ApiGatewayV2(context) = context else {
        panic!("an HTTP API (payload v2) event");
    };
    let claims = &context
        .authorizer
        .as_ref()
        .and_then(|authorizer| authorizer.jwt.as_ref())
        .expect("JWT authorizer context")
        .claims;
    for name in ["sub", "workspace_id", "role"] {
        assert!(claims.contains_key(name), "claim {name}");
    }
    assert_eq!(request.uri().path(), "/v1/patients");

    let unauthenticated = lambda_http::request::from_str(NO_AUTHORIZER).expect("fixture parses");
    match unauthenticated.extensions().get::<lambda_http::request::RequestContext>() {
        Some(lambda_http::request::RequestContext::ApiGatewayV2(context)) => {
            assert!(context.authorizer.is_none())
        }
        other => panic!("unexpected context {other:?}"),
    }
}
