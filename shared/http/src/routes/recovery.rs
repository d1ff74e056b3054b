//! Operating without SQL over HTTP (admin role only; the caller's workspace only):
//!
//! - `GET /v1/system/events/{id}` explains one event end to end ([`clinic_core::operator::explain`]).
//! - `GET /v1/system/overview`: counts by status, oldest due and live ages, dead rows by error code,
//!   paused listeners with what they hold, the workspace they are of (`workspace: {id, name}`) and the
//!   outbox's attempt ceiling (`outboxMaxAttempts`).
//! - `POST /v1/system/outbox/bulk/retry|replay|discard` with
//!   `{ "reason": "…", "dryRun": true, "filter": { "status": "dead", "errorCode": "…", … },
//!   "listeners": [...], "limit": 1000 }`: the outbox's bulk recovery, through the one generic
//!   path of every queue ([`super::acted::bulk`], which describes the answer and its replay). The
//!   reason is required either way.
//! - `GET /v1/system/listeners` and `POST /v1/system/listeners/pause|resume` with
//!   `{ "listener": "…", "reason": "…" }` ([`clinic_core::operator::pause`]).
//!
//! Every POST here honours `Idempotency-Key` ([`Mutation::run`]): the same key with the same body
//! answers the stored answer and acts no second time; the same key with another body answers 422.
//! A pause or resume replays its audit record.
//!
//! A bulk request must name at least one filter field (an empty filter answers 422 naming
//! `filter`): "every row of the workspace" is never one keystroke away.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;

use super::acted::{self, operator_of, Acted, DiscardAll, ReplayAll, RetryAll};
use super::path_id;
use crate::auth::Caller;
use crate::document::{params, problems, schemas};
use crate::problem::ApiError;
use crate::unit_of_work::Mutation;
use crate::AppState;
use clinic_core::domain::input::{FieldError, Fields};
use clinic_core::error::DomainError;
use clinic_core::events::EventType;
use clinic_core::ids::{EventId, WorkspaceId};
use clinic_core::listeners::{listeners, Listener};
use clinic_core::operator::{self, pause, Outbox, Reason};

#[utoipa::path(
    get,
    path = "/v1/system/events/{id}",
    operation_id = "explainEvent",
    summary = "Explain an event end to end, ids and codes only (admin only)",
    params(params::ExplainedEventId, params::CorrelationId),
    responses(
        (status = 200, description = "The event's whole path as sections", body = schemas::Explanation),
        (status = 400, description = "Malformed id", body = schemas::Problem, content_type = "application/problem+json"),
        problems::Unauthorized, problems::Forbidden,
        (status = 404, description = "No such event (or in another workspace)", body = schemas::Problem, content_type = "application/problem+json")
    )
)]
pub async fn explain(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    caller.require_admin()?;
    let event_id: EventId = path_id(&id)?;
    let conn = state.pool.get().await?;
    let explanation =
        operator::explain(&conn, Some(caller.workspace_id), event_id).await?.ok_or(DomainError::NotFound)?;
    Ok(Json(explanation).into_response())
}

/// The overview's answer: the figures, and the workspace they are of (its id and name, for the
/// console's header).
#[derive(Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OverviewAnswer {
    #[serde(flatten)]
    overview: operator::Overview,
    /// The workspace these figures are of (the caller's): its id and name, for the console's header
    workspace: WorkspaceRef,
    /// The dispatcher's attempt ceiling per this deployment's settings (CLINIC_DISPATCH_MAX_ATTEMPTS, default 10): the N of "attempt n of N"; null when unreadable.
    outbox_max_attempts: Option<i32>,
}

#[derive(Serialize, schemars::JsonSchema)]
#[schemars(inline, deny_unknown_fields)]
struct WorkspaceRef {
    id: WorkspaceId,
    name: Option<String>,
}

