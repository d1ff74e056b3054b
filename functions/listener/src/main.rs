//! Lambda entry point: the environment is captured and read into the [`Settings`] once, then
//! telemetry, the secrets (read from Secrets Manager by ARN) and the pool are built once per
//! container.

use std::sync::Arc;

use clinic_core::config::Env;
use clinic_core::delivery::Sender;
use clinic_core::listeners::{Deadline, ListenerHost};
use clinic_core::telemetry::{self, LogFormat};
use clinic_listener::{handle, Settings, State, DEFAULT_DEADLINE_MARGIN};
use lambda_runtime::{service_fn, LambdaEvent};

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    let settings = Settings::read(&Env::capture())?;
    telemetry::init(LogFormat::Json, &settings.telemetry);
    clinic_core::contract::use_schema_base(settings.schema_base.as_deref());
    let Settings { database, aws_endpoint, .. } = &settings;
    let secrets =
        clinic_secrets::StartupSecrets::read(database, &settings.webhook_keys, aws_endpoint.as_deref())
            .await?;
    let pool = secrets.connect_pool(database, &settings.db_timeouts)?;
    let host = ListenerHost::new(pool.clone(), Deadline::Invocation { margin: DEFAULT_DEADLINE_MARGIN })
        .with_metrics(settings.metrics);
    let mut state = State::configured(host, &settings.listener);
    // Delivery fast path (docs/delivery.md): only where CLINIC_NOTIFIER names the providers.
    if let Some(sending) = &settings.delivery {
        let mut config = sending.config.clone();
        // The one-click unsubscribe links of emails (docs/delivery.md): the key by ARN, the public
        // base URL from CLINIC_PUBLIC_BASE_URL.
        let arn = sending.unsubscribe_key_arn.as_deref();
        let keys = clinic_secrets::unsubscribe_keys_at(arn, aws_endpoint.as_deref()).await?;
        config.unsubscribe =
            clinic_core::delivery::unsubscribe::UnsubscribeLinks::configure(&sending.links, keys, None)?;
        let providers = clinic_notify_aws::providers(&config, aws_endpoint.as_deref()).await;
        state = state.with_sender(Sender::new(pool.clone(), providers, config));
    }
    // Webhook first attempts (docs/webhooks.md); never loopback in Lambda.
    // The keys that open webhook secrets: the KMS key CLINIC_WEBHOOK_KMS_KEY_ID names (this role may
    // decrypt with it) and, where older values remain, the keyring of CLINIC_WEBHOOK_KEY_SECRET_ARN;
    // without either the first attempts are left to the scheduled `webhooks` mode.
    match secrets.webhook_key {
        Some(key) => {
            let body = clinic_sqs::webhook_body(&state.source_prefix);
            let sender = clinic_core::webhooks::WebhookSender::new(pool, settings.webhooks, key, body);
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
