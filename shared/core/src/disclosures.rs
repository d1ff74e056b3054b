//! Accounting of disclosures (DESIGN.md §6a; HIPAA 164.312(b) audit controls): every read of a
//! patient's personal fields appends one `patient_disclosures` row per patient, in the same
//! transaction as the read, so a read that commits is accounted for and a rolled-back one is not.
//!
//! Invariants:
//! - Rows hold ids and codes only: the actor, the patient, a purpose (a route name such as
//!   `GET /v1/patients/{id}`, or a listener name) and, for listeners and renderers, the event id.
//! - The table is append-only (triggers, and `clinic_app` holds only SELECT and INSERT on it).
//! - [`record`] writes every patient of one read in a single statement (one round trip).
//! - What records: the API's patient read and appointment read (an appointment carries its reason,
//!   health data: the appointment's patient is recorded), every answer of a change that carries them
//!   (PATCH of a patient, reschedule / cancel / complete of an appointment), and every listener run
//!   that reloads an appointment (actor `system`, purpose = the listener, with the event id).
//!   Creations are not recorded: their answer holds only what the caller itself sent. Reads that
//!   carry ids only (timelines, notifications, the outbox) are not disclosures.
//! - [`list`] answers a patient's rows newest first, `(created_at, id)` descending, keyset after the
//!   row whose id the cursor holds (`patient_disclosures_by_patient` serves it).

use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;
use serde::Serialize;
use tokio_postgres::Row;

use crate::db::sql;
use crate::events::Actor;
use crate::ids::{DisclosureId, EventId, PatientId, WorkspaceId};

/// The purposes of the API's disclosures: the route templates that answer personal fields.
pub mod routes {
    pub const GET_PATIENT: &str = "GET /v1/patients/{id}";
    pub const PATCH_PATIENT: &str = "PATCH /v1/patients/{id}";
    pub const GET_APPOINTMENT: &str = "GET /v1/appointments/{id}";
    pub const RESCHEDULE_APPOINTMENT: &str = "POST /v1/appointments/{id}/reschedule";
    pub const CANCEL_APPOINTMENT: &str = "POST /v1/appointments/{id}/cancel";
    pub const COMPLETE_APPOINTMENT: &str = "POST /v1/appointments/{id}/complete";
    /// A repeated request answered from its `Idempotency-Key` with the resource as it is now.
    pub const IDEMPOTENT_REPLAY: &str = "idempotent replay";
}

impl Purpose<'static> {
    /// An API read or answer: the route template.
    pub const fn route(name: &'static str) -> Self {
        Self { name, event_id: None }
    }
}

/// Why a patient's personal fields were read: the route or listener, and the event it acted on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Purpose<'a> {
    /// A route (`GET /v1/patients/{id}`) or a listener name (`patient_booking_confirmation`).
    pub name: &'a str,
    /// The event a listener or renderer acted on; `None` for API reads.
    pub event_id: Option<EventId>,
}

const RECORD: &str = "\
INSERT INTO patient_disclosures (id, workspace_id, patient_id, actor_kind, actor_id, purpose, event_id)
SELECT id, $1, patient_id, $2, $3, $4, $5
FROM unnest($6::uuid[], $7::uuid[]) AS disclosed (id, patient_id)";

/// Appends one disclosure row per patient in `patients` (nothing when it is empty).
pub async fn record(
    client: &impl GenericClient,
    workspace_id: WorkspaceId,
    actor: &Actor,
    patients: &[PatientId],
    purpose: Purpose<'_>,
) -> Result<(), tokio_postgres::Error> {
    if patients.is_empty() {
        return Ok(());
    }
    let ids: Vec<uuid::Uuid> = patients.iter().map(|_| DisclosureId::generate().uuid()).collect();
    let patient_ids: Vec<uuid::Uuid> = patients.iter().map(|id| id.uuid()).collect();
    let actor_id = actor.id().map(uuid::Uuid::from);
    let event_id = purpose.event_id.map(|id| id.uuid());
    sql::execute(
        client,
        RECORD,
        &[&workspace_id, &actor.kind(), &actor_id, &purpose.name, &event_id, &ids, &patient_ids],
    )
    .await
    .map(drop)
}

/// One disclosure as answered by `GET /v1/patients/{id}/disclosures`: ids and codes only.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Disclosure {
    pub id: DisclosureId,
    pub patient_id: PatientId,
    /// Who read: a member, the patient, or the system (a listener).
    // The stored `actor_kind` (`Actor::kind`); the column's CHECK holds the same three.
    #[schemars(extend("enum" = ["member", "patient", "system"]))]
    pub actor_kind: String,
    /// The member's or patient's id; null for the system (listeners).
    #[schemars(with = "Option<crate::ids::UlidSchema>")]
    pub actor_id: Option<String>,
    /// A route template (GET /v1/patients/{id}) or a listener name.
    pub purpose: String,
    /// The event a listener acted on; null for API reads.
    pub event_id: Option<EventId>,
    pub created_at: DateTime<Utc>,
}

const LIST_FIRST: &str = "\
SELECT id, patient_id, actor_kind, actor_id, purpose, event_id, created_at FROM patient_disclosures
WHERE workspace_id = $1 AND patient_id = $2
ORDER BY created_at DESC, id DESC LIMIT $3";

const LIST_AFTER: &str = "\
SELECT d.id, d.patient_id, d.actor_kind, d.actor_id, d.purpose, d.event_id, d.created_at
FROM patient_disclosures d,
     (SELECT created_at, id FROM patient_disclosures WHERE id = $4 AND workspace_id = $1 AND patient_id = $2)
         AS cursor_row
WHERE d.workspace_id = $1 AND d.patient_id = $2
  AND (d.created_at, d.id) < (cursor_row.created_at, cursor_row.id)
ORDER BY d.created_at DESC, d.id DESC LIMIT $3";

fn from_row(row: &Row) -> Disclosure {
    let actor_id: Option<uuid::Uuid> = row.get(3);
    Disclosure {
        id: row.get(0),
        patient_id: row.get(1),
        actor_kind: row.get(2),
        actor_id: actor_id.map(|id| ulid::Ulid::from(id).to_string()),
        purpose: row.get(4),
        event_id: row.get(5),
        created_at: row.get(6),
    }
}

/// Up to `limit` disclosures of a patient, newest first; after the row `after` (the last id of the
/// previous page) when given. Deleted patients keep their accounting.
pub async fn list(
    client: &impl GenericClient,
    workspace_id: WorkspaceId,
    patient_id: PatientId,
    after: Option<DisclosureId>,
    limit: i64,
) -> Result<Vec<Disclosure>, tokio_postgres::Error> {
    let rows = match after {
        None => sql::query(client, LIST_FIRST, &[&workspace_id, &patient_id, &limit]).await?,
        Some(after) => sql::query(client, LIST_AFTER, &[&workspace_id, &patient_id, &limit, &after]).await?,
    };
    Ok(rows.iter().map(from_row).collect())
}
