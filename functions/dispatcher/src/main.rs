//! Lambda entry point: telemetry, configuration, the secrets (read from Secrets Manager by ARN), the
//! pool, the SQS client and the dispatcher are built once per container; each scheduled invocation
//! only drains.

use std::sync::Arc;

use clinic_core::config::DatabaseConfig;
use clinic_core::dispatch::{DispatchConfig, Dispatcher};
use clinic_core::telemetry::{self, LogFormat};
use clinic_dispatcher::{handle, Housekeeping, Mode, State};
use clinic_sqs::{build_client_with, SqsConfig, SqsTimeouts, SqsTransport};
use lambda_runtime::{service_fn, LambdaEvent};

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    telemetry::init(LogFormat::Json);
    let config = DispatchConfig::from_env()?;
    // One connection per batch in its mark, plus the claim's.
    let database = DatabaseConfig::from_env(config.steps_in_flight + 1)?;
    let sqs = SqsConfig::from_env()?;
    let webhook_keys = clinic_secrets::WebhookKeySources::from_env();
    let aws_endpoint = clinic_core::config::var("CLINIC_AWS_ENDPOINT");
    let secrets =
        clinic_secrets::StartupSecrets::read(&database, &webhook_keys, aws_endpoint.as_deref()).await?;
    let pool = secrets.connect_pool(&database)?;
    let client = build_client_with(sqs.endpoint.as_deref(), SqsTimeouts::from_env()?).await;
    let transport = SqsTransport::from_config(client, &sqs);
    let dispatcher = Dispatcher::new(pool, Arc::new(transport), config)
        .with_listen(database.url.clone(), database.ca_file.clone())
        .with_listen_login(secrets.login.clone())
        .with_metrics(clinic_core::telemetry::emf::MetricsMode::from_env()?);
    let mut housekeeping = Housekeeping::from_env()?;
    // The `deliver` mode (docs/delivery.md): only where CLINIC_NOTIFIER names the providers.
    if clinic_core::config::var("CLINIC_NOTIFIER").is_some() {
        let mut delivery = clinic_core::delivery::DeliveryConfig::from_env("ses,sns")?;
        // The one-click unsubscribe links of emails (docs/delivery.md): the key by ARN, the public
        // base URL from CLINIC_PUBLIC_BASE_URL.
        let arn = clinic_core::config::var(clinic_core::delivery::unsubscribe::KEY_SECRET_ARN_VAR);
        let keys = clinic_secrets::unsubscribe_keys_at(arn.as_deref(), aws_endpoint.as_deref()).await?;
        delivery.unsubscribe = clinic_core::delivery::unsubscribe::UnsubscribeLinks::from_env(keys, None)?;
        let providers = clinic_notify_aws::providers(&delivery, aws_endpoint.as_deref()).await;
        let pool = dispatcher.pool().clone();
        housekeeping.delivery = Some(clinic_core::delivery::Sender::new(pool, providers, delivery));
    }
    // The `webhooks` mode (docs/webhooks.md): retries of webhook deliveries; never loopback in Lambda.
    let webhooks = clinic_core::webhooks::WebhookConfig::from_env(false)?;
    // The keys that open webhook secrets: the KMS key CLINIC_WEBHOOK_KMS_KEY_ID names (this role may
    // decrypt with it) and, where older values remain, the keyring of CLINIC_WEBHOOK_KEY_SECRET_ARN;
    // without either this process sends no webhooks.
    match secrets.webhook_key {
        Some(key) => {
            let body = clinic_sqs::webhook_body(&sqs.source_prefix);
            let pool = dispatcher.pool().clone();
            let sender = clinic_core::webhooks::WebhookSender::new(pool, webhooks, key, body);
            housekeeping.webhooks = Some(Arc::new(sender));
        }
        None => tracing::warn!("no webhook key is configured: the webhooks mode sends nothing"),
    }
    let state = Arc::new(State::new(dispatcher, config.window, Mode::from_env()?, housekeeping));
    lambda_runtime::run(service_fn(move |event: LambdaEvent<_>| {
        let state = Arc::clone(&state);
        // Spans are exported before the invocation returns (a frozen container exports nothing).
        async move {
            let answer = handle(&state, event).await;
            telemetry::flush().await;
            answer
        }
    }))
    .await
}
