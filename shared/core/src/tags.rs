//! Keyed tags: the one signing mechanism of the values this service issues and later accepts back
//! from outside — correlation ids (`clinic_http::correlation`) and email unsubscribe tokens
//! ([`crate::delivery::unsubscribe`]).
//!
//! Invariants:
//! - Each use derives its key from its configured secret with a label of its own (HMAC-SHA256 of the
//!   label under the secret), so one secret serving two purposes never gives them the same key.
//! - A tag is the first [`TAG_BYTES`] bytes of HMAC-SHA256, under the derived key, over the use's tag
//!   label and then the parts in order (HMAC input is their concatenation).
//! - The current key issues; the previous one (during a rotation) only verifies. Verification is in
//!   constant time and needs the full [`TAG_BYTES`].
//! - `Debug` never shows a key.

use hmac::{Hmac, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// Bytes of the HMAC kept in a tag (128 bits: forging one is a 2^128 guess per try).
pub const TAG_BYTES: usize = 16;

/// The keys of one use: current and, during a rotation, previous; and the use's tag label.
#[derive(Clone)]
pub struct TagKeys {
    current: Vec<u8>,
    previous: Option<Vec<u8>>,
    tag_label: &'static [u8],
}

impl std::fmt::Debug for TagKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TagKeys")
            .field("previous", &self.previous.as_ref().map(|_| "<redacted>"))
            .finish_non_exhaustive()
    }
}

fn mac(key: &[u8]) -> HmacSha256 {
    // HMAC accepts keys of any length.
    <HmacSha256 as Mac>::new_from_slice(key).unwrap_or_else(|_| unreachable!())
}

fn derive(secret: &[u8], key_label: &[u8]) -> Vec<u8> {
    let mut mac = mac(secret);
    mac.update(key_label);
    mac.finalize().into_bytes().to_vec()
}

impl TagKeys {
    /// Keys derived from the current secret and, during a rotation, the previous one, with the
    /// use's key label; tags made over `tag_label` and the parts.
    pub fn derive(
        current: &[u8],
        previous: Option<&[u8]>,
        key_label: &[u8],
        tag_label: &'static [u8],
    ) -> Self {
        Self {
            current: derive(current, key_label),
            previous: previous.map(|secret| derive(secret, key_label)),
            tag_label,
        }
    }

    fn tagging(&self, key: &[u8], parts: &[&[u8]]) -> HmacSha256 {
        let mut mac = mac(key);
        mac.update(self.tag_label);
        for part in parts {
            mac.update(part);
        }
        mac
    }

    /// The tag of `parts` under the current key.
    pub fn tag(&self, parts: &[&[u8]]) -> [u8; TAG_BYTES] {
        let full = self.tagging(&self.current, parts).finalize().into_bytes();
        let mut tag = [0u8; TAG_BYTES];
        tag.copy_from_slice(&full[..TAG_BYTES]);
        tag
    }

    /// True when `tag` is the tag of `parts` under the current or the previous key.
    pub fn verify(&self, parts: &[&[u8]], tag: &[u8]) -> bool {
        if tag.len() != TAG_BYTES {
            return false;
        }
        let matches = |key: &[u8]| self.tagging(key, parts).verify_truncated_left(tag).is_ok();
        matches(&self.current) || self.previous.as_deref().is_some_and(matches)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_verify_under_either_key_and_only_for_their_parts_and_use() {
        let keys = TagKeys::derive(b"secret-one-0123456789", None, b"key label", b"tag label");
        let tag = keys.tag(&[b"a", b"b"]);
        assert!(keys.verify(&[b"a", b"b"], &tag));
        assert!(keys.verify(&[b"ab"], &tag), "parts are concatenated");
        assert!(!keys.verify(&[b"a", b"c"], &tag));
        assert!(!keys.verify(&[b"a", b"b"], &tag[..8]), "the full tag is needed");
        let rotated = TagKeys::derive(
            b"secret-two-0123456789",
            Some(b"secret-one-0123456789"),
            b"key label",
            b"tag label",
        );
        assert!(rotated.verify(&[b"a", b"b"], &tag), "the previous key still verifies");
        assert_ne!(rotated.tag(&[b"a", b"b"]), tag, "the current key issues");
        let other_use = TagKeys::derive(b"secret-one-0123456789", None, b"other key label", b"tag label");
        assert!(!other_use.verify(&[b"a", b"b"], &tag), "one secret, two uses, two keys");
        assert!(!format!("{rotated:?}").contains("secret"));
    }
}
