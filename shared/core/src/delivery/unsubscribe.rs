//! One-click unsubscribe (RFC 8058, DESIGN §5e): the signed, expiring token an email of an optional
//! kind carries in its `List-Unsubscribe` link, and the settings that make the link.
//!
//! The sender signs a token when it renders an email ([`UnsubscribeLinks::url`]); the API's
//! unauthenticated `POST /v1/unsubscribe/{token}` verifies it ([`UnsubscribeKeys::verify`]) and opts
//! the patient out of that kind (`patients::record_opt_out`).
//!
//! Invariants:
//! - A token holds exactly four values: the workspace id, the patient id, the message kind and the
//!   expiry (seconds since 1970) — no name, address or other personal data; ids are opaque ULIDs.
//!   Layout: version byte `1`, workspace (16 bytes), patient (16), kind (1), expiry (8, big-endian),
//!   then the first 16 bytes of HMAC-SHA256 over a label and those 42 bytes; base64url without
//!   padding (78 characters: URL-safe, no escaping needed in a path).
//! - The tag is the service's one keyed tag ([`crate::tags`], as correlation ids): its key is derived
//!   from the configured secret with its own label, so a secret that also serves another purpose (the
//!   local JWT secret) never shares a key with it. The current key signs and verifies; the previous
//!   one (during a rotation) only verifies. Tags are compared in constant time.
//! - A token whose tag does not verify under either key is forged, whatever else it says; only a
//!   genuine token can be expired. Verification reads no clock: the caller passes `now`.
//! - A token, a link or a key is never logged, stored, put in an event, a row or a metric: the link
//!   exists only in the rendered email, like the rest of the message. `Debug` redacts keys.

use std::time::Duration;

use crate::config::{ConfigError, Env};
use crate::domain::contact::MessageKind;
use crate::ids::{PatientId, WorkspaceId};
use crate::tags::{TagKeys, TAG_BYTES as TAG};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use chrono::{DateTime, TimeZone, Utc};

const VERSION: u8 = 1;
/// Bytes signed: version, workspace, patient, kind, expiry.
const SIGNED: usize = 1 + 16 + 16 + 1 + 8;
/// Characters of a token in base64url without padding.
pub const TOKEN_CHARS: usize = 78;
const TAG_LABEL: &[u8] = b"clinic unsubscribe token v1";
const KEY_LABEL: &[u8] = b"clinic unsubscribe key v1";

/// The setting that names the key's Secrets Manager secret, by ARN (Lambda: the API, which
/// verifies, and every function that sends, which signs).
pub const KEY_SECRET_ARN_VAR: &str = "CLINIC_UNSUBSCRIBE_KEY_SECRET_ARN";

/// The path of the one-click route under the API's base URL (the token follows).
pub const PATH: &str = "/v1/unsubscribe/";

/// The default lifetime of a link: 60 days (`CLINIC_UNSUBSCRIBE_TTL_DAYS`, 1–365).
pub const DEFAULT_TTL_DAYS: u64 = 60;

/// The kinds an email link may opt out of: every kind the contact policy lets a patient opt out
/// of (`contactOptOuts`). A kind added later must decide here.
pub const fn is_optional(kind: MessageKind) -> bool {
    match kind {
        MessageKind::BookingConfirmation | MessageKind::ChangeNotice | MessageKind::Reminder => true,
    }
}

const fn kind_byte(kind: MessageKind) -> u8 {
    match kind {
        MessageKind::BookingConfirmation => 1,
        MessageKind::ChangeNotice => 2,
        MessageKind::Reminder => 3,
    }
}

fn kind_of_byte(byte: u8) -> Option<MessageKind> {
    MessageKind::ALL.iter().copied().find(|kind| kind_byte(*kind) == byte)
}

/// What a token says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Claims {
    pub workspace_id: WorkspaceId,
    pub patient_id: PatientId,
    pub kind: MessageKind,
    /// Whole seconds.
    pub expires_at: DateTime<Utc>,
}

/// Why a token is refused (the API answers 400 naming `token`; nothing is written).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    #[error("is not an unsubscribe token")]
    Malformed,
    #[error("is not a token this service issued")]
    Forged,
    #[error("has expired")]
    Expired,
}

/// The keys that sign and verify tokens.
#[derive(Clone, Debug)]
pub struct UnsubscribeKeys {
    keys: TagKeys,
}

/// The least length of a configured secret.
pub const MIN_SECRET_CHARS: usize = 16;

impl UnsubscribeKeys {
    /// Keys from the current secret and, during a rotation, the previous one.
    pub fn new(current: &[u8], previous: Option<&[u8]>) -> Self {
        Self { keys: TagKeys::derive(current, previous, KEY_LABEL, TAG_LABEL) }
    }

