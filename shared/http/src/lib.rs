//! The HTTP API (`clinic-http`): one axum `Router`, served by `lambda_http` in Lambda and by a TCP
//! listener locally. Its own crate on top of `clinic-core`, so that only the API Lambda, `clinic dev`
//! and the drills link axum, the token verifier, the console and the OpenAPI document; the dispatcher
//! and listener Lambdas do not (`tests/run` checks it with `cargo tree`).
//!
//! Invariants:
//! - Every response, including errors and unknown routes, carries `X-Correlation-Id`, an id this server
//!   issued for the caller's workspace ([`correlation`]).
//! - Every error is an `application/problem+json` document built by [`problem::ApiError`].
//! - Every query is scoped to the caller's workspace; another workspace's resource answers 404.
//! - Every answer under `/v1/system/` and `/v1/webhooks/` is `nosniff` and `no-store`
//!   ([`admin_headers`]).
//! - A route is registered only with its OpenAPI operation (`utoipa_axum::routes!` over handlers
//!   annotated `#[utoipa::path]`); [`ROUTES`] is read from that generated document, and a test keeps
//!   it, the router and the published OpenAPI document in agreement.

pub mod admin_headers;
pub mod auth;
pub mod config;
pub mod correlation;
pub mod cursor;
pub mod document;
pub mod idempotency;
pub mod jwt;
pub mod problem;
pub mod readiness;
pub mod request;
mod routes;
pub mod unit_of_work;

use axum::middleware::{from_fn, from_fn_with_state};
use std::sync::LazyLock;

use axum::Router;
use deadpool_postgres::Pool;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub use config::{ApiConfig, ApiSettings, AuthConfig, KeyArns, LambdaKeys, LocalKeys};
use problem::ApiError;

/// What every handler shares: the pool and the API settings.
#[derive(Clone)]
pub struct AppState {
    pub pool: Pool,
    pub api: ApiConfig,
}

/// Every implemented route as (method, path template), in OpenAPI spelling: read from the document
/// the router generates ([`generated_openapi`]), so it cannot list a route the router lacks. The
/// strings are leaked once per process (67 short ones) so that the table stays `&'static str` pairs.
pub static ROUTES: LazyLock<Vec<(&'static str, &'static str)>> = LazyLock::new(|| {
    let document = generated_openapi();
    let mut routes = Vec::new();
    for (path, item) in &document.paths.paths {
        let path: &'static str = String::leak(path.clone());
        let operations = [
            ("get", &item.get),
            ("put", &item.put),
            ("post", &item.post),
            ("delete", &item.delete),
            ("patch", &item.patch),
            ("head", &item.head),
            ("options", &item.options),
            ("trace", &item.trace),
        ];
        for (method, operation) in operations {
            if operation.is_some() {
                routes.push((method, path));
            }
        }
    }
    routes
});

/// The OpenAPI document served at `/openapi.json`: the generated one ([`openapi_document`]), checked
/// in; a test fails when it drifts, and `UPDATE_OPENAPI=1 cargo test -p clinic-http --test api --
/// openapi` rewrites it.
pub const OPENAPI_JSON: &str = include_str!("openapi.json");

