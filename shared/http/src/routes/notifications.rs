//! `GET /v1/notifications`: the workspace's delivery log, newest first; ids and templates only.

use std::collections::HashMap;

use axum::extract::{Query, State};
use axum::response::Response;

use crate::auth::Caller;
use crate::cursor::PageRequest;
use crate::document::{params, problems, schemas};
use crate::problem::ApiError;
use crate::AppState;
use clinic_core::ids::NotificationId;

#[utoipa::path(
    get,
    path = "/v1/notifications",
    operation_id = "listNotifications",
    summary = "The workspace's delivery log, newest first (ids only)",
    params(params::Limit, params::Cursor, params::CorrelationId),
    responses(
        (status = 200, description = "OK", body = schemas::NotificationList),
        problems::BadRequest, problems::Unauthorized, problems::Forbidden, problems::Unavailable
    )
)]
pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    caller.require_staff()?;
    let page = PageRequest::parse(&query)?;
    let scope = format!("notifications:{}", caller.workspace_id);
    let before = page.after::<ulid::Ulid>(&state.api.cursor_key, &scope)?.map(NotificationId::from_ulid);
    let conn = state.pool.get().await?;
    let items = clinic_core::delivery::list(&conn, caller.workspace_id, before, page.limit).await?;
    Ok(page.answer(&state.api.cursor_key, &scope, &items, |item| item.id.ulid()))
}
