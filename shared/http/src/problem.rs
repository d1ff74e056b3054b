//! `ApiError`: the one place that decides an HTTP status and its RFC 9457 problem document.
//!
//! Invariants: a problem document never carries a stack trace, SQL text or input values — only a
//! stable `type`, a `title`, a `detail` written here, the offending field's name, and the correlation
//! id. Server-side failures are logged with the error (ids only) and answered generically.

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};

use clinic_core::domain::input::FieldError;
use clinic_core::error::DomainError;

/// Everything an API handler can fail with.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("malformed JSON body")]
    MalformedJson,
    #[error("body too large")]
    PayloadTooLarge,
    #[error("unsupported media type")]
    UnsupportedMediaType,
    #[error("invalid parameter {0}")]
    BadParameter(FieldError),
    #[error("authentication required")]
    Unauthenticated,
    #[error("idempotency key reused with a different request")]
    IdempotencyMismatch,
    #[error("invalid idempotency key")]
    BadIdempotencyKey,
    #[error("no such route")]
    NoRoute,
    #[error("method not allowed")]
    MethodNotAllowed,
    #[error("the database did not pass the readiness check")]
    NotReady,
    /// A verified token whose workspace does not exist.
    #[error("unknown workspace")]
    UnknownWorkspace,
    #[error(transparent)]
    Domain(#[from] DomainError),
}

impl From<FieldError> for ApiError {
    fn from(error: FieldError) -> Self {
        ApiError::Domain(DomainError::Invalid(error))
    }
}

impl From<tokio_postgres::Error> for ApiError {
    fn from(error: tokio_postgres::Error) -> Self {
        ApiError::Domain(DomainError::Db(error))
    }
}

impl From<deadpool_postgres::PoolError> for ApiError {
    fn from(error: deadpool_postgres::PoolError) -> Self {
        ApiError::Domain(DomainError::Unavailable(error))
    }
}

impl From<clinic_core::events::read::ReadError> for ApiError {
    fn from(error: clinic_core::events::read::ReadError) -> Self {
        match error {
            clinic_core::events::read::ReadError::Db(db) => db.into(),
            clinic_core::events::read::ReadError::Unreadable(unreadable) => {
                tracing::error!(error = %unreadable, "stored event cannot be read");
                ApiError::Domain(DomainError::Conflict("stored event cannot be read".into()))
            }
        }
    }
}

struct Problem {
    status: StatusCode,
    slug: &'static str,
    title: &'static str,
    detail: String,
    field: Option<String>,
}

impl ApiError {
    fn problem(&self) -> Problem {
        let problem =
            |status, slug, title, detail: String| Problem { status, slug, title, detail, field: None };
        match self {
            ApiError::MalformedJson => problem(
                StatusCode::BAD_REQUEST,
                "malformed-json",
                "Malformed JSON",
                "The request body is not valid JSON.".into(),
            ),
            ApiError::PayloadTooLarge => problem(
                StatusCode::PAYLOAD_TOO_LARGE,
                "payload-too-large",
                "Payload too large",
                "The request body exceeds 64 KiB.".into(),
            ),
            ApiError::UnsupportedMediaType => problem(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported-media-type",
                "Unsupported media type",
                "Send the body as application/json.".into(),
            ),
            ApiError::BadParameter(error) => Problem {
                field: Some(error.field.clone()),
                ..problem(
                    StatusCode::BAD_REQUEST,
                    "invalid-parameter",
                    "Invalid parameter",
                    error.to_string(),
                )
            },
            ApiError::Unauthenticated => problem(
                StatusCode::UNAUTHORIZED,
                "unauthenticated",
                "Authentication required",
                "Send a valid bearer token.".into(),
            ),
            ApiError::IdempotencyMismatch => Problem {
                field: Some("Idempotency-Key".into()),
                ..problem(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "idempotency-key-reused",
                    "Idempotency key reused",
                    "This Idempotency-Key was used with a different request.".into(),
                )
            },
            ApiError::BadIdempotencyKey => Problem {
                field: Some("Idempotency-Key".into()),
                ..problem(
                    StatusCode::BAD_REQUEST,
                    "invalid-idempotency-key",
                    "Invalid idempotency key",
                    "Idempotency-Key must be 1 to 255 visible ASCII characters.".into(),
                )
            },
            ApiError::NotReady => problem(
                StatusCode::SERVICE_UNAVAILABLE,
                "not-ready",
                "Not ready",
                "The database did not answer the readiness check.".into(),
            ),
            ApiError::UnknownWorkspace => unknown_workspace(),
            ApiError::NoRoute => {
                problem(StatusCode::NOT_FOUND, "no-route", "Not found", "No such route.".into())
            }
            ApiError::MethodNotAllowed => problem(
                StatusCode::METHOD_NOT_ALLOWED,
                "method-not-allowed",
                "Method not allowed",
                "This route does not accept that method.".into(),
            ),
            ApiError::Domain(error) => domain_problem(error),
        }
    }
}

