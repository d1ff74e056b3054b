//! Webhook signing secrets at rest: sealed with XChaCha20-Poly1305 under a key that lives outside the
//! database (docs/deploy.md, docs/secret-rotation.md).
//!
//! Stored form: `enc2:<key id>:<base64(nonce || ciphertext)>` in `webhook_endpoints.secret` and
//! `previous_secret`; the plaintext is the `whsec_…` text; the nonce is 24 random bytes per seal; the
//! key id is the first 8 hex digits of a SHA-256 over the key (it names the key, it reveals nothing
//! usable about it). `enc1:<base64>` (sealed before key ids existed) still opens.
//!
//! Invariants:
//! - A [`WebhookKey`] is a keyring: one current key, which seals, and the keys it replaced, which
//!   only open. After a rotation the values sealed under a previous key keep opening, and
//!   [`super::endpoints::seal_clear`] re-seals them under the current key in bounded batches (the
//!   sender runs it once per process); then the previous key can be dropped.
//! - The associated data is the endpoint id (and the key id): a ciphertext copied into another
//!   endpoint's row does not open there ([`OpenError::Sealed`]), so the sender records a failed
//!   attempt and never sends it (unsigned or signed with another endpoint's secret).
//! - The key is never logged: [`WebhookKey`]'s `Debug` shows key ids only, it has no `Display`, and no
//!   error of this module carries key or secret bytes (a path at most).
//! - A clear legacy `whsec_` value still opens (rows written before sealing); it is re-sealed like a
//!   value under a previous key, and a rotation seals the rotated-out one.
//! - Every process that seals or opens gets its keyring from its `main`: locally from a key file
//!   ([`WebhookKey::load`], [`KeySource`]); in AWS from a Secrets Manager secret's current and
//!   previous versions ([`WebhookKey::from_secret_text`]). Nothing here reads the environment except
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
const LEGACY_PREFIX: &str = "enc1:";
const PREFIX: &str = "enc2:";
/// The setting naming the key file (a path, never the key): the CLI and tests.
pub const KEY_FILE_VAR: &str = "CLINIC_WEBHOOK_KEY_FILE";
/// The setting naming the Secrets Manager secret that holds the keyring (AWS; an ARN, never the key).
pub const KEY_SECRET_ARN_VAR: &str = "CLINIC_WEBHOOK_KEY_SECRET_ARN";

/// One 32-byte key and its id.
#[derive(Clone, PartialEq, Eq)]
struct SealingKey {
    bytes: [u8; KEY_BYTES],
    id: String,
}

impl SealingKey {
    fn new(bytes: [u8; KEY_BYTES]) -> SealingKey {
        use sha2::{Digest, Sha256};
        let digest = Sha256::new().chain_update(b"clinic webhook key id\0").chain_update(bytes).finalize();
        let id = digest[..4].iter().map(|byte| format!("{byte:02x}")).collect();
        SealingKey { bytes, id }
    }

    fn cipher(&self) -> XChaCha20Poly1305 {
        XChaCha20Poly1305::new(&self.bytes.into())
    }
}

/// The keys that seal and open webhook secrets: the current one seals, previous ones only open.
#[derive(Clone, PartialEq, Eq)]
pub struct WebhookKey {
    current: SealingKey,
    previous: Vec<SealingKey>,
}

impl std::fmt::Debug for WebhookKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let previous: Vec<&str> = self.previous.iter().map(|key| key.id.as_str()).collect();
        write!(f, "WebhookKey(current {}, previous {previous:?}, <redacted>)", self.current.id)
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
    /// Sealed under a key this keyring does not hold (a newer one, or one already dropped).
    #[error("stored webhook secret is sealed under a key this process does not hold")]
    UnknownKey,
}

