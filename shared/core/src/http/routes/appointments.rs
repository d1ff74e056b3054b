//! `/v1/appointments`: book, read, reschedule, cancel, complete.
//!
//! Staff and admins act on every appointment of their workspace; a patient may read and cancel only
//! their own (403 otherwise) and nothing else.

use axum::extract::{OriginalUri, Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;

use super::{context, path_id};
use crate::appointments::{self, Access, Cancel, Complete, NewAppointment, Reschedule};
use crate::error::DomainError;
use crate::http::auth::Caller;
use crate::http::mutation::{fingerprint, Begun, Resource, UnitOfWork};
use crate::http::problem::ApiError;
use crate::http::request::{JsonBody, RequestIds};
use crate::http::AppState;
use crate::ids::AppointmentId;

fn access(caller: &Caller) -> Access {
    match caller.patient() {
        Some(patient) => Access::OwnAppointmentsOf(patient),
        None => Access::Workspace,
    }
}

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
    let command = NewAppointment::try_from(body.value)?;
    let mut conn = state.pool.get().await?;
    let uow = match UnitOfWork::begin(&mut conn, &state, caller, &headers, print).await? {
        Begun::Fresh(uow) => uow,
        Begun::Replayed(response) => return Ok(response),
    };
    let (appointment, _) = appointments::book(uow.tx(), &context(&caller, &ids), command).await?;
    uow.finish(&state, StatusCode::CREATED, Resource::Appointment(appointment)).await
}

pub async fn get_one(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let id: AppointmentId = path_id(&id)?;
    let conn = state.pool.get().await?;
    let appointment =
        appointments::repo::find(&conn, caller.workspace_id, id).await?.ok_or(DomainError::NotFound)?;
    access(&caller).check(&appointment)?;
    Ok(Json(appointment).into_response())
}

/// A state change of an existing appointment.
enum Action {
    Reschedule(Reschedule),
    Cancel(Cancel),
    Complete(Complete),
}

struct ActionRequest {
    state: AppState,
    caller: Caller,
    ids: RequestIds,
    headers: HeaderMap,
    fingerprint: String,
    id: String,
}

async fn act(request: ActionRequest, action: Action) -> Result<Response, ApiError> {
    let ActionRequest { state, caller, ids, headers, fingerprint, id } = request;
    if !matches!(action, Action::Cancel(_)) {
        caller.require_staff()?;
    }
    let id: AppointmentId = path_id(&id)?;
    let ctx = context(&caller, &ids);
    let mut conn = state.pool.get().await?;
    let uow = match UnitOfWork::begin(&mut conn, &state, caller, &headers, fingerprint).await? {
        Begun::Fresh(uow) => uow,
        Begun::Replayed(response) => return Ok(response),
    };
    let (appointment, _) = match action {
        Action::Reschedule(command) => appointments::reschedule(uow.tx(), &ctx, id, command).await?,
        Action::Cancel(command) => appointments::cancel(uow.tx(), &ctx, access(&caller), id, command).await?,
        Action::Complete(command) => appointments::complete(uow.tx(), &ctx, id, command).await?,
    };
    uow.finish(&state, StatusCode::OK, Resource::Appointment(appointment)).await
}

macro_rules! action_handler {
    ($name:ident, $command:ty, $variant:ident) => {
        pub async fn $name(
            State(state): State<AppState>,
            caller: Caller,
            ids: RequestIds,
            OriginalUri(uri): OriginalUri,
            headers: HeaderMap,
            Path(id): Path<String>,
            body: JsonBody,
        ) -> Result<Response, ApiError> {
            let fingerprint = fingerprint("POST", uri.path(), &body.value);
            let command = <$command>::try_from(body.value)?;
            let request = ActionRequest { state, caller, ids, headers, fingerprint, id };
            act(request, Action::$variant(command)).await
        }
    };
}

action_handler!(reschedule, Reschedule, Reschedule);
action_handler!(cancel, Cancel, Cancel);
action_handler!(complete, Complete, Complete);
