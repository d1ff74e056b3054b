//! The published event contract, without authentication: `GET /asyncapi.yaml`,
//! `GET /schemas/events/{type}/{version}` (e.g. `appointment.created/v1.json`) and
//! `GET /schemas/cloudevent/{version}` and `GET /schemas/webhooks/{body}/{version}` (the heartbeat's
//! `data` and the id-only FHIR Bundle, e.g. `heartbeat/v1.json`). The documents are the generated ones
//! ([`clinic_core::contract::artifact`]), identical to the checked-in files (a test keeps them so).

use axum::extract::Path;
use axum::http::header;
use axum::response::{IntoResponse, Response};

use crate::document::{params, schemas};
use crate::problem::ApiError;
use clinic_core::contract;
use clinic_core::error::DomainError;

fn document(path: &str, content_type: &'static str) -> Result<Response, ApiError> {
    // An unknown type or version answers 404 like a missing resource.
    let body = contract::artifact(path).ok_or(ApiError::Domain(DomainError::NotFound))?;
    Ok(([(header::CONTENT_TYPE, content_type), (header::CACHE_CONTROL, "public, max-age=300")], body)
        .into_response())
}

#[utoipa::path(
    get,
    path = "/asyncapi.yaml",
    operation_id = "asyncapi",
    summary = "The AsyncAPI 3.0.0 document of the published events (generated; docs/events.md)",
    security(()),
    responses(
        (status = 200, description = "AsyncAPI document", body = inline(schemas::AsyncApiDocument), content_type = "application/yaml")
    )
)]
pub async fn asyncapi() -> Result<Response, ApiError> {
    document(contract::ASYNCAPI_PATH, "application/yaml")
}

#[utoipa::path(
    get,
    path = "/schemas/events/{type}/{version}",
    operation_id = "eventSchema",
    summary = "The JSON Schema (2020-12) of one version of one event type: every CloudEvent's dataschema",
    security(()),
    params(params::TypeInPath, params::VersionInPath),
    responses(
        (status = 200, description = "JSON Schema", body = inline(schemas::JsonObject), content_type = "application/schema+json"),
        (status = 404, description = "No such event type or version", body = schemas::Problem, content_type = "application/problem+json")
    )
)]
pub async fn event_schema(Path((event_type, version)): Path<(String, String)>) -> Result<Response, ApiError> {
    document(&format!("schemas/events/{event_type}/{version}"), "application/schema+json")
}

#[utoipa::path(
    get,
    path = "/schemas/cloudevent/{version}",
    operation_id = "cloudEventSchema",
    summary = "The JSON Schema (2020-12) of the CloudEvent wrapper",
    security(()),
    params(params::VersionInPath),
    responses(
        (status = 200, description = "JSON Schema", body = inline(schemas::JsonObject), content_type = "application/schema+json"),
        (status = 404, description = "No such version", body = schemas::Problem, content_type = "application/problem+json")
    )
)]
pub async fn cloudevent_schema(Path(version): Path<String>) -> Result<Response, ApiError> {
    document(&format!("schemas/cloudevent/{version}"), "application/schema+json")
}

#[utoipa::path(
    get,
    path = "/schemas/webhooks/{body}/{version}",
    operation_id = "webhookBodySchema",
    summary = "The JSON Schema (2020-12) of a webhook body that is not an event's CloudEvent: the heartbeat's data (heartbeat) or the id-only FHIR Bundle (fhir-id-only)",
    security(()),
    params(params::BodyInPath, params::VersionInPath),
    responses(
        (status = 200, description = "JSON Schema", body = inline(schemas::JsonObject), content_type = "application/schema+json"),
        (status = 404, description = "No such body or version", body = schemas::Problem, content_type = "application/problem+json")
    )
)]
pub async fn webhook_body_schema(
    Path((body, version)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    document(&format!("schemas/webhooks/{body}/{version}"), "application/schema+json")
}