/// Where the key comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeySource {
    /// A file that must exist (`CLINIC_WEBHOOK_KEY_FILE`).
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
    #[error("webhook key secret: must be the base64 text of {KEY_BYTES} bytes or at least 32 characters")]
    InvalidText,
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
        WebhookKey::from_bytes(key)
    }

    /// A keyring of one key.
    pub fn from_bytes(bytes: [u8; KEY_BYTES]) -> WebhookKey {
        WebhookKey { current: SealingKey::new(bytes), previous: Vec::new() }
    }

    /// This keyring, still opening what `previous` sealed (its current and previous keys).
    pub fn with_previous(mut self, previous: WebhookKey) -> WebhookKey {
        for key in std::iter::once(previous.current).chain(previous.previous) {
            if key != self.current && !self.previous.contains(&key) {
                self.previous.push(key);
            }
        }
        self
    }

    /// The keyring of a Secrets Manager secret (AWS): its current version seals, its previous
    /// version (after a rotation) only opens. A version is the base64 text of 32 bytes, or any text
    /// of at least 32 characters (what the stack generates), hashed with SHA-256 into the key.
    pub fn from_secret_text(current: &str, previous: Option<&str>) -> Result<WebhookKey, KeyError> {
        let key = WebhookKey::from_bytes(key_from_text(current)?);
        match previous {
            Some(text) => Ok(key.with_previous(WebhookKey::from_bytes(key_from_text(text)?))),
            None => Ok(key),
        }
    }

    /// The id of the key that seals (`enc2:<id>:…`).
    pub fn key_id(&self) -> &str {
        &self.current.id
    }

    /// Whether `stored` should be sealed again: clear, sealed without a key id, or under a key that
    /// is not the current one.
    pub fn needs_reseal(&self, stored: &str) -> bool {
        !stored.starts_with(&self.sealed_prefix())
    }

    /// The start of every value the current key sealed (`enc2:<id>:`).
    pub fn sealed_prefix(&self) -> String {
        format!("{PREFIX}{}:", self.current.id)
    }

    /// What a local process that seals or opens (`clinic dev`, the CLI) calls from its `main`: the
    /// key of [`KeySource::from_env`]`(local_default)`, loaded by [`WebhookKey::load`]; a bad or
    /// missing file is a configuration error naming the path (never the key). The Lambdas read
    /// theirs from Secrets Manager instead ([`WebhookKey::from_secret_text`], `clinic-secrets`).
    pub fn from_env(local_default: Option<PathBuf>) -> Result<WebhookKey, ConfigError> {
        let source = KeySource::from_env(local_default)?;
        WebhookKey::load(&source).map_err(|error| {
            let path = match &source {
                KeySource::File(path) | KeySource::LocalFile(path) => path.display().to_string(),
            };
            ConfigError::Invalid { name: KEY_FILE_VAR, value: path, message: error.to_string() }
        })
    }

    /// Loads (or, for a local file, creates on first use) the key of `source`.
    pub fn load(source: &KeySource) -> Result<WebhookKey, KeyError> {
        match source {
            KeySource::File(path) => read(path).map(WebhookKey::from_bytes),
            KeySource::LocalFile(path) => match read(path) {
                Err(KeyError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
                    create(path).map(WebhookKey::from_bytes)
                }
                other => other.map(WebhookKey::from_bytes),
            },
        }
    }

    /// Seals `secret` for the row of `endpoint` under the current key.
    pub fn seal(&self, endpoint: WebhookEndpointId, secret: &Secret) -> String {
        let mut nonce = [0u8; NONCE_BYTES];
        rand::rng().fill_bytes(&mut nonce);
        let aad = aad(endpoint, Some(&self.current.id));
        let payload = Payload { msg: secret.expose().as_bytes(), aad: &aad };
        let sealed = self
            .current
            .cipher()
            .encrypt(XNonce::from_slice(&nonce), payload)
            .expect("XChaCha20-Poly1305 seals any message of this size");
        let mut stored = nonce.to_vec();
        stored.extend_from_slice(&sealed);
        format!("{}{}", self.sealed_prefix(), STANDARD.encode(stored))
    }

    /// Opens a stored value of the row of `endpoint` (a clear legacy `whsec_` value opens as is).
    pub fn open(&self, endpoint: WebhookEndpointId, stored: &str) -> Result<Secret, OpenError> {
        if stored.starts_with("whsec_") {
            return Secret::parse(stored).map_err(|_| OpenError::Malformed);
        }
        let clear = if let Some(rest) = stored.strip_prefix(PREFIX) {
            let (id, encoded) = rest.split_once(':').ok_or(OpenError::Malformed)?;
            let (nonce, sealed) = split_payload(encoded)?;
            let key = self.keys().find(|key| key.id == id).ok_or(OpenError::UnknownKey)?;
            let aad = aad(endpoint, Some(id));
            key.cipher()
                .decrypt(XNonce::from_slice(&nonce), Payload { msg: &sealed, aad: &aad })
                .map_err(|_| OpenError::Sealed)?
        } else {
            let encoded = stored.strip_prefix(LEGACY_PREFIX).ok_or(OpenError::Malformed)?;
            let (nonce, sealed) = split_payload(encoded)?;
            let aad = aad(endpoint, None);
            self.keys()
                .find_map(|key| {
                    key.cipher().decrypt(XNonce::from_slice(&nonce), Payload { msg: &sealed, aad: &aad }).ok()
                })
                .ok_or(OpenError::Sealed)?
        };
        let text = String::from_utf8(clear).map_err(|_| OpenError::Malformed)?;
        Secret::parse(&text).map_err(|_| OpenError::Malformed)
    }

    /// A stored value as it must be stored: sealed under the current key (a clear legacy value, or
    /// one sealed under a previous key, sealed again), else unchanged.
    pub fn reseal(&self, endpoint: WebhookEndpointId, stored: &str) -> Result<String, OpenError> {
        if self.needs_reseal(stored) {
            Ok(self.seal(endpoint, &self.open(endpoint, stored)?))
        } else {
            Ok(stored.to_owned())
        }
    }

    fn keys(&self) -> impl Iterator<Item = &SealingKey> {
        std::iter::once(&self.current).chain(&self.previous)
    }
}

