//! `/v1/practitioners`: create, read and change (the list is in `lists.rs`).

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
use clinic_core::error::{DomainError, DomainResult};
use clinic_core::events::ResourceType;
use clinic_core::ids::PractitionerId;
use clinic_core::practitioners::{self, NewPractitioner, Practitioner, PractitionerChanges};

impl Answer for Practitioner {
    const RESOURCE: &'static str = ResourceType::Practitioner.as_str();

    fn resource_id(&self) -> uuid::Uuid {
        self.id.uuid()
    }

    async fn reload(tx: &Tx<'_>, caller: &Caller, id: uuid::Uuid) -> DomainResult<Option<Self>> {
        Ok(practitioners::repo::find(tx, caller.workspace_id, PractitionerId::from_uuid(id)).await?)
    }

    fn respond(self, status: StatusCode) -> Response {
        (status, Json(self)).into_response()
    }
}

#[utoipa::path(
    post,
    path = "/v1/practitioners",
    operation_id = "createPractitioner",
    summary = "Create a practitioner",
    params(params::IdempotencyKey, params::CorrelationId),
    request_body(content = schemas::NewPractitioner),
    responses(
        (status = 201, description = "Created", body = schemas::Practitioner),
        problems::BadRequest, problems::Unauthorized, problems::Forbidden, problems::NotFound,
        problems::TooLarge, problems::NotJson, problems::Invalid, problems::Unavailable
    )
)]
pub async fn create(request: Mutation) -> Result<Response, ApiError> {
    request.caller.require_staff()?;
    let command = NewPractitioner::try_from(request.json()?)?;
    request
        .run(StatusCode::CREATED, async move |tx, ctx| Ok(practitioners::create(tx, ctx, command).await?.0))
        .await
}

#[utoipa::path(
    get,
    path = "/v1/practitioners/{id}",
    operation_id = "getPractitioner",
    summary = "Read a practitioner",
    params(params::PathId, params::CorrelationId),
    responses(
        (status = 200, description = "OK", body = schemas::Practitioner),
        problems::BadRequest, problems::Unauthorized, problems::Forbidden, problems::NotFound,
        problems::Unavailable
    )
)]
pub async fn get_one(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    caller.require_staff()?;
    let id: PractitionerId = path_id(&id)?;
    let conn = state.pool.get().await?;
    let practitioner =
        practitioners::repo::find(&conn, caller.workspace_id, id).await?.ok_or(DomainError::NotFound)?;
    Ok(Json(practitioner).into_response())
}

/// `PATCH /v1/practitioners/{id}`: display name, specialty, active flag; optional `expectedVersion`.
#[utoipa::path(
    patch,
    path = "/v1/practitioners/{id}",
    operation_id = "updatePractitioner",
    summary = "Change a practitioner's display name, specialty or active flag",
    description = "Staff and admin only. Emits `practitioner.updated`. An inactive practitioner keeps its appointments but cannot be booked (409 `urn:clinic:problem:practitioner-inactive`).",
    params(params::PathId, params::CorrelationId),
    request_body(content = schemas::PractitionerChanges),
    responses(
        (status = 200, description = "OK", body = schemas::Practitioner),
        problems::BadRequest, problems::Unauthorized, problems::Forbidden, problems::NotFound,
        (status = 409, description = "Version mismatch", body = schemas::Problem, content_type = "application/problem+json"),
        problems::TooLarge, problems::NotJson, problems::Invalid, problems::Unavailable
    )
)]
pub async fn update(Path(id): Path<String>, request: Mutation) -> Result<Response, ApiError> {
    request.caller.require_staff()?;
    let id: PractitionerId = path_id(&id)?;
    let changes = PractitionerChanges::try_from(request.json()?)?;
    request
        .run(StatusCode::OK, async move |tx, ctx| Ok(practitioners::update(tx, ctx, id, changes).await?.0))
        .await
}
