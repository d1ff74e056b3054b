//! `/v1/practitioners`: create and read.

use axum::extract::{OriginalUri, Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;

use super::{context, path_id};
use crate::error::DomainError;
use crate::http::auth::Caller;
use crate::http::mutation::{fingerprint, Begun, Resource, UnitOfWork};
use crate::http::problem::ApiError;
use crate::http::request::{JsonBody, RequestIds};
use crate::http::AppState;
use crate::ids::PractitionerId;
use crate::practitioners::{self, NewPractitioner};

pub async fn create(
    State(state): State<AppState>,
    caller: Caller,
    ids: RequestIds,
    OriginalUri(uri): OriginalUri,
    headers: HeaderMap,
    body: JsonBody,
) -> Result<Response, ApiError> {
    caller.require_staff()?;
    let print = fingerprint("POST", uri.path(), &body.value);
    let command = NewPractitioner::try_from(body.value)?;
    let mut conn = state.pool.get().await?;
    let uow = match UnitOfWork::begin(&mut conn, &state, caller, &headers, print).await? {
        Begun::Fresh(uow) => uow,
        Begun::Replayed(response) => return Ok(response),
    };
    let (practitioner, _) = practitioners::create(uow.tx(), &context(&caller, &ids), command).await?;
    uow.finish(&state, StatusCode::CREATED, Resource::Practitioner(practitioner)).await
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
