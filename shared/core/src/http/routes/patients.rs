//! `/v1/patients`: create, read, update, delete.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;

use super::{context, path_id};
use crate::disclosures::{self, routes, Purpose};
use crate::error::DomainError;
use crate::http::auth::Caller;
use crate::http::mutation::{PostMutation, PostRequest};
use crate::http::problem::ApiError;
use crate::http::request::{JsonBody, RequestIds};
use crate::http::AppState;
use crate::ids::PatientId;
use crate::patients::{self, NewPatient, PatientChanges};

pub async fn create(request: PostRequest) -> Result<Response, ApiError> {
    request.caller.require_staff()?;
    let command = NewPatient::try_from(request.body.clone())?;
    request.perform(PostMutation::CreatePatient(command)).await
}

pub async fn get_one(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let id: PatientId = path_id(&id)?;
    if let Some(own) = caller.patient() {
        if own != id {
            return Err(DomainError::Forbidden.into());
        }
    }
    let mut conn = state.pool.get().await?;
    let tx = conn.transaction().await?;
    let patient = patients::repo::find(&tx, caller.workspace_id, id).await?.ok_or(DomainError::NotFound)?;
    let purpose = Purpose::route(routes::GET_PATIENT);
    disclosures::record(&tx, caller.workspace_id, &caller.actor(), &[patient.id], purpose).await?;
    tx.commit().await?;
    Ok(Json(patient).into_response())
}

pub async fn update(
    State(state): State<AppState>,
    caller: Caller,
    ids: RequestIds,
    Path(id): Path<String>,
    body: JsonBody,
) -> Result<Response, ApiError> {
    caller.require_staff()?;
    let id: PatientId = path_id(&id)?;
    let changes = PatientChanges::try_from(body.value)?;
    let mut conn = state.pool.get().await?;
    let tx = conn.transaction().await?;
    let (patient, _) = patients::update(&tx, &context(&caller, &ids), id, changes).await?;
    tx.commit().await?;
    Ok(Json(patient).into_response())
}

pub async fn delete(
    State(state): State<AppState>,
    caller: Caller,
    ids: RequestIds,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    caller.require_staff()?;
    let id: PatientId = path_id(&id)?;
    let mut conn = state.pool.get().await?;
    let tx = conn.transaction().await?;
    patients::delete(&tx, &context(&caller, &ids), id, None).await?;
    tx.commit().await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}
