//! `/v1/system/outbox`: operator tooling over HTTP, admin role only (403 for everyone else).
//!
//! - `GET /v1/system/outbox?status=&eventType=&olderThan=&listener=&errorCode=&from=&to=&resourceId=&limit=&cursor=` lists the caller's
//!   workspace's outbox rows, newest first, with a signed keyset cursor bound to the filters.
//! - `POST /v1/system/outbox/{id}/retry|replay|discard` with `{ "reason": "…", "listeners": [...] }`
//!   (listeners: replay only) performs the action and answers its audit record, through the one
//!   generic path of every queue ([`acted::act`]: body checked first, 409 naming why, one
//!   transaction with its audit row).
//!
//! - `GET /v1/system/outbox/unsettled?all=&limit=` lists the workspace's (event, listener) pairs
//!   still missing their receipt that the custody reconciler handed to operators (`all=true`: also
//!   the ones it is still restarting); replay the event for that listener to start it afresh.
//!
//! Every action honours `Idempotency-Key` like the other mutating routes ([`Mutation::run`]: the key
//! is claimed inside the action's transaction): the same key with the same body answers the stored
//! audit record again and acts no second time (a row that died again since is not retried again, so
//! one key is one audit row and one fresh attempt budget); the same key with another body answers
//! 422. Without a key, repeating an action answers 409 once the row's status no longer fits.

use std::collections::HashMap;

use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;

use super::acted;
use super::bad;
use crate::auth::Caller;
use crate::cursor::PageRequest;
use crate::document::{params, problems, schemas};
use crate::problem::ApiError;
use crate::unit_of_work::Mutation;
use crate::AppState;
use clinic_core::housekeeping::reconcile::Unsettled;
use clinic_core::ids::EventId;
use clinic_core::lease::ActionKind;
use clinic_core::operator::{self, Outbox, OutboxFilter};

#[utoipa::path(
    get,
    path = "/v1/system/outbox",
    operation_id = "listOutbox",
    summary = "Outbox rows of the workspace, newest first (admin only)",
    params(params::OutboxStatus, params::EventType, params::OlderThan, params::RoutedListener, params::ErrorCode, params::CreatedFrom, params::CreatedTo, params::ResourceId, params::Limit, params::Cursor, params::CorrelationId),
    responses(
        (status = 200, description = "OK", body = schemas::OutboxList),
        problems::BadRequest, problems::Unauthorized, problems::Forbidden, problems::Unavailable
    )
)]
pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    caller.require_admin()?;
    let page = PageRequest::parse(&query)?;
    let mut filter =
        OutboxFilter::parse(|field| query.get(field).cloned()).map_err(ApiError::BadParameter)?;
    filter.workspace = Some(caller.workspace_id);
    let scope = format!("outbox:{}", filter.scope_key());
    filter.before = page.after::<ulid::Ulid>(&state.api.cursor_key, &scope)?.map(EventId::from_ulid);
    let conn = state.pool.get().await?;
    let items = operator::list(&conn, &filter, page.limit).await?;
    Ok(page.answer(&state.api.cursor_key, &scope, &items, |item| item.event_id.ulid()))
}

#[utoipa::path(
    get,
    path = "/v1/system/outbox/unsettled",
    operation_id = "listUnsettledStarts",
    summary = "Listener starts of the workspace still missing their receipt, handed to operators by the custody reconciler (admin only)",
    params(params::All, params::PairLimit, params::CorrelationId),
    responses(
        (status = 200, description = "OK", body = schemas::UnsettledList),
        problems::BadRequest, problems::Unauthorized, problems::Forbidden, problems::Unavailable
    )
)]
pub async fn unsettled(
    State(state): State<AppState>,
    caller: Caller,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    caller.require_admin()?;
    let all = match query.get("all").map(String::as_str) {
        None | Some("false") => false,
        Some("true") => true,
        Some(_) => return Err(bad("all", "must be true or false")),
    };
    let limit = match query.get("limit") {
        None => 50,
        Some(raw) => raw
            .parse::<i64>()
            .ok()
            .filter(|n| (1..=100).contains(n))
            .ok_or_else(|| bad("limit", "must be 1 to 100"))?,
    };
    let conn = state.pool.get().await?;
    let items = clinic_core::housekeeping::reconcile::list_unsettled(
        &conn,
        Some(caller.workspace_id),
        std::time::Duration::ZERO,
        all,
        limit,
    )
    .await?;
    Ok(Json(UnsettledList { items }).into_response())
}

