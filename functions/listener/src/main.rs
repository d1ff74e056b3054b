//! Lambda entry point: telemetry, configuration, the secrets (read from Secrets Manager by ARN) and
//! the pool are built once per container.

use std::sync::Arc;

use clinic_core::config::DatabaseConfig;
use clinic_core::delivery::{DeliveryConfig, Sender};
use clinic_core::telemetry::{self, LogFormat};
use clinic_listener::{handle, State};
use lambda_runtime::{service_fn, LambdaEvent};

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    telemetry::init(LogFormat::Json);
    let database = DatabaseConfig::from_env(4)?;
    let webhook_keys = clinic_secrets::WebhookKeySources::from_env();
    let aws_endpoint = clinic_core::config::var("CLINIC_AWS_ENDPOINT");
    let secrets =
        clinic_secrets::StartupSecrets::read(&database, &webhook_keys, aws_endpoint.as_deref()).await?;
    let pool = secrets.connect_pool(&database)?;
    let mut state = State::from_env(pool.clone())?;
    // Delivery fast path (docs/delivery.md): only where CLINIC_NOTIFIER names the providers.
    if clinic_core::config::var("CLINIC_NOTIFIER").is_some() {
        let mut config = DeliveryConfig::from_env("ses,sns")?;
        // The one-click unsubscribe links of emails (docs/delivery.md): the key by ARN, the public
        // base URL from CLINIC_PUBLIC_BASE_URL.
        let arn = clinic_core::config::var(clinic_core::delivery::unsubscribe::KEY_SECRET_ARN_VAR);
        let keys = clinic_secrets::unsubscribe_keys_at(arn.as_deref(), aws_endpoint.as_deref()).await?;
        config.unsubscribe = clinic_core::delivery::unsubscribe::UnsubscribeLinks::from_env(keys, None)?;
        let providers = clinic_notify_aws::providers(&config, aws_endpoint.as_deref()).await;
        state = state.with_sender(Sender::new(pool.clone(), providers, config));
    }
    // Webhook first attempts (docs/webhooks.md); never loopback in Lambda.
    let webhooks = clinic_core::webhooks::WebhookConfig::from_env(false)?;
    // The keys that open webhook secrets: the KMS key CLINIC_WEBHOOK_KMS_KEY_ID names (this role may
    // decrypt with it) and, where older values remain, the keyring of CLINIC_WEBHOOK_KEY_SECRET_ARN;
    // without either the first attempts are left to the scheduled `webhooks` mode.
    match secrets.webhook_key {
        Some(key) => {
            let body = clinic_sqs::webhook_body(&state.source_prefix);
            let sender = clinic_core::webhooks::WebhookSender::new(pool, webhooks, key, body);
            state = state.with_webhooks(Arc::new(sender));
        }
        None => tracing::warn!("no webhook key is configured: no first webhook attempts here"),
    }
    let state = Arc::new(state);
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
