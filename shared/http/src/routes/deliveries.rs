//! `/v1/system/deliveries`: operator tooling for notification deliveries, admin role only.
//!
//! - `GET /v1/system/deliveries?status=&olderThan=&from=&to=&errorCode=&listener=&template=&limit=&cursor=`
//!   lists the caller's workspace's deliveries, newest first (ids, statuses, counters, codes; never
//!   content), selected by the bulk actions' filter (the same fields, the same rows), with a signed
//!   keyset cursor bound to the filter. A bad field answers 400 naming it.
//! - `POST /v1/system/deliveries/{id}/retry|discard` with `{ "reason": "…" }` and
//!   `POST /v1/system/deliveries/bulk/retry|discard` (filter: `status`, `olderThan`, `from`, `to`,
//!   `errorCode`, `listener`, `template`; `dryRun`, `limit`) go through the one generic path of
//!   every queue ([`acted::act`], [`acted::bulk`]): the same checks, 409s, audit rows, answers and
//!   `Idempotency-Key` rules as the outbox's.

use std::collections::HashMap;

use axum::extract::{Path, Query, State};
use axum::response::Response;

use super::acted::{self, DiscardAll, RetryAll};
use crate::auth::Caller;
use crate::cursor::PageRequest;
use crate::problem::ApiError;
use crate::unit_of_work::Mutation;
use crate::AppState;

use crate::document::{params, problems, schemas};
use clinic_core::ids::NotificationId;
use clinic_core::lease::ActionKind;
use clinic_core::operator::{Notifications, OperatedQueue};

#[utoipa::path(
    get,
    path = "/v1/system/deliveries",
    operation_id = "listDeliveries",
    summary = "Notification deliveries of the workspace, newest first (admin only); ids, statuses and codes, never content; selected by the bulk actions' filter fields (the same rows)",
    params(params::DeliveryStatus, params::Age, params::OnlyFrom, params::OnlyTo, params::LastErrorCode, params::DeliveryListener, params::Template, params::Limit, params::Cursor, params::CorrelationId),
    responses(
        (status = 200, description = "OK", body = schemas::DeliveryList),
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
    let filter =
        Notifications::parse_filter(|field| query.get(field).cloned()).map_err(ApiError::BadParameter)?;
    let scope = format!("deliveries:{}:{}", caller.workspace_id, filter.scope_key());
    let before = page.after::<ulid::Ulid>(&state.api.cursor_key, &scope)?.map(NotificationId::from_ulid);
    let conn = state.pool.get().await?;
    let items = clinic_core::operator::listing::notifications_filtered(
        &conn,
        Some(caller.workspace_id),
        &filter,
        before,
        page.limit,
    )
    .await?;
    Ok(page.answer(&state.api.cursor_key, &scope, &items, |item| item.id.ulid()))
}

#[utoipa::path(
    post,
    path = "/v1/system/deliveries/{id}/retry",
    operation_id = "retryDelivery",
    summary = "Send a dead, retry, uncertain or no_contact delivery again, with a fresh attempt budget (admin only)",
    params(params::DeliveryId, params::IdempotencyKeyOperator, params::CorrelationId),
    request_body(content = schemas::OperatorReasonRequest),
    responses(
        (status = 200, description = "The action was applied and recorded", body = schemas::DeliveryAction),
        (status = 404, description = "No such delivery (or in another workspace)", body = schemas::Problem, content_type = "application/problem+json"),
        (status = 409, description = "The delivery is not dead, retry, uncertain or no_contact (sent, stale, opted_out, suppressed, deferred, discarded, pending or sending); nothing was recorded", body = schemas::Problem, content_type = "application/problem+json"),
        problems::DeliveryRowAction
    )
)]
pub async fn retry(Path(id): Path<String>, request: Mutation) -> Result<Response, ApiError> {
    acted::act::<Notifications>(id, request, ActionKind::Retry).await
}

#[utoipa::path(
    post,
    path = "/v1/system/deliveries/{id}/discard",
    operation_id = "discardDelivery",
    summary = "Discard a dead, retry, uncertain or no_contact delivery (admin only)",
    params(params::DeliveryId, params::IdempotencyKeyOperator, params::CorrelationId),
    request_body(content = schemas::OperatorReasonRequest),
    responses(
        (status = 200, description = "The action was applied and recorded", body = schemas::DeliveryAction),
        (status = 404, description = "No such delivery (or in another workspace)", body = schemas::Problem, content_type = "application/problem+json"),
        (status = 409, description = "The delivery is not dead, retry, deferred, uncertain or no_contact (sent, stale, opted_out, suppressed, discarded, pending or sending); nothing was recorded", body = schemas::Problem, content_type = "application/problem+json"),
        problems::DeliveryRowAction
    )
)]
pub async fn discard(Path(id): Path<String>, request: Mutation) -> Result<Response, ApiError> {
    acted::act::<Notifications>(id, request, ActionKind::Discard).await
}

#[utoipa::path(
    post,
    path = "/v1/system/deliveries/bulk/retry",
    operation_id = "bulkRetryDeliveries",
    summary = "Retry every dead, no_contact, retry or uncertain delivery matching a filter, each with a fresh attempt budget (admin only); dryRun answers the count and a sample",
    params(params::IdempotencyKeyOperator, params::CorrelationId),
    request_body(content = schemas::NotificationBulkRequest),
    responses(
        (status = 200, description = "What matched and what was done (one audit row per target, one batch id)", body = schemas::BulkAnswer),
        (status = 409, description = "The state does not fit the action; nothing was recorded", body = schemas::Problem, content_type = "application/problem+json"),
        problems::DeliveryBulkAction
    )
)]
pub async fn bulk_retry(State(state): State<AppState>, request: Mutation) -> Result<Response, ApiError> {
    acted::bulk::<Notifications, RetryAll>(state, request).await
}

#[utoipa::path(
    post,
    path = "/v1/system/deliveries/bulk/discard",
    operation_id = "bulkDiscardDeliveries",
    summary = "Discard every dead, no_contact, retry or uncertain delivery matching a filter (admin only); dryRun answers the count and a sample",
    params(params::IdempotencyKeyOperator, params::CorrelationId),
    request_body(content = schemas::NotificationBulkRequest),
    responses(
        (status = 200, description = "What matched and what was done (one audit row per target, one batch id)", body = schemas::BulkAnswer),
        (status = 409, description = "The state does not fit the action; nothing was recorded", body = schemas::Problem, content_type = "application/problem+json"),
        problems::DeliveryBulkAction
    )
)]
pub async fn bulk_discard(State(state): State<AppState>, request: Mutation) -> Result<Response, ApiError> {
    acted::bulk::<Notifications, DiscardAll>(state, request).await
}
