//! `GET /healthz` (liveness: the process answers; no database), `GET /readyz` (readiness: the
//! database answered a check within the readiness interval) and `GET /openapi.json`.

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::Json;

use crate::document::{params, schemas};
use crate::problem::ApiError;
use crate::{AppState, OPENAPI_JSON};

// The answer of both probes. Its schema is the document's `Health` component, derived from this type
// (`//` comments: a `///` would become the schema's description).
#[derive(serde::Serialize, utoipa::ToSchema)]
pub struct Health {
    status: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    database: Option<&'static str>,
}

#[utoipa::path(
    get,
    path = "/healthz",
    operation_id = "healthz",
    summary = "Liveness: the process answers (never touches the database)",
    security(()),
    params(params::CorrelationId),
    responses(
        (status = 200, description = "OK", body = schemas::Health)
    )
)]
pub async fn healthz() -> impl IntoResponse {
    (StatusCode::OK, Json(Health { status: "ok", database: None }))
}

#[utoipa::path(
    get,
    path = "/readyz",
    operation_id = "readyz",
    summary = "Readiness: the database answered a check (at most one check per CLINIC_READINESS_INTERVAL_SECS per process; the answer is cached)",
    security(()),
    params(params::CorrelationId),
    responses(
        (status = 200, description = "OK", body = schemas::Health),
        (status = 503, description = "The database did not answer the readiness check", body = schemas::Problem, content_type = "application/problem+json")
    )
)]
pub async fn readyz(State(state): State<AppState>) -> Result<impl IntoResponse, ApiError> {
    if state.api.readiness.is_ready(&state.pool).await {
        Ok((StatusCode::OK, Json(Health { status: "ok", database: Some("ok") })))
    } else {
        Err(ApiError::NotReady)
    }
}

#[utoipa::path(
    get,
    path = "/openapi.json",
    operation_id = "openapi",
    summary = "This document",
    security(()),
    responses(
        (status = 200, description = "OpenAPI document", body = inline(schemas::JsonObject), content_type = "application/json")
    )
)]
pub async fn openapi() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "application/json")], OPENAPI_JSON)
}
