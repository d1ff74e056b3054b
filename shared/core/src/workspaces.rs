//! Workspaces (tenants) and their members. Members are created by seeding and operator tooling; the
//! API trusts verified token claims and does not look members up per request.

use deadpool_postgres::GenericClient;

use crate::db::sql;
use crate::ids::{MemberId, WorkspaceId};

const INSERT_WORKSPACE: &str =
    "INSERT INTO workspaces (id, name) VALUES ($1, $2) ON CONFLICT (id) DO NOTHING";

pub async fn insert_workspace(
    client: &impl GenericClient,
    id: WorkspaceId,
    name: &str,
) -> Result<(), tokio_postgres::Error> {
    sql::execute(client, INSERT_WORKSPACE, &[&id, &name]).await.map(drop)
}

const INSERT_MEMBER: &str =
    "INSERT INTO members (id, workspace_id, role, display_name) VALUES ($1, $2, $3, $4) \
         ON CONFLICT (id) DO NOTHING";

pub async fn insert_member(
    client: &impl GenericClient,
    id: MemberId,
    workspace_id: WorkspaceId,
    role: &str,
    display_name: &str,
) -> Result<(), tokio_postgres::Error> {
    sql::execute(client, INSERT_MEMBER, &[&id, &workspace_id, &role, &display_name]).await.map(drop)
}

const FIRST_ADMIN: &str = "SELECT w.id, m.id FROM workspaces w JOIN members m ON m.workspace_id = w.id \
         WHERE m.role = 'admin' ORDER BY w.created_at, w.id, m.created_at, m.id LIMIT 1";

/// The first workspace, oldest first, with its first admin: what `clinic dev` seeded.
pub async fn first_admin(
    client: &impl GenericClient,
) -> Result<Option<(WorkspaceId, MemberId)>, tokio_postgres::Error> {
    let row = sql::query_opt(client, FIRST_ADMIN, &[]).await?;
    Ok(row.map(|row| (row.get(0), row.get(1))))
}

const TIME_ZONE: &str = "SELECT time_zone FROM workspaces WHERE id = $1";

/// The workspace's IANA time zone name (`workspaces.time_zone`, default `UTC`), used to render times
/// for people. `None` when the workspace does not exist.
pub async fn time_zone(
    client: &impl GenericClient,
    workspace_id: WorkspaceId,
) -> Result<Option<String>, tokio_postgres::Error> {
    let row = sql::query_opt(client, TIME_ZONE, &[&workspace_id]).await?;
    Ok(row.map(|row| row.get(0)))
}
