//! Appointment rows, scoped by workspace.

use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;
use tokio_postgres::Row;

use super::{Appointment, AppointmentStatus};
use crate::db::sql;
use crate::ids::{AppointmentId, PatientId, WorkspaceId};

pub(super) const SELECT: &str = "SELECT id, workspace_id, patient_id, practitioner_id, starts_at, ends_at, \
                      status, reason, cancellation_reason, version, created_at, updated_at \
                      FROM appointments";

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
    }
}

pub async fn insert(client: &impl GenericClient, a: &Appointment) -> Result<(), tokio_postgres::Error> {
    sql::execute(
        client,
        "INSERT INTO appointments (id, workspace_id, patient_id, practitioner_id, starts_at, ends_at, \
         status, reason, version, created_at, updated_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
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

pub async fn find(
    client: &impl GenericClient,
    workspace_id: WorkspaceId,
    id: AppointmentId,
) -> Result<Option<Appointment>, tokio_postgres::Error> {
    let query = format!("{SELECT} WHERE workspace_id = $1 AND id = $2");
    Ok(sql::query_opt(client, &query, &[&workspace_id, &id]).await?.as_ref().map(from_row))
}

pub async fn lock(
    client: &impl GenericClient,
    workspace_id: WorkspaceId,
    id: AppointmentId,
) -> Result<Option<Appointment>, tokio_postgres::Error> {
    let query = format!("{SELECT} WHERE workspace_id = $1 AND id = $2 FOR UPDATE");
    Ok(sql::query_opt(client, &query, &[&workspace_id, &id]).await?.as_ref().map(from_row))
}

pub async fn lock_booked_of_patient_after(
    client: &impl GenericClient,
    workspace_id: WorkspaceId,
    patient_id: PatientId,
    after: DateTime<Utc>,
) -> Result<Vec<Appointment>, tokio_postgres::Error> {
    let query = format!(
        "{SELECT} WHERE workspace_id = $1 AND patient_id = $2 AND status = 'booked' \
         AND starts_at > $3 ORDER BY starts_at, id FOR UPDATE"
    );
    Ok(sql::query(client, &query, &[&workspace_id, &patient_id, &after])
        .await?
        .iter()
        .map(from_row)
        .collect())
}

pub async fn update(client: &impl GenericClient, a: &Appointment) -> Result<(), tokio_postgres::Error> {
    sql::execute(
        client,
        "UPDATE appointments SET starts_at = $3, ends_at = $4, status = $5, cancellation_reason = $6, \
         version = $7, updated_at = $8 WHERE workspace_id = $1 AND id = $2",
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
