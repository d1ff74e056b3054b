//! Delivery to people through AWS: email with Amazon SES v2 (`SendEmail`, raw content) and SMS with
//! Amazon SNS (`Publish` to a phone number), behind `clinic_core::delivery::Provider`. Kept out of
//! the core so the API builds without the AWS SDK.
//!
//! Invariants:
//! - Every call is bounded by the client's operation and attempt timeouts ([`TIMEOUTS`]), below the
//!   delivery lease; the sender bounds it once more.
//! - Errors become stable codes (`provider_throttled`, `provider_unreachable`, `provider_rejected`, …)
//!   with a retryable flag; the SDK's error text (which may echo a request value) is never kept.
//! - SES gets the rendered email as raw RFC 5322 content, so the `X-Clinic-Idempotency-Key` header
//!   (`"{event_id}:{listener}"`) and, on emails of optional kinds, RFC 8058's `List-Unsubscribe` and
//!   `List-Unsubscribe-Post` travel with it exactly as the file provider writes them (one rendering,
//!   `OutgoingMessage::to_eml`, rather than Simple content's separate header list); SNS `Publish` to a phone number takes no
//!   idempotency key, so a resend after an `uncertain` crash can reach the phone twice (documented in
//!   docs/delivery.md).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use aws_config::timeout::TimeoutConfig;
use clinic_core::delivery::{
    Accepted, DeliveryConfig, FileProvider, LogProvider, NotifierKind, OutgoingMessage, Provider,
    ProviderError, Providers, RECIPIENT_OPTED_OUT,
};

/// Client timeouts of every provider call: a connection within 3 s, one attempt within 5 s, the whole
/// operation (with the SDK's retries) within 8 s.
pub const TIMEOUTS: (Duration, Duration, Duration) =
    (Duration::from_secs(3), Duration::from_secs(5), Duration::from_secs(8));

/// The client timeouts of every provider call ([`TIMEOUTS`]).
pub fn timeouts() -> TimeoutConfig {
    let (connect, attempt, operation) = TIMEOUTS;
    TimeoutConfig::builder()
        .connect_timeout(connect)
        .operation_attempt_timeout(attempt)
        .operation_timeout(operation)
        .build()
}

/// Loads the shared AWS configuration (credentials from the usual environment; region `region`, the
/// settings' `CLINIC_DELIVERY_REGION`, else the usual environment) with [`timeouts`]; `endpoint`
/// overrides the service endpoint (an emulator in tests and `clinic dev`).
pub async fn aws_config(endpoint: Option<&str>, region: Option<&str>) -> aws_config::SdkConfig {
    let mut loader = aws_config::defaults(aws_config::BehaviorVersion::latest()).timeout_config(timeouts());
    if let Some(region) = region {
        loader = loader.region(aws_config::Region::new(region.to_owned()));
    }
    if let Some(endpoint) = endpoint {
        loader = loader.endpoint_url(endpoint);
    }
    loader.load().await
}

/// Builds the providers `config.notifiers` names, loading the AWS configuration when SES or SNS is
/// named. `endpoint`: `CLINIC_AWS_ENDPOINT` (emulators).
pub async fn providers(config: &DeliveryConfig, endpoint: Option<&str>) -> Providers {
    let needs_aws = config.notifiers.iter().any(|k| matches!(k, NotifierKind::Ses | NotifierKind::Sns));
    let sdk =
        if needs_aws { Some(aws_config(endpoint, config.provider_region.as_deref()).await) } else { None };
    providers_from(config, sdk.as_ref())
}

/// Builds the providers `config.notifiers` names on an already loaded AWS configuration (SES and
/// SNS are skipped without one).
pub fn providers_from(config: &DeliveryConfig, sdk: Option<&aws_config::SdkConfig>) -> Providers {
    let mut providers = Providers::default();
    for kind in &config.notifiers {
        match (kind, sdk) {
            (NotifierKind::Ses, Some(sdk)) => providers.email = Some(Arc::new(SesProvider::new(sdk))),
            (NotifierKind::Sns, Some(sdk)) => providers.sms = Some(Arc::new(SnsProvider::new(sdk))),
            (NotifierKind::File, _) => {
                let file: Arc<dyn Provider> = Arc::new(FileProvider::new(&config.file_dir));
                providers.email.get_or_insert_with(|| Arc::clone(&file));
                providers.sms.get_or_insert(file);
            }
            (NotifierKind::Log, _) => {
                providers.email.get_or_insert_with(|| Arc::new(LogProvider));
                providers.sms.get_or_insert_with(|| Arc::new(LogProvider));
            }
            (NotifierKind::Ses | NotifierKind::Sns, None) => {
                tracing::warn!(notifier = ?kind, "no AWS configuration: this provider is not available");
            }
        }
    }
    providers
}