/// The associated data: the endpoint id, and the key id for `enc2:` values.
fn aad(endpoint: WebhookEndpointId, key_id: Option<&str>) -> Vec<u8> {
    let mut aad = endpoint.uuid().into_bytes().to_vec();
    if let Some(id) = key_id {
        aad.extend_from_slice(id.as_bytes());
    }
    aad
}

/// The nonce and the ciphertext of a base64 payload.
fn split_payload(encoded: &str) -> Result<(Vec<u8>, Vec<u8>), OpenError> {
    let mut bytes = STANDARD.decode(encoded).map_err(|_| OpenError::Malformed)?;
    if bytes.len() <= NONCE_BYTES {
        return Err(OpenError::Malformed);
    }
    let sealed = bytes.split_off(NONCE_BYTES);
    Ok((bytes, sealed))
}

/// A key from a secret's text: base64 of 32 bytes, else SHA-256 of a text of at least 32 characters.
fn key_from_text(text: &str) -> Result<[u8; KEY_BYTES], KeyError> {
    use sha2::{Digest, Sha256};
    let text = text.trim();
    if let Ok(Ok(raw)) = STANDARD.decode(text).map(<[u8; KEY_BYTES]>::try_from) {
        return Ok(raw);
    }
    if text.chars().count() < 32 {
        return Err(KeyError::InvalidText);
    }
    Ok(Sha256::new().chain_update(b"clinic webhook key\0").chain_update(text.as_bytes()).finalize().into())
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> KeyError + '_ {
    move |source| KeyError::Io { path: path.to_owned(), source }
}

fn read(path: &Path) -> Result<[u8; KEY_BYTES], KeyError> {
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
    Ok(raw)
}