    /// Keys from secret texts (Secrets Manager, or the local settings), each at least
    /// [`MIN_SECRET_CHARS`]; `name` names the setting in the error (never the value).
    pub fn from_secrets(
        name: &'static str,
        current: &str,
        previous: Option<&str>,
    ) -> Result<Self, ConfigError> {
        let check = |text: &str| {
            if text.len() < MIN_SECRET_CHARS {
                Err(ConfigError::Invalid {
                    name,
                    value: "<redacted>".into(),
                    message: format!("must be at least {MIN_SECRET_CHARS} characters"),
                })
            } else {
                Ok(())
            }
        };
        check(current)?;
        if let Some(previous) = previous {
            check(previous)?;
        }
        Ok(Self::new(current.as_bytes(), previous.map(str::as_bytes)))
    }

    /// Local processes (`clinic dev`, `clinic deliveries send`): `CLINIC_UNSUBSCRIBE_KEY` (and,
    /// during a rotation, `CLINIC_UNSUBSCRIBE_KEY_PREVIOUS`); `None` when unset, and the caller
    /// derives the key from the local JWT secret ([`UnsubscribeKeys::new`]; the label keeps the two
    /// keys apart).
    pub fn read_local(env: &Env) -> Result<Option<Self>, ConfigError> {
        let previous = env.var("CLINIC_UNSUBSCRIBE_KEY_PREVIOUS");
        match env.var("CLINIC_UNSUBSCRIBE_KEY") {
            Some(current) => {
                Self::from_secrets("CLINIC_UNSUBSCRIBE_KEY", &current, previous.as_deref()).map(Some)
            }
            None => Ok(None),
        }
    }

    /// A token for `claims`, signed with the current key.
    pub fn issue(&self, claims: &Claims) -> String {
        let mut bytes = Vec::with_capacity(SIGNED + TAG);
        bytes.push(VERSION);
        bytes.extend_from_slice(&claims.workspace_id.ulid().to_bytes());
        bytes.extend_from_slice(&claims.patient_id.ulid().to_bytes());
        bytes.push(kind_byte(claims.kind));
        bytes.extend_from_slice(&claims.expires_at.timestamp().to_be_bytes());
        let tag = self.keys.tag(&[&bytes]);
        bytes.extend_from_slice(&tag);
        URL_SAFE_NO_PAD.encode(bytes)
    }

    /// The claims of `token` when this service issued it (current or previous key) and it has not
    /// expired at `now`.
    pub fn verify(&self, token: &str, now: DateTime<Utc>) -> Result<Claims, TokenError> {
        if token.len() != TOKEN_CHARS {
            return Err(TokenError::Malformed);
        }
        let bytes = URL_SAFE_NO_PAD.decode(token).map_err(|_| TokenError::Malformed)?;
        if bytes.len() != SIGNED + TAG || bytes[0] != VERSION {
            return Err(TokenError::Malformed);
        }
        let (signed, tag) = bytes.split_at(SIGNED);
        if !self.keys.verify(&[signed], tag) {
            return Err(TokenError::Forged);
        }
        let ulid = |range: std::ops::Range<usize>| {
            let mut raw = [0u8; 16];
            raw.copy_from_slice(&signed[range]);
            ulid::Ulid::from_bytes(raw)
        };
        let kind = kind_of_byte(signed[33]).ok_or(TokenError::Malformed)?;
        let mut seconds = [0u8; 8];
        seconds.copy_from_slice(&signed[34..42]);
        let expires_at =
            Utc.timestamp_opt(i64::from_be_bytes(seconds), 0).single().ok_or(TokenError::Malformed)?;
        if expires_at <= now {
            return Err(TokenError::Expired);
        }
        Ok(Claims {
            workspace_id: WorkspaceId::from_ulid(ulid(1..17)),
            patient_id: PatientId::from_ulid(ulid(17..33)),
            kind,
            expires_at,
        })
    }
}

/// What the sender needs to put a link in an email: the API's public base URL, the keys and the
/// links' lifetime.
#[derive(Debug, Clone)]
pub struct UnsubscribeLinks {
    /// `CLINIC_PUBLIC_BASE_URL`, without a trailing slash (e.g. `https://api.clinic.example`).
    pub base_url: String,
    pub keys: UnsubscribeKeys,
    /// `CLINIC_UNSUBSCRIBE_TTL_DAYS` (default 60).
    pub ttl: Duration,
}

