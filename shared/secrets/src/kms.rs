//! The webhook secrets' key service in AWS: KMS encrypts each secret under the stack's key with the
//! endpoint id as encryption context (docs/secret-rotation.md, `clinic_core::webhooks::secret_box`).
//!
//! Invariants:
//! - The key never leaves KMS; a role decides what a process may do with it: the API may only
//!   encrypt (it seals what it creates and can open nothing), the processes that send may decrypt.
//! - The encryption context binds a value to its endpoint: a blob copied into another endpoint's row
//!   is refused by KMS ([`KeyServiceError::Refused`]).
//! - Only a refusal of the value itself is `Refused`; throttling, timeouts and unreachable service
//!   are `Unavailable` (retried, never a send without the secret). No error carries a value.
//! - Every call is bounded by the client's timeouts ([`crate::timeouts`]).

use aws_sdk_kms::error::ProvideErrorMetadata;
use aws_sdk_kms::primitives::Blob;
use clinic_core::db::login::BoxFuture;
use clinic_core::webhooks::secret_box::{KeyService, KeyServiceError};

/// The encryption context's key; its value is the endpoint id.
pub const CONTEXT_KEY: &str = "clinic:webhook-endpoint";

/// KMS with one key (an id, ARN or alias ARN).
#[derive(Debug, Clone)]
pub struct KmsKeys {
    client: aws_sdk_kms::Client,
    key_id: String,
}

impl KmsKeys {
    pub fn new(sdk: &aws_config::SdkConfig, key_id: impl Into<String>) -> KmsKeys {
        KmsKeys { client: aws_sdk_kms::Client::new(sdk), key_id: key_id.into() }
    }

    pub fn client(&self) -> &aws_sdk_kms::Client {
        &self.client
    }
}

/// Refused: the value or the request is wrong for this key; everything else may pass later.
fn classify(code: Option<&str>) -> KeyServiceError {
    match code {
        Some(
            "InvalidCiphertextException"
            | "IncorrectKeyException"
            | "AccessDeniedException"
            | "NotFoundException"
            | "DisabledException"
            | "InvalidKeyUsageException"
            | "ValidationException",
        ) => KeyServiceError::Refused,
        _ => KeyServiceError::Unavailable,
    }
}

/// The bytes of a KMS answer, or why there are none (logged with the service's code only).
fn answered<E: ProvideErrorMetadata>(
    operation: &str,
    answer: Result<Option<Blob>, E>,
) -> Result<Vec<u8>, KeyServiceError> {
    match answer {
        Ok(bytes) => bytes.map(Blob::into_inner).ok_or(KeyServiceError::Unavailable),
        Err(error) => {
            tracing::warn!(code = error.code().unwrap_or("unreachable"), operation, "KMS call failed");
            Err(classify(error.code()))
        }
    }
}

impl KeyService for KmsKeys {
    fn encrypt<'a>(
        &'a self,
        context: &'a str,
        plaintext: &'a [u8],
    ) -> BoxFuture<'a, Result<Vec<u8>, KeyServiceError>> {
        Box::pin(async move {
            let answer = self
                .client
                .encrypt()
                .key_id(&self.key_id)
                .plaintext(Blob::new(plaintext))
                .encryption_context(CONTEXT_KEY, context)
                .send()
                .await;
            answered("encrypt", answer.map(|output| output.ciphertext_blob))
        })
    }

    fn decrypt<'a>(
        &'a self,
        context: &'a str,
        blob: &'a [u8],
    ) -> BoxFuture<'a, Result<Vec<u8>, KeyServiceError>> {
        Box::pin(async move {
            let answer = self
                .client
                .decrypt()
                .key_id(&self.key_id)
                .ciphertext_blob(Blob::new(blob))
                .encryption_context(CONTEXT_KEY, context)
                .send()
                .await;
            answered("decrypt", answer.map(|output| output.plaintext))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_refusal_of_the_value_is_final() {
        assert_eq!(classify(Some("InvalidCiphertextException")), KeyServiceError::Refused);
        assert_eq!(classify(Some("AccessDeniedException")), KeyServiceError::Refused);
        assert_eq!(classify(Some("ThrottlingException")), KeyServiceError::Unavailable);
        assert_eq!(classify(Some("KMSInternalException")), KeyServiceError::Unavailable);
        assert_eq!(classify(None), KeyServiceError::Unavailable);
    }
}
