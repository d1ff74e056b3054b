//! `/v1/appointments`: book, read, reschedule, cancel, complete.
//!
//! Staff and admins act on every appointment of their workspace; a patient may read and cancel only
//! their own (403 otherwise) and nothing else.

use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::Json;

use super::path_id;
use crate::appointments::{self, Access, Cancel, Complete, NewAppointment, Reschedule};
use crate::disclosures::{self, routes, Purpose};
use crate::error::DomainError;
use crate::http::auth::Caller;
use crate::http::mutation::{PostMutation, PostRequest};
use crate::http::problem::ApiError;
use crate::http::AppState;
use crate::ids::AppointmentId;

pub async fn create(request: PostRequest) -> Result<Response, ApiError> {
    request.caller.require_staff()?;
    let command = NewAppointment::try_from(request.body.clone())?;
    request.perform(PostMutation::BookAppointment(command)).await
}

pub async fn get_one(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let id: AppointmentId = path_id(&id)?;
    let mut conn = state.pool.get().await?;
    let tx = conn.transaction().await?;
    let appointment =
        appointments::repo::find(&tx, caller.workspace_id, id).await?.ok_or(DomainError::NotFound)?;
    caller.patient().map_or(Access::Workspace, Access::OwnAppointmentsOf).check(&appointment)?;
    // The answer carries the reason (health data): a disclosure about the appointment's patient.
    let purpose = Purpose::route(routes::GET_APPOINTMENT);
    disclosures::record(&tx, caller.workspace_id, &caller.actor(), &[appointment.patient_id], purpose)
        .await?;
    tx.commit().await?;
    Ok(Json(appointment).into_response())
}

pub async fn reschedule(Path(id): Path<String>, request: PostRequest) -> Result<Response, ApiError> {
    request.caller.require_staff()?;
    let id = path_id(&id)?;
    let command = Reschedule::try_from(request.body.clone())?;
    request.perform(PostMutation::Reschedule(id, command)).await
}

/// Staff cancel any appointment of their workspace; a patient only their own (checked in the use
/// case, after the appointment is found).
pub async fn cancel(Path(id): Path<String>, request: PostRequest) -> Result<Response, ApiError> {
    let id = path_id(&id)?;
    let command = Cancel::try_from(request.body.clone())?;
    request.perform(PostMutation::Cancel(id, command)).await
}

pub async fn complete(Path(id): Path<String>, request: PostRequest) -> Result<Response, ApiError> {
    request.caller.require_staff()?;
    let id = path_id(&id)?;
    let command = Complete::try_from(request.body.clone())?;
    request.perform(PostMutation::Complete(id, command)).await
}
