//! The provider seam: what a rendered message looks like on its way out, and the built-in providers
//! that need no cloud account (files for `clinic dev`, logs). SES v2 and SNS live in the
//! `clinic-notify-aws` crate, so the core builds without the AWS SDK.
//!
//! Invariants:
//! - An [`OutgoingMessage`] holds personal data (the address, the rendered text). It lives only for
//!   the provider call: its `Debug` prints ids and the template only, it is never logged, stored or
//!   serialized by this crate.
//! - A provider answers [`Accepted`] with the provider's message id, or a [`ProviderError`] with a
//!   stable code, whether trying again can help, and no content.
//! - The idempotency key travels with the message: as the `X-Clinic-Idempotency-Key` header of an
//!   email, and as the file name of the file provider (a resend replaces the file, it does not add one).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use chrono::Utc;

use crate::ids::NotificationId;

pub use crate::domain::contact::Channel;

/// The error code of a provider that found the recipient on the channel's own opt-out list (an SMS
/// STOP reply): the sender suppresses the message (`opted_out`) and records the opt-out on the
/// patient.
pub const RECIPIENT_OPTED_OUT: &str = "recipient_opted_out";

/// One rendered message, for one provider call only.
#[derive(Clone)]
pub struct OutgoingMessage {
    pub notification_id: NotificationId,
    pub template: String,
    pub channel: Channel,
    /// `"{event_id}:{listener}"`.
    pub idempotency_key: String,
    /// The recipient's email address or E.164 phone number.
    pub to: String,
    /// The sender identity (email) or sender id (SMS; may be empty).
    pub from: String,
    /// Email only; fixed template text, never a personal value.
    pub subject: String,
    /// The email's text body, or the SMS text.
    pub body: String,
    /// Email of an optional kind only: the one-click unsubscribe link (RFC 8058), sent as
    /// `List-Unsubscribe: <link>` with `List-Unsubscribe-Post: List-Unsubscribe=One-Click`. It holds
    /// a token: like the text, never logged or stored.
    pub unsubscribe_url: Option<String>,
}

impl std::fmt::Debug for OutgoingMessage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OutgoingMessage")
            .field("notification_id", &self.notification_id)
            .field("template", &self.template)
            .field("channel", &self.channel)
            .finish_non_exhaustive()
    }
}

impl OutgoingMessage {
    /// The email as RFC 5322 text (UTF-8 body, CRLF line ends): what SES sends as raw content and
    /// what the file provider writes as `.eml`.
    pub fn to_eml(&self) -> String {
        let subject = if self.subject.is_ascii() {
            self.subject.clone()
        } else {
            use base64::Engine;
            format!("=?UTF-8?B?{}?=", base64::engine::general_purpose::STANDARD.encode(&self.subject))
        };
        let mut text = String::with_capacity(self.body.len() + 512);
        let unsubscribe = self.unsubscribe_url.as_ref().map(|url| format!("<{url}>"));
        let one_click = unsubscribe.as_ref().map(|link| {
            [("List-Unsubscribe", link.as_str()), ("List-Unsubscribe-Post", "List-Unsubscribe=One-Click")]
        });
        let headers = [
            ("From", self.from.as_str()),
            ("To", self.to.as_str()),
            ("Subject", subject.as_str()),
            ("Date", &Utc::now().to_rfc2822()),
            ("Message-ID", &format!("<{}@clinic.invalid>", self.notification_id)),
            ("MIME-Version", "1.0"),
            ("Content-Type", "text/plain; charset=utf-8"),
            ("Content-Transfer-Encoding", "8bit"),
            ("X-Clinic-Idempotency-Key", &self.idempotency_key),
            ("X-Clinic-Template", &self.template),
        ];
        for (name, value) in headers.into_iter().chain(one_click.into_iter().flatten()) {
            text.push_str(name);
            text.push_str(": ");
            text.push_str(value);
            text.push_str("\r\n");
        }
        text.push_str("\r\n");
        for line in self.body.lines() {
            text.push_str(line);
            text.push_str("\r\n");
        }
        text
    }

