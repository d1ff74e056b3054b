//! Operating without SQL over HTTP (admin role only; the caller's workspace only):
//!
//! - `GET /v1/system/events/{id}` explains one event end to end ([`clinic_core::operator::explain`]).
//! - `GET /v1/system/overview`: counts by status, oldest due and live ages, dead rows by error code,
//!   paused listeners with what they hold.
//! - `POST /v1/system/outbox/bulk/retry|replay|discard` with
//!   `{ "reason": "…", "dryRun": true, "filter": { "status": "dead", "errorCode": "…", … },
//!   "listeners": [...], "limit": 1000 }`: a dry run answers the count and a sample; otherwise every
//!   target is acted on through the single-row action in bounded transactions, one audit row each
//!   under one batch id ([`clinic_core::operator::bulk`]). The reason is required either way.
//! - `GET /v1/system/listeners` and `POST /v1/system/listeners/pause|resume` with
//!   `{ "listener": "…", "reason": "…" }` ([`clinic_core::operator::pause`]).
//!
//! A bulk request must name at least one filter field (an empty filter answers 422 naming
//! `filter`): "every row of the workspace" is never one keystroke away.

use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Map, Value};

use super::path_id;
use crate::auth::Caller;
use crate::problem::ApiError;
use crate::request::JsonBody;
use crate::AppState;
use clinic_core::domain::input::{self, integer, FieldError, Fields};
use clinic_core::error::DomainError;
use clinic_core::events::EventType;
use clinic_core::ids::{EventId, MemberId};
use clinic_core::listeners::{listeners, Listener};
use clinic_core::operator::{
    self, bulk, pause, ActionKind, ActionRequest, BulkRequest, Operator, OutboxFilter, Reason,
};

fn operator_of(caller: &Caller) -> Operator {
    Operator::member(MemberId::from_ulid(caller.subject))
}

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

pub async fn overview(State(state): State<AppState>, caller: Caller) -> Result<Response, ApiError> {
    caller.require_admin()?;
    let conn = state.pool.get().await?;
    Ok(Json(operator::overview(&conn, Some(caller.workspace_id)).await?).into_response())
}

/// Splits a bulk body into its filter, dry-run flag and limit, leaving the action's own fields.
fn bulk_request(action: ActionKind, body: Value) -> Result<BulkRequest, DomainError> {
    let Value::Object(mut body) = body else {
        return Err(FieldError::new("body", "must be a JSON object").into());
    };
    // Absent takes the default; null is not a boolean or an integer (the contract types them).
    let dry_run = input::boolean("dryRun", body.remove("dryRun").as_ref())?.unwrap_or(false);
    let limit = match body.remove("limit") {
        None => 1_000,
        Some(value) => {
            value.as_number().and_then(integer).filter(|n| (1..=bulk::MAX_LIMIT).contains(n)).ok_or_else(
                || FieldError::new("limit", format!("must be an integer from 1 to {}", bulk::MAX_LIMIT)),
            )?
        }
    };
    let filter = match body.remove("filter") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(filter)) => filter,
        Some(_) => return Err(FieldError::new("filter", "must be an object").into()),
    };
    // The reason first (the contract: a missing reason answers before anything else is considered).
    let action = ActionRequest::from_body(action, Value::Object(body))?;
    const KNOWN: &[&str] =
        &["status", "eventType", "olderThan", "listener", "errorCode", "from", "to", "resourceId"];
    for (key, value) in &filter {
        if !KNOWN.contains(&key.as_str()) {
            return Err(FieldError::new(format!("filter.{key}"), "is not a filter").into());
        }
        if !value.is_string() {
            return Err(FieldError::new(format!("filter.{key}"), "must be a string").into());
        }
    }
    let filter = OutboxFilter::parse(|field| filter.get(field).and_then(Value::as_str).map(str::to_owned))
        .map_err(|error| FieldError::new(format!("filter.{}", error.field), error.message))?;

    Ok(BulkRequest { filter, action, dry_run, limit })
}

async fn bulk_act(
    state: AppState,
    caller: Caller,
    body: JsonBody,
    action: ActionKind,
) -> Result<Response, ApiError> {
    caller.require_admin()?;
    let mut request = bulk_request(action, body.value)?;
    request.filter.workspace = Some(caller.workspace_id);
    let mut conn = state.pool.get().await?;
    let answer = bulk::run(&mut conn, &request, &operator_of(&caller)).await?;
    Ok(Json(answer).into_response())
}

pub async fn bulk_retry(
    State(state): State<AppState>,
    caller: Caller,
    body: JsonBody,
) -> Result<Response, ApiError> {
    bulk_act(state, caller, body, ActionKind::Retry).await
}

pub async fn bulk_replay(
    State(state): State<AppState>,
    caller: Caller,
    body: JsonBody,
) -> Result<Response, ApiError> {
    bulk_act(state, caller, body, ActionKind::Replay).await
}

pub async fn bulk_discard(
    State(state): State<AppState>,
    caller: Caller,
    body: JsonBody,
) -> Result<Response, ApiError> {
    bulk_act(state, caller, body, ActionKind::Discard).await
}

pub async fn listener_list(State(state): State<AppState>, caller: Caller) -> Result<Response, ApiError> {
    caller.require_admin()?;
    let conn = state.pool.get().await?;
    let paused = pause::paused(&conn, Some(caller.workspace_id)).await?;
    let items: Vec<Value> = Listener::ALL
        .iter()
        .map(|listener| {
            let types: Vec<&str> = EventType::ALL
                .iter()
                .filter(|t| listeners(**t).contains(listener))
                .map(|t| t.as_str())
                .collect();
            let pause = paused.iter().find(|p| p.listener == listener.as_str());
            json!({
                "listener": listener.as_str(),
                "eventTypes": types,
                "paused": pause.is_some(),
                "pausedBy": pause.map(|p| p.paused_by.clone()),
                "pausedAt": pause.map(|p| p.paused_at),
                "held": pause.map_or(0, |p| p.held),
            })
        })
        .collect();
    Ok(Json(json!({ "items": items })).into_response())
}

async fn pause_act(
    state: AppState,
    caller: Caller,
    body: JsonBody,
    resume: bool,
) -> Result<Response, ApiError> {
    caller.require_admin()?;
    let mut fields = Fields::new(body.value)?;
    let reason = Reason::parse(&fields.required_str("reason")?)?;
    let name = fields.required_str("listener")?;
    fields.finish()?;
    let listener =
        Listener::parse(name.trim()).ok_or_else(|| FieldError::new("listener", "must be a listener name"))?;
    let operator = operator_of(&caller);
    let mut conn = state.pool.get().await?;
    let tx = conn.transaction().await?;
    let record = if resume {
        pause::resume(&tx, caller.workspace_id, listener, &operator, &reason).await?
    } else {
        pause::pause(&tx, caller.workspace_id, listener, &operator, &reason).await?
    };
    tx.commit().await?;
    Ok(Json(record).into_response())
}

pub async fn pause_listener(
    State(state): State<AppState>,
    caller: Caller,
    body: JsonBody,
) -> Result<Response, ApiError> {
    pause_act(state, caller, body, false).await
}

pub async fn resume_listener(
    State(state): State<AppState>,
    caller: Caller,
    body: JsonBody,
) -> Result<Response, ApiError> {
    pause_act(state, caller, body, true).await
}
