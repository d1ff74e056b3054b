//! Fixtures for the operator, retention and reminder tests: a `TestApp` with one booked appointment,
//! dispatchers with fast settings on the app's restricted pool, and readers of the outbox tables.

use std::sync::Arc;
use std::time::Duration;

/// The dispatcher settings of these tests: short leases and backoffs (the one fast config).
pub use clinic_core::dispatch::testing::fast_config;
use clinic_core::dispatch::testing::FailingTransport;
use clinic_core::dispatch::{DispatchConfig, Dispatcher, DrainReport, LocalTransport, StartError, Transport};
use clinic_core::ids::EventId;
use clinic_core::outbox::{Backoff, Jitter};
use clinic_testkit::app::TestApp;
use serde_json::Value;

/// A config whose retries wait an hour (so a `retry` row stays in `retry`).
pub fn slow_retry_config() -> DispatchConfig {
    DispatchConfig {
        backoff: Backoff {
            base: Duration::from_secs(3600),
            cap: Duration::from_secs(3600),
            jitter: Jitter::Equal,
        },
        ..fast_config()
    }
}

pub struct Scene {
    pub app: TestApp,
    pub patient: Value,
    pub practitioner: Value,
    pub appointment: Value,
    /// The `appointment.created` event (two listeners: patient and practitioner notices).
    pub created: EventId,
}

impl Scene {
    /// A workspace with a patient, a practitioner and one appointment booked tomorrow (reason set:
    /// health data that must never show up in operator answers).
    pub async fn new() -> Scene {
        clinic_testkit::init_test_logging();
        let app = TestApp::new().await;
        let admin = app.workspace.admin.clone();
        let patient = app
            .create_patient(&admin, serde_json::json!({"givenName": "Grace", "familyName": "Hopper"}))
            .await;
        let practitioner = app.create_practitioner(&admin).await;
        let starts = chrono::Utc::now() + chrono::Duration::hours(30);
        let ends = starts + chrono::Duration::minutes(30);
        let body = serde_json::json!({
            "patientId": patient["id"], "practitionerId": practitioner["id"],
            "startsAt": rfc3339(starts), "endsAt": rfc3339(ends), "reason": "Chest pain since Tuesday",
        });
        let response = app.call("POST", "/v1/appointments", Some(&admin), Some(body)).await;
        assert_eq!(response.status, 201, "{}", response.text);
        let appointment = response.body;
        let created = event_of(&app, "appointment.created").await;
        Scene { app, patient, practitioner, appointment, created }
    }

    pub fn local(&self) -> Arc<dyn Transport> {
        Arc::new(LocalTransport::new(self.app.state.pool.clone()))
    }

    pub fn dispatcher(&self, transport: Arc<dyn Transport>, config: DispatchConfig) -> Dispatcher {
        Dispatcher::new(self.app.state.pool.clone(), transport, config)
    }

    /// Drains once with the local transport.
    pub async fn dispatch_locally(&self) -> DrainReport {
        self.dispatcher(self.local(), fast_config()).drain_once().await.unwrap()
    }

    /// Drains once with every start failing permanently: rows with listeners go `dead`.
    pub async fn bury(&self) -> DrainReport {
        let failing =
            FailingTransport::always(StartError::permanent("provider_rejected", "provider said no"));
        self.dispatcher(Arc::new(failing), fast_config()).drain_once().await.unwrap()
    }

    /// Drains once with every start failing retryably and an hour of backoff: rows go `retry`.
    pub async fn delay(&self) -> DrainReport {
        let failing = FailingTransport::always(StartError::retryable("provider_down", "timeout"));
        self.dispatcher(Arc::new(failing), slow_retry_config()).drain_once().await.unwrap()
    }

    pub async fn status(&self, event: EventId) -> String {
        status_of(&self.app, event).await
    }

    pub async fn attempts(&self, event: EventId) -> i32 {
        self.query_one("SELECT attempts FROM event_outbox WHERE event_id = $1", event).await.get(0)
    }

    pub async fn audit_count(&self, event: EventId) -> i64 {
        self.query_one("SELECT count(*) FROM operator_actions WHERE event_id = $1", event).await.get(0)
    }

    pub async fn notifications(&self, event: EventId) -> i64 {
        self.query_one("SELECT count(*) FROM notifications WHERE event_id = $1", event).await.get(0)
    }

    pub async fn query_one(&self, sql: &str, event: EventId) -> tokio_postgres::Row {
        self.app.db.client().await.query_one(sql, &[&event]).await.unwrap()
    }

    pub async fn execute(&self, sql: &str, event: EventId) -> u64 {
        self.app.db.client().await.execute(sql, &[&event]).await.unwrap()
    }
}

pub fn rfc3339(at: chrono::DateTime<chrono::Utc>) -> String {
    at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// The (single) event of `event_type` in the app's database.
pub async fn event_of(app: &TestApp, event_type: &str) -> EventId {
    let row = app
        .db
        .client()
        .await
        .query_one("SELECT id FROM events WHERE type = $1 ORDER BY id DESC LIMIT 1", &[&event_type])
        .await
        .unwrap();
    row.get(0)
}

pub async fn status_of(app: &TestApp, event: EventId) -> String {
    app.db
        .client()
        .await
        .query_one("SELECT status FROM event_outbox WHERE event_id = $1", &[&event])
        .await
        .unwrap()
        .get(0)
}
