//! Appointment rows, scoped by workspace.

use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;
use tokio_postgres::Row;
use ulid::Ulid;

use super::{Access, Appointment, AppointmentStatus};
use crate::db::sql;
use crate::ids::{AppointmentId, PatientId, WorkspaceId};

/// The columns [`from_row`] reads, and the head of every read. Macros, so each statement below is
/// one compile-time literal (`concat!`), not text built at run time.
macro_rules! columns {
    () => {
        "id, workspace_id, patient_id, practitioner_id, starts_at, ends_at, \
         status, reason, cancellation_reason, version, created_at, updated_at, patient_erased"
    };
}

macro_rules! select {
    () => {
        concat!("SELECT ", columns!(), " FROM appointments")
    };
}

pub(super) fn from_row(row: &Row) -> Appointment {
    let status: &str = row.get("status");
    Appointment {
        id: row.get("id"),
        workspace_id: row.get("workspace_id"),
        patient_id: row.get("patient_id"),
        practitioner_id: row.get("practitioner_id"),
        starts_at: row.get("starts_at"),
        ends_at: row.get("ends_at"),
        // The CHECK constraint admits only the three statuses.
        status: AppointmentStatus::parse(status).unwrap_or(AppointmentStatus::Cancelled),
        reason: row.get("reason"),
        cancellation_reason: row.get("cancellation_reason"),
        version: row.get("version"),
        created_at: row.get("created_at"),
        updated_at: row.get("updated_at"),
        patient_erased: row.get("patient_erased"),
    }
}

pub(super) const INSERT: &str =
    "INSERT INTO appointments (id, workspace_id, patient_id, practitioner_id, starts_at, ends_at, \
         status, reason, version, created_at, updated_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)";

pub async fn insert(client: &impl GenericClient, a: &Appointment) -> Result<(), tokio_postgres::Error> {
    sql::execute(
        client,
        INSERT,
        &[
            &a.id,
            &a.workspace_id,
            &a.patient_id,
            &a.practitioner_id,
            &a.starts_at,
            &a.ends_at,
            &a.status.as_str(),
            &a.reason,
            &a.version,
            &a.created_at,
            &a.updated_at,
        ],
    )
    .await
    .map(drop)
}

const FIND: &str = concat!(select!(), " WHERE workspace_id = $1 AND id = $2");

pub async fn find(
    client: &impl GenericClient,
    workspace_id: WorkspaceId,
    id: AppointmentId,
) -> Result<Option<Appointment>, tokio_postgres::Error> {
    Ok(sql::query_opt(client, FIND, &[&workspace_id, &id]).await?.as_ref().map(from_row))
}

/// What a notice about an appointment needs to know of its parties besides the appointment (see
/// [`find_with_parties`]). No personal field of either is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Parties {
    /// The patient is not deleted (a deleted patient is not contacted any more).
    pub patient_live: bool,
    /// The staff member behind the practitioner, if one is linked.
    pub practitioner_member: Option<Ulid>,
}

pub(crate) const FIND_WITH_PARTIES: &str = concat!(
    "SELECT ",
    columns!(),
    ", EXISTS (SELECT 1 FROM patients p WHERE p.workspace_id = a.workspace_id AND p.id = a.patient_id \
         AND p.deleted_at IS NULL) AS patient_live, \
     (SELECT r.member_id FROM practitioners r WHERE r.workspace_id = a.workspace_id \
         AND r.id = a.practitioner_id) AS practitioner_member \
     FROM appointments a WHERE a.workspace_id = $1 AND a.id = $2"
);

/// The appointment and what a notice about it needs of its parties, in one statement (a listener's
/// reload: one round trip, sent together with the listener's receipt).
pub async fn find_with_parties(
    client: &impl GenericClient,
    workspace_id: WorkspaceId,
    id: AppointmentId,
) -> Result<Option<(Appointment, Parties)>, tokio_postgres::Error> {
    let row = sql::query_opt(client, FIND_WITH_PARTIES, &[&workspace_id, &id]).await?;
    Ok(row.map(|row| {
        let member: Option<uuid::Uuid> = row.get("practitioner_member");
        let parties =
            Parties { patient_live: row.get("patient_live"), practitioner_member: member.map(Ulid::from) };
        (from_row(&row), parties)
    }))
}

