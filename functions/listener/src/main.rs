//! Lambda entry point: telemetry, configuration and the pool are built once per container.

use std::sync::Arc;

use clinic_core::config::DatabaseConfig;
use clinic_core::db::connect_pool;
use clinic_core::delivery::{DeliveryConfig, Sender};
use clinic_core::telemetry::{self, LogFormat};
use clinic_listener::{handle, State};
use lambda_runtime::{service_fn, LambdaEvent};

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    telemetry::init(LogFormat::Json);
    let database = DatabaseConfig::from_env(4)?;
    let pool = connect_pool(&database.url, database.pool_size, database.ca_file.as_deref())?;
    let mut state = State::from_env(pool.clone())?;
    // Delivery fast path (docs/delivery.md): only where CLINIC_NOTIFIER names the providers.
    if clinic_core::config::var("CLINIC_NOTIFIER").is_some() {
        let config = DeliveryConfig::from_env("ses,sns")?;
        let endpoint = clinic_core::config::var("CLINIC_AWS_ENDPOINT");
        let providers = clinic_notify_aws::providers(&config, endpoint.as_deref()).await;
        state = state.with_sender(Sender::new(pool.clone(), providers, config));
    }
    // Webhook first attempts (docs/webhooks.md); never loopback in Lambda.
    let webhooks = clinic_core::webhooks::WebhookConfig::from_env(false)?;
    // The key that opens webhook secrets: CLINIC_WEBHOOK_KEY_FILE names its file (never the key);
    // without it the first attempts are left to the scheduled `webhooks` mode.
    match clinic_core::webhooks::secret_box::WebhookKey::from_env_if_set()? {
        Some(key) => {
            let body = clinic_sqs::webhook_body(&state.source_prefix);
            let sender = clinic_core::webhooks::WebhookSender::new(pool, webhooks, key, body);
            state = state.with_webhooks(Arc::new(sender));
        }
        None => tracing::warn!("CLINIC_WEBHOOK_KEY_FILE is not set: no first webhook attempts here"),
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
