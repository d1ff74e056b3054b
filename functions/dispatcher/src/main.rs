//! Lambda entry point: the environment is captured and read into the [`Settings`] once, then
//! telemetry, the secrets (read from Secrets Manager by ARN), the pool, the SQS client and the
//! dispatcher are built once per container; each scheduled invocation only drains.

use std::sync::Arc;

use clinic_core::config::Env;
use clinic_core::dispatch::Dispatcher;
use clinic_core::telemetry::{self, LogFormat};
use clinic_dispatcher::{handle, Settings, State};
use clinic_sqs::{build_client_with, SqsTransport};
use lambda_runtime::{service_fn, LambdaEvent};

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    let settings = Settings::read(&Env::capture())?;
    telemetry::init(LogFormat::Json, &settings.telemetry);
    clinic_core::contract::use_schema_base(settings.schema_base.as_deref());
    let Settings { database, sqs, aws_endpoint, .. } = &settings;
    let secrets =
        clinic_secrets::StartupSecrets::read(database, &settings.webhook_keys, aws_endpoint.as_deref())
            .await?;
    let pool = secrets.connect_pool(database, &settings.db_timeouts)?;
    let client = build_client_with(sqs.endpoint.as_deref(), settings.sqs_timeouts).await;
    let transport = SqsTransport::from_config(client, sqs);
    let dispatcher = Dispatcher::new(pool, Arc::new(transport), settings.dispatch)
        .with_listen(database.url.clone(), database.ca_file.clone())
        .with_listen_login(secrets.login.clone())
        .with_metrics(settings.metrics);
    let mut housekeeping = settings.housekeeping.clone();
    // The `deliver` mode (docs/delivery.md): only where CLINIC_NOTIFIER names the providers.
    if let Some(sending) = &settings.delivery {
        let mut delivery = sending.config.clone();
        // The one-click unsubscribe links of emails (docs/delivery.md): the key by ARN, the public
        // base URL from CLINIC_PUBLIC_BASE_URL.
        let arn = sending.unsubscribe_key_arn.as_deref();
        let keys = clinic_secrets::unsubscribe_keys_at(arn, aws_endpoint.as_deref()).await?;
        delivery.unsubscribe =
            clinic_core::delivery::unsubscribe::UnsubscribeLinks::configure(&sending.links, keys, None)?;
        let providers = clinic_notify_aws::providers(&delivery, aws_endpoint.as_deref()).await;
        let pool = dispatcher.pool().clone();
        housekeeping.delivery = Some(clinic_core::delivery::Sender::new(pool, providers, delivery));
    }
    // The `webhooks` mode (docs/webhooks.md): retries of webhook deliveries; never loopback in Lambda.
    // The keys that open webhook secrets: the KMS key CLINIC_WEBHOOK_KMS_KEY_ID names (this role may
    // decrypt with it) and, where older values remain, the keyring of CLINIC_WEBHOOK_KEY_SECRET_ARN;
    // without either this process sends no webhooks.
    match secrets.webhook_key {
        Some(key) => {
            let body = clinic_sqs::webhook_body(&sqs.source_prefix);
            let pool = dispatcher.pool().clone();
            let sender = clinic_core::webhooks::WebhookSender::new(pool, settings.webhooks, key, body);
            housekeeping.webhooks = Some(Arc::new(sender));
        }
        None => tracing::warn!("no webhook key is configured: the webhooks mode sends nothing"),
    }
    let state = Arc::new(State::new(dispatcher, settings.dispatch.window, settings.mode, housekeeping));
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
