//! Practitioner rows, scoped by workspace. Every statement is a named const next to the one function
//! that runs it.

use deadpool_postgres::GenericClient;
use tokio_postgres::Row;

use super::Practitioner;
use crate::db::sql;
use crate::ids::{PractitionerId, WorkspaceId};

const INSERT: &str = "\
INSERT INTO practitioners (id, workspace_id, display_name, specialty, active, version, created_at, updated_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8)";

const FIND: &str = "\
SELECT id, workspace_id, display_name, specialty, active, version, created_at, updated_at
FROM practitioners WHERE workspace_id = $1 AND id = $2";

pub(crate) const FIND_FOR_SHARE: &str = "\
SELECT id, workspace_id, display_name, specialty, active, version, created_at, updated_at
FROM practitioners WHERE workspace_id = $1 AND id = $2 FOR SHARE";

const LOCK: &str = "\
SELECT id, workspace_id, display_name, specialty, active, version, created_at, updated_at
FROM practitioners WHERE workspace_id = $1 AND id = $2 FOR UPDATE";

const UPDATE: &str = "\
UPDATE practitioners SET display_name = $3, specialty = $4, active = $5, version = $6, updated_at = $7
WHERE workspace_id = $1 AND id = $2";

/// One page of the workspace's practitioners in id order, after `$2` (served by
/// `practitioners_list_idx`); `$3` narrows to active or inactive ones when not null.
pub const LIST: &str = "\
SELECT id, workspace_id, display_name, specialty, active, version, created_at, updated_at
FROM practitioners
WHERE workspace_id = $1 AND id > $2 AND ($3::boolean IS NULL OR active = $3)
ORDER BY id
LIMIT $4";

fn from_row(row: &Row) -> Practitioner {
    Practitioner {
        id: row.get("id"),
        workspace_id: row.get("workspace_id"),
        display_name: row.get("display_name"),
        specialty: row.get("specialty"),
        active: row.get("active"),
        version: row.get("version"),
        created_at: row.get("created_at"),
        updated_at: row.get("updated_at"),
    }
}

pub async fn insert(client: &impl GenericClient, p: &Practitioner) -> Result<(), tokio_postgres::Error> {
    sql::execute(
        client,
        INSERT,
        &[
            &p.id,
            &p.workspace_id,
            &p.display_name,
            &p.specialty,
            &p.active,
            &p.version,
            &p.created_at,
            &p.updated_at,
        ],
    )
    .await
    .map(drop)
}

pub async fn find(
    client: &impl GenericClient,
    workspace_id: WorkspaceId,
    id: PractitionerId,
) -> Result<Option<Practitioner>, tokio_postgres::Error> {
    Ok(sql::query_opt(client, FIND, &[&workspace_id, &id]).await?.as_ref().map(from_row))
}

/// The practitioner, share-locked for the rest of the transaction: a booking holds this while it
/// checks the active flag, so a concurrent deactivation commits either before it (and the booking is
/// refused) or after it.
pub async fn find_for_share(
    client: &impl GenericClient,
    workspace_id: WorkspaceId,
    id: PractitionerId,
) -> Result<Option<Practitioner>, tokio_postgres::Error> {
    Ok(sql::query_opt(client, FIND_FOR_SHARE, &[&workspace_id, &id]).await?.as_ref().map(from_row))
}

/// The practitioner, locked for update for the rest of the transaction.
pub async fn lock(
    client: &impl GenericClient,
    workspace_id: WorkspaceId,
    id: PractitionerId,
) -> Result<Option<Practitioner>, tokio_postgres::Error> {
    Ok(sql::query_opt(client, LOCK, &[&workspace_id, &id]).await?.as_ref().map(from_row))
}

pub async fn update(client: &impl GenericClient, p: &Practitioner) -> Result<(), tokio_postgres::Error> {
    sql::execute(
        client,
        UPDATE,
        &[&p.workspace_id, &p.id, &p.display_name, &p.specialty, &p.active, &p.version, &p.updated_at],
    )
    .await
    .map(drop)
}

/// Up to `limit` practitioners after `after` (the nil id before the first page), in id order.
pub async fn list(
    client: &impl GenericClient,
    workspace_id: WorkspaceId,
    after: Option<PractitionerId>,
    active: Option<bool>,
    limit: i64,
) -> Result<Vec<Practitioner>, tokio_postgres::Error> {
    let after = after.map_or_else(uuid::Uuid::nil, |id| id.uuid());
    Ok(sql::query(client, LIST, &[&workspace_id, &after, &active, &limit])
        .await?
        .iter()
        .map(from_row)
        .collect())
}