/// The answer of `GET /v1/system/outbox/unsettled`: the pairs, oldest first (no cursor).
#[derive(Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UnsettledList {
    items: Vec<Unsettled>,
}

#[utoipa::path(
    post,
    path = "/v1/system/outbox/{id}/retry",
    operation_id = "retryOutboxEvent",
    summary = "Make a dead or retry row due now, same event id, with a fresh attempt budget (admin only)",
    params(params::OutboxEventId, params::IdempotencyKeyOperator, params::CorrelationId),
    request_body(content = schemas::OperatorReasonRequest),
    responses(
        (status = 200, description = "The action was applied and recorded", body = schemas::OperatorAction),
        (status = 404, description = "No such outbox row (or in another workspace)", body = schemas::Problem, content_type = "application/problem+json"),
        (status = 409, description = "The row's status does not fit the action; nothing was recorded", body = schemas::Problem, content_type = "application/problem+json"),
        problems::OutboxRowAction
    )
)]
pub async fn retry(Path(id): Path<String>, request: Mutation) -> Result<Response, ApiError> {
    acted::act::<Outbox>(id, request, ActionKind::Retry).await
}

#[utoipa::path(
    post,
    path = "/v1/system/outbox/{id}/replay",
    operation_id = "replayOutboxEvent",
    summary = "Start a dispatched event's listeners again under the same event id (admin only)",
    description = "A replay whose named listeners are all unknown to this build answers 409 `urn:clinic:problem:unknown-listeners` naming them (field `listeners`); naming some known and some unknown listeners answers 422 on `listeners` naming the unknown ones, and nothing is replayed.",
    params(params::OutboxEventId, params::IdempotencyKeyOperator, params::CorrelationId),
    request_body(content = schemas::OperatorActionRequest),
    responses(
        (status = 200, description = "The action was applied and recorded", body = schemas::OperatorAction),
        (status = 404, description = "No such outbox row (or in another workspace)", body = schemas::Problem, content_type = "application/problem+json"),
        (status = 409, description = "The row's status does not fit the action; nothing was recorded; or every listener named is unknown to this build (urn:clinic:problem:unknown-listeners)", body = schemas::Problem, content_type = "application/problem+json"),
        problems::OutboxRowAction
    )
)]
pub async fn replay(Path(id): Path<String>, request: Mutation) -> Result<Response, ApiError> {
    acted::act::<Outbox>(id, request, ActionKind::Replay).await
}

#[utoipa::path(
    post,
    path = "/v1/system/outbox/{id}/discard",
    operation_id = "discardOutboxEvent",
    summary = "Discard a dead row (admin only)",
    params(params::OutboxEventId, params::IdempotencyKeyOperator, params::CorrelationId),
    request_body(content = schemas::OperatorReasonRequest),
    responses(
        (status = 200, description = "The action was applied and recorded", body = schemas::OperatorAction),
        (status = 404, description = "No such outbox row (or in another workspace)", body = schemas::Problem, content_type = "application/problem+json"),
        (status = 409, description = "The row's status does not fit the action; nothing was recorded", body = schemas::Problem, content_type = "application/problem+json"),
        problems::OutboxRowAction
    )
)]
pub async fn discard(Path(id): Path<String>, request: Mutation) -> Result<Response, ApiError> {
    acted::act::<Outbox>(id, request, ActionKind::Discard).await
}
