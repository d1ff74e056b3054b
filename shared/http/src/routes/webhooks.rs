//! `/v1/webhooks/endpoints…`: a workspace's webhook subscriptions, admin role only (403 otherwise).
//!
//! - `POST /v1/webhooks/endpoints` `{url, description?, eventTypes?}` → 201, the endpoint and its
//!   `secret` (`whsec_…`, shown this once). The URL passes the SSRF guard at save (422 naming `url`).
//! - `GET /v1/webhooks/endpoints`, `GET|PATCH|DELETE /v1/webhooks/endpoints/{id}` (PATCH: any of
//!   `url`, `description`, `eventTypes`, `enabled`).
//! - `POST /v1/webhooks/endpoints/{id}/rotate` `{overlapHours?}` (default 24, 0–168) → the new
//!   secret; the previous one keeps signing until the overlap ends.
//! - `POST /v1/webhooks/endpoints/{id}/recover` `{since}` → `{recovered}`: failed deliveries created
//!   since then are sent again (same `webhook-id`).
//! - `GET /v1/webhooks/deliveries?endpointId=&eventId=&status=&limit=` → the newest deliveries.
//!
//! Each change is one transaction with its audit row; another workspace's endpoint answers 404.

use std::collections::HashMap;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use super::{bad, path_id};
use crate::auth::Caller;
use crate::problem::ApiError;
use crate::request::JsonBody;
use crate::AppState;
use clinic_core::domain::input::FieldError;
use clinic_core::ids::{EventId, WebhookEndpointId};
use clinic_core::webhooks::endpoints::{self, EndpointChange, NewEndpoint};
use clinic_core::webhooks::{guard, store};

const STATUSES: &[&str] = &["pending", "sending", "delivered", "retry", "failed"];

fn actor(caller: &Caller) -> String {
    caller.subject.to_string()
}

/// The SSRF guard at save: the URL must resolve to allowed addresses now (422 naming `url`).
async fn check_url(state: &AppState, url: &str) -> Result<(), ApiError> {
    let check = guard::check_url(url, state.api.webhook_egress, &guard::SystemResolver);
    match tokio::time::timeout(std::time::Duration::from_secs(5), check).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(refused)) => Err(FieldError::new("url", refused.to_string()).into()),
        Err(_) => Err(FieldError::new("url", "the host did not resolve in time").into()),
    }
}

pub async fn create(
    State(state): State<AppState>,
    caller: Caller,
    body: JsonBody,
) -> Result<Response, ApiError> {
    caller.require_admin()?;
    let new = NewEndpoint::try_from(&body.value)?;
    check_url(&state, &new.url).await?;
    let mut conn = state.pool.get().await?;
    let tx = conn.transaction().await?;
    let created = endpoints::create(&tx, caller.workspace_id, &new, &actor(&caller)).await?;
    tx.commit().await?;
    Ok((StatusCode::CREATED, Json(created)).into_response())
}

pub async fn list(State(state): State<AppState>, caller: Caller) -> Result<Response, ApiError> {
    caller.require_admin()?;
    let conn = state.pool.get().await?;
    let items = endpoints::list(&conn, caller.workspace_id).await?;
    Ok(Json(json!({ "items": items, "nextCursor": null })).into_response())
}

pub async fn get_one(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    caller.require_admin()?;
    let id: WebhookEndpointId = path_id(&id)?;
    let conn = state.pool.get().await?;
    Ok(Json(endpoints::get(&conn, caller.workspace_id, id).await?).into_response())
}

pub async fn update(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    body: JsonBody,
) -> Result<Response, ApiError> {
    caller.require_admin()?;
    let change = EndpointChange::try_from(&body.value)?;
    let id: WebhookEndpointId = path_id(&id)?;
    if let Some(url) = &change.url {
        check_url(&state, url).await?;
    }
    let mut conn = state.pool.get().await?;
    let tx = conn.transaction().await?;
    let endpoint = endpoints::update(&tx, caller.workspace_id, id, &change, &actor(&caller)).await?;
    tx.commit().await?;
    Ok(Json(endpoint).into_response())
}

