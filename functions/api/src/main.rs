//! Lambda entry point: telemetry, configuration, the keys (from Secrets Manager, by ARN) and the pool
//! are built once per container; each invocation only runs the router.

use clinic_core::config::DatabaseConfig;
use clinic_core::telemetry::{self, LogFormat};
use clinic_http::{ApiConfig, AppState, KeyArns, LambdaKeys};
use clinic_secrets::{Secrets, StartupSecrets, WebhookKeySources};

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    telemetry::init(LogFormat::Json);
    let database = DatabaseConfig::from_env(2)?;
    let arns = KeyArns::from_env()?;
    let endpoint = clinic_core::config::var("CLINIC_AWS_ENDPOINT");
    let secrets = Secrets::connect(endpoint.as_deref()).await;
    // The secrets are read at once (each call bounded by the client's timeouts).
    let correlation = async {
        match &arns.correlation {
            Some(arn) => secrets.read_versions(arn).await.map(Some),
            None => Ok(None),
        }
    };
    // The webhook keys: in AWS the KMS key that seals (CLINIC_WEBHOOK_KMS_KEY_ID; this role may only
    // encrypt with it), and an older keyring only where one is still configured.
    let webhook = WebhookKeySources::from_env();
    let shared = StartupSecrets::read_with(&secrets, &database, &webhook);
    // The key that verifies one-click unsubscribe links (its previous version too).
    let unsubscribe = async {
        match &arns.unsubscribe {
            Some(arn) => secrets.read_versions(arn).await.map(Some),
            None => Ok(None),
        }
    };
    let (cursor, correlation, shared, unsubscribe) =
        tokio::try_join!(secrets.read(&arns.cursor), correlation, shared, unsubscribe)?;
    // Connections open lazily on the first request, so init stays small.
    let pool = shared.connect_pool(&database)?;
    let keys = LambdaKeys { cursor, correlation, webhook: shared.webhook_key, unsubscribe };
    let state = AppState { pool, api: ApiConfig::lambda_from_env(keys)? };
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
