//! Lambda entry point: telemetry, configuration, the keys (from Secrets Manager, by ARN) and the pool
//! are built once per container; each invocation only runs the router.

use clinic_core::config::DatabaseConfig;
use clinic_core::db::connect_pool_as;
use clinic_core::telemetry::{self, LogFormat};
use clinic_http::{ApiConfig, AppState, KeyArns, LambdaKeys};
use clinic_secrets::Secrets;

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    telemetry::init(LogFormat::Json);
    let database = DatabaseConfig::from_env(2)?;
    let arns = KeyArns::from_env()?;
    let secrets = Secrets::connect(clinic_core::config::var("CLINIC_AWS_ENDPOINT").as_deref()).await;
    let login = match &database.secret_arn {
        Some(arn) => Some(clinic_secrets::database_login(&secrets, arn).await?),
        None => None,
    };
    let keys = LambdaKeys {
        cursor: secrets.read(&arns.cursor).await?,
        correlation: match &arns.correlation {
            Some(arn) => Some(secrets.read_versions(arn).await?),
            None => None,
        },
        webhook: match &arns.webhook {
            Some(arn) => Some(clinic_secrets::webhook_key(&secrets, arn).await?),
            None => None,
        },
    };
    // Connections open lazily on the first request, so init stays small.
    let pool =
        connect_pool_as(&database.url, database.pool_size, database.ca_file.as_deref(), login.as_ref())?;
    let state = AppState { pool, api: ApiConfig::lambda_from_env(keys)? };
    lambda_http::run(clinic_api::app(state)).await
}
