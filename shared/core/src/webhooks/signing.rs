//! Signing secrets and signatures per the Standard Webhooks spec.
//!
//! A secret is `whsec_` followed by the base64 of 32 random bytes; the HMAC key is the decoded bytes.
//! A signature is `v1,<base64 HMAC-SHA256(key, "{webhook-id}.{webhook-timestamp}.{body}")>`; during a
//! rotation the header carries one signature per live secret, separated by a space.
//!
//! Invariants: a [`Secret`] never prints (its `Debug` is redacted, it has no `Display`); only
//! [`Secret::expose`] reveals it, for the one answer that shows it and for storing it.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use hmac::{Hmac, Mac};
use rand::RngCore;
use sha2::Sha256;

/// What a secret's text starts with.
pub const PREFIX: &str = "whsec_";
const KEY_BYTES: usize = 32;

/// A signing secret (`whsec_…`).
#[derive(Clone, PartialEq, Eq)]
pub struct Secret {
    text: String,
    key: Vec<u8>,
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

/// A stored secret that is not `whsec_<base64>` (never expected: the server wrote it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("not a whsec_ secret")]
pub struct BadSecret;

impl Secret {
    /// A fresh random secret.
    pub fn generate() -> Secret {
        let mut key = vec![0u8; KEY_BYTES];
        rand::rng().fill_bytes(&mut key);
        Secret { text: format!("{PREFIX}{}", STANDARD.encode(&key)), key }
    }

    pub fn parse(text: &str) -> Result<Secret, BadSecret> {
        let encoded = text.strip_prefix(PREFIX).ok_or(BadSecret)?;
        let key = STANDARD.decode(encoded).map_err(|_| BadSecret)?;
        if key.len() < 24 {
            return Err(BadSecret);
        }
        Ok(Secret { text: text.to_owned(), key })
    }

    /// The secret's text, for storing it and for the one answer that shows it.
    pub fn expose(&self) -> &str {
        &self.text
    }

    fn sign(&self, id: &str, timestamp: i64, body: &[u8]) -> String {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.key).expect("HMAC takes any key length");
        mac.update(id.as_bytes());
        mac.update(b".");
        mac.update(timestamp.to_string().as_bytes());
        mac.update(b".");
        mac.update(body);
        format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes()))
    }
}

/// The `webhook-signature` header value: one `v1,` signature per secret, space separated.
pub fn signature_header(secrets: &[&Secret], id: &str, timestamp: i64, body: &[u8]) -> String {
    secrets.iter().map(|secret| secret.sign(id, timestamp, body)).collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_secrets_round_trip_and_never_print() {
        let secret = Secret::generate();
        assert!(secret.expose().starts_with("whsec_"));
        assert_eq!(Secret::parse(secret.expose()).unwrap(), secret);
        assert_eq!(format!("{secret:?}"), "Secret(<redacted>)");
        assert_ne!(Secret::generate(), secret);
        assert!(Secret::parse("whsec_!!").is_err());
        assert!(Secret::parse("sk_live_abc").is_err());
    }

    #[test]
    fn matches_the_spec_example() {
        // The example of the Standard Webhooks reference libraries.
        let secret = Secret::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        let body = br#"{"test": 2432232314}"#;
        let header = signature_header(&[&secret], "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body);
        assert_eq!(header, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
    }

    #[test]
    fn a_rotation_signs_with_both() {
        let (new, old) = (Secret::generate(), Secret::generate());
        let header = signature_header(&[&new, &old], "id", 1, b"{}");
        let parts: Vec<&str> = header.split(' ').collect();
        assert_eq!(parts.len(), 2);
        assert!(parts.iter().all(|p| p.starts_with("v1,")));
        assert_ne!(parts[0], parts[1]);
    }
}