const LOCK: &str = concat!(select!(), " WHERE workspace_id = $1 AND id = $2 FOR UPDATE");

pub async fn lock(
    client: &impl GenericClient,
    workspace_id: WorkspaceId,
    id: AppointmentId,
) -> Result<Option<Appointment>, tokio_postgres::Error> {
    lock_visible(client, workspace_id, Access::Workspace, id).await
}

const FIND_OF_PATIENT: &str =
    concat!(select!(), " WHERE workspace_id = $1 AND id = $2 AND patient_id = $3 AND NOT patient_erased");

/// The appointment as `access` may see it: a patient's query names the patient, so another
/// patient's appointment is not found, and a deleted patient's token finds none of its own.
pub async fn find_visible(
    client: &impl GenericClient,
    workspace_id: WorkspaceId,
    access: Access,
    id: AppointmentId,
) -> Result<Option<Appointment>, tokio_postgres::Error> {
    visible(client, workspace_id, access, id, (FIND, FIND_OF_PATIENT)).await
}

const LOCK_OF_PATIENT: &str = concat!(
    select!(),
    " WHERE workspace_id = $1 AND id = $2 AND patient_id = $3 AND NOT patient_erased FOR UPDATE"
);

/// Like [`find_visible`], locked `FOR UPDATE` for the rest of the transaction. The ownership is in the
/// WHERE clause, so a row the caller may not see is never locked.
pub async fn lock_visible(
    client: &impl GenericClient,
    workspace_id: WorkspaceId,
    access: Access,
    id: AppointmentId,
) -> Result<Option<Appointment>, tokio_postgres::Error> {
    visible(client, workspace_id, access, id, (LOCK, LOCK_OF_PATIENT)).await
}

/// Runs the workspace-wide or the patient-scoped statement of a pair, as `access` requires.
async fn visible(
    client: &impl GenericClient,
    workspace_id: WorkspaceId,
    access: Access,
    id: AppointmentId,
    (workspace_wide, of_patient): (&str, &str),
) -> Result<Option<Appointment>, tokio_postgres::Error> {
    let row = match access {
        Access::Workspace => sql::query_opt(client, workspace_wide, &[&workspace_id, &id]).await?,
        Access::OwnAppointmentsOf(patient) => {
            sql::query_opt(client, of_patient, &[&workspace_id, &id, &patient]).await?
        }
    };
    Ok(row.as_ref().map(from_row))
}

const LOCK_BOOKED_OF_PATIENT_AFTER: &str = concat!(
    select!(),
    " WHERE workspace_id = $1 AND patient_id = $2 AND status = 'booked' \
     AND starts_at > $3 ORDER BY starts_at, id FOR UPDATE"
);

pub async fn lock_booked_of_patient_after(
    client: &impl GenericClient,
    workspace_id: WorkspaceId,
    patient_id: PatientId,
    after: DateTime<Utc>,
) -> Result<Vec<Appointment>, tokio_postgres::Error> {
    Ok(sql::query(client, LOCK_BOOKED_OF_PATIENT_AFTER, &[&workspace_id, &patient_id, &after])
        .await?
        .iter()
        .map(from_row)
        .collect())
}

const UPDATE: &str =
    "UPDATE appointments SET starts_at = $3, ends_at = $4, status = $5, cancellation_reason = $6, \
         version = $7, updated_at = $8 WHERE workspace_id = $1 AND id = $2";

pub async fn update(client: &impl GenericClient, a: &Appointment) -> Result<(), tokio_postgres::Error> {
    sql::execute(
        client,
        UPDATE,
        &[
            &a.workspace_id,
            &a.id,
            &a.starts_at,
            &a.ends_at,
            &a.status.as_str(),
            &a.cancellation_reason,
            &a.version,
            &a.updated_at,
        ],
    )
    .await
    .map(drop)
}
