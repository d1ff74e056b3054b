//! `/v1/practitioners`: create, read and change (the list is in `lists.rs`).

use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::Json;

use super::{context, path_id};
use crate::error::DomainError;
use crate::http::auth::Caller;
use crate::http::mutation::{PostMutation, PostRequest};
use crate::http::problem::ApiError;
use crate::http::request::{JsonBody, RequestIds};
use crate::http::AppState;
use crate::ids::PractitionerId;
use crate::practitioners::{self, NewPractitioner, PractitionerChanges};

pub async fn create(request: PostRequest) -> Result<Response, ApiError> {
    request.caller.require_staff()?;
    let command = NewPractitioner::try_from(request.body.clone())?;
    request.perform(PostMutation::CreatePractitioner(command)).await
}

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
pub async fn update(
    State(state): State<AppState>,
    caller: Caller,
    ids: RequestIds,
    Path(id): Path<String>,
    body: JsonBody,
) -> Result<Response, ApiError> {
    caller.require_staff()?;
    let id: PractitionerId = path_id(&id)?;
    let changes = PractitionerChanges::try_from(body.value)?;
    let mut conn = state.pool.get().await?;
    let tx = conn.transaction().await?;
    let (practitioner, _) = practitioners::update(&tx, &context(&caller, &ids), id, changes).await?;
    tx.commit().await?;
    Ok(Json(practitioner).into_response())
}
