//! `/v1/appointments`: book, read, reschedule, cancel, complete.
//!
//! Staff and admins act on every appointment of their workspace; a patient may read and cancel only
//! their own — another patient's appointment answers 404, exactly like a missing one — and nothing
//! else (403).

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;

use super::path_id;
use crate::auth::Caller;
use crate::document::{params, problems, schemas};
use crate::problem::ApiError;
use crate::unit_of_work::{Answer, Mutation};
use crate::AppState;
use clinic_core::appointments::{self, Access, Appointment, Cancel, Complete, NewAppointment, Reschedule};
use clinic_core::db::Tx;
use clinic_core::disclosures::{self, routes, Purpose};
use clinic_core::error::{DomainError, DomainResult};
use clinic_core::events::ResourceType;
use clinic_core::ids::AppointmentId;

/// Who the caller may see: a patient only their own appointments.
fn access(caller: &Caller) -> Access {
    caller.patient().map_or(Access::Workspace, Access::OwnAppointmentsOf)
}

impl Answer for Appointment {
    const RESOURCE: &'static str = ResourceType::Appointment.as_str();

    fn resource_id(&self) -> uuid::Uuid {
        self.id.uuid()
    }

    async fn reload(tx: &Tx<'_>, caller: &Caller, id: uuid::Uuid) -> DomainResult<Option<Self>> {
        let id = AppointmentId::from_uuid(id);
        let appointment =
            appointments::repo::find_visible(tx, caller.workspace_id, access(caller), id).await?;
        // A replay answers the reason (health data): a disclosure like any read (DESIGN.md §6a).
        if let Some(appointment) = &appointment {
            let purpose = Purpose::route(routes::IDEMPOTENT_REPLAY);
            disclosures::record(tx, caller.workspace_id, &caller.actor(), &[appointment.patient_id], purpose)
                .await?;
        }
        Ok(appointment)
    }

    fn respond(self, status: StatusCode) -> Response {
        (status, Json(self)).into_response()
    }
}

/// The appointment of a mutation's `(appointment, event)` result.
fn changed<E>((appointment, _): (Appointment, E)) -> Appointment {
    appointment
}

#[utoipa::path(
    post,
    path = "/v1/appointments",
    operation_id = "bookAppointment",
    summary = "Book an appointment",
    params(params::IdempotencyKey, params::CorrelationId),
    request_body(content = schemas::NewAppointment),
    responses(
        (status = 201, description = "Created", body = schemas::Appointment),
        problems::BadRequest, problems::Unauthorized, problems::Forbidden, problems::NotFound,
        problems::TooLarge, problems::NotJson, problems::Invalid, problems::Unavailable,
        (status = 409, description = "Double booking, or the practitioner is inactive (urn:clinic:problem:practitioner-inactive)", body = schemas::Problem, content_type = "application/problem+json")
    )
)]
pub async fn create(request: Mutation) -> Result<Response, ApiError> {
    request.caller.require_staff()?;
    let command = NewAppointment::try_from(request.json()?)?;
    request
        .run(StatusCode::CREATED, async move |tx, ctx| {
            Ok(changed(appointments::book(tx, ctx, command).await?))
        })
        .await
}

#[utoipa::path(
    get,
    path = "/v1/appointments/{id}",
    operation_id = "getAppointment",
    summary = "Read an appointment",
    params(params::PathId, params::CorrelationId),
    responses(
        (status = 200, description = "OK", body = schemas::Appointment),
        problems::BadRequest, problems::Unauthorized, problems::Forbidden, problems::NotFound,
        problems::Unavailable
    )
)]
pub async fn get_one(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let id: AppointmentId = path_id(&id)?;
    let mut conn = state.pool.get().await?;
    let tx = conn.transaction().await?;
    let appointment = appointments::repo::find_visible(&tx, caller.workspace_id, access(&caller), id)
        .await?
        .ok_or(DomainError::NotFound)?;
    // The answer carries the reason (health data): a disclosure about the appointment's patient.
    let purpose = Purpose::route(routes::GET_APPOINTMENT);
    disclosures::record(&tx, caller.workspace_id, &caller.actor(), &[appointment.patient_id], purpose)
        .await?;
    tx.commit().await?;
    Ok(Json(appointment).into_response())
}

