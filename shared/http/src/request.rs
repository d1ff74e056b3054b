//! Per-request plumbing: who is calling, the correlation id, the request id, and the JSON body reader.
//!
//! Invariants: every response, a 401 included, carries `X-Correlation-Id` — an id this server issued,
//! tagged for the caller's workspace ([`super::correlation`]); a client's value is used only when it is
//! such a tag for the same workspace, and is never echoed otherwise. Bodies are read up to 64 KiB (413
//! beyond), must be JSON when they have a content type (415 otherwise), and malformed JSON answers 400.

use axum::body::{Body, Bytes};
use axum::extract::{FromRequest, FromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, HeaderName, HeaderValue};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use super::auth::{self, Caller};
use super::problem::ApiError;
use super::AppState;
use clinic_core::ids::{CorrelationId, RequestId};
use clinic_core::telemetry::{spans, TraceParent};

pub const CORRELATION_HEADER: HeaderName = HeaderName::from_static("x-correlation-id");
pub const TRACEPARENT_HEADER: HeaderName = HeaderName::from_static("traceparent");
pub const AMZN_TRACE_HEADER: HeaderName = HeaderName::from_static("x-amzn-trace-id");
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// The ids of the request being served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestIds {
    pub correlation_id: CorrelationId,
    pub request_id: RequestId,
    /// The trace context stored with the events the request commits ([`trace_context`]).
    pub trace: TraceParent,
}

impl<S: Send + Sync> FromRequestParts<S> for RequestIds {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, ApiError> {
        Ok(parts.extensions.get::<RequestIds>().copied().unwrap_or_else(|| RequestIds {
            correlation_id: CorrelationId::generate(),
            request_id: RequestId::generate(),
            trace: TraceParent::generate(),
        }))
    }
}

/// Middleware, outermost: identifies the caller ([`auth::identify`]), then decides the request's
/// correlation id for the caller's workspace, answers it in `X-Correlation-Id` and logs one line per
/// request (ids and the route template only).
pub async fn enter(State(state): State<AppState>, mut request: Request, next: Next) -> Response {
    let identified = auth::identify(&state, &mut request);
    let workspace = request.extensions().get::<Caller>().map(|caller| caller.workspace_id);
    let sent = request.headers().get(&CORRELATION_HEADER).and_then(|value| value.to_str().ok());
    let correlation = state.api.correlation.resolve(workspace, sent);
    let incoming = trace_context(request.headers());
    let method = request.method().clone();
    // The route template (`/v1/patients/{id}`), never the concrete path or query.
    let route = request
        .extensions()
        .get::<axum::extract::MatchedPath>()
        .map(|path| path.as_str().to_owned())
        .unwrap_or_else(|| "unmatched".into());
    let started = std::time::Instant::now();
    // Ids only (no path, query, header or body): the route template, the method and the request's ids.
    let span = tracing::info_span!(
        "request",
        method = %method,
        route = %route,
        correlation_id = %correlation.id,
        request_id = tracing::field::Empty,
        status = tracing::field::Empty,
    );
    let ids = RequestIds {
        correlation_id: correlation.id,
        request_id: RequestId::generate(),
        trace: spans::continue_trace(&span, incoming),
    };
    span.record("request_id", tracing::field::display(ids.request_id));
    request.extensions_mut().insert(ids);
    let mut response = match identified {
        Ok(()) => tracing::Instrument::instrument(next.run(request), span.clone()).await,
        Err(error) => error.into_response(),
    };
    span.record("status", response.status().as_u16());
    if let Ok(value) = HeaderValue::from_str(&correlation.header) {
        response.headers_mut().insert(CORRELATION_HEADER, value);
    }
    tracing::info!(
        correlation_id = %correlation.id,
        correlation_accepted = correlation.accepted,
        client_correlation_id = correlation.client.as_deref(),
        request_id = %ids.request_id,
        method = %method,
        route = %route,
        status = response.status().as_u16(),
        elapsed_us = started.elapsed().as_micros() as u64,
        "request"
    );
    response
}

/// The caller's trace context: a valid W3C `traceparent` header, else the X-Ray root of
/// `X-Amzn-Trace-Id`, else Lambda's `_X_AMZN_TRACE_ID` (set by the runtime for the invocation being
/// served). A header that does not parse is ignored — the request starts a fresh trace, it is never
/// refused — and is never stored ([`TraceParent`] holds only what parsed).
pub fn trace_context(headers: &HeaderMap) -> Option<TraceParent> {
    let header = |name: &HeaderName| headers.get(name).and_then(|value| value.to_str().ok());
    header(&TRACEPARENT_HEADER)
        .and_then(|value| TraceParent::parse(value.trim()))
        .or_else(|| header(&AMZN_TRACE_HEADER).and_then(TraceParent::from_amzn))
        // Not configuration: the Lambda runtime sets it anew for each invocation, so it is read per
        // request (the one live environment read below a `main`).
        .or_else(|| std::env::var("_X_AMZN_TRACE_ID").ok().as_deref().and_then(TraceParent::from_amzn))
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