#[utoipa::path(
    get,
    path = "/v1/system/overview",
    operation_id = "operatorOverview",
    summary = "Counts by status, oldest ages, dead rows by error code, paused listeners (admin only)",
    params(params::CorrelationId),
    responses(
        (status = 200, description = "The overview", body = schemas::Overview),
        problems::Unauthorized, problems::Forbidden
    )
)]
pub async fn overview(State(state): State<AppState>, caller: Caller) -> Result<Response, ApiError> {
    caller.require_admin()?;
    let conn = state.pool.get().await?;
    let overview = operator::overview(&conn, Some(caller.workspace_id)).await?;
    let name = clinic_core::workspaces::name(&conn, caller.workspace_id).await?;
    let workspace = WorkspaceRef { id: caller.workspace_id, name };
    let outbox_max_attempts = state.api.outbox_max_attempts;
    Ok(Json(OverviewAnswer { overview, workspace, outbox_max_attempts }).into_response())
}

#[utoipa::path(
    post,
    path = "/v1/system/outbox/bulk/retry",
    operation_id = "bulkRetryOutbox",
    summary = "Retry every dead or retry row matching a filter (admin only); dryRun answers the count and a sample",
    params(params::IdempotencyKeyOperator, params::CorrelationId),
    request_body(content = schemas::BulkRequest),
    responses(
        (status = 200, description = "What matched and what was done (one audit row per target, one batch id)", body = schemas::BulkAnswer),
        (status = 409, description = "The state does not fit the action; nothing was recorded", body = schemas::Problem, content_type = "application/problem+json"),
        problems::OutboxBulkAction
    )
)]
pub async fn bulk_retry(State(state): State<AppState>, request: Mutation) -> Result<Response, ApiError> {
    acted::bulk::<Outbox, RetryAll>(state, request).await
}

#[utoipa::path(
    post,
    path = "/v1/system/outbox/bulk/replay",
    operation_id = "bulkReplayOutbox",
    summary = "Replay every dispatched row matching a filter (optionally only named listeners) (admin only); dryRun answers the count and a sample",
    description = "A replay whose named listeners are all unknown to this build answers 409 `urn:clinic:problem:unknown-listeners` naming them (field `listeners`); naming some known and some unknown listeners answers 422 on `listeners` naming the unknown ones, and nothing is replayed.",
    params(params::IdempotencyKeyOperator, params::CorrelationId),
    request_body(content = schemas::BulkReplayRequest),
    responses(
        (status = 200, description = "What matched and what was done (one audit row per target, one batch id)", body = schemas::BulkAnswer),
        (status = 409, description = "The state does not fit the action; nothing was recorded; or every listener named is unknown to this build (urn:clinic:problem:unknown-listeners)", body = schemas::Problem, content_type = "application/problem+json"),
        problems::OutboxBulkAction
    )
)]
pub async fn bulk_replay(State(state): State<AppState>, request: Mutation) -> Result<Response, ApiError> {
    acted::bulk::<Outbox, ReplayAll>(state, request).await
}

#[utoipa::path(
    post,
    path = "/v1/system/outbox/bulk/discard",
    operation_id = "bulkDiscardOutbox",
    summary = "Discard every dead row matching a filter (admin only); dryRun answers the count and a sample",
    params(params::IdempotencyKeyOperator, params::CorrelationId),
    request_body(content = schemas::BulkRequest),
    responses(
        (status = 200, description = "What matched and what was done (one audit row per target, one batch id)", body = schemas::BulkAnswer),
        (status = 409, description = "The state does not fit the action; nothing was recorded", body = schemas::Problem, content_type = "application/problem+json"),
        problems::OutboxBulkAction
    )
)]
pub async fn bulk_discard(State(state): State<AppState>, request: Mutation) -> Result<Response, ApiError> {
    acted::bulk::<Outbox, DiscardAll>(state, request).await
}

