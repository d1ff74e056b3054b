//! Patient rows. Every query is scoped by workspace and skips soft-deleted patients.

use deadpool_postgres::GenericClient;
use tokio_postgres::Row;

use super::Patient;
use crate::db::sql;
use crate::domain::contact::{from_stored, Channel, MessageKind};
use crate::ids::{PatientId, WorkspaceId};

/// The columns [`from_row`] reads. A macro, so each statement below is one compile-time literal
/// (`concat!`), not text built at run time.
macro_rules! columns {
    () => {
        "id, workspace_id, given_name, family_name, email, phone, date_of_birth, \
         version, created_at, updated_at, contact_channels, contact_opt_outs, time_zone"
    };
}

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
        contact_channels: from_stored(&row.get::<_, Vec<String>>("contact_channels"), Channel::parse),
        contact_opt_outs: from_stored(&row.get::<_, Vec<String>>("contact_opt_outs"), MessageKind::parse),
        time_zone: row.get("time_zone"),
    }
}

const INSERT: &str = "INSERT INTO patients (id, workspace_id, given_name, family_name, email, phone, \
         date_of_birth, version, created_at, updated_at, contact_channels, contact_opt_outs, time_zone) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)";

pub async fn insert(client: &impl GenericClient, p: &Patient) -> Result<(), tokio_postgres::Error> {
    sql::execute(
        client,
        INSERT,
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
            &names(&p.contact_channels, |c| c.as_str()),
            &names(&p.contact_opt_outs, |k| k.as_str()),
            &p.time_zone,
        ],
    )
    .await
    .map(drop)
}

const FIND: &str = concat!(
    "SELECT ",
    columns!(),
    " FROM patients WHERE workspace_id = $1 AND id = $2 AND deleted_at IS NULL"
);

/// The live patient, if any.
pub async fn find(
    client: &impl GenericClient,
    workspace_id: WorkspaceId,
    id: PatientId,
) -> Result<Option<Patient>, tokio_postgres::Error> {
    Ok(sql::query_opt(client, FIND, &[&workspace_id, &id]).await?.as_ref().map(from_row))
}

const LOCK: &str = concat!(
    "SELECT ",
    columns!(),
    " FROM patients WHERE workspace_id = $1 AND id = $2 AND deleted_at IS NULL FOR UPDATE"
);

/// The live patient, locked for the rest of the transaction.
pub async fn lock(
    client: &impl GenericClient,
    workspace_id: WorkspaceId,
    id: PatientId,
) -> Result<Option<Patient>, tokio_postgres::Error> {
    Ok(sql::query_opt(client, LOCK, &[&workspace_id, &id]).await?.as_ref().map(from_row))
}

pub(crate) const LOCK_SHARED: &str =
    "SELECT 1 FROM patients WHERE workspace_id = $1 AND id = $2 AND deleted_at IS NULL FOR SHARE";

/// True when the live patient exists; it is then locked `FOR SHARE` for the rest of the transaction
/// (bookings take it; a deletion's `FOR UPDATE` in [`lock`] waits for them, and they for it).
pub async fn lock_shared(
    client: &impl GenericClient,
    workspace_id: WorkspaceId,
    id: PatientId,
) -> Result<bool, tokio_postgres::Error> {
    Ok(sql::query_opt(client, LOCK_SHARED, &[&workspace_id, &id]).await?.is_some())
}

const UPDATE: &str = "UPDATE patients SET given_name = $3, family_name = $4, email = $5, phone = $6, \
         date_of_birth = $7, version = $8, updated_at = $9, contact_channels = $10, \
         contact_opt_outs = $11, time_zone = $12 WHERE workspace_id = $1 AND id = $2";

/// Stored names of a preference list (a `text[]` column).
fn names<T: Copy>(values: &[T], name: impl Fn(T) -> &'static str) -> Vec<&'static str> {
    values.iter().map(|value| name(*value)).collect()
}

pub async fn update(client: &impl GenericClient, p: &Patient) -> Result<(), tokio_postgres::Error> {
    sql::execute(
        client,
        UPDATE,
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
            &names(&p.contact_channels, |c| c.as_str()),
            &names(&p.contact_opt_outs, |k| k.as_str()),
            &p.time_zone,
        ],
    )
    .await
    .map(drop)
}

/// Erases a deleted patient in one statement (DESIGN.md §6a): marks the row deleted with its new
/// version, clears its personal fields (names, email, phone, date of birth), and marks EVERY
/// appointment of the patient `patient_erased` with its free-text reasons cleared. Writing every
/// appointment (not only those with a reason in this statement's snapshot) makes the erasure wait for
/// a concurrent change holding one of them and clear what it wrote; a change after the commit finds
/// the flag on the row it locked (DESIGN.md §6c, migration V16). Ids, statuses, versions and times
/// stay, so timelines and history stay whole; appointment versions are not bumped (erasure is not a
/// domain change and emits no event of its own). Answers the number of appointments erased.
const ERASE: &str = "\
WITH patient AS (
    UPDATE patients
    SET deleted_at = $3, version = $4, updated_at = $3,
        given_name = NULL, family_name = NULL, email = NULL, phone = NULL, date_of_birth = NULL
    WHERE workspace_id = $1 AND id = $2
    RETURNING id
), reasons AS (
    UPDATE appointments SET reason = NULL, cancellation_reason = NULL, patient_erased = true
    WHERE workspace_id = $1 AND patient_id = $2
    RETURNING id
)
SELECT (SELECT count(*) FROM patient), (SELECT count(*) FROM reasons)";

pub async fn mark_deleted(client: &impl GenericClient, p: &Patient) -> Result<u64, tokio_postgres::Error> {
    let row = sql::query_one(client, ERASE, &[&p.workspace_id, &p.id, &p.updated_at, &p.version]).await?;
    Ok(row.get::<_, i64>(1) as u64)
}