#[utoipa::path(
    post,
    path = "/v1/appointments/{id}/reschedule",
    operation_id = "rescheduleAppointment",
    summary = "Reschedule",
    params(params::PathId, params::IdempotencyKey, params::CorrelationId),
    request_body(content = schemas::Reschedule),
    responses(
        (status = 200, description = "OK", body = schemas::Appointment),
        problems::BadRequest, problems::Unauthorized, problems::Forbidden, problems::NotFound,
        problems::TooLarge, problems::NotJson, problems::Invalid, problems::Unavailable,
        (status = 409, description = "Version mismatch, double booking, not booked, or the patient is deleted (patient-deleted)", body = schemas::Problem, content_type = "application/problem+json")
    )
)]
pub async fn reschedule(Path(id): Path<String>, request: Mutation) -> Result<Response, ApiError> {
    request.caller.require_staff()?;
    let id = path_id(&id)?;
    let command = Reschedule::try_from(request.json()?)?;
    request
        .run(StatusCode::OK, async move |tx, ctx| {
            Ok(changed(appointments::reschedule(tx, ctx, id, command).await?))
        })
        .await
}

/// Staff cancel any appointment of their workspace; a patient only their own (the ownership is part
/// of the locking query, so no other patient's row is locked or revealed).
#[utoipa::path(
    post,
    path = "/v1/appointments/{id}/cancel",
    operation_id = "cancelAppointment",
    summary = "Cancel",
    params(params::PathId, params::IdempotencyKey, params::CorrelationId),
    request_body(content = ref("#/components/schemas/Cancel")),
    responses(
        (status = 200, description = "OK", body = schemas::Appointment),
        problems::BadRequest, problems::Unauthorized, problems::Forbidden, problems::NotFound,
        problems::TooLarge, problems::NotJson, problems::Invalid, problems::Unavailable,
        (status = 409, description = "Version mismatch, not booked, or the patient is deleted (patient-deleted)", body = schemas::Problem, content_type = "application/problem+json")
    )
)]
pub async fn cancel(Path(id): Path<String>, request: Mutation) -> Result<Response, ApiError> {
    let id = path_id(&id)?;
    let command = Cancel::try_from(request.json()?)?;
    let access = access(&request.caller);
    request
        .run(StatusCode::OK, async move |tx, ctx| {
            Ok(changed(appointments::cancel(tx, ctx, access, id, command).await?))
        })
        .await
}

#[utoipa::path(
    post,
    path = "/v1/appointments/{id}/complete",
    operation_id = "completeAppointment",
    summary = "Complete",
    params(params::PathId, params::IdempotencyKey, params::CorrelationId),
    request_body(content = ref("#/components/schemas/Complete")),
    responses(
        (status = 200, description = "OK", body = schemas::Appointment),
        problems::BadRequest, problems::Unauthorized, problems::Forbidden, problems::NotFound,
        problems::TooLarge, problems::NotJson, problems::Invalid, problems::Unavailable,
        (status = 409, description = "Version mismatch, not booked, or the patient is deleted (patient-deleted)", body = schemas::Problem, content_type = "application/problem+json")
    )
)]
pub async fn complete(Path(id): Path<String>, request: Mutation) -> Result<Response, ApiError> {
    request.caller.require_staff()?;
    let id = path_id(&id)?;
    let command = Complete::try_from(request.json()?)?;
    request
        .run(StatusCode::OK, async move |tx, ctx| {
            Ok(changed(appointments::complete(tx, ctx, id, command).await?))
        })
        .await
}
