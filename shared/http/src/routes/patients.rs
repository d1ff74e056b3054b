//! `/v1/patients`: create, read, update, delete.
//!
//! A patient token reads only its own record and changes only its own contact preferences; any other
//! patient id answers 404, exactly like a missing one.

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
use clinic_core::db::Tx;
use clinic_core::disclosures::{self, routes, Purpose};
use clinic_core::error::{DomainError, DomainResult};
use clinic_core::events::ResourceType;
use clinic_core::ids::PatientId;
use clinic_core::patients::{self, NewPatient, Patient, PatientChanges};

impl Answer for Patient {
    const RESOURCE: &'static str = ResourceType::Patient.as_str();

    fn resource_id(&self) -> uuid::Uuid {
        self.id.uuid()
    }

    /// A replay answers the patient's personal fields: a disclosure like any read (DESIGN.md §6a).
    async fn reload(tx: &Tx<'_>, caller: &Caller, id: uuid::Uuid) -> DomainResult<Option<Self>> {
        let patient = patients::repo::find(tx, caller.workspace_id, PatientId::from_uuid(id)).await?;
        if let Some(patient) = &patient {
            let purpose = Purpose::route(routes::IDEMPOTENT_REPLAY);
            disclosures::record(tx, caller.workspace_id, &caller.actor(), &[patient.id], purpose).await?;
        }
        Ok(patient)
    }

    fn respond(self, status: StatusCode) -> Response {
        (status, Json(self)).into_response()
    }
}

/// The answer of a deletion: 204 naming the patient (a replay needs no lookup: it is gone).
pub struct Deleted(PatientId);

impl Answer for Deleted {
    const RESOURCE: &'static str = ResourceType::Patient.as_str();

    fn resource_id(&self) -> uuid::Uuid {
        self.0.uuid()
    }

    async fn reload(_tx: &Tx<'_>, _caller: &Caller, id: uuid::Uuid) -> DomainResult<Option<Self>> {
        Ok(Some(Deleted(PatientId::from_uuid(id))))
    }

    fn respond(self, status: StatusCode) -> Response {
        status.into_response()
    }
}

#[utoipa::path(
    post,
    path = "/v1/patients",
    operation_id = "createPatient",
    summary = "Create a patient",
    params(params::IdempotencyKey, params::CorrelationId),
    request_body(content = schemas::NewPatient),
    responses(
        (status = 201, description = "Created", body = schemas::Patient),
        problems::BadRequest, problems::Unauthorized, problems::Forbidden, problems::NotFound,
        problems::TooLarge, problems::NotJson, problems::Invalid, problems::Unavailable
    )
)]
pub async fn create(request: Mutation) -> Result<Response, ApiError> {
    request.caller.require_staff()?;
    let command = NewPatient::try_from(request.json()?)?;
    request
        .run(StatusCode::CREATED, async move |tx, ctx| Ok(patients::create(tx, ctx, command).await?.0))
        .await
}

#[utoipa::path(
    get,
    path = "/v1/patients/{id}",
    operation_id = "getPatient",
    summary = "Read a patient",
    params(params::PathId, params::CorrelationId),
    responses(
        (status = 200, description = "OK", body = schemas::Patient),
        problems::BadRequest, problems::Unauthorized, problems::Forbidden, problems::NotFound,
        problems::Unavailable
    )
)]
pub async fn get_one(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let id: PatientId = path_id(&id)?;
    if caller.patient().is_some_and(|own| own != id) {
        return Err(DomainError::NotFound.into());
    }
    let mut conn = state.pool.get().await?;
    let tx = conn.transaction().await?;
    let patient = patients::repo::find(&tx, caller.workspace_id, id).await?.ok_or(DomainError::NotFound)?;
    let purpose = Purpose::route(routes::GET_PATIENT);
    disclosures::record(&tx, caller.workspace_id, &caller.actor(), &[patient.id], purpose).await?;
    tx.commit().await?;
    Ok(Json(patient).into_response())
}

/// Staff change any field; a patient's own token changes only their contact preferences
/// ([`patients::CONTACT_PREFERENCE_FIELDS`]; any other field answers 403, another patient 404). Either
/// way the change is one `patient.updated` event naming the changed fields, with the caller as actor.
#[utoipa::path(
    patch,
    path = "/v1/patients/{id}",
    operation_id = "updatePatient",
    summary = "Update a patient",
    description = "Staff change any field. A patient's own token changes only its contact preferences (contactChannels, contactOptOuts, timeZone): any other field answers 403, another patient's id 404. Each change is one patient.updated event naming the changed fields only.",
    params(params::PathId, params::CorrelationId),
    request_body(content = schemas::PatientChanges),
    responses(
        (status = 200, description = "OK", body = schemas::Patient),
        problems::BadRequest, problems::Unauthorized, problems::Forbidden, problems::NotFound,
        problems::TooLarge, problems::NotJson, problems::Invalid, problems::Unavailable,
        (status = 409, description = "Version mismatch", body = schemas::Problem, content_type = "application/problem+json")
    )
)]
pub async fn update(Path(id): Path<String>, request: Mutation) -> Result<Response, ApiError> {
    let id: PatientId = path_id(&id)?;
    let own = request.caller.patient();
    if own.is_some_and(|own| own != id) {
        return Err(DomainError::NotFound.into());
    }
    let changes = PatientChanges::try_from(request.json()?)?;
    if own.is_some() && !changes.only_contact_preferences() {
        return Err(DomainError::Forbidden.into());
    }
    request
        .run(StatusCode::OK, async move |tx, ctx| Ok(patients::update(tx, ctx, id, changes).await?.0))
        .await
}

#[utoipa::path(
    delete,
    path = "/v1/patients/{id}",
    operation_id = "deletePatient",
    summary = "Delete a patient (cancels future appointments through a listener)",
    params(params::PathId, params::CorrelationId),
    responses(
        (status = 204, description = "Deleted"),
        problems::BadRequest, problems::Unauthorized, problems::Forbidden, problems::NotFound,
        problems::Unavailable
    )
)]
pub async fn delete(Path(id): Path<String>, request: Mutation) -> Result<Response, ApiError> {
    request.caller.require_staff()?;
    let id: PatientId = path_id(&id)?;
    request
        .run(StatusCode::NO_CONTENT, async move |tx, ctx| {
            patients::delete(tx, ctx, id, None).await?;
            Ok(Deleted(id))
        })
        .await
}
