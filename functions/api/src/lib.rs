//! The API Lambda: the shared axum router behind API Gateway (HTTP API, payload v2).
//!
//! API Gateway's JWT authorizer verifies the token; [`app`] copies its claims from the Lambda request
//! context into the router's [`VerifiedClaims`], which the router trusts. Without an authorizer
//! context the request has no identity and answers 401.

mod settings;

pub use settings::Settings;

use axum::extract::Request;
use axum::middleware::{from_fn, Next};
use axum::response::Response;
use axum::Router;
use clinic_http::auth::VerifiedClaims;
use clinic_http::{router, AppState};
use lambda_http::request::RequestContext;

/// The router with the Lambda claims adapter in front of it.
pub fn app(state: AppState) -> Router {
    router(state).layer(from_fn(copy_authorizer_claims))
}

async fn copy_authorizer_claims(mut request: Request, next: Next) -> Response {
    let claims = match request.extensions().get::<RequestContext>() {
        Some(RequestContext::ApiGatewayV2(context)) => context
            .authorizer
            .as_ref()
            .and_then(|authorizer| authorizer.jwt.as_ref())
            .map(|jwt| VerifiedClaims(jwt.claims.clone())),
        _ => None,
    };
    if let Some(claims) = claims {
        request.extensions_mut().insert(claims);
    }
    next.run(request).await
}
