//! Per-request plumbing: the correlation id, the request id, and the JSON body reader.
//!
//! Invariants: every response carries `X-Correlation-Id` — the caller's when it is a valid ULID or
//! UUID, otherwise a freshly issued ULID (an invalid value is never echoed). Bodies are read up to
//! 64 KiB (413 beyond), must be JSON when they have a content type (415 otherwise), and malformed JSON
//! answers 400.

use axum::body::{Body, Bytes};
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, HeaderName, HeaderValue};
use axum::middleware::Next;
use axum::response::Response;
use serde_json::Value;

use super::problem::ApiError;
use crate::ids::{CorrelationId, RequestId};

pub const CORRELATION_HEADER: HeaderName = HeaderName::from_static("x-correlation-id");
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// The ids of the request being served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestIds {
    pub correlation_id: CorrelationId,
    pub request_id: RequestId,
}

impl<S: Send + Sync> FromRequestParts<S> for RequestIds {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, ApiError> {
        Ok(parts.extensions.get::<RequestIds>().copied().unwrap_or_else(|| RequestIds {
            correlation_id: CorrelationId::generate(),
            request_id: RequestId::generate(),
        }))
    }
}

/// Middleware: assigns the request's ids and echoes the correlation id on the response.
pub async fn correlate(mut request: Request, next: Next) -> Response {
    let correlation_id = request
        .headers()
        .get(&CORRELATION_HEADER)
        .and_then(|value| value.to_str().ok())
        .and_then(CorrelationId::parse_header)
        .unwrap_or_else(CorrelationId::generate);
    let ids = RequestIds { correlation_id, request_id: RequestId::generate() };
    request.extensions_mut().insert(ids);
    let method = request.method().clone();
    // The route template (`/v1/patients/{id}`), never the concrete path or query.
    let route = request
        .extensions()
        .get::<axum::extract::MatchedPath>()
        .map(|path| path.as_str().to_owned())
        .unwrap_or_else(|| "unmatched".into());
    let started = std::time::Instant::now();
    let mut response = next.run(request).await;
    if let Ok(value) = HeaderValue::from_str(&correlation_id.to_string()) {
        response.headers_mut().insert(CORRELATION_HEADER, value);
    }
    tracing::info!(
        correlation_id = %correlation_id,
        request_id = %ids.request_id,
        method = %method,
        route = %route,
        status = response.status().as_u16(),
        elapsed_us = started.elapsed().as_micros() as u64,
        "request"
    );
    response
}

/// A JSON request body (an absent or empty body reads as `{}`).
#[derive(Debug, Clone)]
pub struct JsonBody {
    pub value: Value,
}

impl<S: Send + Sync> FromRequest<S> for JsonBody {
    type Rejection = ApiError;

    async fn from_request(request: Request, _state: &S) -> Result<Self, ApiError> {
        require_json_content(request.headers())?;
        let bytes = read_bytes(request.into_body()).await?;
        Ok(Self { value: parse_json(&bytes)? })
    }
}

/// A body with a content type must be JSON (`application/json` or `application/*+json`); 415 otherwise.
pub fn require_json_content(headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(content_type) = headers.get(header::CONTENT_TYPE) else {
        return Ok(());
    };
    let is_json = content_type
        .to_str()
        .ok()
        .and_then(|value| value.split(';').next())
        .map(|mime| {
            let mime = mime.trim().to_ascii_lowercase();
            mime == "application/json" || (mime.starts_with("application/") && mime.ends_with("+json"))
        })
        .unwrap_or(false);
    if is_json {
        Ok(())
    } else {
        Err(ApiError::UnsupportedMediaType)
    }
}

/// Reads a body of at most [`MAX_BODY_BYTES`] (413 beyond).
pub async fn read_bytes(body: Body) -> Result<Bytes, ApiError> {
    axum::body::to_bytes(body, MAX_BODY_BYTES).await.map_err(|_| ApiError::PayloadTooLarge)
}

/// Parses body bytes as JSON; whitespace only reads as `{}`, malformed JSON answers 400.
pub fn parse_json(bytes: &[u8]) -> Result<Value, ApiError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(Value::Object(Default::default()));
    }
    serde_json::from_slice(bytes).map_err(|_| ApiError::MalformedJson)
}

/// Rejects bodies over the limit before they are read, by their declared length.
pub async fn limit_body(request: Request<Body>, next: Next) -> Result<Response, ApiError> {
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse::<u64>().ok());
    if declared.is_some_and(|length| length > MAX_BODY_BYTES as u64) {
        return Err(ApiError::PayloadTooLarge);
    }
    Ok(next.run(request).await)
}
