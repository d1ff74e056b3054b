//! `GET /healthz` (checks the database) and `GET /openapi.json`.

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::Json;
use serde_json::json;

use crate::http::problem::ApiError;
use crate::http::{AppState, OPENAPI_JSON};

pub async fn healthz(State(state): State<AppState>) -> Result<impl IntoResponse, ApiError> {
    let conn = state.pool.get().await?;
    conn.simple_query("SELECT 1").await?;
    Ok((StatusCode::OK, Json(json!({ "status": "ok", "database": "ok" }))))
}

pub async fn openapi() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "application/json")], OPENAPI_JSON)
}
