//! `TestApp`: the real HTTP router on a fresh database, driven in-process (no socket), with tokens
//! for an admin and a staff member of a seeded workspace and small factories for common resources.

use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderMap, Method, Request, StatusCode};
use axum::Router;
use clinic_core::db::connect_pool;
use clinic_core::ids::{AppointmentId, MemberId, WorkspaceId};
use clinic_core::workspaces;
use clinic_http::auth::{issue_token, Role};
use clinic_http::ApiConfig;
use clinic_http::{router, AppState};
use serde_json::{json, Value};
use tower::ServiceExt;
use ulid::Ulid;

use crate::{fresh_db, TestDb};

pub const TEST_SECRET: &str = "test-secret-for-hs256-tokens-only";

/// One response, with its body parsed as JSON when it is JSON.
#[derive(Debug)]
pub struct TestResponse {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub text: String,
    pub body: Value,
}

impl TestResponse {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|value| value.to_str().ok())
    }
}

/// A seeded workspace with an admin and a staff member.
#[derive(Debug, Clone)]
pub struct Workspace {
    pub id: WorkspaceId,
    pub admin_id: MemberId,
    pub admin: String,
    pub staff: String,
}

pub struct TestApp {
    pub db: TestDb,
    pub state: AppState,
    pub router: Router,
    pub workspace: Workspace,
}

impl TestApp {
    /// A fresh database, a workspace, and the router connected as the restricted `clinic_app` role.
    pub async fn new() -> TestApp {
        let db = fresh_db().await;
        let pool = connect_pool(&db.url_for_role("clinic_app"), 8, None).expect("pool");
        let settings =
            clinic_http::ApiSettings::read_local(&clinic_core::config::Env::default()).expect("settings");
        let keys = clinic_http::LocalKeys::default();
        let api = ApiConfig::local(&settings, &keys, TEST_SECRET, crate::webhook_key()).expect("api config");
        let state = AppState { pool, api };
        let router = router(state.clone());
        let mut app = TestApp {
            db,
            state,
            router,
            workspace: Workspace {
                id: WorkspaceId::generate(),
                admin_id: MemberId::generate(),
                admin: String::new(),
                staff: String::new(),
            },
        };
        app.workspace = app.add_workspace().await;
        app
    }

    /// Creates another workspace with its own admin and staff member.
    pub async fn add_workspace(&self) -> Workspace {
        let id = WorkspaceId::generate();
        let admin_id = MemberId::generate();
        let staff_id = MemberId::generate();
        let conn = self.db.pool.get().await.expect("connection");
        workspaces::insert_workspace(&conn, id, "Test Clinic").await.expect("workspace");
        workspaces::insert_member(&conn, admin_id, id, "admin", "Admin").await.expect("admin");
        workspaces::insert_member(&conn, staff_id, id, "staff", "Staff").await.expect("staff");
        Workspace {
            id,
            admin_id,
            admin: token(id, admin_id.ulid(), Role::Admin),
            staff: token(id, staff_id.ulid(), Role::Staff),
        }
    }

    pub async fn send(&self, request: Request<Body>) -> TestResponse {
        let response = self.router.clone().oneshot(request).await.expect("router never fails");
        let status = response.status();
        let headers = response.headers().clone();
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX).await.expect("body");
        let text = String::from_utf8_lossy(&bytes).into_owned();
        let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        TestResponse { status, headers, text, body }
    }

    /// Sends `method path` with an optional bearer token and JSON body.
    pub async fn call(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<Value>,
    ) -> TestResponse {
        self.call_with(method, path, token, body, &[]).await
    }

    /// POSTs a form (`application/x-www-form-urlencoded`) with no token: an email's one-click
    /// unsubscribe (RFC 8058).
    pub async fn post_form(&self, path: &str, form: &str) -> TestResponse {
        let request = Request::builder()
            .method(Method::POST)
            .uri(path)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(Body::from(form.to_owned()))
            .expect("request");
        self.send(request).await
    }

    /// Like [`TestApp::call`], with extra headers.
    pub async fn call_with(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<Value>,
        headers: &[(&str, &str)],
    ) -> TestResponse {
        let mut builder =
            Request::builder().method(Method::from_bytes(method.as_bytes()).expect("method")).uri(path);
        if let Some(token) = token {
            builder = builder.header("authorization", format!("Bearer {token}"));
        }
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
        let body = match body {
            Some(body) => {
                builder = builder.header("content-type", "application/json");
                Body::from(body.to_string())
            }
            None => Body::empty(),
        };
        self.send(builder.body(body).expect("request")).await
    }

    pub async fn create_patient(&self, token: &str, body: Value) -> Value {
        let response = self.call("POST", "/v1/patients", Some(token), Some(body)).await;
        assert_eq!(response.status, StatusCode::CREATED, "{}", response.text);
        response.body
    }

    pub async fn create_practitioner(&self, token: &str) -> Value {
        let body = json!({ "displayName": "Dr. Test", "specialty": "General" });
        let response = self.call("POST", "/v1/practitioners", Some(token), Some(body)).await;
        assert_eq!(response.status, StatusCode::CREATED, "{}", response.text);
        response.body
    }

    pub async fn book(
        &self,
        token: &str,
        patient: &Value,
        practitioner: &Value,
        starts_at: &str,
        ends_at: &str,
    ) -> Value {
        let body = json!({
            "patientId": patient["id"], "practitionerId": practitioner["id"],
            "startsAt": starts_at, "endsAt": ends_at,
        });
        let response = self.call("POST", "/v1/appointments", Some(token), Some(body)).await;
        assert_eq!(response.status, StatusCode::CREATED, "{}", response.text);
        response.body
    }

    /// The `appointment.created` event of `appointment` (an answer of [`TestApp::book`]), as stored.
    pub async fn created_event(&self, appointment: &Value) -> clinic_core::events::Envelope {
        let id: AppointmentId =
            appointment["id"].as_str().expect("an appointment answer").parse().expect("a ULID");
        let conn = self.db.pool.get().await.expect("connection");
        let row = conn
            .query_one(
                "SELECT id FROM events WHERE type = 'appointment.created' AND resource_id = $1",
                &[&id],
            )
            .await
            .expect("the appointment's created event");
        clinic_core::events::read::find(&conn, row.get(0)).await.expect("read").expect("the event")
    }

    /// `SELECT count(*)` of a query on the test database.
    pub async fn count(&self, query: &str) -> i64 {
        let conn = self.db.pool.get().await.expect("connection");
        conn.query_one(&format!("SELECT count(*) FROM ({query}) AS counted"), &[])
            .await
            .expect("count")
            .get(0)
    }
}

/// A locally signed token for the test secret.
pub fn token(workspace: WorkspaceId, sub: Ulid, role: Role) -> String {
    issue_token(TEST_SECRET.as_bytes(), workspace, sub, role, Duration::from_secs(3600)).expect("token")
}