fn domain_problem(error: &DomainError) -> Problem {
    let problem = |status, slug, title, detail: String| Problem { status, slug, title, detail, field: None };
    match error {
        DomainError::Invalid(field) => Problem {
            field: Some(field.field.clone()),
            ..problem(StatusCode::UNPROCESSABLE_ENTITY, "validation", "Invalid request", field.to_string())
        },
        DomainError::NotFound => {
            problem(StatusCode::NOT_FOUND, "not-found", "Not found", "No such resource.".into())
        }
        DomainError::Forbidden => {
            problem(StatusCode::FORBIDDEN, "forbidden", "Forbidden", "Your role does not allow this.".into())
        }
        DomainError::VersionMismatch { .. } => Problem {
            field: Some("expectedVersion".into()),
            ..problem(StatusCode::CONFLICT, "version-mismatch", "Version mismatch", error.to_string())
        },
        DomainError::DoubleBooked => {
            problem(StatusCode::CONFLICT, "double-booked", "Double booking", error.to_string())
        }
        DomainError::PractitionerInactive => Problem {
            field: Some("practitionerId".into()),
            ..problem(
                StatusCode::CONFLICT,
                "practitioner-inactive",
                "Practitioner inactive",
                error.to_string(),
            )
        },
        DomainError::InvalidTransition { .. } => {
            problem(StatusCode::CONFLICT, "invalid-transition", "Invalid status change", error.to_string())
        }
        DomainError::PatientDeleted => {
            problem(StatusCode::CONFLICT, "patient-deleted", "Patient deleted", error.to_string())
        }
        DomainError::UnknownListeners(_) => Problem {
            field: Some("listeners".into()),
            ..problem(StatusCode::CONFLICT, "unknown-listeners", "Unknown listeners", error.to_string())
        },
        DomainError::Conflict(detail) => {
            problem(StatusCode::CONFLICT, "conflict", "Conflict", detail.clone())
        }
        DomainError::Unavailable(_) => unavailable(),
        DomainError::SealingUnavailable => Problem {
            detail: "Webhook secrets cannot be sealed now; retry with the same Idempotency-Key.".into(),
            ..unavailable()
        },
        DomainError::Db(db) if clinic_core::db::is_transient(db) => unavailable(),
        // V16's erasure trigger, reached by a path that did not check first: the same answer.
        DomainError::Db(db)
            if clinic_core::db::violated_constraint(db) == Some(clinic_core::db::PATIENT_ERASED) =>
        {
            domain_problem(&DomainError::PatientDeleted)
        }
        DomainError::Db(db) if is_unknown_workspace(db) => unknown_workspace(),
        DomainError::Db(_) => problem(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "Internal error",
            "Something went wrong on our side; quote the correlation id.".into(),
        ),
    }
}

fn unknown_workspace() -> Problem {
    Problem {
        status: StatusCode::FORBIDDEN,
        slug: "unknown-workspace",
        title: "Unknown workspace",
        detail: "The workspace in your token is not provisioned.".into(),
        field: None,
    }
}

fn unavailable() -> Problem {
    Problem {
        status: StatusCode::SERVICE_UNAVAILABLE,
        slug: "unavailable",
        title: "Service unavailable",
        detail: "The database is unavailable; retry with the same Idempotency-Key.".into(),
        field: None,
    }
}

fn is_unknown_workspace(error: &tokio_postgres::Error) -> bool {
    error.code() == Some(&tokio_postgres::error::SqlState::FOREIGN_KEY_VIOLATION)
        && clinic_core::db::violated_constraint(error)
            .is_some_and(|name| name.ends_with("_workspace_id_fkey"))
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let problem = self.problem();
        if problem.status.is_server_error() {
            // The error text of a database failure names constraints and codes, never row values.
            tracing::error!(status = problem.status.as_u16(), error = %self, "request failed");
        }
        problem_response(problem)
    }
}

// The body of every error answer (RFC 9457). Its schema is the OpenAPI document's `Problem`
// component, derived from this type (`//` comments: a `///` would become the schema's description).
#[derive(serde::Serialize, utoipa::ToSchema)]
#[schema(as = Problem)]
pub struct ProblemBody {
    #[serde(rename = "type")]
    kind: String,
    title: &'static str,
    #[schema(schema_with = crate::document::integer)]
    status: u16,
    detail: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    field: Option<String>,
}

fn problem_response(problem: Problem) -> Response {
    let body = ProblemBody {
        kind: format!("urn:clinic:problem:{}", problem.slug),
        title: problem.title,
        status: problem.status.as_u16(),
        detail: problem.detail,
        field: problem.field,
    };
    let body = serde_json::to_string(&body).expect("a problem serialises");
    let mut response = (problem.status, body).into_response();
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, header::HeaderValue::from_static("application/problem+json"));
    if problem.status == StatusCode::SERVICE_UNAVAILABLE {
        response.headers_mut().insert(header::RETRY_AFTER, header::HeaderValue::from_static("1"));
    }
    response
}

/// Middleware: an error answered by axum itself rather than by [`ApiError`] — a path parameter that is
/// not UTF-8, for example, which axum rejects with a `text/plain` message — becomes a problem document
/// with the same status, so every error a client sees has one shape and none echoes its input.
pub async fn problem_for_bare_errors(
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let response = next.run(request).await;
    let status = response.status();
    let is_problem = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|value| value.as_bytes().starts_with(b"application/problem+json"));
    if !(status.is_client_error() || status.is_server_error()) || is_problem {
        return response;
    }
    let problem = match status {
        StatusCode::NOT_FOUND => ApiError::NoRoute.problem(),
        StatusCode::METHOD_NOT_ALLOWED => ApiError::MethodNotAllowed.problem(),
        StatusCode::PAYLOAD_TOO_LARGE => ApiError::PayloadTooLarge.problem(),
        StatusCode::UNSUPPORTED_MEDIA_TYPE => ApiError::UnsupportedMediaType.problem(),
        status if status.is_server_error() => Problem {
            status,
            slug: "internal",
            title: "Internal error",
            detail: "Something went wrong on our side; quote the correlation id.".into(),
            field: None,
        },
        status => Problem {
            status,
            slug: "invalid-request",
            title: "Invalid request",
            detail: "The request could not be read (path, query or headers).".into(),
            field: None,
        },
    };
    problem_response(problem)
}