/// Maps an SDK error (SES v2 and SNS share the smithy `SdkError`) to a stable code; only the error's
/// class and service code are looked at, never its text.
fn classify<E, R>(error: &aws_sdk_sesv2::error::SdkError<E, R>, service_code: Option<&str>) -> ProviderError
where
    E: std::error::Error + 'static,
{
    use aws_sdk_sesv2::error::SdkError;
    match error {
        SdkError::TimeoutError(_) => ProviderError::retryable("provider_timeout"),
        SdkError::DispatchFailure(_) | SdkError::ResponseError(_) => {
            ProviderError::retryable("provider_unreachable")
        }
        SdkError::ServiceError(_) => match service_code {
            Some("Throttling" | "ThrottlingException" | "TooManyRequestsException" | "Throttled") => {
                ProviderError::retryable(clinic_core::delivery::THROTTLED)
            }
            Some("InternalFailure" | "InternalError" | "ServiceUnavailable" | "KMSThrottling") => {
                ProviderError::retryable("provider_unavailable")
            }
            Some(
                "MessageRejected"
                | "InvalidParameter"
                | "InvalidParameterValue"
                | "BadRequestException"
                | "MailFromDomainNotVerifiedException"
                | "AccountSuspendedException"
                | "SendingPausedException"
                | "NotFoundException"
                | "OptedOut"
                | "AuthorizationError"
                | "NotFound",
            ) => ProviderError::permanent("provider_rejected"),
            _ => ProviderError::retryable("provider_error"),
        },
        _ => ProviderError::retryable("provider_error"),
    }
}

/// Email through SES v2 `SendEmail` with raw content.
#[derive(Debug, Clone)]
pub struct SesProvider {
    client: aws_sdk_sesv2::Client,
}

impl SesProvider {
    pub fn new(sdk: &aws_config::SdkConfig) -> Self {
        Self { client: aws_sdk_sesv2::Client::new(sdk) }
    }
}

#[async_trait]
impl Provider for SesProvider {
    fn name(&self) -> &'static str {
        "ses"
    }

    async fn send(&self, message: &OutgoingMessage) -> Result<Accepted, ProviderError> {
        use aws_sdk_sesv2::primitives::Blob;
        use aws_sdk_sesv2::types::{Destination, EmailContent, RawMessage};
        let raw = RawMessage::builder()
            .data(Blob::new(message.to_eml().into_bytes()))
            .build()
            .map_err(|_| ProviderError::permanent("invalid_message"))?;
        let result = self
            .client
            .send_email()
            .from_email_address(&message.from)
            .destination(Destination::builder().to_addresses(&message.to).build())
            .content(EmailContent::builder().raw(raw).build())
            .send()
            .await;
        match result {
            Ok(output) => Ok(Accepted { provider_message_id: output.message_id.unwrap_or_default() }),
            Err(error) => {
                use aws_sdk_sesv2::error::ProvideErrorMetadata;
                let code = error.code().map(str::to_owned);
                Err(classify(&error, code.as_deref()))
            }
        }
    }
}

/// SMS through SNS `Publish` to the recipient's phone number (transactional SMS type).
#[derive(Debug, Clone)]
pub struct SnsProvider {
    client: aws_sdk_sns::Client,
}

impl SnsProvider {
    pub fn new(sdk: &aws_config::SdkConfig) -> Self {
        Self { client: aws_sdk_sns::Client::new(sdk) }
    }
}

#[async_trait]
impl Provider for SnsProvider {
    fn name(&self) -> &'static str {
        "sns"
    }

    async fn send(&self, message: &OutgoingMessage) -> Result<Accepted, ProviderError> {
        use aws_sdk_sns::types::MessageAttributeValue;
        let string = |value: &str| {
            MessageAttributeValue::builder().data_type("String").string_value(value).build().ok()
        };
        // The provider's opt-out list first (DESIGN §5e): a number that replied STOP gets nothing,
        // and the sender records the opt-out on the patient.
        let checked = self.client.check_if_phone_number_is_opted_out().phone_number(&message.to).send().await;
        match checked {
            Ok(answer) if answer.is_opted_out => return Err(ProviderError::permanent(RECIPIENT_OPTED_OUT)),
            Ok(_) => {}
            Err(error) => {
                use aws_sdk_sns::error::ProvideErrorMetadata;
                let code = error.code().map(str::to_owned);
                return Err(classify(&error, code.as_deref()));
            }
        }
        let mut publish = self.client.publish().phone_number(&message.to).message(&message.body);
        if let Some(kind) = string("Transactional") {
            publish = publish.message_attributes("AWS.SNS.SMS.SMSType", kind);
        }
        if let Some(sender) = (!message.from.is_empty()).then(|| string(&message.from)).flatten() {
            publish = publish.message_attributes("AWS.SNS.SMS.SenderID", sender);
        }
        match publish.send().await {
            Ok(output) => Ok(Accepted { provider_message_id: output.message_id.unwrap_or_default() }),
            Err(error) => {
                use aws_sdk_sns::error::ProvideErrorMetadata;
                let code = error.code().map(str::to_owned);
                Err(classify(&error, code.as_deref()))
            }
        }
    }
}
