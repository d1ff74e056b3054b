//! Lambda entry point: the environment is captured and read into the [`Settings`] once, then
//! telemetry, the keys (from Secrets Manager, by ARN) and the pool are built once per container;
//! each invocation only runs the router.

use clinic_api::Settings;
use clinic_core::config::Env;
use clinic_core::telemetry::{self, LogFormat};
use clinic_http::{ApiConfig, AppState, LambdaKeys};
use clinic_secrets::{Secrets, StartupSecrets};

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    let settings = Settings::read(&Env::capture())?;
    telemetry::init(LogFormat::Json, &settings.telemetry);
    clinic_core::contract::use_schema_base(settings.schema_base.as_deref());
    let Settings { database, arns, .. } = &settings;
    let secrets = Secrets::connect(settings.aws_endpoint.as_deref()).await;
    // The secrets are read at once (each call bounded by the client's timeouts).
    let correlation = async {
        match &arns.correlation {
            Some(arn) => secrets.read_versions(arn).await.map(Some),
            None => Ok(None),
        }
    };
    // The webhook keys: in AWS the KMS key that seals (CLINIC_WEBHOOK_KMS_KEY_ID; this role may only
    // encrypt with it), and an older keyring only where one is still configured.
    let shared = StartupSecrets::read_with(&secrets, database, &settings.webhook_keys);
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
    let pool = shared.connect_pool(database, &settings.db_timeouts)?;
    let keys = LambdaKeys { cursor, correlation, webhook: shared.webhook_key, unsubscribe };
    let state = AppState { pool, api: ApiConfig::lambda(&settings.api, keys)? };
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