    /// True when no header value could break out of its line (addresses come from stored data).
    pub fn headers_are_safe(&self) -> bool {
        [&self.to, &self.from, &self.subject, &self.idempotency_key, &self.template]
            .into_iter()
            .chain(&self.unsubscribe_url)
            .all(|value| !value.chars().any(char::is_control))
    }
}

/// The code of a provider's throttling answer (SES `Throttling`/`TooManyRequestsException`, SNS
/// `Throttled`, …): a hold, not a failure — the row's attempt is given back and the provider's
/// shared rate slows down ([`crate::lease::rate::slow`]).
pub const THROTTLED: &str = "provider_throttled";

/// The provider took the message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Accepted {
    pub provider_message_id: String,
}

/// The provider did not take the message. `code` is stable (stored as `last_error_code`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("provider error {code} (retryable: {retryable})")]
pub struct ProviderError {
    pub code: String,
    pub retryable: bool,
}

impl ProviderError {
    pub fn retryable(code: impl Into<String>) -> Self {
        Self { code: code.into(), retryable: true }
    }

    pub fn permanent(code: impl Into<String>) -> Self {
        Self { code: code.into(), retryable: false }
    }
}

/// Sends one rendered message. Implementations bound their own network time (client timeouts); the
/// sender also wraps every call in [`super::DeliveryConfig::provider_timeout`].
#[async_trait]
pub trait Provider: Send + Sync {
    /// A short name for logs (`ses`, `sns`, `file`, `log`).
    fn name(&self) -> &'static str;

    async fn send(&self, message: &OutgoingMessage) -> Result<Accepted, ProviderError>;
}

/// The provider of each channel; a channel without one cannot be used (`no_contact`).
#[derive(Clone, Default)]
pub struct Providers {
    pub email: Option<Arc<dyn Provider>>,
    pub sms: Option<Arc<dyn Provider>>,
}

impl std::fmt::Debug for Providers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Providers")
            .field("email", &self.email.as_ref().map(|p| p.name()))
            .field("sms", &self.sms.as_ref().map(|p| p.name()))
            .finish()
    }
}

impl Providers {
    /// One provider for both channels.
    pub fn both(provider: Arc<dyn Provider>) -> Self {
        Self { email: Some(Arc::clone(&provider)), sms: Some(provider) }
    }

    pub fn for_channel(&self, channel: Channel) -> Option<&Arc<dyn Provider>> {
        match channel {
            Channel::Email => self.email.as_ref(),
            Channel::Sms => self.sms.as_ref(),
        }
    }
}

/// Writes each message as a readable file under a folder: `<key>.eml` for email, `<key>.sms.txt` for
/// SMS, where `<key>` is the idempotency key with `:` as `_`. Written to a temporary name, then
/// renamed, so a reader never sees half a message and a resend replaces the earlier file.
#[derive(Debug, Clone)]
pub struct FileProvider {
    dir: PathBuf,
    timeout: Duration,
}

impl FileProvider {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into(), timeout: Duration::from_secs(5) }
    }

    /// The file a message is written to.
    pub fn path_for(&self, message: &OutgoingMessage) -> PathBuf {
        let key: String = message
            .idempotency_key
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '-' { c } else { '_' })
            .collect();
        let extension = match message.channel {
            Channel::Email => "eml",
            Channel::Sms => "sms.txt",
        };
        self.dir.join(format!("{key}.{extension}"))
    }

    async fn write(&self, message: &OutgoingMessage) -> std::io::Result<PathBuf> {
        let dir = self.dir.clone();
        let path = self.path_for(message);
        let text = match message.channel {
            Channel::Email => message.to_eml(),
            Channel::Sms => format!("To: {}\nFrom: {}\n\n{}\n", message.to, message.from, message.body),
        };
        tokio::task::spawn_blocking(move || {
            std::fs::create_dir_all(&dir)?;
            let temporary = path.with_extension("partial");
            std::fs::write(&temporary, text)?;
            std::fs::rename(&temporary, &path)?;
            Ok(path)
        })
        .await
        .map_err(std::io::Error::other)?
    }
}

