//! `GET /v1/system/rejections?eventId=&reason=&limit=&cursor=` (admin only): the caller's workspace's
//! recorded listener rejections (`listener_rejections`), newest first, with a sealed keyset cursor
//! bound to the filters. Ids and codes only. A rejection is filed under the stored event's workspace
//! (or, for an id that matches no event, the workspace the message claimed), so a forged message
//! that claims another tenant never appears in that tenant's list.

use std::collections::HashMap;

use axum::extract::{Query, State};
use axum::response::Response;

use super::bad;
use crate::auth::Caller;
use crate::cursor::PageRequest;
use crate::document::{params, problems, schemas};
use crate::problem::ApiError;
use crate::AppState;
use clinic_core::ids::{EventId, RejectionId};
use clinic_core::listeners::rejections::{self, RejectionFilter};
use clinic_core::listeners::Rejection;

#[utoipa::path(
    get,
    path = "/v1/system/rejections",
    operation_id = "listRejections",
    summary = "Recorded listener rejections of the workspace, newest first (admin only; ids and codes only)",
    params(params::RejectedEventId, params::Reason, params::RejectionLimit, params::RejectionCursor, params::CorrelationIdPlain),
    responses(
        (status = 200, description = "OK", body = schemas::RejectionList),
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
    let event_id = query
        .get("eventId")
        .map(|raw| raw.parse::<EventId>().map_err(|_| bad("eventId", "must be a ULID")))
        .transpose()?;
    let reason = query
        .get("reason")
        .map(|raw| Rejection::parse(raw).ok_or_else(|| bad("reason", "must be a rejection reason code")))
        .transpose()?;
    let scope = format!(
        "rejections:{}:{}",
        event_id.map(|id| id.to_string()).unwrap_or_default(),
        reason.map(Rejection::as_str).unwrap_or_default()
    );
    let before = page.after::<ulid::Ulid>(&state.api.cursor_key, &scope)?.map(RejectionId::from_ulid);
    let filter = RejectionFilter { workspace: Some(caller.workspace_id), event_id, reason, before };
    let conn = state.pool.get().await?;
    let items = rejections::list(&conn, &filter, page.limit).await?;
    Ok(page.answer(&state.api.cursor_key, &scope, &items, |item| item.id.ulid()))
}
