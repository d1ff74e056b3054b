//! Opaque, signed pagination cursors.
//!
//! A cursor is base64url(16-byte position ‖ 16-byte HMAC-SHA256 tag). The tag covers the position and
//! the scope it was issued for (workspace, list and resource), so a cursor that this server did not
//! issue, or issued for another list, is rejected (400) instead of silently paging somewhere else.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use ulid::Ulid;

type HmacSha256 = Hmac<Sha256>;

fn tag(key: &[u8], scope: &str, position: &[u8; 16]) -> [u8; 16] {
    // HMAC accepts keys of any length.
    let mut mac = HmacSha256::new_from_slice(key).unwrap_or_else(|_| unreachable!());
    mac.update(scope.as_bytes());
    mac.update(&[0]);
    mac.update(position);
    let full = mac.finalize().into_bytes();
    let mut short = [0u8; 16];
    short.copy_from_slice(&full[..16]);
    short
}

/// Encodes the position after which the next page starts.
pub fn encode(key: &[u8], scope: &str, position: Ulid) -> String {
    let bytes = position.to_bytes();
    let mut raw = Vec::with_capacity(32);
    raw.extend_from_slice(&bytes);
    raw.extend_from_slice(&tag(key, scope, &bytes));
    URL_SAFE_NO_PAD.encode(raw)
}

/// Decodes a cursor issued by [`encode`] for the same scope; anything else is `None`.
pub fn decode(key: &[u8], scope: &str, cursor: &str) -> Option<Ulid> {
    let raw = URL_SAFE_NO_PAD.decode(cursor.as_bytes()).ok()?;
    if raw.len() != 32 {
        return None;
    }
    let mut position = [0u8; 16];
    position.copy_from_slice(&raw[..16]);
    let expected = tag(key, scope, &position);
    // Constant-time comparison of the tags.
    let difference = expected.iter().zip(&raw[16..]).fold(0u8, |acc, (a, b)| acc | (a ^ b));
    (difference == 0).then(|| Ulid::from_bytes(position))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_rejects_tampering_and_other_scopes() {
        let id = Ulid::generate();
        let cursor = encode(b"key", "patient:1", id);
        assert_eq!(decode(b"key", "patient:1", &cursor), Some(id));
        assert_eq!(decode(b"key", "patient:2", &cursor), None);
        assert_eq!(decode(b"other", "patient:1", &cursor), None);
        let mut tampered = cursor.clone().into_bytes();
        tampered[3] = if tampered[3] == b'A' { b'B' } else { b'A' };
        assert_eq!(decode(b"key", "patient:1", std::str::from_utf8(&tampered).unwrap()), None);
        assert_eq!(decode(b"key", "patient:1", "not a cursor"), None);
    }
}
