//! Idempotency keys: the key a client sends, the fingerprint of the request it guards, the answer
//! stored for it, and the one decision ([`claim`]) a mutating request takes before any work.
//!
//! Invariants:
//! - A key is scoped to the workspace and bound to the fingerprint of the first request that used it
//!   (method, path and the body's bytes, hashed once as they were read).
//! - [`claim`] runs inside the request's transaction BEFORE the mutation: it takes a transaction-scoped
//!   advisory lock keyed by (workspace, key), then re-reads the stored answer. Concurrent requests with
//!   one key therefore serialise: the first runs the mutation and [`store`]s its answer in the same
//!   transaction; every later one waits for that commit (or rollback) and then sees the stored answer
//!   (or, after a rollback, runs the mutation itself). Exactly one mutation and one event commit.
//! - The same key with another fingerprint answers 422 (`IdempotencyMismatch`); nothing is written.
//! - A failed mutation stores nothing: its transaction rolls back with the key, so a retry runs again.
//! - The stored row holds ids and the status only — never the response body — so no copy of health
//!   data lives outside the resource tables; a replay answers the resource as it is now.

use axum::http::{HeaderMap, StatusCode};
use deadpool_postgres::GenericClient;
use sha2::{Digest, Sha256};

use super::problem::ApiError;
use clinic_core::db::sql;
use clinic_core::ids::WorkspaceId;

const HEADER: &str = "idempotency-key";

/// A client's `Idempotency-Key`: 1 to 255 visible ASCII characters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdempotencyKey(String);

impl IdempotencyKey {
    /// The request's key, if it sent one; a malformed one answers 400.
    pub fn from_headers(headers: &HeaderMap) -> Result<Option<Self>, ApiError> {
        let Some(value) = headers.get(HEADER) else {
            return Ok(None);
        };
        let key = value.to_str().map_err(|_| ApiError::BadIdempotencyKey)?;
        let valid = (1..=255).contains(&key.len()) && key.bytes().all(|b| b.is_ascii_graphic());
        if valid {
            Ok(Some(Self(key.to_owned())))
        } else {
            Err(ApiError::BadIdempotencyKey)
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Hex SHA-256 of a request's method, path and body bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fingerprint(String);

impl Fingerprint {
    pub fn of(method: &str, path: &str, body: &[u8]) -> Self {
        let mut hasher = Sha256::new();
        hasher.update(method.as_bytes());
        hasher.update(b" ");
        hasher.update(path.as_bytes());
        hasher.update(b"\n");
        hasher.update(body);
        Self(hasher.finalize().iter().map(|byte| format!("{byte:02x}")).collect())
    }
}

/// The answer a request with this key committed: its status and the resource it named (the
/// resource's type is the route's, which the fingerprint's path already binds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoredAnswer {
    pub status: StatusCode,
    /// A [`clinic_core::events::ResourceType`]'s name, or a resource without events (`webhook_endpoint`).
    pub resource_type: &'static str,
    pub resource_id: uuid::Uuid,
}

/// What a replay answers: the stored status and the id of the resource to answer as it is now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SavedResponse {
    pub status: StatusCode,
    pub resource_id: uuid::Uuid,
}

/// What [`claim`] decided.
#[derive(Debug)]
pub enum Claimed {
    /// Nobody answered this key yet, and this transaction now holds it: run the mutation.
    StartProcessing,
    /// The same request was answered before: replay this.
    ReturnSavedResponse(SavedResponse),
}

/// Serialises requests with one key: (workspace, key) hashed into the advisory-lock key space. A
/// collision between two keys only makes them wait for each other.
const LOCK: &str = "SELECT pg_advisory_xact_lock(hashtextextended($1::uuid::text || ':' || $2::text, 0))";

const FIND: &str = "SELECT request_hash, response_status, resource_id \
                    FROM idempotency_keys WHERE workspace_id = $1 AND key = $2";

const INSERT: &str = "INSERT INTO idempotency_keys (workspace_id, key, request_hash, response_status, \
                      resource_type, resource_id) VALUES ($1, $2, $3, $4, $5, $6)";

/// Claims `key` on the request's transaction `tx` (see the module invariants). Call it before the
/// mutation; the lock is held until `tx` commits or rolls back.
pub async fn claim(
    tx: &impl GenericClient,
    workspace_id: WorkspaceId,
    key: &IdempotencyKey,
    fingerprint: &Fingerprint,
) -> Result<Claimed, ApiError> {
    // One round trip (`sql::pipeline`): the lock, then the lookup, which PostgreSQL runs only once
    // the lock is granted. READ COMMITTED: the lookup's snapshot is taken after that, so it sees the
    // answer of the transaction that held the lock before.
    let (locked, found) = sql::pipeline(
        tx,
        &[LOCK, FIND],
        (
            sql::execute(tx, LOCK, &[&workspace_id, &key.0]),
            sql::query_opt(tx, FIND, &[&workspace_id, &key.0]),
        ),
    )
    .await?;
    locked?;
    let found = found?;
    let Some(row) = found else {
        return Ok(Claimed::StartProcessing);
    };
    let request_hash: String = row.get(0);
    if request_hash != fingerprint.0 {
        return Err(ApiError::IdempotencyMismatch);
    }
    let status: i16 = row.get(1);
    let status = u16::try_from(status).ok().and_then(|s| StatusCode::from_u16(s).ok());
    Ok(Claimed::ReturnSavedResponse(SavedResponse {
        status: status.unwrap_or(StatusCode::OK),
        resource_id: row.get(2),
    }))
}

/// Stores the answer for a claimed key on the same transaction as the mutation.
pub async fn store(
    tx: &impl GenericClient,
    workspace_id: WorkspaceId,
    key: &IdempotencyKey,
    fingerprint: &Fingerprint,
    answer: StoredAnswer,
) -> Result<(), ApiError> {
    sql::execute(
        tx,
        INSERT,
        &[
            &workspace_id,
            &key.0,
            &fingerprint.0,
            &(answer.status.as_u16() as i16),
            &answer.resource_type,
            &answer.resource_id,
        ],
    )
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprints_differ_by_method_path_and_body() {
        let base = Fingerprint::of("POST", "/v1/patients", b"{}");
        assert_eq!(base, Fingerprint::of("POST", "/v1/patients", b"{}"));
        assert_ne!(base, Fingerprint::of("PATCH", "/v1/patients", b"{}"));
        assert_ne!(base, Fingerprint::of("POST", "/v1/practitioners", b"{}"));
        assert_ne!(base, Fingerprint::of("POST", "/v1/patients", b"{ }"));
    }

    #[test]
    fn keys_are_visible_ascii_of_bounded_length() {
        let mut headers = HeaderMap::new();
        assert_eq!(IdempotencyKey::from_headers(&headers).unwrap(), None);
        headers.insert(HEADER, "book-ada-1".parse().unwrap());
        assert_eq!(IdempotencyKey::from_headers(&headers).unwrap().unwrap().as_str(), "book-ada-1");
        headers.insert(HEADER, "has space".parse().unwrap());
        assert!(IdempotencyKey::from_headers(&headers).is_err());
        headers.insert(HEADER, "k".repeat(256).parse().unwrap());
        assert!(IdempotencyKey::from_headers(&headers).is_err());
    }
}