impl UnsubscribeLinks {
    /// The link that opts `patient` out of `kind`, valid for [`Self::ttl`] from `now`.
    pub fn url(
        &self,
        workspace_id: WorkspaceId,
        patient_id: PatientId,
        kind: MessageKind,
        now: DateTime<Utc>,
    ) -> String {
        let ttl =
            chrono::Duration::from_std(self.ttl).unwrap_or(chrono::Duration::days(DEFAULT_TTL_DAYS as i64));
        let expires_at = Utc.timestamp_opt((now + ttl).timestamp(), 0).single().unwrap_or(now + ttl);
        let token = self.keys.issue(&Claims { workspace_id, patient_id, kind, expires_at });
        format!("{}{PATH}{token}", self.base_url)
    }

    /// The settings' public base URL (else `default_base`, `clinic dev`'s own address) and link
    /// lifetime, with `keys`; `None` (emails carry no link, and a warning says so) when either the
    /// keys or the base URL is missing.
    pub fn configure(
        settings: &LinkSettings,
        keys: Option<UnsubscribeKeys>,
        default_base: Option<&str>,
    ) -> Result<Option<Self>, ConfigError> {
        let days = settings.ttl_days;
        let base = settings.public_base_url.clone().or_else(|| default_base.map(str::to_owned));
        let (Some(keys), Some(base)) = (keys, base) else {
            tracing::warn!(
                "no CLINIC_PUBLIC_BASE_URL or no unsubscribe key: emails carry no one-click unsubscribe link"
            );
            return Ok(None);
        };
        let ttl = Duration::from_secs(days * 86_400);
        Ok(Some(Self { base_url: public_base_url(&base)?, keys, ttl }))
    }
}

/// What the links read from the environment: `CLINIC_PUBLIC_BASE_URL` (checked when the links are
/// configured) and `CLINIC_UNSUBSCRIBE_TTL_DAYS` (1–365, default 60).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkSettings {
    pub public_base_url: Option<String>,
    pub ttl_days: u64,
}

impl LinkSettings {
    pub fn read(env: &Env) -> Result<Self, ConfigError> {
        Ok(Self {
            public_base_url: env.var("CLINIC_PUBLIC_BASE_URL"),
            ttl_days: env.bounded("CLINIC_UNSUBSCRIBE_TTL_DAYS", DEFAULT_TTL_DAYS, 1..=365)?,
        })
    }
}

