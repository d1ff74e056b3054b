//! Correlation ids the API issues, and the only ones it accepts back (policy: docs/correlation.md).
//!
//! Invariants:
//! - The `X-Correlation-Id` the API answers is `<ULID>.<tag>`: the ULID is the correlation id stored
//!   in events (`correlationId`); the tag is the first 16 bytes of HMAC-SHA256 over a version label,
//!   the caller's workspace (or "no workspace" for unauthenticated requests) and the ULID, under a key
//!   derived from the configured secret, in base64url without padding (22 characters) — the keyed
//!   tags of [`clinic_core::tags`], shared with the email unsubscribe tokens.
//! - A request's correlation id is the one in its `X-Correlation-Id` only when that header is a tag
//!   this server issued for the caller's own workspace (checked in constant time, under the current key
//!   or the previous one during a rotation). Anything else — a bare ULID or UUID, another workspace's
//!   tag, a tag from before the last rotation, junk — is not used: a fresh id is issued.
//! - A client's own value is never put into an event, an outbox row, a message or an answer. When it
//!   is a ULID or a UUID (128 opaque bits, no room for a name or a reason) it is kept, in canonical
//!   form, as `client_correlation_id` on the request's log line only; any other text is dropped.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;

use clinic_core::ids::{CorrelationId, WorkspaceId};
use clinic_core::tags::{TagKeys, TAG_BYTES};
/// Characters of a tag in base64url without padding.
const TAG_CHARS: usize = 22;
/// The longest header looked at: a ULID, a dot and a tag.
const ISSUED_CHARS: usize = 26 + 1 + TAG_CHARS;
const TAG_LABEL: &[u8] = b"clinic correlation id v1";
const KEY_LABEL: &[u8] = b"clinic correlation key v1";

/// The keys that tag correlation ids: the current one issues and verifies; the previous one (during a
/// rotation) only verifies. Each is derived from its configured secret, so the same secret can also
/// serve another purpose (the cursor key) without the two uses sharing a key.
#[derive(Clone, Debug)]
pub struct CorrelationKeys {
    keys: TagKeys,
}

/// How a request's correlation id was decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Correlation {
    /// The id carried into every event the request causes.
    pub id: CorrelationId,
    /// The `X-Correlation-Id` to answer: `id`, tagged for the caller's workspace with the current key.
    pub header: String,
    /// Whether the client sent back an id this server issued for its workspace.
    pub accepted: bool,
    /// The client's own value, for the log line only: a ULID or UUID it sent that is not ours.
    pub client: Option<String>,
}

/// The parts a tag covers: the caller's workspace (or "no workspace") and the id.
fn tagged<R>(workspace: Option<WorkspaceId>, id: CorrelationId, with: impl FnOnce(&[&[u8]]) -> R) -> R {
    let id = id.ulid().to_bytes();
    match workspace {
        Some(workspace) => with(&[b"w", &workspace.ulid().to_bytes(), &id]),
        None => with(&[b"-", &id]),
    }
}

impl CorrelationKeys {
    /// Keys from the current secret and, during a rotation, the previous one.
    pub fn new(current: &[u8], previous: Option<&[u8]>) -> Self {
        Self { keys: TagKeys::derive(current, previous, KEY_LABEL, TAG_LABEL) }
    }

    /// `id` tagged for `workspace` with the current key: the header value to answer.
    pub fn issue(&self, workspace: Option<WorkspaceId>, id: CorrelationId) -> String {
        let tag = tagged(workspace, id, |parts| self.keys.tag(parts));
        format!("{id}.{}", URL_SAFE_NO_PAD.encode(tag))
    }

    /// The correlation id in `header` when it is a tag this server issued for `workspace`.
    pub fn verify(&self, workspace: Option<WorkspaceId>, header: &str) -> Option<CorrelationId> {
        if header.len() != ISSUED_CHARS {
            return None;
        }
        let (id, tag) = header.split_once('.')?;
        let id: CorrelationId = id.parse().ok()?;
        let tag = URL_SAFE_NO_PAD.decode(tag).ok()?;
        if tag.len() != TAG_BYTES {
            return None;
        }
        tagged(workspace, id, |parts| self.keys.verify(parts, &tag)).then_some(id)
    }

    /// Decides the correlation id of a request from the caller's workspace and its header, if any.
    pub fn resolve(&self, workspace: Option<WorkspaceId>, header: Option<&str>) -> Correlation {
        let header = header.map(str::trim);
        let accepted = header.and_then(|value| self.verify(workspace, value));
        let id = accepted.unwrap_or_else(CorrelationId::generate);
        let client = match accepted {
            Some(_) => None,
            None => header.and_then(client_id),
        };
        Correlation { id, header: self.issue(workspace, id), accepted: accepted.is_some(), client }
    }
}

