//! Lambda entry point: telemetry, configuration and the pool are built once per container.

use std::sync::Arc;

use clinic_core::config::DatabaseConfig;
use clinic_core::db::connect_pool;
use clinic_core::telemetry::{self, LogFormat};
use clinic_listener::{handle, State};
use lambda_runtime::{service_fn, LambdaEvent};

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    telemetry::init(LogFormat::Json);
    let database = DatabaseConfig::from_env(4)?;
    let pool = connect_pool(&database.url, database.pool_size, database.ca_file.as_deref())?;
    let state = Arc::new(State::from_env(pool)?);
    lambda_runtime::run(service_fn(move |event: LambdaEvent<_>| {
        let state = Arc::clone(&state);
        async move { handle(&state, event).await }
    }))
    .await
}
