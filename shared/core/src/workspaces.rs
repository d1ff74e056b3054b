//! Workspaces (tenants) and their members. Members are created by seeding and operator tooling; the
//! API trusts verified token claims and does not look members up per request.
//!
//! Invariants: a workspace's time zone is a name of the IANA tz database (checked against `chrono-tz`
//! before it is stored, kept in its canonical spelling); onboarding ([`create`]) writes only the
//! `workspaces` row — the identity provider issues the members' tokens (docs/onboarding.md).

use std::str::FromStr;

use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;
use serde::Serialize;

use crate::db::sql;
use crate::domain::input::FieldError;
use crate::domain::values::Name;
use crate::ids::{MemberId, WorkspaceId};

const INSERT_WORKSPACE: &str = "INSERT INTO workspaces (id, name, quiet_hours_start, quiet_hours_end) \
     VALUES ($1, $2, '00:00', '00:00') ON CONFLICT (id) DO NOTHING";
const CREATE: &str = "INSERT INTO workspaces (id, name, time_zone) VALUES ($1, $2, $3) RETURNING created_at";

const EXISTS: &str = "SELECT EXISTS (SELECT 1 FROM workspaces WHERE id = $1)";

/// True when the workspace exists (the API refuses a token naming another one; cached by
/// `http::auth::KnownWorkspaces`).
pub async fn exists(client: &impl GenericClient, id: WorkspaceId) -> Result<bool, tokio_postgres::Error> {
    Ok(sql::query_one(client, EXISTS, &[&id]).await?.get(0))
}

const LIST: &str = "SELECT id, name, time_zone, created_at FROM workspaces ORDER BY created_at, id";

/// An IANA time zone name such as `Europe/Lisbon`, in its canonical spelling.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimeZone(String);

