//! Webhook signing secrets at rest: sealed with an AEAD under a key that lives outside the database
//! (docs/deploy.md, docs/secret-rotation.md).
//!
//! In AWS a [`KeyService`] (KMS, `clinic-secrets`) seals: each secret is encrypted by the service
//! under its key with the endpoint id as encryption context, stored as `kms1:<base64 blob>`. The API
//! may only encrypt there, so it seals what it creates and can open nothing; only the processes that
//! send (the webhook sender, the fan-out listener's first attempts) may decrypt, and they keep what
//! they opened in memory (bounded) so a send costs no service call after the first.
//!
//! Locally (`clinic dev`, the CLI, tests) and for values sealed before the service was used, a
//! keyring of 32-byte keys seals with XChaCha20-Poly1305. Stored form: `enc2:<key id>:<base64(nonce || ciphertext)>` in `webhook_endpoints.secret` and
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
//! - With a service, every new value is sealed by it, and [`super::endpoints::seal_clear`] moves the
//!   older values (clear, `enc1:`, `enc2:`) to it in bounded batches; the keyring then only opens.
//!   A service that cannot be reached is [`OpenError::Unavailable`] / [`SealError::Unavailable`]:
//!   never a send without a secret, never a stored clear value.
//! - Every process that seals or opens gets its keyring from its `main`: locally from a key file
//!   ([`WebhookKey::load`], [`KeySource`]); in AWS from a Secrets Manager secret's current and
//!   previous versions ([`WebhookKey::from_secret_text`]). Nothing here reads the environment except
//!   [`KeySource::read`], which a `main` calls.
//!
//! Over 500 lines only with its tests; the code above them is under 500.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use rand::RngCore;

use super::signing::Secret;
use crate::config::{ConfigError, Env};
use crate::db::login::BoxFuture;
use crate::ids::WebhookEndpointId;

/// The key's length in bytes.
pub const KEY_BYTES: usize = 32;
const NONCE_BYTES: usize = 24;
const LEGACY_PREFIX: &str = "enc1:";
const PREFIX: &str = "enc2:";
const SERVICE_PREFIX: &str = "kms1:";
/// How many opened secrets a process keeps in memory (per endpoint and stored value); past it the
/// memory is emptied and refilled on demand.
const OPENED_LIMIT: usize = 4096;
/// The setting naming the key file (a path, never the key): the CLI and tests.
pub const KEY_FILE_VAR: &str = "CLINIC_WEBHOOK_KEY_FILE";
/// The setting naming the Secrets Manager secret that holds the keyring (AWS; an ARN, never the key).
pub const KEY_SECRET_ARN_VAR: &str = "CLINIC_WEBHOOK_KEY_SECRET_ARN";
/// The setting naming the KMS key that seals webhook secrets (AWS; a key id or ARN, not a secret).
pub const KMS_KEY_VAR: &str = "CLINIC_WEBHOOK_KMS_KEY_ID";

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

/// A key service (KMS in AWS): encrypts and decrypts small values under a key it never gives out,
/// bound to an encryption context (here the endpoint id).
pub trait KeyService: Send + Sync + 'static {
    fn encrypt<'a>(
        &'a self,
        context: &'a str,
        plaintext: &'a [u8],
    ) -> BoxFuture<'a, Result<Vec<u8>, KeyServiceError>>;
    fn decrypt<'a>(
        &'a self,
        context: &'a str,
        blob: &'a [u8],
    ) -> BoxFuture<'a, Result<Vec<u8>, KeyServiceError>>;
}

/// Why the key service did not answer with a value (never the value).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum KeyServiceError {
    /// Not for this context or key, altered, or not allowed to this process.
    #[error("the key service refused")]
    Refused,
    /// Unreachable, throttled or failing: try again later.
    #[error("the key service is unavailable")]
    Unavailable,
}

/// A secret could not be sealed (the key service did not answer): nothing is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SealError {
    #[error("webhook secrets cannot be sealed now: the key service is unavailable")]
    Unavailable,
    #[error("webhook secrets cannot be sealed: the key service refused")]
    Refused,
}

/// The key service and the secrets this process opened with it.
#[derive(Clone)]
struct Service {
    keys: Arc<dyn KeyService>,
    opened: Arc<Mutex<HashMap<(WebhookEndpointId, String), Secret>>>,
}

