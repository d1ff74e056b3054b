//! Timelines: a resource's events, newest first, with signed keyset cursors.
//!
//! A timeline with no events in the caller's workspace answers 404 — so another workspace's ids and
//! ids never used look the same — and a deleted patient's timeline stays readable.

use std::collections::HashMap;

use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;
use ulid::Ulid;

use super::path_id;
use crate::domain::input::FieldError;
use crate::error::DomainError;
use crate::events::{read, ResourceType};
use crate::http::auth::Caller;
use crate::http::problem::ApiError;
use crate::http::{cursor, AppState};
use crate::ids::EventId;

/// A page request: `limit` 1–100 (default 50) and an optional cursor.
pub struct PageRequest {
    pub limit: i64,
    pub cursor: Option<String>,
}

impl PageRequest {
    pub fn parse(query: &HashMap<String, String>) -> Result<Self, ApiError> {
        let limit = match query.get("limit") {
            None => 50,
            Some(raw) => {
                raw.parse::<i64>().ok().filter(|limit| (1..=100).contains(limit)).ok_or_else(|| {
                    ApiError::BadParameter(FieldError::new("limit", "must be an integer from 1 to 100"))
                })?
            }
        };
        Ok(Self { limit, cursor: query.get("cursor").cloned() })
    }

    /// Decodes the cursor for `scope`; one this server did not issue answers 400.
    pub fn after(&self, key: &[u8], scope: &str) -> Result<Option<Ulid>, ApiError> {
        self.cursor
            .as_deref()
            .map(|raw| {
                cursor::decode(key, scope, raw).ok_or_else(|| {
                    ApiError::BadParameter(FieldError::new("cursor", "is not a cursor this server issued"))
                })
            })
            .transpose()
    }
}

async fn timeline(
    state: AppState,
    caller: Caller,
    resource_type: ResourceType,
    raw_id: String,
    query: HashMap<String, String>,
) -> Result<Response, ApiError> {
    caller.require_staff()?;
    let resource_id: Ulid = path_id(&raw_id)?;
    let page = PageRequest::parse(&query)?;
    let scope = format!("timeline:{}:{}:{}", caller.workspace_id, resource_type.as_str(), resource_id);
    let before = page.after(&state.api.cursor_key, &scope)?.map(EventId::from_ulid);
    let conn = state.pool.get().await?;
    let events =
        read::timeline(&conn, caller.workspace_id, resource_type, resource_id, before, page.limit).await?;
    if events.is_empty() && before.is_none() {
        return Err(DomainError::NotFound.into());
    }
    let next_cursor = (events.len() as i64 == page.limit)
        .then(|| events.last().map(|last| cursor::encode(&state.api.cursor_key, &scope, last.id.ulid())))
        .flatten();
    Ok(Json(json!({ "items": events, "nextCursor": next_cursor })).into_response())
}

pub async fn patient(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    timeline(state, caller, ResourceType::Patient, id, query).await
}

pub async fn practitioner(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    timeline(state, caller, ResourceType::Practitioner, id, query).await
}

pub async fn appointment(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    timeline(state, caller, ResourceType::Appointment, id, query).await
}
