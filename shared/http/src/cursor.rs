//! Pagination shared by every list and timeline: the page request (`?limit=&cursor=`), opaque sealed
//! cursors, and the `{ "items": [...], "nextCursor": … }` answer.
//!
//! Invariants:
//! - A cursor is base64url(24-byte nonce ‖ XChaCha20-Poly1305 ciphertext ‖ 16-byte tag) of a keyset
//!   [`Position`], with the scope it was issued for (workspace, list, filters) as associated data.
//!   A cursor this server did not issue, or issued for another list or other filters, does not open
//!   and answers 400 instead of silently paging somewhere else.
//! - Positions are sealed, not only signed: a position may hold a sort key such as a lower-cased name
//!   (patient search), and a cursor travels in URLs that proxies and access logs record, so its content
//!   is readable only by this server.
//! - `limit` is 1–100 (default 50). A page shorter than its limit is the last one (`nextCursor` null);
//!   a full page carries the position of its last item.

use std::collections::HashMap;

use axum::response::{IntoResponse, Response};
use axum::Json;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use chrono::{DateTime, Utc};
use hmac::{Hmac, Mac};
use serde::Serialize;
use sha2::Sha256;
use ulid::Ulid;

use super::problem::ApiError;
use clinic_core::domain::input::FieldError;

/// The longest cursor accepted (a patient-search position holds a name of at most 200 characters).
const MAX_CURSOR_CHARS: usize = 2048;
const NONCE_BYTES: usize = 24;

/// A keyset position that a cursor carries.
pub trait Position: Sized {
    fn to_bytes(&self) -> Vec<u8>;
    fn from_bytes(bytes: &[u8]) -> Option<Self>;
}

/// Lists ordered by id alone (timelines, notifications, the outbox, practitioners).
impl Position for Ulid {
    fn to_bytes(&self) -> Vec<u8> {
        Ulid::to_bytes(self).to_vec()
    }

    fn from_bytes(bytes: &[u8]) -> Option<Self> {
        Some(Ulid::from_bytes(bytes.try_into().ok()?))
    }
}

/// Lists ordered by a time, then id (the schedule view: `startsAt`, id).
impl Position for (DateTime<Utc>, Ulid) {
    fn to_bytes(&self) -> Vec<u8> {
        let mut bytes = self.0.timestamp_micros().to_be_bytes().to_vec();
        bytes.extend_from_slice(&self.1.to_bytes());
        bytes
    }

    fn from_bytes(bytes: &[u8]) -> Option<Self> {
        let (micros, id) = bytes.split_at_checked(8)?;
        let at = DateTime::from_timestamp_micros(i64::from_be_bytes(micros.try_into().ok()?))?;
        Some((at, <Ulid as Position>::from_bytes(id)?))
    }
}

/// Lists ordered by a text key, then id (patient search: the matched name, lower-cased).
impl Position for (String, Ulid) {
    fn to_bytes(&self) -> Vec<u8> {
        let mut bytes = self.1.to_bytes().to_vec();
        bytes.extend_from_slice(self.0.as_bytes());
        bytes
    }

    fn from_bytes(bytes: &[u8]) -> Option<Self> {
        let (id, key) = bytes.split_at_checked(16)?;
        Some((String::from_utf8(key.to_vec()).ok()?, <Ulid as Position>::from_bytes(id)?))
    }
}

/// The sealing key, derived from the configured cursor key (any length) with HMAC-SHA256.
fn cipher(key: &[u8]) -> XChaCha20Poly1305 {
    // HMAC accepts keys of any length.
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(key).unwrap_or_else(|_| unreachable!());
    mac.update(b"clinic pagination cursor v2");
    XChaCha20Poly1305::new(&mac.finalize().into_bytes())
}

/// Seals `position` for `scope`.
pub fn encode<P: Position>(key: &[u8], scope: &str, position: P) -> String {
    let nonce: [u8; NONCE_BYTES] = rand::random();
    let plaintext = position.to_bytes();
    let sealed = cipher(key)
        .encrypt(XNonce::from_slice(&nonce), Payload { msg: &plaintext, aad: scope.as_bytes() })
        // Encryption fails only for messages beyond 256 GiB.
        .unwrap_or_else(|_| unreachable!());
    let mut raw = nonce.to_vec();
    raw.extend_from_slice(&sealed);
    URL_SAFE_NO_PAD.encode(raw)
}

/// Opens a cursor sealed by [`encode`] for the same scope; anything else is `None`.
pub fn decode<P: Position>(key: &[u8], scope: &str, cursor: &str) -> Option<P> {
    if cursor.len() > MAX_CURSOR_CHARS {
        return None;
    }
    let raw = URL_SAFE_NO_PAD.decode(cursor.as_bytes()).ok()?;
    let (nonce, sealed) = raw.split_at_checked(NONCE_BYTES)?;
    let plaintext = cipher(key)
        .decrypt(XNonce::from_slice(nonce), Payload { msg: sealed, aad: scope.as_bytes() })
        .ok()?;
    P::from_bytes(&plaintext)
}

