//! The staff app's lists: the schedule view (`GET /v1/appointments`), patient search
//! (`GET /v1/patients?q=`) and the practitioner list (`GET /v1/practitioners`).
//!
//! Invariants:
//! - Every list is scoped to the caller's workspace and paged by a sealed keyset cursor bound to the
//!   workspace and the filters (`http::cursor`); a bad filter answers 400 naming the parameter.
//! - A list that answers patients' personal fields or appointment reasons records one disclosure per
//!   listed patient (purpose: the route), in the transaction of the read (DESIGN.md §6a).
//! - Patient search is staff and admin only; a patient token on the schedule view sees only its own
//!   appointments (any other `patientId` answers an empty page, as an unknown id does for staff),
//!   and a deleted patient's token an empty page.

use std::collections::{BTreeSet, HashMap};
use std::str::FromStr;

use axum::extract::{Query, State};
use axum::response::Response;

use super::bad;
use crate::auth::Caller;
use crate::cursor::{self, PageRequest};
use crate::document::{params, problems, schemas};
use crate::problem::ApiError;
use crate::AppState;
use clinic_core::appointments::schedule::{self, Schedule};
use clinic_core::appointments::{Appointment, AppointmentStatus};
use clinic_core::db::Tx;
use clinic_core::disclosures::{self, Purpose};
use clinic_core::domain::values::{parse_date_of_birth, parse_utc};
use clinic_core::ids::{AppointmentId, PatientId, PractitionerId};
use clinic_core::patients::search::{self, Search};
use clinic_core::practitioners;

const SCHEDULE_ROUTE: &str = "GET /v1/appointments";
const SEARCH_ROUTE: &str = "GET /v1/patients";

/// An optional query parameter parsed with `parse`; a present but malformed one names `field`.
fn param<T>(
    query: &HashMap<String, String>,
    field: &str,
    parse: impl FnOnce(&str) -> Option<T>,
    expected: &str,
) -> Result<Option<T>, ApiError> {
    query.get(field).map(|raw| parse(raw).ok_or_else(|| bad(field, expected))).transpose()
}

fn id_param<T: FromStr>(query: &HashMap<String, String>, field: &str) -> Result<Option<T>, ApiError> {
    param(query, field, |raw| raw.parse().ok(), "must be a ULID (26 characters)")
}

fn required_time(
    query: &HashMap<String, String>,
    field: &str,
) -> Result<chrono::DateTime<chrono::Utc>, ApiError> {
    let raw = query.get(field).ok_or_else(|| bad(field, "is required (an RFC 3339 UTC time)"))?;
    parse_utc(field, raw).map_err(ApiError::BadParameter)
}

fn schedule_of(query: &HashMap<String, String>) -> Result<Schedule, ApiError> {
    let from = required_time(query, "from")?;
    let to = required_time(query, "to")?;
    let practitioner = id_param::<PractitionerId>(query, "practitionerId")?;
    let patient = id_param::<PatientId>(query, "patientId")?;
    let status = param(query, "status", AppointmentStatus::parse, "must be booked, cancelled or completed")?;
    Schedule::new(from, to, practitioner, patient, status).map_err(ApiError::BadParameter)
}

/// Runs `read` in a transaction, records one disclosure per distinct patient of what it read (purpose:
/// `route`) and commits: a read that answers is accounted for, and one that fails is not.
async fn read_disclosed<T>(
    state: &AppState,
    caller: &Caller,
    route: &str,
    read: impl AsyncFnOnce(&Tx<'_>) -> Result<Vec<T>, tokio_postgres::Error>,
    patient_of: impl Fn(&T) -> PatientId,
) -> Result<Vec<T>, ApiError> {
    let mut conn = state.pool.get().await?;
    let tx = conn.transaction().await?;
    let items = read(&tx).await?;
    let patients: BTreeSet<PatientId> = items.iter().map(patient_of).collect();
    let patients: Vec<PatientId> = patients.into_iter().collect();
    let purpose = Purpose { name: route, event_id: None };
    disclosures::record(&tx, caller.workspace_id, &caller.actor(), &patients, purpose).await?;
    tx.commit().await?;
    Ok(items)
}

/// `GET /v1/appointments?from=&to=&practitionerId=&patientId=&status=&limit=&cursor=`.
#[utoipa::path(
    get,
    path = "/v1/appointments",
    operation_id = "listAppointments",
    summary = "The schedule view: appointments starting in [from, to), ordered by startsAt then id",
    description = "Keyset-paged by (startsAt, id). The window is required and at most 31 days long. A patient token sees only its own appointments (another patientId answers an empty page). Each listed appointment's patient is recorded as a disclosure (purpose `GET /v1/appointments`): answers carry `reason`, which is health data.",
    params(params::WindowFrom, params::WindowTo, params::PractitionerId, params::PatientId, params::AppointmentStatus, params::Limit, params::Cursor, params::CorrelationId),
    responses(
        (status = 200, description = "OK", body = schemas::AppointmentList),
        (status = 400, description = "Invalid parameter (the problem names it)", body = schemas::Problem, content_type = "application/problem+json"),
        problems::Unauthorized,
        (status = 403, description = "Workspace not provisioned", body = schemas::Problem, content_type = "application/problem+json"),
        problems::Unavailable
    )
)]
pub async fn schedule(
    State(state): State<AppState>,
    caller: Caller,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    let page = PageRequest::parse(&query)?;
    let mut schedule = schedule_of(&query)?;
    let mut foreign_patient = false;
    if let Some(own) = caller.patient() {
        foreign_patient = schedule.patient.is_some_and(|asked| asked != own);
        schedule = schedule.only_patient(own);
    }
    let scope = format!(
        "schedule:{}:{}:{}:{}:{}:{}",
        caller.workspace_id,
        schedule.from().timestamp_micros(),
        schedule.to().timestamp_micros(),
        schedule.practitioner.map(|id| id.to_string()).unwrap_or_default(),
        schedule.patient.map(|id| id.to_string()).unwrap_or_default(),
        schedule.status.map_or("", AppointmentStatus::as_str),
    );
    let after = page
        .after::<(chrono::DateTime<chrono::Utc>, ulid::Ulid)>(&state.api.cursor_key, &scope)?
        .map(|(at, id)| (at, AppointmentId::from_ulid(id)));
    if foreign_patient {
        return Ok(page.answer(&state.api.cursor_key, &scope, &Vec::<Appointment>::new(), |a| {
            (a.starts_at, a.id.ulid())
        }));
    }
    // A deleted patient's token lists nothing: its appointments are not its own any more.
    let own_only = caller.patient().is_some();
    let read = async |tx: &Tx<'_>| {
        let mut items = schedule::list(tx, caller.workspace_id, &schedule, after, page.limit).await?;
        items.retain(|a| !(own_only && a.patient_erased));
        Ok(items)
    };
    let items = read_disclosed(&state, &caller, SCHEDULE_ROUTE, read, |a| a.patient_id).await?;
    Ok(page.answer(&state.api.cursor_key, &scope, &items, |a| (a.starts_at, a.id.ulid())))
}

