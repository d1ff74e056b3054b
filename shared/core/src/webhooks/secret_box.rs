//! Webhook signing secrets at rest: sealed with XChaCha20-Poly1305 under a key that lives outside the
//! database (docs/deploy.md, docs/secret-rotation.md).
//!
//! Stored form: `enc1:<base64(nonce || ciphertext)>` in `webhook_endpoints.secret` and
//! `previous_secret`; the plaintext is the `whsec_…` text; the nonce is 24 random bytes per seal.
//!
//! Invariants:
//! - The associated data is the endpoint id: a ciphertext copied into another endpoint's row does
//!   not open there ([`OpenError::Sealed`]), so the sender records a failed attempt and never sends
//!   it (unsigned or signed with another endpoint's secret).
//! - The key is never logged: [`WebhookKey`]'s `Debug` is redacted, it has no `Display`, and no error
//!   of this module carries key or secret bytes (a path at most).
//! - A clear legacy `whsec_` value still opens (rows written before sealing); the sender seals such
//!   rows once per process ([`super::endpoints::seal_clear`]) and a rotation seals the rotated-out one.
//! - Every process that seals or opens loads the key through [`WebhookKey::load`] from a
//!   [`KeySource`] its `main` read from the settings; nothing here reads the environment except
//!   [`KeySource::from_env`], which a `main` calls.

use std::io::Write;
use std::path::{Path, PathBuf};

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use rand::RngCore;

use super::signing::Secret;
use crate::config::ConfigError;
use crate::ids::WebhookEndpointId;

/// The key's length in bytes.
pub const KEY_BYTES: usize = 32;
const NONCE_BYTES: usize = 24;
const PREFIX: &str = "enc1:";
/// The setting naming the key file (a path, never the key).
pub const KEY_FILE_VAR: &str = "CLINIC_WEBHOOK_KEY_FILE";

/// The key that seals webhook secrets.
#[derive(Clone, PartialEq, Eq)]
pub struct WebhookKey([u8; KEY_BYTES]);

impl std::fmt::Debug for WebhookKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WebhookKey(<redacted>)")
    }
}

/// A stored secret that cannot be opened for this endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum OpenError {
    /// Not `enc1:` nor `whsec_`, or a sealed value whose payload is not valid base64 / too short.
    #[error("stored webhook secret is malformed")]
    Malformed,
    /// Sealed under another key, for another endpoint, or altered.
    #[error("stored webhook secret does not open under this key for this endpoint")]
    Sealed,
}

/// Where the key comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeySource {
    /// A file that must exist (AWS: `CLINIC_WEBHOOK_KEY_FILE`).
    File(PathBuf),
    /// A local file, created with mode 0600 on first use and reused after (`clinic dev`, the CLI).
    LocalFile(PathBuf),
}

/// Why the key could not be loaded (never the key's bytes).
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("webhook key file {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("webhook key file {path}: must hold {KEY_BYTES} bytes (raw, or base64 text)")]
    Invalid { path: PathBuf },
}

impl KeySource {
    /// `CLINIC_WEBHOOK_KEY_FILE` when set (the file must exist); else `local_default` (created on
    /// first use), when the caller runs locally; else the setting is required.
    pub fn from_env(local_default: Option<PathBuf>) -> Result<KeySource, ConfigError> {
        match (crate::config::var(KEY_FILE_VAR), local_default) {
            (Some(path), _) => Ok(KeySource::File(PathBuf::from(path))),
            (None, Some(path)) => Ok(KeySource::LocalFile(path)),
            (None, None) => Err(ConfigError::Missing { name: KEY_FILE_VAR }),
        }
    }
}

impl WebhookKey {
    /// A fresh random key held only in memory: for throwaway databases (the drills), never for data
    /// that outlives the process.
    pub fn generate() -> WebhookKey {
        let mut key = [0u8; KEY_BYTES];
        rand::rng().fill_bytes(&mut key);
        WebhookKey(key)
    }

    pub fn from_bytes(bytes: [u8; KEY_BYTES]) -> WebhookKey {
        WebhookKey(bytes)
    }

