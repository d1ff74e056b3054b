//! Practitioner rows, scoped by workspace.

use deadpool_postgres::GenericClient;

use super::Practitioner;
use crate::db::sql;
use crate::ids::{PractitionerId, WorkspaceId};

const INSERT: &str =
    "INSERT INTO practitioners (id, workspace_id, display_name, specialty, version, created_at, \
         updated_at) VALUES ($1, $2, $3, $4, $5, $6, $7)";

pub async fn insert(client: &impl GenericClient, p: &Practitioner) -> Result<(), tokio_postgres::Error> {
    sql::execute(
        client,
        INSERT,
        &[&p.id, &p.workspace_id, &p.display_name, &p.specialty, &p.version, &p.created_at, &p.updated_at],
    )
    .await
    .map(drop)
}

const FIND: &str = "SELECT id, workspace_id, display_name, specialty, version, created_at, updated_at \
         FROM practitioners WHERE workspace_id = $1 AND id = $2";

pub async fn find(
    client: &impl GenericClient,
    workspace_id: WorkspaceId,
    id: PractitionerId,
) -> Result<Option<Practitioner>, tokio_postgres::Error> {
    let row = sql::query_opt(client, FIND, &[&workspace_id, &id]).await?;
    Ok(row.map(|row| Practitioner {
        id: row.get("id"),
        workspace_id: row.get("workspace_id"),
        display_name: row.get("display_name"),
        specialty: row.get("specialty"),
        version: row.get("version"),
        created_at: row.get("created_at"),
        updated_at: row.get("updated_at"),
    }))
}
