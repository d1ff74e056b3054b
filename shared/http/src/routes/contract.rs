//! The published event contract, without authentication: `GET /asyncapi.yaml`,
//! `GET /schemas/events/{type}/{version}` (e.g. `appointment.created/v1.json`) and
//! `GET /schemas/cloudevent/{version}` and `GET /schemas/webhooks/{body}/{version}` (the heartbeat's
//! `data` and the id-only FHIR Bundle, e.g. `heartbeat/v1.json`). The documents are the generated ones
//! ([`clinic_core::contract::artifact`]), identical to the checked-in files (a test keeps them so).

use axum::extract::Path;
use axum::http::header;
use axum::response::{IntoResponse, Response};

use crate::problem::ApiError;
use clinic_core::contract;
use clinic_core::error::DomainError;

fn document(path: &str, content_type: &'static str) -> Result<Response, ApiError> {
    // An unknown type or version answers 404 like a missing resource.
    let body = contract::artifact(path).ok_or(ApiError::Domain(DomainError::NotFound))?;
    Ok(([(header::CONTENT_TYPE, content_type), (header::CACHE_CONTROL, "public, max-age=300")], body)
        .into_response())
}

pub async fn asyncapi() -> Result<Response, ApiError> {
    document(contract::ASYNCAPI_PATH, "application/yaml")
}

pub async fn event_schema(Path((event_type, version)): Path<(String, String)>) -> Result<Response, ApiError> {
    document(&format!("schemas/events/{event_type}/{version}"), "application/schema+json")
}

pub async fn cloudevent_schema(Path(version): Path<String>) -> Result<Response, ApiError> {
    document(&format!("schemas/cloudevent/{version}"), "application/schema+json")
}

pub async fn webhook_body_schema(
    Path((body, version)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    document(&format!("schemas/webhooks/{body}/{version}"), "application/schema+json")
}