    /// What every process that seals or opens calls from its `main`: the key of
    /// [`KeySource::from_env`]`(local_default)`, loaded by [`WebhookKey::load`]; a bad or missing
    /// file is a configuration error naming the path (never the key).
    pub fn from_env(local_default: Option<PathBuf>) -> Result<WebhookKey, ConfigError> {
        let source = KeySource::from_env(local_default)?;
        WebhookKey::load(&source).map_err(|error| {
            let path = match &source {
                KeySource::File(path) | KeySource::LocalFile(path) => path.display().to_string(),
            };
            ConfigError::Invalid { name: KEY_FILE_VAR, value: path, message: error.to_string() }
        })
    }

    /// [`WebhookKey::from_env`] where the key is optional (the Lambdas): `None` when
    /// `CLINIC_WEBHOOK_KEY_FILE` is unset — that process then neither seals nor sends webhooks.
    pub fn from_env_if_set() -> Result<Option<WebhookKey>, ConfigError> {
        match crate::config::var(KEY_FILE_VAR) {
            Some(_) => WebhookKey::from_env(None).map(Some),
            None => Ok(None),
        }
    }

    /// Loads (or, for a local file, creates on first use) the key of `source`.
    pub fn load(source: &KeySource) -> Result<WebhookKey, KeyError> {
        match source {
            KeySource::File(path) => read(path),
            KeySource::LocalFile(path) => match read(path) {
                Err(KeyError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
                    create(path)
                }
                other => other,
            },
        }
    }

    fn cipher(&self) -> XChaCha20Poly1305 {
        XChaCha20Poly1305::new(&self.0.into())
    }

    /// Seals `secret` for the row of `endpoint`.
    pub fn seal(&self, endpoint: WebhookEndpointId, secret: &Secret) -> String {
        let mut nonce = [0u8; NONCE_BYTES];
        rand::rng().fill_bytes(&mut nonce);
        let aad = endpoint.uuid().into_bytes();
        let payload = Payload { msg: secret.expose().as_bytes(), aad: &aad };
        let sealed = self
            .cipher()
            .encrypt(XNonce::from_slice(&nonce), payload)
            .expect("XChaCha20-Poly1305 seals any message of this size");
        let mut stored = nonce.to_vec();
        stored.extend_from_slice(&sealed);
        format!("{PREFIX}{}", STANDARD.encode(stored))
    }

    /// Opens a stored value of the row of `endpoint` (a clear legacy `whsec_` value opens as is).
    pub fn open(&self, endpoint: WebhookEndpointId, stored: &str) -> Result<Secret, OpenError> {
        if stored.starts_with("whsec_") {
            return Secret::parse(stored).map_err(|_| OpenError::Malformed);
        }
        let encoded = stored.strip_prefix(PREFIX).ok_or(OpenError::Malformed)?;
        let bytes = STANDARD.decode(encoded).map_err(|_| OpenError::Malformed)?;
        if bytes.len() <= NONCE_BYTES {
            return Err(OpenError::Malformed);
        }
        let (nonce, sealed) = bytes.split_at(NONCE_BYTES);
        let aad = endpoint.uuid().into_bytes();
        let clear = self
            .cipher()
            .decrypt(XNonce::from_slice(nonce), Payload { msg: sealed, aad: &aad })
            .map_err(|_| OpenError::Sealed)?;
        let text = String::from_utf8(clear).map_err(|_| OpenError::Malformed)?;
        Secret::parse(&text).map_err(|_| OpenError::Malformed)
    }

    /// A stored value as it must be stored: a clear legacy value sealed, a sealed one unchanged.
    pub fn seal_if_clear(&self, endpoint: WebhookEndpointId, stored: &str) -> Result<String, OpenError> {
        if is_clear(stored) {
            Ok(self.seal(endpoint, &self.open(endpoint, stored)?))
        } else {
            Ok(stored.to_owned())
        }
    }
}

/// A legacy value stored in clear.
pub fn is_clear(stored: &str) -> bool {
    stored.starts_with("whsec_")
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> KeyError + '_ {
    move |source| KeyError::Io { path: path.to_owned(), source }
}

fn read(path: &Path) -> Result<WebhookKey, KeyError> {
    let bytes = std::fs::read(path).map_err(io(path))?;
    let raw = match <[u8; KEY_BYTES]>::try_from(bytes.as_slice()) {
        Ok(raw) => raw,
        Err(_) => {
            let text =
                std::str::from_utf8(&bytes).map_err(|_| KeyError::Invalid { path: path.to_owned() })?;
            let decoded =
                STANDARD.decode(text.trim()).map_err(|_| KeyError::Invalid { path: path.to_owned() })?;
            <[u8; KEY_BYTES]>::try_from(decoded.as_slice())
                .map_err(|_| KeyError::Invalid { path: path.to_owned() })?
        }
    };
    Ok(WebhookKey(raw))
}