/// The routes and their operations' document from one list (STYLE.md pattern 27): each handler's
/// `#[utoipa::path(…)]` names its method and path, and `routes!` registers it with the router and its
/// operation with the document at once, so a route cannot exist without its document entry.
fn api() -> OpenApiRouter<AppState> {
    use routes::{
        appointments, console, contract, deliveries, health, lists, notifications, outbox, patients,
        practitioners, recovery, timelines, unsubscribe, webhooks,
    };
    OpenApiRouter::new()
        .routes(routes!(health::healthz))
        .routes(routes!(health::readyz))
        .routes(routes!(health::openapi))
        .routes(routes!(contract::asyncapi))
        .routes(routes!(contract::event_schema))
        .routes(routes!(contract::cloudevent_schema))
        .routes(routes!(contract::webhook_body_schema))
        .routes(routes!(patients::create, lists::search_patients))
        .routes(routes!(patients::get_one, patients::update, patients::delete))
        .routes(routes!(timelines::patient))
        .routes(routes!(routes::disclosures::list))
        .routes(routes!(practitioners::create, lists::practitioners))
        .routes(routes!(practitioners::get_one, practitioners::update))
        .routes(routes!(timelines::practitioner))
        .routes(routes!(appointments::create, lists::schedule))
        .routes(routes!(appointments::get_one))
        .routes(routes!(appointments::reschedule))
        .routes(routes!(appointments::cancel))
        .routes(routes!(appointments::complete))
        .routes(routes!(timelines::appointment))
        .routes(routes!(notifications::list))
        .routes(routes!(outbox::list))
        .routes(routes!(outbox::unsettled))
        .routes(routes!(outbox::retry))
        .routes(routes!(outbox::replay))
        .routes(routes!(outbox::discard))
        .routes(routes!(recovery::bulk_retry))
        .routes(routes!(recovery::bulk_replay))
        .routes(routes!(recovery::bulk_discard))
        .routes(routes!(recovery::explain))
        .routes(routes!(recovery::overview))
        .routes(routes!(routes::rejections::list))
        .routes(routes!(recovery::listener_list))
        .routes(routes!(recovery::pause_listener))
        .routes(routes!(recovery::resume_listener))
        .routes(routes!(console::page))
        .routes(routes!(console::script))
        .routes(routes!(console::core))
        .routes(routes!(console::explain))
        .routes(routes!(console::queues))
        .routes(routes!(console::style))
        .routes(routes!(deliveries::list))
        .routes(routes!(deliveries::retry))
        .routes(routes!(deliveries::discard))
        .routes(routes!(deliveries::bulk_retry))
        .routes(routes!(deliveries::bulk_discard))
        .routes(routes!(webhooks::retry_delivery))
        .routes(routes!(webhooks::discard_delivery))
        .routes(routes!(webhooks::bulk_retry))
        .routes(routes!(webhooks::bulk_discard))
        .routes(routes!(webhooks::create, webhooks::list))
        .routes(routes!(webhooks::get_one, webhooks::update, webhooks::delete))
        .routes(routes!(webhooks::rotate))
        .routes(routes!(webhooks::recover))
        .routes(routes!(webhooks::replay))
        .routes(routes!(webhooks::deliveries))
        .routes(routes!(unsubscribe::confirm_page, unsubscribe::one_click))
}

/// The OpenAPI document generated from the router's handlers (paths, methods, operation ids,
/// summaries, descriptions, tags and public routes' security).
pub fn generated_openapi() -> utoipa::openapi::OpenApi {
    let mut document = API.1.clone();
    let anonymous = vec![utoipa::openapi::security::SecurityRequirement::default()];
    for item in document.paths.paths.values_mut() {
        let operations = [&mut item.get, &mut item.put, &mut item.post, &mut item.delete, &mut item.patch];
        for operation in operations.into_iter().flatten() {
            // `security(())` spells "no token needed" as one empty requirement; the published
            // document says it as no requirement at all (the same meaning, the shorter spelling).
            if operation.security.as_ref() == Some(&anonymous) {
                operation.security = Some(Vec::new());
            }
        }
    }
    document
}

/// The generated document as published: [`generated_openapi`] with the components
/// ([`document::publish`]).
pub fn openapi_document() -> serde_json::Value {
    document::publish(&generated_openapi())
}

/// The routes and their document, built once per process: building them runs every handler's
/// operation (its parameters, bodies and schemas), far more work than a request, and tests build a
/// router per request.
static API: LazyLock<(Router<AppState>, utoipa::openapi::OpenApi)> =
    LazyLock::new(|| api().split_for_parts());

/// Builds the router with its middleware.
pub fn router(state: AppState) -> Router {
    API.0
        .clone()
        .fallback(|| async { ApiError::NoRoute })
        .method_not_allowed_fallback(|| async { ApiError::MethodNotAllowed })
        .layer(from_fn(problem::problem_for_bare_errors))
        .layer(from_fn(admin_headers::admin_headers))
        .layer(from_fn(request::limit_body))
        .layer(from_fn_with_state(state.clone(), request::enter))
        .with_state(state)
}

#[cfg(test)]
mod tests {
    use clinic_core::contract::catalog::emitted_by;
    use clinic_core::events::EventType;

    /// The event catalog (docs/events.md) names the route that emits each type; it must be a route.
    #[test]
    fn every_documented_route_is_a_route_of_the_api() {
        for event_type in EventType::ALL {
            if let Some(route) = emitted_by(*event_type).route {
                assert!(super::ROUTES.contains(&route), "{event_type}: {route:?} is not a route");
            }
        }
    }
}
