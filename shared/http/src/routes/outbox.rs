//! `/v1/system/outbox`: operator tooling over HTTP, admin role only (403 for everyone else).
//!
//! - `GET /v1/system/outbox?status=&eventType=&olderThan=&listener=&errorCode=&from=&to=&resourceId=&limit=&cursor=` lists the caller's
//!   workspace's outbox rows, newest first, with a signed keyset cursor bound to the filters.
//! - `POST /v1/system/outbox/{id}/retry|replay|discard` with `{ "reason": "…", "listeners": [...] }`
//!   (listeners: replay only) performs the action and answers its audit record. The body is checked
//!   (400/422) before the row's status is considered; a status the action does not fit answers 409
//!   and records nothing. Each action is its own transaction: lock, change, audit, commit.
//!
//! - `GET /v1/system/outbox/unsettled?all=&limit=` lists the workspace's (event, listener) pairs
//!   still missing their receipt that the custody reconciler handed to operators (`all=true`: also
//!   the ones it is still restarting); replay the event for that listener to start it afresh.
//!
//! These routes take no `Idempotency-Key`: every action changes the row's status, so repeating one
//! answers 409 instead of acting twice.

use std::collections::HashMap;

use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use super::{bad, path_id};
use crate::auth::Caller;
use crate::cursor::PageRequest;
use crate::problem::ApiError;
use crate::request::JsonBody;
use crate::AppState;
use clinic_core::ids::{EventId, MemberId};
use clinic_core::operator::{self, ActionKind, ActionRequest, Operator, OutboxFilter};

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
    Ok(Json(json!({ "items": items })).into_response())
}

async fn act(
    state: AppState,
    caller: Caller,
    raw_id: String,
    body: JsonBody,
    action: ActionKind,
) -> Result<Response, ApiError> {
    caller.require_admin()?;
    let request = ActionRequest::from_body(action, body.value)?;
    let event_id: EventId = path_id(&raw_id)?;
    let operator = Operator::member(MemberId::from_ulid(caller.subject));
    let mut conn = state.pool.get().await?;
    let tx = conn.transaction().await?;
    let record = operator::perform(&tx, Some(caller.workspace_id), event_id, &request, &operator).await?;
    tx.commit().await?;
    Ok(Json(record).into_response())
}

pub async fn retry(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    body: JsonBody,
) -> Result<Response, ApiError> {
    act(state, caller, id, body, ActionKind::Retry).await
}

pub async fn replay(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    body: JsonBody,
) -> Result<Response, ApiError> {
    act(state, caller, id, body, ActionKind::Replay).await
}

pub async fn discard(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    body: JsonBody,
) -> Result<Response, ApiError> {
    act(state, caller, id, body, ActionKind::Discard).await
}