#[async_trait]
impl Provider for FileProvider {
    fn name(&self) -> &'static str {
        "file"
    }

    async fn send(&self, message: &OutgoingMessage) -> Result<Accepted, ProviderError> {
        match tokio::time::timeout(self.timeout, self.write(message)).await {
            Ok(Ok(path)) => {
                let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
                Ok(Accepted { provider_message_id: format!("file:{name}") })
            }
            Ok(Err(_)) => Err(ProviderError::retryable("file_write_failed")),
            Err(_) => Err(ProviderError::retryable("provider_timeout")),
        }
    }
}

/// Accepts every message and logs that it did — ids and the template only, never the content.
#[derive(Debug, Clone, Copy, Default)]
pub struct LogProvider;

#[async_trait]
impl Provider for LogProvider {
    fn name(&self) -> &'static str {
        "log"
    }

    async fn send(&self, message: &OutgoingMessage) -> Result<Accepted, ProviderError> {
        tracing::info!(
            notification_id = %message.notification_id,
            template = %message.template,
            channel = message.channel.as_str(),
            "log notifier: message accepted, not sent"
        );
        Ok(Accepted { provider_message_id: format!("log:{}", message.notification_id) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message() -> OutgoingMessage {
        OutgoingMessage {
            notification_id: NotificationId::generate(),
            template: "appointment.reminder".into(),
            channel: Channel::Email,
            idempotency_key: "01J00000000000000000000000:patient_reminder".into(),
            to: "secret@example.test".into(),
            from: "clinic@example.test".into(),
            subject: "Réminder".into(),
            body: "Hello Secret Name\nline two".into(),
            unsubscribe_url: None,
        }
    }

    #[test]
    fn debug_prints_no_content() {
        let text = format!("{:?}", message());
        assert!(!text.contains("secret") && !text.contains("Secret"), "{text}");
        assert!(text.contains("appointment.reminder"));
    }

    #[test]
    fn eml_has_headers_key_and_crlf_body() {
        let eml = message().to_eml();
        assert!(eml.contains("To: secret@example.test\r\n"));
        assert!(eml.contains("X-Clinic-Idempotency-Key: 01J00000000000000000000000:patient_reminder\r\n"));
        assert!(eml.contains("Subject: =?UTF-8?B?"));
        assert!(eml.ends_with("\r\n\r\nHello Secret Name\r\nline two\r\n"));
        let mut bad = message();
        bad.to = "a@example.test\r\nBcc: x@example.test".into();
        assert!(!bad.headers_are_safe());
        assert!(message().headers_are_safe());
        let mut linked = message();
        linked.unsubscribe_url = Some("https://api.example.test/v1/unsubscribe/tok".into());
        let eml = linked.to_eml();
        assert!(
            eml.contains("\r\nList-Unsubscribe: <https://api.example.test/v1/unsubscribe/tok>\r\n"),
            "{eml}"
        );
        assert!(eml.contains("\r\nList-Unsubscribe-Post: List-Unsubscribe=One-Click\r\n"), "{eml}");
        assert!(!message().to_eml().contains("List-Unsubscribe"), "no link, no header");
        linked.unsubscribe_url = Some("https://x/\r\nBcc: y".into());
        assert!(!linked.headers_are_safe());
    }

    #[test]
    fn file_names_come_from_the_idempotency_key() {
        let provider = FileProvider::new("/tmp/x");
        let path = provider.path_for(&message());
        assert_eq!(path.to_str().unwrap(), "/tmp/x/01J00000000000000000000000_patient_reminder.eml");
    }
}
