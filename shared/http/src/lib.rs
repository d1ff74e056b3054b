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
//! - [`ROUTES`] lists exactly the implemented routes; a test keeps it, the router and the OpenAPI
//!   document in agreement.

pub mod admin_headers;
pub mod auth;
pub mod config;
pub mod correlation;
pub mod cursor;
pub mod idempotency;
pub mod jwt;
pub mod problem;
pub mod readiness;
pub mod request;
mod routes;
pub mod unit_of_work;

use axum::middleware::{from_fn, from_fn_with_state};
use axum::routing::{get, post};
use axum::Router;
use deadpool_postgres::Pool;

pub use config::{ApiConfig, ApiSettings, AuthConfig, KeyArns, LambdaKeys, LocalKeys};
use problem::ApiError;

/// What every handler shares: the pool and the API settings.
#[derive(Clone)]
pub struct AppState {
    pub pool: Pool,
    pub api: ApiConfig,
}

/// Every implemented route as (method, path template), in OpenAPI spelling.
pub const ROUTES: &[(&str, &str)] = &[
    ("get", "/healthz"),
    ("get", "/readyz"),
    ("get", "/openapi.json"),
    ("get", "/asyncapi.yaml"),
    ("get", "/schemas/events/{type}/{version}"),
    ("get", "/schemas/cloudevent/{version}"),
    ("get", "/schemas/webhooks/{body}/{version}"),
    ("post", "/v1/patients"),
    ("get", "/v1/patients"),
    ("get", "/v1/patients/{id}"),
    ("patch", "/v1/patients/{id}"),
    ("delete", "/v1/patients/{id}"),
    ("get", "/v1/patients/{id}/timeline"),
    ("get", "/v1/patients/{id}/disclosures"),
    ("post", "/v1/practitioners"),
    ("get", "/v1/practitioners"),
    ("get", "/v1/practitioners/{id}"),
    ("patch", "/v1/practitioners/{id}"),
    ("get", "/v1/practitioners/{id}/timeline"),
    ("post", "/v1/appointments"),
    ("get", "/v1/appointments"),
    ("get", "/v1/appointments/{id}"),
    ("post", "/v1/appointments/{id}/reschedule"),
    ("post", "/v1/appointments/{id}/cancel"),
    ("post", "/v1/appointments/{id}/complete"),
    ("get", "/v1/appointments/{id}/timeline"),
    ("get", "/v1/notifications"),
    ("get", "/v1/system/outbox"),
    ("get", "/v1/system/outbox/unsettled"),
    ("post", "/v1/system/outbox/{id}/retry"),
    ("post", "/v1/system/outbox/{id}/replay"),
    ("post", "/v1/system/outbox/{id}/discard"),
    ("post", "/v1/system/outbox/bulk/retry"),
    ("post", "/v1/system/outbox/bulk/replay"),
    ("post", "/v1/system/outbox/bulk/discard"),
    ("get", "/v1/system/events/{id}"),
    ("get", "/v1/system/overview"),
    ("get", "/v1/system/rejections"),
    ("get", "/v1/system/listeners"),
    ("post", "/v1/system/listeners/pause"),
    ("post", "/v1/system/listeners/resume"),
    ("get", "/console"),
    ("get", "/console/console.js"),
    ("get", "/console/console-core.js"),
    ("get", "/console/console-explain.js"),
    ("get", "/console/console-queues.js"),
    ("get", "/console/console.css"),
    ("get", "/v1/system/deliveries"),
    ("post", "/v1/system/deliveries/{id}/retry"),
    ("post", "/v1/system/deliveries/{id}/discard"),
    ("post", "/v1/system/deliveries/bulk/retry"),
    ("post", "/v1/system/deliveries/bulk/discard"),
    ("post", "/v1/system/webhook-deliveries/{id}/retry"),
    ("post", "/v1/system/webhook-deliveries/{id}/discard"),
    ("post", "/v1/system/webhook-deliveries/bulk/retry"),
    ("post", "/v1/system/webhook-deliveries/bulk/discard"),
    ("post", "/v1/webhooks/endpoints"),
    ("get", "/v1/webhooks/endpoints"),
    ("get", "/v1/webhooks/endpoints/{id}"),
    ("patch", "/v1/webhooks/endpoints/{id}"),
    ("delete", "/v1/webhooks/endpoints/{id}"),
    ("post", "/v1/webhooks/endpoints/{id}/rotate"),
    ("post", "/v1/webhooks/endpoints/{id}/recover"),
    ("get", "/v1/webhooks/endpoints/{id}/events"),
    ("get", "/v1/webhooks/deliveries"),
    ("get", "/v1/unsubscribe/{token}"),
    ("post", "/v1/unsubscribe/{token}"),
];