/// Writes a fresh key to a private temporary file (0600) and links it into place, so a concurrent
/// first use never reads a half-written key: whoever links first wins, the other reads that one.
fn create(path: &Path) -> Result<[u8; KEY_BYTES], KeyError> {
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
        Ok(()) => Ok(key),
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
        assert!(stored.starts_with(&format!("enc2:{}:", key().key_id())));
        assert!(!stored.contains(secret.expose().trim_start_matches("whsec_")));
        assert_ne!(key().seal(a, &secret), stored, "a fresh nonce per seal");
        assert_eq!(key().open(a, &stored).unwrap(), secret);
        assert_eq!(key().open(b, &stored), Err(OpenError::Sealed), "moved to another row");
        assert_eq!(WebhookKey::from_bytes([8; KEY_BYTES]).open(a, &stored), Err(OpenError::UnknownKey));
        assert_eq!(key().open(a, "enc1:!!"), Err(OpenError::Malformed));
        assert_eq!(key().open(a, "enc1:AAAA"), Err(OpenError::Malformed));
        assert_eq!(key().open(a, "sk_live_x"), Err(OpenError::Malformed));
        // Legacy clear rows open as they are and are sealed when rewritten.
        assert_eq!(key().open(a, secret.expose()).unwrap(), secret);
        let resealed = key().reseal(a, secret.expose()).unwrap();
        assert_eq!(key().open(a, &resealed).unwrap(), secret);
        assert_eq!(key().reseal(a, &stored).unwrap(), stored);
        let shown = format!("{:?}", key());
        assert!(shown.starts_with("WebhookKey(current ") && shown.ends_with("<redacted>)"), "{shown}");
        assert!(!shown.contains("0707"), "{shown}");
    }

    #[test]
    fn a_rotated_keyring_opens_old_values_and_reseals_them_under_the_new_key() {
        let endpoint = WebhookEndpointId::generate();
        let secret = Secret::generate();
        let old = key();
        let sealed_old = old.seal(endpoint, &secret);
        let new = WebhookKey::from_bytes([8; KEY_BYTES]);
        assert_ne!(new.key_id(), old.key_id());
        // Without the previous key the old value names a key this process does not hold.
        assert_eq!(new.open(endpoint, &sealed_old), Err(OpenError::UnknownKey));
        let ring = new.clone().with_previous(old.clone());
        assert_eq!(ring.open(endpoint, &sealed_old).unwrap(), secret);
        assert!(ring.needs_reseal(&sealed_old));
        let resealed = ring.reseal(endpoint, &sealed_old).unwrap();
        assert!(resealed.starts_with(&ring.sealed_prefix()) && !ring.needs_reseal(&resealed));
        assert_eq!(new.open(endpoint, &resealed).unwrap(), secret, "the previous key is no longer needed");
        assert_eq!(old.open(endpoint, &resealed), Err(OpenError::UnknownKey));
        // A key id pasted onto another key's ciphertext does not open.
        let forged = sealed_old.replacen(old.key_id(), new.key_id(), 1);
        assert_eq!(ring.open(endpoint, &forged), Err(OpenError::Sealed));
        // Values sealed before key ids (`enc1:`) open under any key of the ring.
        let mut nonce = [1u8; NONCE_BYTES].to_vec();
        let legacy = old
            .current
            .cipher()
            .encrypt(
                XNonce::from_slice(&nonce),
                Payload { msg: secret.expose().as_bytes(), aad: &aad(endpoint, None) },
            )
            .unwrap();
        nonce.extend_from_slice(&legacy);
        let legacy = format!("enc1:{}", STANDARD.encode(nonce));
        assert_eq!(ring.open(endpoint, &legacy).unwrap(), secret);
        assert!(ring.needs_reseal(&legacy));
        // Secrets Manager text: base64 of 32 bytes, or a long generated text hashed into a key.
        let from_base64 = WebhookKey::from_secret_text(&STANDARD.encode([8u8; KEY_BYTES]), None).unwrap();
        assert_eq!(from_base64, new);
        let generated = "AbCdEfGhIjKlMnOpQrStUvWxYz0123456789AbCdEfGhIjKlMnOpQrStUvWxYz01";
        let ring = WebhookKey::from_secret_text(generated, Some(&STANDARD.encode([7u8; KEY_BYTES]))).unwrap();
        assert_eq!(ring.open(endpoint, &sealed_old).unwrap(), secret);
        assert!(matches!(WebhookKey::from_secret_text("short", None), Err(KeyError::InvalidText)));
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
        assert_eq!(
            WebhookKey::load(&KeySource::File(text.clone())).unwrap(),
            WebhookKey::from_bytes([9; KEY_BYTES])
        );
        std::fs::write(&text, "short").unwrap();
        let invalid = WebhookKey::load(&KeySource::File(text)).unwrap_err();
        assert!(matches!(invalid, KeyError::Invalid { .. }), "{invalid}");
        std::fs::remove_dir_all(&folder).unwrap();
    }
}
