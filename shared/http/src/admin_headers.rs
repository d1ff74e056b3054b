//! The headers of every admin answer: `X-Content-Type-Options: nosniff` and `Cache-Control:
//! no-store` on everything under `/v1/system/` and `/v1/webhooks/` (the operators' and the webhook
//! admins' routes), whatever the status — a 200, a problem document, a 401 or an unknown path.
//!
//! Invariant: an operator's answer (ids, statuses, codes, counts) is never stored by a browser or a
//! proxy cache, and never content-sniffed into something executable. One middleware on the router,
//! so a route added under these prefixes gets them without a line of its own.

use axum::extract::Request;
use axum::http::{header, HeaderValue};
use axum::middleware::Next;
use axum::response::Response;

/// The path prefixes whose answers are admin answers.
pub const ADMIN_PREFIXES: &[&str] = &["/v1/system/", "/v1/webhooks/"];

/// Whether `path` is under an admin prefix.
pub fn is_admin_path(path: &str) -> bool {
    ADMIN_PREFIXES.iter().any(|prefix| path.starts_with(prefix))
}

/// Middleware: sets both headers on an admin path's answer (replacing any value a handler set).
pub async fn admin_headers(request: Request, next: Next) -> Response {
    let admin = is_admin_path(request.uri().path());
    let mut response = next.run(request).await;
    if admin {
        let headers = response.headers_mut();
        headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    response
}