/// Writes a fresh key to a private temporary file (0600) and links it into place, so a concurrent
/// first use never reads a half-written key: whoever links first wins, the other reads that one.
fn create(path: &Path) -> Result<WebhookKey, KeyError> {
    use std::os::unix::fs::OpenOptionsExt;
    if let Some(folder) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(folder).map_err(io(folder))?;
    }
    let mut key = [0u8; KEY_BYTES];
    rand::rng().fill_bytes(&mut key);
    let temporary = path.with_extension(format!("tmp-{}", std::process::id()));
    let written = (|| {
        let mut file =
            std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&temporary)?;
        file.write_all(&key)?;
        file.sync_all()?;
        std::fs::hard_link(&temporary, path)
    })();
    let _ = std::fs::remove_file(&temporary);
    match written {
        Ok(()) => Ok(WebhookKey(key)),
        Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => read(path),
        Err(error) => Err(KeyError::Io { path: path.to_owned(), source: error }),
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn key() -> WebhookKey {
        WebhookKey::from_bytes([7; KEY_BYTES])
    }

    #[test]
    fn seals_open_for_their_endpoint_only() {
        let (a, b) = (WebhookEndpointId::generate(), WebhookEndpointId::generate());
        let secret = Secret::generate();
        let stored = key().seal(a, &secret);
        assert!(stored.starts_with("enc1:"));
        assert!(!stored.contains(secret.expose().trim_start_matches("whsec_")));
        assert_ne!(key().seal(a, &secret), stored, "a fresh nonce per seal");
        assert_eq!(key().open(a, &stored).unwrap(), secret);
        assert_eq!(key().open(b, &stored), Err(OpenError::Sealed), "moved to another row");
        assert_eq!(WebhookKey::from_bytes([8; KEY_BYTES]).open(a, &stored), Err(OpenError::Sealed));
        assert_eq!(key().open(a, "enc1:!!"), Err(OpenError::Malformed));
        assert_eq!(key().open(a, "enc1:AAAA"), Err(OpenError::Malformed));
        assert_eq!(key().open(a, "sk_live_x"), Err(OpenError::Malformed));
        // Legacy clear rows open as they are and are sealed when rewritten.
        assert_eq!(key().open(a, secret.expose()).unwrap(), secret);
        let resealed = key().seal_if_clear(a, secret.expose()).unwrap();
        assert_eq!(key().open(a, &resealed).unwrap(), secret);
        assert_eq!(key().seal_if_clear(a, &stored).unwrap(), stored);
        assert_eq!(format!("{:?}", key()), "WebhookKey(<redacted>)");
    }

    #[test]
    fn the_local_key_file_is_created_private_and_reused() {
        let folder = std::env::temp_dir().join(format!("clinic-key-{}", ulid::Ulid::generate()));
        let path = folder.join("webhook-secret-key");
        assert!(matches!(WebhookKey::load(&KeySource::File(path.clone())), Err(KeyError::Io { .. })));
        let first = WebhookKey::load(&KeySource::LocalFile(path.clone())).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(std::fs::read(&path).unwrap().len(), KEY_BYTES);
        assert_eq!(WebhookKey::load(&KeySource::LocalFile(path.clone())).unwrap(), first, "reused");
        assert_eq!(WebhookKey::load(&KeySource::File(path.clone())).unwrap(), first);
        // A deployment may provide the key as base64 text.
        let text = folder.join("from-secrets-manager");
        std::fs::write(&text, format!("{}\n", STANDARD.encode([9u8; KEY_BYTES]))).unwrap();
        assert_eq!(WebhookKey::load(&KeySource::File(text.clone())).unwrap(), WebhookKey([9; KEY_BYTES]));
        std::fs::write(&text, "short").unwrap();
        let invalid = WebhookKey::load(&KeySource::File(text)).unwrap_err();
        assert!(matches!(invalid, KeyError::Invalid { .. }), "{invalid}");
        std::fs::remove_dir_all(&folder).unwrap();
    }
}