impl TimeZone {
    pub fn parse(field: &str, raw: &str) -> Result<Self, FieldError> {
        chrono_tz::Tz::from_str(raw.trim()).map(|zone| Self(zone.name().to_owned())).map_err(|_| {
            FieldError::new(field, "must be an IANA time zone name such as Europe/Lisbon or UTC")
        })
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

// A request field's time zone: a name of the tz database this build carries, which JSON Schema
// cannot state (a list that changes with the database's releases: the API fuzzing's one exclusion
// for it); the schema states the stored column's bounds (`CHECK (length(time_zone) BETWEEN 1 AND
// 64)`). [`TimeZone::parse`] trims the name first, so a zone padded past 64 characters is read too.
crate::inline_schema!(TimeZone, |_: &mut schemars::SchemaGenerator| {
    schemars::json_schema!({ "type": "string", "minLength": 1, "maxLength": 64 })
});

/// A workspace as onboarding shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkspaceSummary {
    pub id: WorkspaceId,
    pub name: String,
    pub time_zone: String,
    pub created_at: DateTime<Utc>,
}

/// Creates a workspace (onboarding a clinic) and answers it.
pub async fn create(
    client: &impl GenericClient,
    name: Name,
    time_zone: TimeZone,
) -> Result<WorkspaceSummary, tokio_postgres::Error> {
    let id = WorkspaceId::generate();
    let row = sql::query_one(client, CREATE, &[&id, &name.as_str(), &time_zone.as_str()]).await?;
    Ok(WorkspaceSummary { id, name: name.into_string(), time_zone: time_zone.0, created_at: row.get(0) })
}

/// Every workspace, oldest first. Bound: one row per onboarded clinic.
pub async fn list(client: &impl GenericClient) -> Result<Vec<WorkspaceSummary>, tokio_postgres::Error> {
    Ok(sql::query(client, LIST, &[])
        .await?
        .iter()
        .map(|row| WorkspaceSummary {
            id: row.get("id"),
            name: row.get("name"),
            time_zone: row.get("time_zone"),
            created_at: row.get("created_at"),
        })
        .collect())
}

/// Seeds a workspace for tests, benches, drills and `clinic dev`'s demo clinic. It has **no quiet
/// hours**, so what they send does not depend on the hour they run; clinics onboarded with
/// [`create`] keep the default 21:00–08:00 (set with [`set_quiet_hours`]).
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

const NAME: &str = "SELECT name FROM workspaces WHERE id = $1";

/// The workspace's name (what its people call it; the console's header shows it). `None` when the
/// workspace does not exist.
pub async fn name(
    client: &impl GenericClient,
    workspace_id: WorkspaceId,
) -> Result<Option<String>, tokio_postgres::Error> {
    let row = sql::query_opt(client, NAME, &[&workspace_id]).await?;
    Ok(row.map(|row| row.get(0)))
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

const SET_QUIET_HOURS: &str = "UPDATE workspaces SET quiet_hours_start = $2, quiet_hours_end = $3, \
     quiet_hours_bypass = $4 WHERE id = $1";

/// Sets the workspace's quiet hours and the kinds that may bypass them (owner connection: the app
/// role cannot change workspaces). `start == end` means none; only `change_notice` may bypass (the
/// database refuses anything else).
pub async fn set_quiet_hours(
    client: &impl GenericClient,
    workspace_id: WorkspaceId,
    start: chrono::NaiveTime,
    end: chrono::NaiveTime,
    bypass: &[crate::domain::contact::MessageKind],
) -> Result<bool, tokio_postgres::Error> {
    let bypass: Vec<&str> = bypass.iter().map(|kind| kind.as_str()).collect();
    Ok(sql::execute(client, SET_QUIET_HOURS, &[&workspace_id, &start, &end, &bypass]).await? == 1)
}

/// A workspace's delivery weight (issue 41): its share of every notification and webhook claim
/// among the workspaces with due work (`workspaces.delivery_weight`; 3 = three rows per turn of a
/// workspace at 1). A whole number within [`DeliveryWeight::RANGE`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeliveryWeight(u8);

impl DeliveryWeight {
    pub const RANGE: std::ops::RangeInclusive<u8> = 1..=100;

    /// Parses a whole number 1–100; the error names `field`.
    pub fn parse(field: &str, raw: &str) -> Result<DeliveryWeight, String> {
        match raw.trim().parse::<u8>() {
            Ok(weight) if Self::RANGE.contains(&weight) => Ok(DeliveryWeight(weight)),
            _ => Err(format!("{field}: must be a whole number from 1 to 100, not {raw:?}")),
        }
    }

    pub fn get(self) -> u8 {
        self.0
    }
}

const SET_DELIVERY_WEIGHT: &str =
    "UPDATE workspaces SET delivery_weight = $2 WHERE id = $1 RETURNING delivery_weight::float8";

/// Sets the workspace's delivery weight (owner connection: the app role cannot change workspaces,
/// and a clinic's own admin must not raise its share of every clinic's claims); `None` when the
/// workspace does not exist, else the weight stored.
pub async fn set_delivery_weight(
    client: &impl GenericClient,
    workspace_id: WorkspaceId,
    weight: DeliveryWeight,
) -> Result<Option<f64>, tokio_postgres::Error> {
    let weight = f32::from(weight.0);
    let row = sql::query_opt(client, SET_DELIVERY_WEIGHT, &[&workspace_id, &weight]).await?;
    Ok(row.map(|row| row.get(0)))
}

const CONTACT_SETTINGS: &str =
    "SELECT time_zone, quiet_hours_start, quiet_hours_end, quiet_hours_bypass, name FROM workspaces WHERE id = $1";

/// What the contact policy reads from the workspace (migration V22).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContactSettings {
    /// The IANA zone name (`UTC` by default): times are rendered in it, and it is the patients' zone
    /// when they have none.
    pub time_zone: String,
    pub quiet_hours_start: chrono::NaiveTime,
    pub quiet_hours_end: chrono::NaiveTime,
    /// Stored names of the kinds that may bypass quiet hours (only `change_notice` is allowed).
    pub quiet_hours_bypass: Vec<String>,
    /// The clinic's name (every SMS names it).
    pub name: String,
}

/// The workspace's contact settings; `None` when the workspace does not exist.
pub async fn contact_settings(
    client: &impl GenericClient,
    workspace_id: WorkspaceId,
) -> Result<Option<ContactSettings>, tokio_postgres::Error> {
    let row = sql::query_opt(client, CONTACT_SETTINGS, &[&workspace_id]).await?;
    Ok(row.map(|row| ContactSettings {
        time_zone: row.get(0),
        quiet_hours_start: row.get(1),
        quiet_hours_end: row.get(2),
        quiet_hours_bypass: row.get(3),
        name: row.get(4),
    }))
}

#[cfg(test)]
mod tests {
    use super::TimeZone;

    #[test]
    fn time_zones_are_iana_names_in_canonical_spelling() {
        assert_eq!(TimeZone::parse("tz", "Europe/Lisbon").unwrap().as_str(), "Europe/Lisbon");
        assert_eq!(TimeZone::parse("tz", " UTC ").unwrap().as_str(), "UTC");
        assert_eq!(
            TimeZone::parse("tz", "America/Argentina/Buenos_Aires").unwrap().as_str(),
            "America/Argentina/Buenos_Aires"
        );
        for bad in ["", "Mars/Olympus_Mons", "europe/lisbon ", "+01:00", "Europe/Lisbon; DROP TABLE"] {
            assert_eq!(TimeZone::parse("timeZone", bad).unwrap_err().field, "timeZone", "{bad:?}");
        }
    }
}
