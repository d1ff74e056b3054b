//! `/v1/system/deliveries`: operator tooling for notification deliveries, admin role only.
//!
//! - `GET /v1/system/deliveries?status=&limit=&cursor=` lists the caller's workspace's deliveries,
//!   newest first (ids, statuses, counters, codes; never content), with a signed keyset cursor bound
//!   to the filter.
//! - `POST /v1/system/deliveries/{id}/retry|discard` with `{ "reason": "…" }` performs the action
//!   ([`clinic_core::delivery::admin`]) and answers its audit record; the body is checked (400/422) before
//!   the row's status is considered, and a status the action does not fit answers 409, recording
//!   nothing. Both honour `Idempotency-Key` like the outbox actions ([`super::outbox`]): the same key
//!   with the same body answers the stored audit record and acts no second time.

use std::collections::HashMap;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;

use super::acted::Acted;
use super::{bad, path_id};
use crate::auth::Caller;
use crate::cursor::PageRequest;
use crate::problem::ApiError;
use crate::unit_of_work::Mutation;
use crate::AppState;
use clinic_core::delivery::admin::{self};
use clinic_core::delivery::DeliveryStatus;
use clinic_core::ids::{MemberId, NotificationId};
use clinic_core::lease::ActionKind;
use clinic_core::operator::{ActionRequest, Operator};

pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    caller.require_admin()?;
    let page = PageRequest::parse(&query)?;
    let status = query
        .get("status")
        .map(|raw| DeliveryStatus::parse(raw).ok_or_else(|| bad("status", "must be a delivery status")))
        .transpose()?;
    let scope = format!("deliveries:{}:{}", caller.workspace_id, status.map_or("", DeliveryStatus::as_str));
    let before = page.after::<ulid::Ulid>(&state.api.cursor_key, &scope)?.map(NotificationId::from_ulid);
    let conn = state.pool.get().await?;
    let items = admin::list(&conn, Some(caller.workspace_id), status, before, page.limit).await?;
    Ok(page.answer(&state.api.cursor_key, &scope, &items, |item| item.id.ulid()))
}

async fn act(raw_id: String, request: Mutation, action: ActionKind) -> Result<Response, ApiError> {
    request.caller.require_admin()?;
    let reason = ActionRequest::from_body(action, request.json()?)?.reason;
    let id: NotificationId = path_id(&raw_id)?;
    let operator = Operator::member(MemberId::from_ulid(request.caller.subject));
    request
        .run(StatusCode::OK, async move |tx, ctx| {
            let workspace = Some(ctx.workspace_id);
            Ok(Acted(admin::perform(tx, workspace, id, action, &reason, &operator).await?))
        })
        .await
}

pub async fn retry(Path(id): Path<String>, request: Mutation) -> Result<Response, ApiError> {
    act(id, request, ActionKind::Retry).await
}

pub async fn discard(Path(id): Path<String>, request: Mutation) -> Result<Response, ApiError> {
    act(id, request, ActionKind::Discard).await
}