pub async fn delete(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    caller.require_admin()?;
    let id: WebhookEndpointId = path_id(&id)?;
    let mut conn = state.pool.get().await?;
    let tx = conn.transaction().await?;
    endpoints::delete(&tx, caller.workspace_id, id, &actor(&caller)).await?;
    tx.commit().await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

fn object_of(value: &Value, known: &[&str]) -> Result<serde_json::Map<String, Value>, FieldError> {
    let map = value.as_object().cloned().ok_or_else(|| FieldError::new("body", "must be a JSON object"))?;
    if let Some(key) = map.keys().find(|key| !known.contains(&key.as_str())) {
        return Err(FieldError::new(key.clone(), "is not a field of this request"));
    }
    Ok(map)
}

pub async fn rotate(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    body: axum::body::Bytes,
) -> Result<Response, ApiError> {
    caller.require_admin()?;
    // The body is optional here: none means the default overlap.
    let value = if body.iter().all(u8::is_ascii_whitespace) {
        json!({})
    } else {
        serde_json::from_slice(&body).map_err(|_| ApiError::MalformedJson)?
    };
    let map = object_of(&value, &["overlapHours"])?;
    let overlap = match map.get("overlapHours") {
        None => 24,
        Some(value) => value
            .as_number()
            .and_then(clinic_core::domain::input::integer)
            .ok_or_else(|| FieldError::new("overlapHours", "must be a whole number of hours"))?,
    };
    let id: WebhookEndpointId = path_id(&id)?;
    let mut conn = state.pool.get().await?;
    let tx = conn.transaction().await?;
    let rotated = endpoints::rotate(&tx, caller.workspace_id, id, overlap, &actor(&caller)).await?;
    tx.commit().await?;
    Ok(Json(rotated).into_response())
}

pub async fn recover(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    body: JsonBody,
) -> Result<Response, ApiError> {
    caller.require_admin()?;
    let map = object_of(&body.value, &["since"])?;
    let since = map
        .get("since")
        .and_then(Value::as_str)
        .and_then(|raw| chrono::DateTime::parse_from_rfc3339(raw).ok())
        .map(|at| at.with_timezone(&chrono::Utc))
        .ok_or_else(|| FieldError::new("since", "is required: an RFC 3339 time"))?;
    let id: WebhookEndpointId = path_id(&id)?;
    let mut conn = state.pool.get().await?;
    let tx = conn.transaction().await?;
    endpoints::get(&tx, caller.workspace_id, id).await?;
    let recovered = store::recover(&tx, caller.workspace_id, id, since).await?;
    endpoints::audit(
        &tx,
        caller.workspace_id,
        id,
        "recover",
        &actor(&caller),
        json!({ "recovered": recovered }),
    )
    .await?;
    tx.commit().await?;
    Ok(Json(json!({ "endpointId": id, "since": since, "recovered": recovered })).into_response())
}

pub async fn deliveries(
    State(state): State<AppState>,
    caller: Caller,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    caller.require_admin()?;
    let endpoint: Option<WebhookEndpointId> = query
        .get("endpointId")
        .map(|raw| raw.parse().map_err(|_| bad("endpointId", "must be a ULID")))
        .transpose()?;
    let event: Option<EventId> = query
        .get("eventId")
        .map(|raw| raw.parse().map_err(|_| bad("eventId", "must be a ULID")))
        .transpose()?;
    let status = query.get("status").map(String::as_str);
    if let Some(status) = status {
        if !STATUSES.contains(&status) {
            return Err(bad("status", "must be pending, sending, delivered, retry or failed"));
        }
    }
    let limit = match query.get("limit") {
        None => 50,
        Some(raw) => raw
            .parse::<i64>()
            .ok()
            .filter(|n| (1..=100).contains(n))
            .ok_or_else(|| bad("limit", "must be 1 to 100"))?,
    };
    let conn = state.pool.get().await?;
    let items = store::list(&conn, caller.workspace_id, endpoint, event, status, limit).await?;
    Ok(Json(json!({ "items": items, "nextCursor": null })).into_response())
}
