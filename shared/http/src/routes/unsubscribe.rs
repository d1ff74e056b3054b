//! One-click unsubscribe (RFC 8058, DESIGN §5e): `GET|POST /v1/unsubscribe/{token}`, the link an
//! email of an optional kind carries in `List-Unsubscribe`. No login: the token
//! ([`clinic_core::delivery::unsubscribe`]) is the only credential, and it can do one thing — opt its
//! patient out of its kind of message.
//!
//! Invariants:
//! - `GET` only shows a page with a button that POSTs; it verifies the token and writes nothing
//!   (mail scanners and link previews follow GETs).
//! - `POST` with the body `List-Unsubscribe=One-Click` (form-urlencoded, or the same field in
//!   multipart/form-data) adds the kind to the patient's `contactOptOuts` through
//!   [`patients::record_opt_out`] — the write path of the SMS provider's STOP: one
//!   `patient.updated` event naming `contactOptOuts`, actor the patient. A second POST finds it
//!   recorded and writes nothing; both answer 200.
//! - A bad, forged or expired token answers 400 naming `token`, a missing or wrong body 400 naming
//!   `List-Unsubscribe`; nothing is read from or written to the database.
//! - A patient deleted (erased) or never existing gets the same 200 page and nothing is written: the
//!   answer says nothing about whether the patient exists.
//! - The token is never logged: the request's log line and span carry the route template
//!   (`/v1/unsubscribe/{token}`), never the path; pages tell browsers not to send it on as a
//!   referrer and not to cache it.

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use super::super::problem::ApiError;
use super::super::request::{read_bytes, RequestIds};
use super::super::AppState;
use crate::document::{params, schemas};
use clinic_core::context::Ctx;
use clinic_core::delivery::unsubscribe::{Claims, TokenError};
use clinic_core::domain::contact::MessageKind;
use clinic_core::domain::input::FieldError;
use clinic_core::error::DomainError;
use clinic_core::events::{Actor, Cause};
use clinic_core::patients::{self, OptOut};

/// The one-click body (RFC 8058 §3.1).
const ONE_CLICK: &str = "List-Unsubscribe=One-Click";

fn claims(state: &AppState, token: &str) -> Result<Claims, ApiError> {
    let refused = |error: TokenError| ApiError::BadParameter(FieldError::new("token", error.to_string()));
    let keys = state.api.unsubscribe.as_ref().ok_or_else(|| refused(TokenError::Forged))?;
    keys.verify(token, chrono::Utc::now()).map_err(refused)
}

/// What the page calls a kind.
fn described(kind: MessageKind) -> &'static str {
    match kind {
        MessageKind::BookingConfirmation => "booking confirmations",
        MessageKind::ChangeNotice => "reschedule and cancellation notices",
        MessageKind::Reminder => "appointment reminders",
    }
}

fn page(title: &str, body: &str) -> Response {
    let html = format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <meta name=\"robots\" content=\"noindex\"><title>{title}</title></head>\
         <body style=\"font-family: sans-serif; max-width: 32em; margin: 3em auto\">\
         <h1>{title}</h1>{body}</body></html>\n"
    );
    let mut response = (StatusCode::OK, html).into_response();
    let headers = response.headers_mut();
    for (name, value) in [
        (header::CONTENT_TYPE, "text/html; charset=utf-8"),
        (header::CACHE_CONTROL, "no-store"),
        (header::REFERRER_POLICY, "no-referrer"),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (
            header::CONTENT_SECURITY_POLICY,
            "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'",
        ),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    response
}

/// `GET /v1/unsubscribe/{token}`: a page whose button POSTs the one-click body to the same address.
/// Writes nothing.
#[utoipa::path(
    get,
    path = "/v1/unsubscribe/{token}",
    operation_id = "unsubscribePage",
    summary = "One-click unsubscribe link of an email (RFC 8058), opened in a browser: a page whose button POSTs the one-click body; writes nothing (mail scanners follow links)",
    security(()),
    params(params::TokenInPath, params::CorrelationId),
    responses(
        (status = 200, description = "A page asking to confirm, with a button that POSTs List-Unsubscribe=One-Click to the same address", body = String, content_type = "text/html"),
        (status = 400, description = "The token is not one this service issued, or has expired (field token); nothing is written", body = schemas::Problem, content_type = "application/problem+json")
    )
)]
pub async fn confirm_page(
    State(state): State<AppState>,
    Path(token): Path<String>,
) -> Result<Response, ApiError> {
    let claims = claims(&state, &token)?;
    let what = described(claims.kind);
    Ok(page(
        "Unsubscribe",
        &format!(
            "<p>Stop receiving {what} by email from this clinic?</p>\
             <form method=\"post\"><input type=\"hidden\" name=\"List-Unsubscribe\" value=\"One-Click\">\
             <button type=\"submit\">Unsubscribe</button></form>"
        ),
    ))
}