/// The OpenAPI document served at `/openapi.json`.
pub const OPENAPI_JSON: &str = include_str!("openapi.json");

/// Builds the router with its middleware.
pub fn router(state: AppState) -> Router {
    use routes::{
        appointments, console, contract, deliveries, health, lists, notifications, outbox, patients,
        practitioners, recovery, timelines, unsubscribe, webhooks,
    };
    Router::new()
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .route("/openapi.json", get(health::openapi))
        .route("/asyncapi.yaml", get(contract::asyncapi))
        .route("/schemas/events/{type}/{version}", get(contract::event_schema))
        .route("/schemas/cloudevent/{version}", get(contract::cloudevent_schema))
        .route("/schemas/webhooks/{body}/{version}", get(contract::webhook_body_schema))
        .route("/v1/patients", post(patients::create).get(lists::search_patients))
        .route("/v1/patients/{id}", get(patients::get_one).patch(patients::update).delete(patients::delete))
        .route("/v1/patients/{id}/timeline", get(timelines::patient))
        .route("/v1/patients/{id}/disclosures", get(routes::disclosures::list))
        .route("/v1/practitioners", post(practitioners::create).get(lists::practitioners))
        .route("/v1/practitioners/{id}", get(practitioners::get_one).patch(practitioners::update))
        .route("/v1/practitioners/{id}/timeline", get(timelines::practitioner))
        .route("/v1/appointments", post(appointments::create).get(lists::schedule))
        .route("/v1/appointments/{id}", get(appointments::get_one))
        .route("/v1/appointments/{id}/reschedule", post(appointments::reschedule))
        .route("/v1/appointments/{id}/cancel", post(appointments::cancel))
        .route("/v1/appointments/{id}/complete", post(appointments::complete))
        .route("/v1/appointments/{id}/timeline", get(timelines::appointment))
        .route("/v1/notifications", get(notifications::list))
        .route("/v1/system/outbox", get(outbox::list))
        .route("/v1/system/outbox/unsettled", get(outbox::unsettled))
        .route("/v1/system/outbox/{id}/retry", post(outbox::retry))
        .route("/v1/system/outbox/{id}/replay", post(outbox::replay))
        .route("/v1/system/outbox/{id}/discard", post(outbox::discard))
        .route("/v1/system/outbox/bulk/retry", post(recovery::bulk_retry))
        .route("/v1/system/outbox/bulk/replay", post(recovery::bulk_replay))
        .route("/v1/system/outbox/bulk/discard", post(recovery::bulk_discard))
        .route("/v1/system/events/{id}", get(recovery::explain))
        .route("/v1/system/overview", get(recovery::overview))
        .route("/v1/system/rejections", get(routes::rejections::list))
        .route("/v1/system/listeners", get(recovery::listener_list))
        .route("/v1/system/listeners/pause", post(recovery::pause_listener))
        .route("/v1/system/listeners/resume", post(recovery::resume_listener))
        .route("/console", get(console::page))
        .route("/console/console.js", get(console::script))
        .route("/console/console-core.js", get(console::core))
        .route("/console/console-explain.js", get(console::explain))
        .route("/console/console-queues.js", get(console::queues))
        .route("/console/console.css", get(console::style))
        .route("/v1/system/deliveries", get(deliveries::list))
        .route("/v1/system/deliveries/{id}/retry", post(deliveries::retry))
        .route("/v1/system/deliveries/{id}/discard", post(deliveries::discard))
        .route("/v1/system/deliveries/bulk/retry", post(deliveries::bulk_retry))
        .route("/v1/system/deliveries/bulk/discard", post(deliveries::bulk_discard))
        .route("/v1/system/webhook-deliveries/{id}/retry", post(webhooks::retry_delivery))
        .route("/v1/system/webhook-deliveries/{id}/discard", post(webhooks::discard_delivery))
        .route("/v1/system/webhook-deliveries/bulk/retry", post(webhooks::bulk_retry))
        .route("/v1/system/webhook-deliveries/bulk/discard", post(webhooks::bulk_discard))
        .route("/v1/webhooks/endpoints", post(webhooks::create).get(webhooks::list))
        .route(
            "/v1/webhooks/endpoints/{id}",
            get(webhooks::get_one).patch(webhooks::update).delete(webhooks::delete),
        )
        .route("/v1/webhooks/endpoints/{id}/rotate", post(webhooks::rotate))
        .route("/v1/webhooks/endpoints/{id}/recover", post(webhooks::recover))
        .route("/v1/webhooks/endpoints/{id}/events", get(webhooks::replay))
        .route("/v1/webhooks/deliveries", get(webhooks::deliveries))
        .route("/v1/unsubscribe/{token}", get(unsubscribe::confirm_page).post(unsubscribe::one_click))
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