/// The keys that seal and open webhook secrets: with a [`KeyService`], the service seals and the
/// keyring only opens older values; without one, the keyring's current key seals and its previous
/// ones only open.
#[derive(Clone)]
pub struct WebhookKey {
    current: SealingKey,
    previous: Vec<SealingKey>,
    service: Option<Service>,
}

impl PartialEq for WebhookKey {
    fn eq(&self, other: &Self) -> bool {
        let same_service = match (&self.service, &other.service) {
            (None, None) => true,
            (Some(a), Some(b)) => Arc::ptr_eq(&a.keys, &b.keys),
            _ => false,
        };
        self.current == other.current && self.previous == other.previous && same_service
    }
}

impl Eq for WebhookKey {}

impl std::fmt::Debug for WebhookKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let previous: Vec<&str> = self.previous.iter().map(|key| key.id.as_str()).collect();
        let service = if self.service.is_some() { "key service, " } else { "" };
        write!(f, "WebhookKey({service}current {}, previous {previous:?}, <redacted>)", self.current.id)
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
    /// Sealed under a key this keyring does not hold (a newer one, or one already dropped), or by a
    /// key service this process does not use.
    #[error("stored webhook secret is sealed under a key this process does not hold")]
    UnknownKey,
    /// Sealed by the key service, which did not answer: try again later.
    #[error("stored webhook secret cannot be opened now: the key service is unavailable")]
    Unavailable,
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
    pub fn read(env: &Env, local_default: Option<PathBuf>) -> Result<KeySource, ConfigError> {
        match (env.var(KEY_FILE_VAR), local_default) {
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
        WebhookKey { current: SealingKey::new(bytes), previous: Vec::new(), service: None }
    }

    /// This keyring with `service` sealing from now on (the keyring then only opens older values).
    pub fn with_service(mut self, service: Arc<dyn KeyService>) -> WebhookKey {
        self.service = Some(Service { keys: service, opened: Arc::default() });
        self
    }

    /// Only the key service (the API in AWS: it seals and may open nothing). Its keyring is a
    /// random in-memory key that nothing was sealed with.
    pub fn service_only(service: Arc<dyn KeyService>) -> WebhookKey {
        WebhookKey::generate().with_service(service)
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

    /// The id of the keyring's current key (`enc2:<id>:…`).
    pub fn key_id(&self) -> &str {
        &self.current.id
    }

    /// Whether `stored` should be sealed again: clear, sealed without a key id, or under a key that
    /// is not the current one.
    pub fn needs_reseal(&self, stored: &str) -> bool {
        !stored.starts_with(&self.sealed_prefix())
    }

    /// The start of every value sealed as it must be now: `kms1:` with a key service, else
    /// `enc2:<id>:` of the current key.
    pub fn sealed_prefix(&self) -> String {
        match self.service {
            Some(_) => SERVICE_PREFIX.to_owned(),
            None => format!("{PREFIX}{}:", self.current.id),
        }
    }

    /// The key of `source` ([`KeySource::read`]), loaded by [`WebhookKey::load`]: what a local
    /// process that seals or opens (`clinic dev`, the CLI) calls from its `main`. A bad or missing
    /// file is a configuration error naming the path (never the key). The Lambdas read theirs from
    /// Secrets Manager instead ([`WebhookKey::from_secret_text`], `clinic-secrets`).
    pub fn configured(source: &KeySource) -> Result<WebhookKey, ConfigError> {
        WebhookKey::load(source).map_err(|error| {
            let path = match source {
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

    /// Seals `secret` for the row of `endpoint`: by the key service when there is one, else under the
    /// current key.
    pub async fn seal(&self, endpoint: WebhookEndpointId, secret: &Secret) -> Result<String, SealError> {
        let Some(service) = &self.service else {
            return Ok(self.seal_locally(endpoint, secret));
        };
        let context = endpoint.to_string();
        let blob =
            service.keys.encrypt(&context, secret.expose().as_bytes()).await.map_err(
                |error| match error {
                    KeyServiceError::Refused => SealError::Refused,
                    KeyServiceError::Unavailable => SealError::Unavailable,
                },
            )?;
        Ok(format!("{SERVICE_PREFIX}{}", STANDARD.encode(blob)))
    }

    fn seal_locally(&self, endpoint: WebhookEndpointId, secret: &Secret) -> String {
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
    pub async fn open(&self, endpoint: WebhookEndpointId, stored: &str) -> Result<Secret, OpenError> {
        match stored.strip_prefix(SERVICE_PREFIX) {
            Some(encoded) => self.open_by_service(endpoint, stored, encoded).await,
            None => self.open_locally(endpoint, stored),
        }
    }

    async fn open_by_service(
        &self,
        endpoint: WebhookEndpointId,
        stored: &str,
        encoded: &str,
    ) -> Result<Secret, OpenError> {
        let service = self.service.as_ref().ok_or(OpenError::UnknownKey)?;
        let remembered = (endpoint, stored.to_owned());
        if let Some(secret) = service.opened.lock().unwrap_or_else(|p| p.into_inner()).get(&remembered) {
            return Ok(secret.clone());
        }
        let blob = STANDARD.decode(encoded).map_err(|_| OpenError::Malformed)?;
        let clear =
            service.keys.decrypt(&endpoint.to_string(), &blob).await.map_err(|error| match error {
                KeyServiceError::Refused => OpenError::Sealed,
                KeyServiceError::Unavailable => OpenError::Unavailable,
            })?;
        let text = String::from_utf8(clear).map_err(|_| OpenError::Malformed)?;
        let secret = Secret::parse(&text).map_err(|_| OpenError::Malformed)?;
        let mut opened = service.opened.lock().unwrap_or_else(|p| p.into_inner());
        if opened.len() >= OPENED_LIMIT {
            opened.clear();
        }
        opened.insert(remembered, secret.clone());
        Ok(secret)
    }

    fn open_locally(&self, endpoint: WebhookEndpointId, stored: &str) -> Result<Secret, OpenError> {
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

    /// A stored value as it must be stored: sealed as [`WebhookKey::sealed_prefix`] says (a clear
    /// legacy value, or one sealed under a previous key, sealed again), else unchanged.
    pub async fn reseal(&self, endpoint: WebhookEndpointId, stored: &str) -> Result<String, OpenError> {
        if !self.needs_reseal(stored) {
            return Ok(stored.to_owned());
        }
        let secret = self.open(endpoint, stored).await?;
        self.seal(endpoint, &secret).await.map_err(|error| match error {
            SealError::Unavailable => OpenError::Unavailable,
            SealError::Refused => OpenError::UnknownKey,
        })
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

/// Makes the local key file with a fresh key ([`crate::private_file::create_once`]): concurrent first
/// uses agree, as whoever links first wins and the others read that key.
fn create(path: &Path) -> Result<[u8; KEY_BYTES], KeyError> {
    let mut key = [0u8; KEY_BYTES];
    rand::rng().fill_bytes(&mut key);
    match crate::private_file::create_once(path, &key).map_err(io(path))? {
        crate::private_file::Created::Made => Ok(key),
        crate::private_file::Created::Existing => read(path),
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn key() -> WebhookKey {
        WebhookKey::from_bytes([7; KEY_BYTES])
    }

    #[tokio::test]
    async fn seals_open_for_their_endpoint_only() {
        let (a, b) = (WebhookEndpointId::generate(), WebhookEndpointId::generate());
        let secret = Secret::generate();
        let stored = key().seal(a, &secret).await.unwrap();
        assert!(stored.starts_with(&format!("enc2:{}:", key().key_id())));
        assert!(!stored.contains(secret.expose().trim_start_matches("whsec_")));
        assert_ne!(key().seal(a, &secret).await.unwrap(), stored, "a fresh nonce per seal");
        assert_eq!(key().open(a, &stored).await.unwrap(), secret);
        assert_eq!(key().open(b, &stored).await, Err(OpenError::Sealed), "moved to another row");
        assert_eq!(WebhookKey::from_bytes([8; KEY_BYTES]).open(a, &stored).await, Err(OpenError::UnknownKey));
        assert_eq!(key().open(a, "enc1:!!").await, Err(OpenError::Malformed));
        assert_eq!(key().open(a, "enc1:AAAA").await, Err(OpenError::Malformed));
        assert_eq!(key().open(a, "sk_live_x").await, Err(OpenError::Malformed));
        // Legacy clear rows open as they are and are sealed when rewritten.
        assert_eq!(key().open(a, secret.expose()).await.unwrap(), secret);
        let resealed = key().reseal(a, secret.expose()).await.unwrap();
        assert_eq!(key().open(a, &resealed).await.unwrap(), secret);
        assert_eq!(key().reseal(a, &stored).await.unwrap(), stored);
        let shown = format!("{:?}", key());
        assert!(shown.starts_with("WebhookKey(current ") && shown.ends_with("<redacted>)"), "{shown}");
        assert!(!shown.contains("0707"), "{shown}");
    }

    #[tokio::test]
    async fn a_rotated_keyring_opens_old_values_and_reseals_them_under_the_new_key() {
        let endpoint = WebhookEndpointId::generate();
        let secret = Secret::generate();
        let old = key();
        let sealed_old = old.seal(endpoint, &secret).await.unwrap();
        let new = WebhookKey::from_bytes([8; KEY_BYTES]);
        assert_ne!(new.key_id(), old.key_id());
        // Without the previous key the old value names a key this process does not hold.
        assert_eq!(new.open(endpoint, &sealed_old).await, Err(OpenError::UnknownKey));
        let ring = new.clone().with_previous(old.clone());
        assert_eq!(ring.open(endpoint, &sealed_old).await.unwrap(), secret);
        assert!(ring.needs_reseal(&sealed_old));
        let resealed = ring.reseal(endpoint, &sealed_old).await.unwrap();
        assert!(resealed.starts_with(&ring.sealed_prefix()) && !ring.needs_reseal(&resealed));
        assert_eq!(
            new.open(endpoint, &resealed).await.unwrap(),
            secret,
            "the previous key is no longer needed"
        );
        assert_eq!(old.open(endpoint, &resealed).await, Err(OpenError::UnknownKey));
        // A key id pasted onto another key's ciphertext does not open.
        let forged = sealed_old.replacen(old.key_id(), new.key_id(), 1);
        assert_eq!(ring.open(endpoint, &forged).await, Err(OpenError::Sealed));
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
        assert_eq!(ring.open(endpoint, &legacy).await.unwrap(), secret);
        assert!(ring.needs_reseal(&legacy));
        // Secrets Manager text: base64 of 32 bytes, or a long generated text hashed into a key.
        let from_base64 = WebhookKey::from_secret_text(&STANDARD.encode([8u8; KEY_BYTES]), None).unwrap();
        assert_eq!(from_base64, new);
        let generated = "AbCdEfGhIjKlMnOpQrStUvWxYz0123456789AbCdEfGhIjKlMnOpQrStUvWxYz01";
        let ring = WebhookKey::from_secret_text(generated, Some(&STANDARD.encode([7u8; KEY_BYTES]))).unwrap();
        assert_eq!(ring.open(endpoint, &sealed_old).await.unwrap(), secret);
        assert!(matches!(WebhookKey::from_secret_text("short", None), Err(KeyError::InvalidText)));
    }

    /// A key service in memory: XChaCha20-Poly1305 under its own key with the context as associated
    /// data (what KMS does with an encryption context), counting decryptions, switchable off.
    struct InMemoryService {
        key: SealingKey,
        decrypted: std::sync::atomic::AtomicUsize,
        down: std::sync::atomic::AtomicBool,
    }

    impl InMemoryService {
        fn new() -> Arc<InMemoryService> {
            Arc::new(InMemoryService {
                key: SealingKey::new([3; KEY_BYTES]),
                decrypted: 0.into(),
                down: false.into(),
            })
        }
        fn check(&self) -> Result<(), KeyServiceError> {
            match self.down.load(std::sync::atomic::Ordering::SeqCst) {
                true => Err(KeyServiceError::Unavailable),
                false => Ok(()),
            }
        }
    }

    impl KeyService for InMemoryService {
        fn encrypt<'a>(
            &'a self,
            context: &'a str,
            plaintext: &'a [u8],
        ) -> BoxFuture<'a, Result<Vec<u8>, KeyServiceError>> {
            Box::pin(async move {
                self.check()?;
                let payload = Payload { msg: plaintext, aad: context.as_bytes() };
                let mut blob = [9u8; NONCE_BYTES].to_vec();
                blob.extend(
                    self.key.cipher().encrypt(XNonce::from_slice(&[9u8; NONCE_BYTES]), payload).unwrap(),
                );
                Ok(blob)
            })
        }
        fn decrypt<'a>(
            &'a self,
            context: &'a str,
            blob: &'a [u8],
        ) -> BoxFuture<'a, Result<Vec<u8>, KeyServiceError>> {
            Box::pin(async move {
                self.check()?;
                self.decrypted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let (nonce, sealed) = blob.split_at(NONCE_BYTES);
                let payload = Payload { msg: sealed, aad: context.as_bytes() };
                self.key
                    .cipher()
                    .decrypt(XNonce::from_slice(nonce), payload)
                    .map_err(|_| KeyServiceError::Refused)
            })
        }
    }

    #[tokio::test]
    async fn with_a_key_service_it_seals_and_the_keyring_only_opens_older_values() {
        use std::sync::atomic::Ordering::SeqCst;
        let (a, b) = (WebhookEndpointId::generate(), WebhookEndpointId::generate());
        let secret = Secret::generate();
        let service = InMemoryService::new();
        let older = key().seal(a, &secret).await.unwrap();
        let sender = key().with_service(service.clone());
        let api = WebhookKey::service_only(service.clone());
        let stored = api.seal(a, &secret).await.unwrap();
        assert!(stored.starts_with("kms1:") && api.sealed_prefix() == "kms1:", "{stored}");
        assert!(!stored.contains(secret.expose().trim_start_matches("whsec_")));
        // The API's keyring holds nothing anyone sealed with: it opens no older value.
        assert_eq!(api.open(a, &older).await, Err(OpenError::UnknownKey));
        // The sender opens the service's value once, then from memory; for its endpoint only.
        assert_eq!(sender.open(a, &stored).await.unwrap(), secret);
        assert_eq!(sender.open(a, &stored).await.unwrap(), secret);
        assert_eq!(service.decrypted.load(SeqCst), 1, "opened secrets are kept in memory");
        assert_eq!(sender.open(b, &stored).await, Err(OpenError::Sealed), "moved to another row");
        // A process without the service cannot open it.
        assert_eq!(key().open(a, &stored).await, Err(OpenError::UnknownKey));
        // Older values open with the keyring and are moved to the service.
        assert!(sender.needs_reseal(&older) && !sender.needs_reseal(&stored));
        let moved = sender.reseal(a, &older).await.unwrap();
        assert!(moved.starts_with("kms1:"));
        assert_eq!(WebhookKey::service_only(service.clone()).open(a, &moved).await.unwrap(), secret);
        // The service down: nothing sealed, nothing opened (and never a clear value instead).
        service.down.store(true, SeqCst);
        assert_eq!(api.seal(b, &secret).await, Err(SealError::Unavailable));
        assert_eq!(
            WebhookKey::service_only(service.clone()).open(a, &stored).await,
            Err(OpenError::Unavailable)
        );
        assert_eq!(sender.reseal(b, secret.expose()).await, Err(OpenError::Unavailable));
        assert!(format!("{sender:?}").starts_with("WebhookKey(key service, current "));
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

    /// Concurrent first uses in one process (two local commands' threads, or two tests) agree on one
    /// key and leave no temporary file behind.
    #[test]
    fn concurrent_first_uses_of_the_local_key_file_agree_on_one_key() {
        for _ in 0..20 {
            let folder = std::env::temp_dir().join(format!("clinic-key-{}", ulid::Ulid::generate()));
            let path = folder.join("webhook-secret-key");
            let start = std::sync::Arc::new(std::sync::Barrier::new(8));
            let threads: Vec<_> = (0..8)
                .map(|_| {
                    let (path, start) = (path.clone(), start.clone());
                    std::thread::spawn(move || {
                        start.wait();
                        WebhookKey::load(&KeySource::LocalFile(path))
                    })
                })
                .collect();
            let keys: Vec<WebhookKey> = threads.into_iter().map(|t| t.join().unwrap().unwrap()).collect();
            let kept = WebhookKey::load(&KeySource::File(path.clone())).unwrap();
            assert!(keys.iter().all(|key| *key == kept), "every first use has the file's key");
            assert_eq!(std::fs::read_dir(&folder).unwrap().count(), 1, "only the key file stays");
            std::fs::remove_dir_all(&folder).unwrap();
        }
    }
}
