//! Patient rows. Every query is scoped by workspace and skips soft-deleted patients.

use deadpool_postgres::GenericClient;
use tokio_postgres::Row;

use super::Patient;
use crate::db::sql;
use crate::ids::{PatientId, WorkspaceId};

const COLUMNS: &str = "id, workspace_id, given_name, family_name, email, phone, date_of_birth, \
                       version, created_at, updated_at";

pub(super) fn from_row(row: &Row) -> Patient {
    Patient {
        id: row.get("id"),
        workspace_id: row.get("workspace_id"),
        given_name: row.get("given_name"),
        family_name: row.get("family_name"),
        email: row.get("email"),
        phone: row.get("phone"),
        date_of_birth: row.get("date_of_birth"),
        version: row.get("version"),
        created_at: row.get("created_at"),
        updated_at: row.get("updated_at"),
    }
}

pub async fn insert(client: &impl GenericClient, p: &Patient) -> Result<(), tokio_postgres::Error> {
    sql::execute(
        client,
        "INSERT INTO patients (id, workspace_id, given_name, family_name, email, phone, \
         date_of_birth, version, created_at, updated_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
        &[
            &p.id,
            &p.workspace_id,
            &p.given_name,
            &p.family_name,
            &p.email,
            &p.phone,
            &p.date_of_birth,
            &p.version,
            &p.created_at,
            &p.updated_at,
        ],
    )
    .await
    .map(drop)
}

/// The live patient, if any.
pub async fn find(
    client: &impl GenericClient,
    workspace_id: WorkspaceId,
    id: PatientId,
) -> Result<Option<Patient>, tokio_postgres::Error> {
    let query =
        format!("SELECT {COLUMNS} FROM patients WHERE workspace_id = $1 AND id = $2 AND deleted_at IS NULL");
    Ok(sql::query_opt(client, &query, &[&workspace_id, &id]).await?.as_ref().map(from_row))
}

/// The live patient, locked for the rest of the transaction.
pub async fn lock(
    client: &impl GenericClient,
    workspace_id: WorkspaceId,
    id: PatientId,
) -> Result<Option<Patient>, tokio_postgres::Error> {
    let query = format!(
        "SELECT {COLUMNS} FROM patients WHERE workspace_id = $1 AND id = $2 AND deleted_at IS NULL \
         FOR UPDATE"
    );
    Ok(sql::query_opt(client, &query, &[&workspace_id, &id]).await?.as_ref().map(from_row))
}

pub async fn update(client: &impl GenericClient, p: &Patient) -> Result<(), tokio_postgres::Error> {
    sql::execute(
        client,
        "UPDATE patients SET given_name = $3, family_name = $4, email = $5, phone = $6, \
         date_of_birth = $7, version = $8, updated_at = $9 WHERE workspace_id = $1 AND id = $2",
        &[
            &p.workspace_id,
            &p.id,
            &p.given_name,
            &p.family_name,
            &p.email,
            &p.phone,
            &p.date_of_birth,
            &p.version,
            &p.updated_at,
        ],
    )
    .await
    .map(drop)
}

pub async fn mark_deleted(client: &impl GenericClient, p: &Patient) -> Result<(), tokio_postgres::Error> {
    sql::execute(
        client,
        "UPDATE patients SET deleted_at = $3, version = $4, updated_at = $3 \
         WHERE workspace_id = $1 AND id = $2",
        &[&p.workspace_id, &p.id, &p.updated_at, &p.version],
    )
    .await
    .map(drop)
}