/// A page request: `limit` 1–100 (default 50) and an optional cursor.
#[derive(Debug, Clone)]
pub struct PageRequest {
    pub limit: i64,
    pub cursor: Option<String>,
}

impl PageRequest {
    pub fn parse(query: &HashMap<String, String>) -> Result<Self, ApiError> {
        let limit = match query.get("limit") {
            None => 50,
            Some(raw) => {
                raw.parse::<i64>().ok().filter(|limit| (1..=100).contains(limit)).ok_or_else(|| {
                    ApiError::BadParameter(FieldError::new("limit", "must be an integer from 1 to 100"))
                })?
            }
        };
        Ok(Self { limit, cursor: query.get("cursor").cloned() })
    }

    /// Opens the cursor for `scope`; one this server did not issue answers 400.
    pub fn after<P: Position>(&self, key: &[u8], scope: &str) -> Result<Option<P>, ApiError> {
        self.cursor
            .as_deref()
            .map(|raw| {
                decode(key, scope, raw).ok_or_else(|| {
                    ApiError::BadParameter(FieldError::new("cursor", "is not a cursor this server issued"))
                })
            })
            .transpose()
    }

    /// The cursor of the page after `items`: the position of the last item of a full page, else none.
    pub fn next_cursor<T, P: Position>(
        &self,
        key: &[u8],
        scope: &str,
        items: &[T],
        position: impl Fn(&T) -> P,
    ) -> Option<String> {
        (items.len() as i64 >= self.limit)
            .then(|| items.last().map(|last| encode(key, scope, position(last))))
            .flatten()
    }

    /// The answer of a list or timeline: `{ "items": [...], "nextCursor": "…" | null }`.
    pub fn answer<T: Serialize, P: Position>(
        &self,
        key: &[u8],
        scope: &str,
        items: &[T],
        position: impl Fn(&T) -> P,
    ) -> Response {
        respond(items, self.next_cursor(key, scope, items, position))
    }
}

/// A page of a list or timeline as answered: `{ "items": [...], "nextCursor": "…" | null }`. Its
/// schema is a list's component (`Page<'static, Patient>` is `PatientList`).
#[derive(Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Page<'a, T> {
    pub items: &'a [T],
    /// Opaque: pass it as `cursor` for the next page; null on the last page.
    pub next_cursor: Option<String>,
}

/// `{ "items": [...], "nextCursor": … }` from items and a cursor computed beforehand.
pub fn respond<T: Serialize>(items: &[T], next_cursor: Option<String>) -> Response {
    Json(Page { items, next_cursor }).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_rejects_tampering_and_other_scopes() {
        let id = Ulid::generate();
        let cursor = encode(b"key", "patient:1", id);
        assert_eq!(decode(b"key", "patient:1", &cursor), Some(id));
        assert_eq!(decode::<Ulid>(b"key", "patient:2", &cursor), None);
        assert_eq!(decode::<Ulid>(b"other", "patient:1", &cursor), None);
        let mut tampered = cursor.clone().into_bytes();
        tampered[3] = if tampered[3] == b'A' { b'B' } else { b'A' };
        assert_eq!(decode::<Ulid>(b"key", "patient:1", std::str::from_utf8(&tampered).unwrap()), None);
        assert_eq!(decode::<Ulid>(b"key", "patient:1", "not a cursor"), None);
    }

    #[test]
    fn composite_positions_round_trip_and_hide_their_text() {
        let at = DateTime::from_timestamp_micros(1_900_000_000_123_456).unwrap();
        let id = Ulid::generate();
        let cursor = encode(b"key", "schedule", (at, id));
        assert_eq!(decode(b"key", "schedule", &cursor), Some((at, id)));
        let named = encode(b"key", "search", ("quillborough".to_owned(), id));
        assert_eq!(decode(b"key", "search", &named), Some(("quillborough".to_owned(), id)));
        let raw = URL_SAFE_NO_PAD.decode(named.as_bytes()).unwrap();
        assert!(!raw.windows(5).any(|w| w == b"quill"), "the sort key is sealed, not readable");
        // A position of one shape does not open as another.
        assert_eq!(decode::<(DateTime<Utc>, Ulid)>(b"key", "search", &named), None);
        assert_eq!(decode::<Ulid>(b"key", "schedule", &cursor), None);
        assert_eq!(decode::<Ulid>(b"key", "schedule", &"A".repeat(MAX_CURSOR_CHARS + 1)), None);
    }
}