/// A client's own id in canonical form (an upper-case ULID or a hyphenated lower-case UUID), or
/// `None` for any other text.
fn client_id(text: &str) -> Option<String> {
    if let Ok(ulid) = clinic_core::ids::parse_ulid(text) {
        return Some(ulid.to_string());
    }
    uuid::Uuid::try_parse(text).ok().map(|uuid| uuid.hyphenated().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_its_own_tag_for_the_same_workspace_only() {
        let keys = CorrelationKeys::new(b"secret-one-0123456789", None);
        let (ours, theirs) = (WorkspaceId::generate(), WorkspaceId::generate());
        let id = CorrelationId::generate();
        let issued = keys.issue(Some(ours), id);
        assert_eq!(issued.len(), ISSUED_CHARS);
        assert!(issued.starts_with(&id.to_string()));
        assert_eq!(keys.verify(Some(ours), &issued), Some(id));
        assert_eq!(keys.verify(Some(theirs), &issued), None, "bound to the workspace");
        assert_eq!(keys.verify(None, &issued), None, "not valid without a caller");
        assert_eq!(keys.verify(Some(ours), &keys.issue(None, id)), None);
        let other_key = CorrelationKeys::new(b"secret-two-0123456789", None);
        assert_eq!(other_key.verify(Some(ours), &issued), None);
        // Same tag, another id; and the same id, a flipped tag.
        let other_id = CorrelationId::generate();
        let swapped = format!("{other_id}{}", &issued[26..]);
        assert_eq!(keys.verify(Some(ours), &swapped), None);
        let mut flipped = issued.clone().into_bytes();
        let last = flipped.len() - 2;
        flipped[last] = if flipped[last] == b'A' { b'B' } else { b'A' };
        assert_eq!(keys.verify(Some(ours), std::str::from_utf8(&flipped).unwrap()), None);
        for junk in ["", ".", &id.to_string(), &format!("{id}."), &format!("{issued}x"), "<script>"] {
            assert_eq!(keys.verify(Some(ours), junk), None, "{junk:?}");
        }
    }

    /// Ids issued by a running build must verify after an upgrade: the tag's bytes are fixed.
    #[test]
    fn a_tag_is_stable_across_builds() {
        let keys = CorrelationKeys::new(b"secret-one-0123456789", None);
        let workspace: WorkspaceId = "01J00000000000000000000000".parse().unwrap();
        let id: CorrelationId = "01J11111111111111111111111".parse().unwrap();
        assert_eq!(keys.issue(Some(workspace), id), "01J11111111111111111111111.riO5xDrBsVfPuaXbh5Grww");
        assert_eq!(keys.issue(None, id), "01J11111111111111111111111.z4qE6cepumqEObCgIifx2A");
    }

    #[test]
    fn a_rotation_keeps_accepting_the_previous_key_and_reissues_with_the_new_one() {
        let workspace = Some(WorkspaceId::generate());
        let before = CorrelationKeys::new(b"old-secret-0123456789", None);
        let id = CorrelationId::generate();
        let old = before.issue(workspace, id);
        let during = CorrelationKeys::new(b"new-secret-0123456789", Some(b"old-secret-0123456789"));
        let resolved = during.resolve(workspace, Some(&old));
        assert!(resolved.accepted);
        assert_eq!(resolved.id, id);
        assert_eq!(resolved.header, during.issue(workspace, id));
        assert_ne!(resolved.header, old, "answered under the new key");
        let after = CorrelationKeys::new(b"new-secret-0123456789", None);
        assert!(!after.resolve(workspace, Some(&old)).accepted);
    }

    #[test]
    fn a_client_value_is_replaced_and_kept_for_logs_only_when_it_is_an_id() {
        let keys = CorrelationKeys::new(b"secret-one-0123456789", None);
        let workspace = Some(WorkspaceId::generate());
        let own = ulid::Ulid::generate().to_string();
        let resolved = keys.resolve(workspace, Some(&own));
        assert!(!resolved.accepted);
        assert_ne!(resolved.id.to_string(), own);
        assert_eq!(resolved.client.as_deref(), Some(own.as_str()));
        assert_eq!(keys.verify(workspace, &resolved.header), Some(resolved.id));
        let uuid = "67E55044-10B1-426F-9247-BB680E5FE0C8";
        let kept = keys.resolve(workspace, Some(uuid)).client;
        assert_eq!(kept.as_deref(), Some("67e55044-10b1-426f-9247-bb680e5fe0c8"));
        for text in ["Jane Doe, HIV clinic", "<script>", ""] {
            let resolved = keys.resolve(workspace, Some(text));
            assert_eq!(resolved.client, None, "{text:?} is dropped");
            assert!(!resolved.accepted);
        }
        let none = keys.resolve(workspace, None);
        assert_eq!((none.accepted, none.client), (false, None));
    }
}
