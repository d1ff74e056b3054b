//! Timelines: a resource's events, newest first, with signed keyset cursors.
//!
//! A timeline with no events in the caller's workspace answers 404 — so another workspace's ids and
//! ids never used look the same — and a deleted patient's timeline stays readable.

use std::collections::HashMap;

use axum::extract::{Path, Query, State};
use axum::response::Response;
use ulid::Ulid;

use super::path_id;
use crate::auth::Caller;
use crate::cursor::PageRequest;
use crate::document::{params, problems, schemas};
use crate::problem::ApiError;
use crate::AppState;
use clinic_core::error::DomainError;
use clinic_core::events::{read, ResourceType};
use clinic_core::ids::EventId;

async fn timeline(
    state: AppState,
    caller: Caller,
    resource_type: ResourceType,
    raw_id: String,
    query: HashMap<String, String>,
) -> Result<Response, ApiError> {
    caller.require_staff()?;
    let resource_id: Ulid = path_id(&raw_id)?;
    let page = PageRequest::parse(&query)?;
    let scope = format!("timeline:{}:{}:{}", caller.workspace_id, resource_type.as_str(), resource_id);
    let before = page.after::<Ulid>(&state.api.cursor_key, &scope)?.map(EventId::from_ulid);
    let conn = state.pool.get().await?;
    let events =
        read::timeline(&conn, caller.workspace_id, resource_type, resource_id, before, page.limit).await?;
    if events.is_empty() && before.is_none() {
        return Err(DomainError::NotFound.into());
    }
    Ok(page.answer(&state.api.cursor_key, &scope, &events, |event| event.id.ulid()))
}

#[utoipa::path(
    get,
    path = "/v1/patients/{id}/timeline",
    operation_id = "patientTimeline",
    summary = "A patient's events, newest first",
    params(params::PathId, params::Limit, params::Cursor, params::CorrelationId),
    responses(
        (status = 200, description = "OK", body = schemas::Timeline),
        problems::BadRequest, problems::Unauthorized, problems::Forbidden, problems::NotFound,
        problems::Unavailable
    )
)]
pub async fn patient(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    timeline(state, caller, ResourceType::Patient, id, query).await
}

#[utoipa::path(
    get,
    path = "/v1/practitioners/{id}/timeline",
    operation_id = "practitionerTimeline",
    summary = "A practitioner's events, newest first",
    params(params::PathId, params::Limit, params::Cursor, params::CorrelationId),
    responses(
        (status = 200, description = "OK", body = schemas::Timeline),
        problems::BadRequest, problems::Unauthorized, problems::Forbidden, problems::NotFound,
        problems::Unavailable
    )
)]
pub async fn practitioner(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    timeline(state, caller, ResourceType::Practitioner, id, query).await
}

#[utoipa::path(
    get,
    path = "/v1/appointments/{id}/timeline",
    operation_id = "appointmentTimeline",
    summary = "An appointment's events, newest first",
    params(params::PathId, params::Limit, params::Cursor, params::CorrelationId),
    responses(
        (status = 200, description = "OK", body = schemas::Timeline),
        problems::BadRequest, problems::Unauthorized, problems::Forbidden, problems::NotFound,
        problems::Unavailable
    )
)]
pub async fn appointment(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    timeline(state, caller, ResourceType::Appointment, id, query).await
}