#[utoipa::path(
    get,
    path = "/v1/system/listeners",
    operation_id = "listListeners",
    summary = "Every listener with its event types and pause state (admin only)",
    params(params::CorrelationId),
    responses(
        (status = 200, description = "The listeners", body = schemas::ListenerList),
        problems::Unauthorized, problems::Forbidden
    )
)]
pub async fn listener_list(State(state): State<AppState>, caller: Caller) -> Result<Response, ApiError> {
    caller.require_admin()?;
    let conn = state.pool.get().await?;
    let paused = pause::paused(&conn, Some(caller.workspace_id)).await?;
    let items = Listener::ALL
        .iter()
        .map(|listener| {
            let event_types = EventType::ALL
                .iter()
                .filter(|t| listeners(**t).contains(listener))
                .map(|t| t.as_str())
                .collect();
            let pause = paused.iter().find(|p| p.listener == listener.as_str());
            ListenerState {
                listener: listener.as_str(),
                event_types,
                paused: pause.is_some(),
                paused_by: pause.map(|p| p.paused_by.clone()),
                paused_at: pause.map(|p| p.paused_at),
                held: pause.map_or(0, |p| p.held),
            }
        })
        .collect();
    Ok(Json(ListenerList { items }).into_response())
}

/// The answer of `GET /v1/system/listeners`: every listener, in catalog order.
#[derive(Serialize, schemars::JsonSchema)]
pub struct ListenerList {
    items: Vec<ListenerState>,
}

/// A listener, the event types routed to it, and its pause in the caller's workspace.
#[derive(Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(inline)]
struct ListenerState {
    listener: &'static str,
    event_types: Vec<&'static str>,
    paused: bool,
    paused_by: Option<String>,
    paused_at: Option<DateTime<Utc>>,
    held: i64,
}

/// `POST /v1/system/listeners/pause|resume`, parsed. Its schema is the body it is read from.
#[derive(schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PauseRequest {
    listener: Listener,
    /// Why; required and not blank. Stored in the audit log, never logged.
    reason: Reason,
}

impl PauseRequest {
    /// Reads the body: the reason first, then the listener's name (trimmed).
    fn read(body: Value) -> Result<Self, ApiError> {
        let mut fields = Fields::new(body)?;
        let reason = Reason::parse(&fields.required_str("reason")?)?;
        let name = fields.required_str("listener")?;
        fields.finish()?;
        let listener = Listener::parse(name.trim())
            .ok_or_else(|| FieldError::new("listener", "must be a listener name"))?;
        Ok(PauseRequest { listener, reason })
    }
}

async fn pause_act(request: Mutation, resume: bool) -> Result<Response, ApiError> {
    request.caller.require_admin()?;
    let PauseRequest { listener, reason } = PauseRequest::read(request.json()?)?;
    let operator = operator_of(&request.caller);
    request
        .run(StatusCode::OK, async move |tx, ctx| {
            let record = if resume {
                pause::resume(tx, ctx.workspace_id, listener, &operator, &reason).await?
            } else {
                pause::pause(tx, ctx.workspace_id, listener, &operator, &reason).await?
            };
            Ok(Acted(record))
        })
        .await
}

#[utoipa::path(
    post,
    path = "/v1/system/listeners/pause",
    operation_id = "pauseListener",
    summary = "Pause a listener in the caller's workspace: its starts are held, durably (admin only)",
    params(params::IdempotencyKeyOperator, params::CorrelationId),
    request_body(content = schemas::PauseRequest),
    responses(
        (status = 200, description = "The audited action", body = schemas::PauseRecord),
        (status = 409, description = "The state does not fit the action; nothing was recorded", body = schemas::Problem, content_type = "application/problem+json"),
        problems::OutboxBulkAction
    )
)]
pub async fn pause_listener(request: Mutation) -> Result<Response, ApiError> {
    pause_act(request, false).await
}

#[utoipa::path(
    post,
    path = "/v1/system/listeners/resume",
    operation_id = "resumeListener",
    summary = "Resume a listener and release what it held, in event order (admin only)",
    params(params::IdempotencyKeyOperator, params::CorrelationId),
    request_body(content = schemas::PauseRequest),
    responses(
        (status = 200, description = "The audited action", body = schemas::PauseRecord),
        (status = 409, description = "The state does not fit the action; nothing was recorded", body = schemas::Problem, content_type = "application/problem+json"),
        problems::OutboxBulkAction
    )
)]
pub async fn resume_listener(request: Mutation) -> Result<Response, ApiError> {
    pause_act(request, true).await
}