/// `GET /v1/patients?q=&dateOfBirth=&limit=&cursor=`: staff and admin only.
#[utoipa::path(
    get,
    path = "/v1/patients",
    operation_id = "searchPatients",
    summary = "Patient search: a case-insensitive prefix of the family or given name",
    description = "Staff and admin only. Ordered by the matched name (the family name when it matches, else the given name), then id; keyset-paged. Deleted patients never appear. Each listed patient is recorded as a disclosure (purpose `GET /v1/patients`).",
    params(params::Q, params::DateOfBirth, params::Limit, params::Cursor, params::CorrelationId),
    responses(
        (status = 200, description = "OK", body = schemas::PatientList),
        (status = 400, description = "Invalid parameter (the problem names it)", body = schemas::Problem, content_type = "application/problem+json"),
        problems::Unauthorized, problems::Forbidden, problems::Unavailable
    )
)]
pub async fn search_patients(
    State(state): State<AppState>,
    caller: Caller,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    caller.require_staff()?;
    let page = PageRequest::parse(&query)?;
    let q = query.get("q").ok_or_else(|| bad("q", "is required (at least 2 characters of a name)"))?;
    let date_of_birth = query
        .get("dateOfBirth")
        .map(|raw| parse_date_of_birth("dateOfBirth", raw).map_err(ApiError::BadParameter))
        .transpose()?;
    let search = Search::new(q, date_of_birth).map_err(ApiError::BadParameter)?;
    let scope = format!(
        "patients:{}:{}:{}",
        caller.workspace_id,
        search.prefix(),
        date_of_birth.map(|d| d.to_string()).unwrap_or_default()
    );
    let after = page
        .after::<(String, ulid::Ulid)>(&state.api.cursor_key, &scope)?
        .map(|(key, id)| (key, PatientId::from_ulid(id)));
    let read = async |tx: &Tx<'_>| search::search(tx, caller.workspace_id, &search, after, page.limit).await;
    let hits = read_disclosed(&state, &caller, SEARCH_ROUTE, read, |hit| hit.patient.id).await?;
    let next_cursor = page.next_cursor(&state.api.cursor_key, &scope, &hits, |hit| {
        (hit.sort_key.clone(), hit.patient.id.ulid())
    });
    let items: Vec<_> = hits.into_iter().map(|hit| hit.patient).collect();
    Ok(cursor::respond(&items, next_cursor))
}

/// `GET /v1/practitioners?active=&limit=&cursor=`: staff and admin only.
#[utoipa::path(
    get,
    path = "/v1/practitioners",
    operation_id = "listPractitioners",
    summary = "The workspace's practitioners, oldest first",
    description = "Staff and admin only; keyset-paged by id. `active` narrows to active or inactive practitioners.",
    params(params::Active, params::Limit, params::Cursor, params::CorrelationId),
    responses(
        (status = 200, description = "OK", body = schemas::PractitionerList),
        (status = 400, description = "Invalid parameter (the problem names it)", body = schemas::Problem, content_type = "application/problem+json"),
        problems::Unauthorized, problems::Forbidden, problems::Unavailable
    )
)]
pub async fn practitioners(
    State(state): State<AppState>,
    caller: Caller,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    caller.require_staff()?;
    let page = PageRequest::parse(&query)?;
    let active = param(&query, "active", |raw| raw.parse::<bool>().ok(), "must be true or false")?;
    let scope =
        format!("practitioners:{}:{}", caller.workspace_id, active.map_or("", |a| if a { "1" } else { "0" }));
    let after = page.after::<ulid::Ulid>(&state.api.cursor_key, &scope)?.map(PractitionerId::from_ulid);
    let conn = state.pool.get().await?;
    let items = practitioners::repo::list(&conn, caller.workspace_id, after, active, page.limit).await?;
    Ok(page.answer(&state.api.cursor_key, &scope, &items, |p| p.id.ulid()))
}
