//! `/console`: the operators' web console — one HTML page, four small scripts (loaded in order with
//! `defer`: shared helpers, the explain view, the queue views, the page's start-up) and one
//! stylesheet, embedded in the binary (`include_str!`), served without a caller (the page holds no data; every call it makes
//! goes to the admin API with the bearer token the operator pastes, kept in `sessionStorage`).
//!
//! Every asset answers `Content-Security-Policy: default-src 'self'` (no inline script or style, no
//! other origin), `X-Content-Type-Options: nosniff` and `Cache-Control: no-store`.

use crate::document::params;
use axum::http::header;
use axum::response::{IntoResponse, Response};

pub const CSP: &str = "default-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'";

const PAGE: &str = include_str!("../console/index.html");
const SCRIPT: &str = include_str!("../console/console.js");
const CORE: &str = include_str!("../console/console-core.js");
const EXPLAIN: &str = include_str!("../console/console-explain.js");
const QUEUES: &str = include_str!("../console/console-queues.js");
const STYLE: &str = include_str!("../console/console.css");

fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CONTENT_SECURITY_POLICY, CSP),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::CACHE_CONTROL, "no-store"),
            (header::REFERRER_POLICY, "no-referrer"),
        ],
        body,
    )
        .into_response()
}

#[utoipa::path(
    get,
    path = "/console",
    operation_id = "consolePage",
    summary = "The operators' web console page (no token needed: it holds no data)",
    security(()),
    params(params::CorrelationId),
    responses(
        (status = 200, description = "The asset, with Content-Security-Policy: default-src 'self'", body = String, content_type = "text/html")
    )
)]
pub async fn page() -> Response {
    asset("text/html; charset=utf-8", PAGE)
}

#[utoipa::path(
    get,
    path = "/console/console.js",
    operation_id = "consoleScript",
    summary = "The console's script (no token needed: it holds no data)",
    security(()),
    params(params::CorrelationId),
    responses(
        (status = 200, description = "The asset, with Content-Security-Policy: default-src 'self'", body = String, content_type = "text/javascript")
    )
)]
pub async fn script() -> Response {
    asset("text/javascript; charset=utf-8", SCRIPT)
}

#[utoipa::path(
    get,
    path = "/console/console-core.js",
    operation_id = "consoleScriptCore",
    summary = "The console's script: shared helpers: the API call, rendering, times (no token needed: it holds no data)",
    security(()),
    params(params::CorrelationId),
    responses(
        (status = 200, description = "The asset, with Content-Security-Policy: default-src 'self'", body = String, content_type = "text/javascript")
    )
)]
pub async fn core() -> Response {
    asset("text/javascript; charset=utf-8", CORE)
}

#[utoipa::path(
    get,
    path = "/console/console-explain.js",
    operation_id = "consoleScriptExplain",
    summary = "The console's script: the explain view (no token needed: it holds no data)",
    security(()),
    params(params::CorrelationId),
    responses(
        (status = 200, description = "The asset, with Content-Security-Policy: default-src 'self'", body = String, content_type = "text/javascript")
    )
)]
pub async fn explain() -> Response {
    asset("text/javascript; charset=utf-8", EXPLAIN)
}

#[utoipa::path(
    get,
    path = "/console/console-queues.js",
    operation_id = "consoleScriptQueues",
    summary = "The console's script: the queue views and their actions (no token needed: it holds no data)",
    security(()),
    params(params::CorrelationId),
    responses(
        (status = 200, description = "The asset, with Content-Security-Policy: default-src 'self'", body = String, content_type = "text/javascript")
    )
)]
pub async fn queues() -> Response {
    asset("text/javascript; charset=utf-8", QUEUES)
}

#[utoipa::path(
    get,
    path = "/console/console.css",
    operation_id = "consoleStyle",
    summary = "The console's stylesheet (no token needed: it holds no data)",
    security(()),
    params(params::CorrelationId),
    responses(
        (status = 200, description = "The asset, with Content-Security-Policy: default-src 'self'", body = String, content_type = "text/css")
    )
)]
pub async fn style() -> Response {
    asset("text/css; charset=utf-8", STYLE)
}
