//! `GET /v1/notifications`: the workspace's delivery log, newest first; ids and templates only.

use std::collections::HashMap;

use axum::extract::{Query, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use super::timelines::PageRequest;
use crate::http::auth::Caller;
use crate::http::problem::ApiError;
use crate::http::{cursor, AppState};
use crate::ids::NotificationId;

pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    caller.require_staff()?;
    let page = PageRequest::parse(&query)?;
    let scope = format!("notifications:{}", caller.workspace_id);
    let before = page.after(&state.api.cursor_key, &scope)?.map(NotificationId::from_ulid);
    let conn = state.pool.get().await?;
    let items = crate::delivery::list(&conn, caller.workspace_id, before, page.limit).await?;
    let next_cursor = (items.len() as i64 == page.limit)
        .then(|| items.last().map(|last| cursor::encode(&state.api.cursor_key, &scope, last.id.ulid())))
        .flatten();
    Ok(Json(json!({ "items": items, "nextCursor": next_cursor })).into_response())
}
