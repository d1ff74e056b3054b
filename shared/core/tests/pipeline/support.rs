//! Fixtures for the dispatcher and listener tests: a fresh database with a workspace, mutations
//! through the real use cases (each committed on its own transaction), fast dispatcher settings and
//! small readers of the outbox tables.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use clinic_core::appointments::{self, Cancel, NewAppointment};
use clinic_core::context::Ctx;
/// The dispatcher settings of these tests: short leases and backoffs (the one fast config).
pub use clinic_core::dispatch::testing::fast_config;
use clinic_core::dispatch::{
    DispatchConfig, Dispatcher, DrainReport, LocalTransport, StepOutcome, Transport,
};
use clinic_core::domain::values::TimeSlot;
use clinic_core::events::{Actor, Cause, Envelope};
use clinic_core::ids::{
    AppointmentId, CorrelationId, MemberId, PatientId, PractitionerId, RequestId, WorkspaceId,
};
use clinic_core::{patients, practitioners, workspaces};
use clinic_testkit::TestDb;
use serde_json::json;

pub struct Fixture {
    pub db: TestDb,
    pub workspace: WorkspaceId,
    pub member: MemberId,
}

impl Fixture {
    pub async fn new() -> Fixture {
        clinic_testkit::init_test_logging();
        let db = clinic_testkit::fresh_db().await;
        let workspace = WorkspaceId::generate();
        let member = MemberId::generate();
        let client = db.client().await;
        workspaces::insert_workspace(&client, workspace, "Test clinic").await.unwrap();
        workspaces::insert_member(&client, member, workspace, "admin", "Admin").await.unwrap();
        Fixture { db, workspace, member }
    }

    pub fn ctx(&self) -> Ctx {
        Ctx {
            workspace_id: self.workspace,
            cause: Cause {
                actor: Actor::Member { id: self.member.ulid() },
                correlation_id: CorrelationId::generate(),
                causation_id: RequestId::generate().into(),
                idempotency_key: None,
                trace: None,
            },
        }
    }

    pub async fn create_patient(&self) -> PatientId {
        let mut client = self.db.client().await;
        let tx = client.transaction().await.unwrap();
        let command = json!({"givenName": "Ada", "familyName": "Lovelace", "email": "ada@example.org"})
            .try_into()
            .unwrap();
        let (patient, _) = patients::create(&tx, &self.ctx(), command).await.unwrap();
        tx.commit().await.unwrap();
        patient.id
    }

    pub async fn create_practitioner(&self) -> PractitionerId {
        let mut client = self.db.client().await;
        let tx = client.transaction().await.unwrap();
        let command = json!({"displayName": "Dr. Who"}).try_into().unwrap();
        let (practitioner, _) = practitioners::create(&tx, &self.ctx(), command).await.unwrap();
        tx.commit().await.unwrap();
        practitioner.id
    }

    /// Books `count` back-to-back 30-minute appointments starting `hours_from_now` hours from now,
    /// in one transaction; returns their ids and `appointment.created` envelopes.
    pub async fn book_many(
        &self,
        patient: PatientId,
        practitioner: PractitionerId,
        hours_from_now: i64,
        count: usize,
    ) -> Vec<(AppointmentId, Envelope)> {
        let mut client = self.db.client().await;
        let tx = client.transaction().await.unwrap();
        let ctx = self.ctx();
        let first = Utc::now() + chrono::Duration::hours(hours_from_now);
        let mut booked = Vec::with_capacity(count);
        for i in 0..count {
            let starts_at = first + chrono::Duration::minutes(30 * i as i64);
            let slot = TimeSlot::new(starts_at, starts_at + chrono::Duration::minutes(30)).unwrap();
            let command = NewAppointment::new(patient, practitioner, slot, None);
            let (appointment, event) = appointments::book(&tx, &ctx, command).await.unwrap();
            booked.push((appointment.id, event));
        }
        tx.commit().await.unwrap();
        booked
    }

    pub async fn book(
        &self,
        patient: PatientId,
        practitioner: PractitionerId,
        hours_from_now: i64,
    ) -> (AppointmentId, Envelope) {
        self.book_many(patient, practitioner, hours_from_now, 1).await.remove(0)
    }