/// A public base URL: `https://host[:port][/prefix]` (or `http://` for a loopback host, locally),
/// no query, no fragment, no control characters or spaces (it goes into a mail header); the trailing
/// slash is dropped.
pub fn public_base_url(text: &str) -> Result<String, ConfigError> {
    let invalid = |message: &str| ConfigError::Invalid {
        name: "CLINIC_PUBLIC_BASE_URL",
        value: text.to_owned(),
        message: message.to_owned(),
    };
    let trimmed = text.trim().trim_end_matches('/');
    if trimmed
        .chars()
        .any(|c| c.is_control() || c.is_whitespace() || matches!(c, '?' | '#' | '<' | '>' | '"'))
    {
        return Err(invalid("must be a URL without spaces, query or fragment"));
    }
    let (rest, secure) = match (trimmed.strip_prefix("https://"), trimmed.strip_prefix("http://")) {
        (Some(rest), _) => (rest, true),
        (None, Some(rest)) => (rest, false),
        (None, None) => return Err(invalid("must start with https://")),
    };
    let authority = rest.split('/').next().unwrap_or_default();
    let host = authority
        .rsplit_once(':')
        .filter(|(host, port)| {
            !host.is_empty() && !port.is_empty() && port.chars().all(|c| c.is_ascii_digit())
        })
        .map_or(authority, |(host, _)| host);
    if host.is_empty() {
        return Err(invalid("must name a host"));
    }
    if !secure && !matches!(host, "127.0.0.1" | "localhost" | "[::1]") {
        return Err(invalid("must be https (http only for a loopback address)"));
    }
    Ok(trimmed.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claims(now: DateTime<Utc>) -> Claims {
        Claims {
            workspace_id: WorkspaceId::generate(),
            patient_id: PatientId::generate(),
            kind: MessageKind::Reminder,
            expires_at: Utc.timestamp_opt(now.timestamp() + 3600, 0).unwrap(),
        }
    }

    #[test]
    fn a_token_round_trips_is_url_safe_and_holds_only_ids_kind_and_expiry() {
        let keys = UnsubscribeKeys::new(b"unsubscribe-secret-0123", None);
        let now = Utc::now();
        for kind in MessageKind::ALL {
            let claims = Claims { kind: *kind, ..claims(now) };
            let token = keys.issue(&claims);
            assert_eq!(token.len(), TOKEN_CHARS);
            assert!(token.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'), "{token}");
            assert_eq!(keys.verify(&token, now), Ok(claims));
            // 42 signed bytes: exactly the version, two ids, the kind and the expiry.
            assert_eq!(URL_SAFE_NO_PAD.decode(&token).unwrap().len(), SIGNED + TAG);
        }
    }

    #[test]
    fn forged_altered_expired_and_other_key_tokens_are_refused() {
        let keys = UnsubscribeKeys::new(b"unsubscribe-secret-0123", None);
        let now = Utc::now();
        let claims = claims(now);
        let token = keys.issue(&claims);
        // Another key (another deployment, or a guess).
        let other = UnsubscribeKeys::new(b"another-secret-456789", None);
        assert_eq!(other.verify(&token, now), Err(TokenError::Forged));
        // One character changed anywhere: the tag no longer matches (or it no longer decodes).
        for at in [0, 5, 30, 60, TOKEN_CHARS - 2] {
            let mut altered: Vec<char> = token.chars().collect();
            altered[at] = if altered[at] == 'A' { 'B' } else { 'A' };
            let altered: String = altered.into_iter().collect();
            assert!(keys.verify(&altered, now).is_err(), "altered at {at}");
        }
        // Expired: at the expiry instant and after.
        assert_eq!(keys.verify(&token, claims.expires_at), Err(TokenError::Expired));
        // A forged token that claims a far expiry is forged, not expired.
        let forged = other.issue(&Claims { expires_at: now - chrono::Duration::days(1), ..claims });
        assert_eq!(keys.verify(&forged, now), Err(TokenError::Forged));
        for junk in ["", "abc", &"A".repeat(TOKEN_CHARS), &format!("{}=", &token[1..])] {
            assert!(keys.verify(junk, now).is_err(), "{junk:?}");
        }
    }

    #[test]
    fn the_previous_key_still_verifies_after_a_rotation_and_the_current_one_signs() {
        let now = Utc::now();
        let before = UnsubscribeKeys::new(b"unsubscribe-old-0123", None);
        let token = before.issue(&claims(now));
        let after = UnsubscribeKeys::new(b"unsubscribe-new-0123", Some(b"unsubscribe-old-0123"));
        assert!(after.verify(&token, now).is_ok(), "a link in an email sent before the rotation");
        let fresh = after.issue(&claims(now));
        assert_eq!(before.verify(&fresh, now), Err(TokenError::Forged), "the new key signs");
        // The key is derived for this use: the same secret tagging correlation ids differs.
        let correlation =
            TagKeys::derive(b"unsubscribe-old-0123", None, b"clinic correlation key v1", TAG_LABEL);
        assert!(!correlation.verify(
            &[&URL_SAFE_NO_PAD.decode(&token).unwrap()[..SIGNED]],
            &URL_SAFE_NO_PAD.decode(&token).unwrap()[SIGNED..]
        ));
        assert!(!format!("{after:?}").contains("unsubscribe"));
    }

    #[test]
    fn short_secrets_are_refused_without_showing_them() {
        let error = UnsubscribeKeys::from_secrets("CLINIC_UNSUBSCRIBE_KEY", "tiny", None).unwrap_err();
        assert!(error.to_string().contains("CLINIC_UNSUBSCRIBE_KEY") && !error.to_string().contains("tiny"));
        assert!(UnsubscribeKeys::from_secrets("X", "long-enough-secret-01", Some("short")).is_err());
    }

    #[test]
    fn links_are_made_under_the_public_base_url() {
        let keys = UnsubscribeKeys::new(b"unsubscribe-secret-0123", None);
        let links = UnsubscribeLinks {
            base_url: public_base_url("https://api.clinic.example/").unwrap(),
            keys: keys.clone(),
            ttl: Duration::from_secs(DEFAULT_TTL_DAYS * 86_400),
        };
        let now = Utc::now();
        let (workspace, patient) = (WorkspaceId::generate(), PatientId::generate());
        let url = links.url(workspace, patient, MessageKind::BookingConfirmation, now);
        let token = url.strip_prefix("https://api.clinic.example/v1/unsubscribe/").unwrap();
        let claims = keys.verify(token, now).unwrap();
        assert_eq!((claims.workspace_id, claims.patient_id), (workspace, patient));
        let days = (claims.expires_at - now).num_seconds() as f64 / 86_400.0;
        assert!((59.99..=60.0).contains(&days), "{days}");
        assert!(public_base_url("http://127.0.0.1:3000").is_ok());
        for bad in ["http://api.clinic.example", "ftp://x", "https://", "https://a b", "https://x/?q=1", "x"]
        {
            assert!(public_base_url(bad).is_err(), "{bad}");
        }
    }
}
