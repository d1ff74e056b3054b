//! Lambda entry point: telemetry, configuration and the pool are built once per container; each
//! invocation only runs the router.

use clinic_core::config::DatabaseConfig;
use clinic_core::db::connect_pool;
use clinic_core::telemetry::{self, LogFormat};
use clinic_http::ApiConfig;
use clinic_http::AppState;

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    telemetry::init(LogFormat::Json);
    let database = DatabaseConfig::from_env(2)?;
    // Connections open lazily on the first request, so init stays small.
    let pool = connect_pool(&database.url, database.pool_size, database.ca_file.as_deref())?;
    let state = AppState { pool, api: ApiConfig::lambda_from_env()? };
    let app = clinic_api::app(state);
    // Spans are exported before the invocation returns (a frozen container exports nothing).
    lambda_http::run(tower::service_fn(move |request: lambda_http::Request| {
        let app = app.clone();
        async move {
            let response = tower::ServiceExt::oneshot(app, request).await;
            telemetry::flush().await;
            response
        }
    }))
    .await
}
