//! The unit of work of a mutating request (every POST, PATCH and DELETE that changes a resource): one
//! transaction holding the idempotency claim, the resource change, its event and the stored answer, so
//! all of them commit or none does.
//!
//! Each route parses its own command and passes its own use case to [`Mutation::run`] as an async
//! closure; this module knows no resource and no use case. The order inside the transaction is fixed:
//! 1. claim the `Idempotency-Key`, if the request has one ([`idempotency::claim`]) — a repeat answers
//!    the stored status with the resource as it is now ([`Answer::reload`]) and writes nothing;
//! 2. run the use case (which appends the event on the same transaction; the event carries the key's
//!    keyed digest, [`KeyDigest`], never the key);
//! 3. store the answer for the key, then commit.
//!
//! The body is read once, as bytes: the fingerprint hashes those bytes and the route parses the same
//! bytes into its command ([`Mutation::json`]); nothing is cloned.

use std::future::Future;

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, OriginalUri, Request};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde_json::Value;

use super::auth::Caller;
use super::idempotency::{self, Claimed, Fingerprint, IdempotencyKey, StoredAnswer};
use super::problem::ApiError;
use super::request::{self, RequestIds};
use super::AppState;
use clinic_core::context::Ctx;
use clinic_core::db::Tx;
use clinic_core::error::{DomainError, DomainResult};
use clinic_core::events::{Cause, KeyDigest};

/// What a mutation answers with, and how a replay of it is answered.
pub trait Answer: Sized {
    /// The type of the resource the answer names (stored with the idempotency key): a
    /// [`clinic_core::events::ResourceType`]'s name, or a resource without events such as `webhook_endpoint`.
    const RESOURCE: &'static str;

    /// The id of the resource the answer names.
    fn resource_id(&self) -> uuid::Uuid;

    /// The answer again, for a replay: the resource as `caller` may see it now (`None` answers 404).
    fn reload(
        tx: &Tx<'_>,
        caller: &Caller,
        id: uuid::Uuid,
    ) -> impl Future<Output = DomainResult<Option<Self>>> + Send;

    /// The response with `status`.
    fn respond(self, status: StatusCode) -> Response;
}

/// The use-case context of a request: the caller's workspace, actor and causal ids.
pub fn context(caller: &Caller, ids: &RequestIds) -> Ctx {
    Ctx {
        workspace_id: caller.workspace_id,
        cause: Cause {
            actor: caller.actor(),
            correlation_id: ids.correlation_id,
            causation_id: ids.request_id.into(),
            idempotency_key: None,
            trace: Some(ids.trace),
        },
    }
}

/// A mutating request: its caller, ids, idempotency key, fingerprint and body bytes.
pub struct Mutation {
    pub caller: Caller,
    state: AppState,
    ids: RequestIds,
    /// Parsed at extraction, answered (400 when malformed) only when the mutation runs, so that role
    /// and body errors come first as before.
    key: Result<Option<IdempotencyKey>, ApiError>,
    fingerprint: Option<Fingerprint>,
    headers: HeaderMap,
    body: Bytes,
}

impl FromRequest<AppState> for Mutation {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &AppState) -> Result<Self, ApiError> {
        let (mut parts, body) = request.into_parts();
        let caller = Caller::from_request_parts(&mut parts, state).await?;
        let ids = RequestIds::from_request_parts(&mut parts, state).await?;
        let key = IdempotencyKey::from_headers(&parts.headers);
        let body = request::read_bytes(body).await?;
        let fingerprint = matches!(key, Ok(Some(_))).then(|| {
            let path = parts
                .extensions
                .get::<OriginalUri>()
                .map_or_else(|| parts.uri.path().to_owned(), |uri| uri.0.path().to_owned());
            Fingerprint::of(parts.method.as_str(), &path, &body)
        });
        Ok(Self { caller, state: state.clone(), ids, key, fingerprint, headers: parts.headers, body })
    }
}

impl Mutation {
    /// The body as JSON (415 for another content type, 400 when malformed, `{}` when empty).
    pub fn json(&self) -> Result<Value, ApiError> {
        request::require_json_content(&self.headers)?;
        request::parse_json(&self.body)
    }

    /// Answers 400 when the request's `Idempotency-Key` is malformed, for a route that writes
    /// nothing on this request (a dry run) and so runs no unit of work, yet still checks its input.
    pub fn check_key(&self) -> Result<(), ApiError> {
        match &self.key {
            Ok(_) => Ok(()),
            Err(_) => Err(ApiError::BadIdempotencyKey),
        }
    }

    /// Runs `use_case` in the request's unit of work (see the module docs) and answers `status` with
    /// its answer, or replays the answer of an earlier request with the same key and fingerprint.
    /// One `transaction` span (a child of the request's) covers it.
    #[tracing::instrument(skip_all, name = "transaction", fields(workspace_id = %self.caller.workspace_id))]
    pub async fn run<A, F>(self, status: StatusCode, use_case: F) -> Result<Response, ApiError>
    where
        A: Answer,
        F: AsyncFnOnce(&Tx<'_>, &Ctx) -> DomainResult<A>,
    {
        let key = self.key?.zip(self.fingerprint);
        let workspace_id = self.caller.workspace_id;
        let mut conn = self.state.pool.get().await?;
        let tx = conn.transaction().await?;
        if let Some((key, fingerprint)) = &key {
            if let Claimed::ReturnSavedResponse(saved) =
                idempotency::claim(&tx, workspace_id, key, fingerprint).await?
            {
                let answer =
                    A::reload(&tx, &self.caller, saved.resource_id).await?.ok_or(DomainError::NotFound)?;
                tx.commit().await?;
                return Ok(answer.respond(saved.status));
            }
        }
        let mut ctx = context(&self.caller, &self.ids);
        // Events carry a keyed digest of the key, never the key (see `events::KeyDigest`).
        ctx.cause.idempotency_key = key
            .as_ref()
            .map(|(key, _)| KeyDigest::of(&self.state.api.cursor_key, workspace_id, key.as_str()));
        let answer = use_case(&tx, &ctx).await?;
        if let Some((key, fingerprint)) = &key {
            let stored =
                StoredAnswer { status, resource_type: A::RESOURCE, resource_id: answer.resource_id() };
            idempotency::store(&tx, workspace_id, key, fingerprint, stored).await?;
        }
        tx.commit().await?;
        Ok(answer.respond(status))
    }
}