/// True when `body` is the one-click body: `List-Unsubscribe=One-Click` form-urlencoded, or that
/// field in multipart/form-data (both are what RFC 8058's senders use).
fn is_one_click(headers: &HeaderMap, body: &[u8]) -> bool {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .map(|value| value.split(';').next().unwrap_or_default().trim().to_ascii_lowercase());
    match content_type.as_deref() {
        Some("application/x-www-form-urlencoded") => form_urlencoded::parse(body)
            .any(|(name, value)| name == "List-Unsubscribe" && value == "One-Click"),
        Some("multipart/form-data") => {
            let text = String::from_utf8_lossy(body);
            text.contains("name=\"List-Unsubscribe\"") && text.contains("One-Click")
        }
        _ => false,
    }
}

/// `POST /v1/unsubscribe/{token}`: opts the token's patient out of its kind; 200 whether it was
/// recorded now, before, or the patient is gone.
#[utoipa::path(
    post,
    path = "/v1/unsubscribe/{token}",
    operation_id = "unsubscribeOneClick",
    summary = "RFC 8058 one-click unsubscribe: opts the token's patient out of the token's kind of message (contactOptOuts); one patient.updated event by the patient; repeating it changes nothing",
    description = "No login: the token is the only credential. Answers 200 whether the opt-out was recorded now, before, or the patient no longer exists (the answer tells nothing about the patient). Rate: the stage's throttling applies (docs/delivery.md).",
    security(()),
    params(params::TokenInPath, params::CorrelationId),
    request_body(content = inline(schemas::OneClickForm), content_type = "application/x-www-form-urlencoded"),
    responses(
        (status = 200, description = "Unsubscribed (or already, or no such patient: the same answer)", body = String, content_type = "text/html"),
        (status = 400, description = "The token is not one this service issued, or has expired (field token); nothing is written; or the body is not List-Unsubscribe=One-Click (field List-Unsubscribe)", body = schemas::Problem, content_type = "application/problem+json"),
        (status = 413, description = "The request body exceeds 64 KiB", body = schemas::Problem, content_type = "application/problem+json")
    )
)]
pub async fn one_click(
    State(state): State<AppState>,
    ids: RequestIds,
    Path(token): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let claims = claims(&state, &token)?;
    if !is_one_click(&headers, &read_bytes(body).await?) {
        let message = format!("the body must be {ONE_CLICK} (application/x-www-form-urlencoded)");
        return Err(ApiError::BadParameter(FieldError::new("List-Unsubscribe", message)));
    }
    let ctx = Ctx {
        workspace_id: claims.workspace_id,
        cause: Cause {
            actor: Actor::Patient { id: claims.patient_id.ulid() },
            correlation_id: ids.correlation_id,
            causation_id: ids.request_id.into(),
            idempotency_key: None,
            trace: Some(ids.trace),
        },
    };
    let mut conn = state.pool.get().await?;
    let tx = conn.transaction().await?;
    let opt_out = OptOut::Kind(claims.kind);
    let recorded = match patients::record_opt_out(&tx, &ctx, claims.patient_id, opt_out).await {
        Ok(recorded) => recorded.is_some(),
        // Deleted, erased or never there: the same answer, nothing written.
        Err(DomainError::NotFound) => false,
        Err(error) => return Err(error.into()),
    };
    tx.commit().await?;
    tracing::info!(
        workspace_id = %claims.workspace_id,
        kind = claims.kind.as_str(),
        recorded,
        "one-click unsubscribe"
    );
    Ok(page(
        "Unsubscribed",
        &format!("<p>You will no longer receive {} by email from this clinic.</p>", described(claims.kind)),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_one_click_body_is_recognised_in_both_forms() {
        let form = |content_type: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(header::CONTENT_TYPE, HeaderValue::from_str(content_type).unwrap());
            headers
        };
        let urlencoded = form("application/x-www-form-urlencoded");
        assert!(is_one_click(&urlencoded, ONE_CLICK.as_bytes()));
        assert!(!is_one_click(&urlencoded, b"List-Unsubscribe=Maybe"));
        assert!(!is_one_click(&urlencoded, b""));
        assert!(!is_one_click(&HeaderMap::new(), ONE_CLICK.as_bytes()), "a content type is needed");
        assert!(!is_one_click(&form("application/json"), ONE_CLICK.as_bytes()));
        let multipart =
            "--b\r\nContent-Disposition: form-data; name=\"List-Unsubscribe\"\r\n\r\nOne-Click\r\n--b--\r\n";
        assert!(is_one_click(&form("multipart/form-data; boundary=b"), multipart.as_bytes()));
    }
}