    pub async fn cancel(&self, id: AppointmentId) -> Envelope {
        let mut client = self.db.client().await;
        let tx = client.transaction().await.unwrap();
        let (_, event) =
            appointments::cancel(&tx, &self.ctx(), appointments::Access::Workspace, id, Cancel::default())
                .await
                .unwrap();
        tx.commit().await.unwrap();
        event
    }

    pub async fn reschedule(&self, id: AppointmentId, hours_from_now: i64) -> Envelope {
        let mut client = self.db.client().await;
        let tx = client.transaction().await.unwrap();
        let starts_at: DateTime<Utc> = Utc::now() + chrono::Duration::hours(hours_from_now);
        let ends_at = starts_at + chrono::Duration::minutes(30);
        let command = json!({"startsAt": starts_at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                             "endsAt": ends_at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)})
        .try_into()
        .unwrap();
        let (_, event) = appointments::reschedule(&tx, &self.ctx(), id, command).await.unwrap();
        tx.commit().await.unwrap();
        event
    }

    pub async fn delete_patient(&self, id: PatientId) -> Envelope {
        let mut client = self.db.client().await;
        let tx = client.transaction().await.unwrap();
        let event = patients::delete(&tx, &self.ctx(), id, None).await.unwrap();
        tx.commit().await.unwrap();
        event
    }

    /// A webhook endpoint of the workspace for every event type (`https://hooks.example.com/{path}`),
    /// created through the use case on `client` (so a test may hold it in a transaction).
    pub async fn webhook_endpoint_on(
        client: &impl deadpool_postgres::GenericClient,
        workspace: WorkspaceId,
        path: &str,
    ) -> clinic_core::ids::WebhookEndpointId {
        let new = clinic_core::webhooks::endpoints::NewEndpoint {
            url: format!("https://hooks.example.com/{path}"),
            description: String::new(),
            event_types: vec![],
            heartbeat_seconds: 0,
            payload_format: "cloudevents",
        };
        let key = clinic_testkit::webhook_key();
        clinic_core::webhooks::endpoints::create(client, &key, workspace, &new, "test")
            .await
            .unwrap()
            .endpoint
            .id
    }

    /// [`Fixture::webhook_endpoint_on`] on a connection of its own.
    pub async fn webhook_endpoint(&self, path: &str) -> clinic_core::ids::WebhookEndpointId {
        Self::webhook_endpoint_on(&self.db.client().await, self.workspace, path).await
    }

    pub async fn count(&self, query: &str) -> i64 {
        self.db.client().await.query_one(query, &[]).await.unwrap().get(0)
    }

    pub fn local(&self) -> Arc<dyn Transport> {
        Arc::new(LocalTransport::new(self.db.pool.clone()))
    }

    pub fn dispatcher(&self, transport: Arc<dyn Transport>, config: DispatchConfig) -> Dispatcher {
        Dispatcher::new(self.db.pool.clone(), transport, config)
    }

    /// The outbox row of `event`: status, attempts, last error code and text.
    pub async fn outbox(&self, event: &Envelope) -> OutboxRow {
        let row = self
            .db
            .client()
            .await
            .query_one(
                "SELECT status, attempts, last_error_code, last_error, \
                        (extract(epoch FROM (available_at - updated_at)) * 1000)::float8, claim_token \
                 FROM event_outbox WHERE event_id = $1",
                &[&event.id],
            )
            .await
            .unwrap();
        let delay: Option<f64> = row.get(4);
        OutboxRow {
            status: row.get(0),
            attempts: row.get(1),
            last_error_code: row.get(2),
            last_error: row.get(3),
            delay_ms: delay.unwrap_or(0.0),
            claim_token: row.get::<_, Option<uuid::Uuid>>(5).is_some(),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct OutboxRow {
    pub status: String,
    pub attempts: i32,
    pub last_error_code: Option<String>,
    pub last_error: Option<String>,
    /// `available_at - updated_at` (the backoff of a `retry` row), in milliseconds.
    pub delay_ms: f64,
    pub claim_token: bool,
}

/// Steps until idle; panics if it takes absurdly many steps.
pub async fn drain(dispatcher: &Dispatcher) -> DrainReport {
    dispatcher.drain_once().await.unwrap()
}

/// One step's report, panicking on `Idle`.
pub async fn step(dispatcher: &Dispatcher) -> clinic_core::dispatch::StepReport {
    match dispatcher.step().await.unwrap() {
        StepOutcome::Dispatched(report) => report,
        StepOutcome::Idle => panic!("expected work, the outbox was idle"),
    }
}
