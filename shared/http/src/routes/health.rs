//! `GET /healthz` (liveness: the process answers; no database), `GET /readyz` (readiness: the
//! database answered a check within the readiness interval) and `GET /openapi.json`.

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::Json;
use serde_json::json;

use crate::problem::ApiError;
use crate::{AppState, OPENAPI_JSON};

pub async fn healthz() -> impl IntoResponse {
    (StatusCode::OK, Json(json!({ "status": "ok" })))
}

pub async fn readyz(State(state): State<AppState>) -> Result<impl IntoResponse, ApiError> {
    if state.api.readiness.is_ready(&state.pool).await {
        Ok((StatusCode::OK, Json(json!({ "status": "ok", "database": "ok" }))))
    } else {
        Err(ApiError::NotReady)
    }
}

pub async fn openapi() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "application/json")], OPENAPI_JSON)
}
