//! Accounting of disclosures (DESIGN.md §6a; HIPAA 164.312(b) audit controls): every read of a
//! patient's personal fields appends one `patient_disclosures` row per patient, in the same
//! transaction as the read, so a read that commits is accounted for and a rolled-back one is not.
//!
//! Invariants:
//! - Rows hold ids and codes only: the actor, the patient, a purpose (a route name such as
//!   `GET /v1/patients/{id}`, or a listener name) and, for listeners and renderers, the event id.
//! - The table is append-only (triggers, and `clinic_app` holds only SELECT and INSERT on it).
//! - [`record`] writes every patient of one read in a single statement (one round trip).

use deadpool_postgres::GenericClient;

use crate::db::sql;
use crate::events::Actor;
use crate::ids::{DisclosureId, EventId, PatientId, WorkspaceId};

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
