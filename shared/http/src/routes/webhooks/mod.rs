//! `/v1/webhooks/endpoints…`: a workspace's webhook subscriptions, admin role only (403 otherwise).
//!
//! - `POST /v1/webhooks/endpoints` `{url, description?, eventTypes?}` → 201, the endpoint and its
//!   `secret` (`whsec_…`, shown this once). The URL passes the SSRF guard at save (422 naming `url`).
//! - `GET /v1/webhooks/endpoints`, `GET|PATCH|DELETE /v1/webhooks/endpoints/{id}` (PATCH: any of
//!   `url`, `description`, `eventTypes`, `enabled`).
//! - `POST /v1/webhooks/endpoints/{id}/rotate` `{overlapHours?}` (default 24, 0–168) → the new
//!   secret; the previous one keeps signing until the overlap ends.
//! - `POST /v1/webhooks/endpoints/{id}/recover` `{since}` → `{recovered}`: failed deliveries created
//!   since then are sent again (same `webhook-id`).
//! - `GET /v1/webhooks/deliveries?endpointId=&eventId=&status=&eventType=&errorCode=&olderThan=&from=&to=&limit=`
//!   → the newest deliveries, selected by the bulk actions' filter (the same fields, the same rows)
//!   and by event; a bad field answers 400 naming it.
//! - `POST /v1/system/webhook-deliveries/{id}/retry|discard` with `{ "reason": "…" }` and
//!   `POST /v1/system/webhook-deliveries/bulk/retry|discard` (filter: `status`, `olderThan`, `from`,
//!   `to`, `errorCode`, `endpointId`, `eventType`; `dryRun`, `limit`): the operator actions of the
//!   lease queue, through the one generic path of every queue ([`super::acted::act`],
//!   [`super::acted::bulk`]): retry makes a `failed` or `retry` delivery `pending` now with a fresh
//!   attempt budget (same `webhook-id`), discard makes it `discarded` (final); any other status
//!   answers 409 naming why; each writes one `operator_actions` row.
//! - `GET /v1/webhooks/endpoints/{id}/events?after=N&limit=L` → replay by number: the endpoint's
//!   numbered deliveries after N in number order (ids only, whatever their state), its status and
//!   last number. With `GET /v1/webhooks/endpoints/{id}` the one pair of routes a partner's
//!   read-only `integration` token may call ([`IntegrationReader`]; admins may too).
//!
//! Each change is one transaction with its audit row; another workspace's endpoint answers 404.
//!
//! Every change honours `Idempotency-Key` like the other mutating routes ([`Mutation::run`]: the key
//! is claimed inside the change's transaction; the same key with another request answers 422). The
//! stored answer holds the endpoint's id and the status only, never the secret: a replay of create
//! or rotate answers the endpoint as it is now **without** `secret` (the secret was shown once; a
//! client that lost that answer rotates), a replay of recover answers `since` and `recovered` as
//! `null` (the count is not stored), and a replay of delete answers 204 again.
//!
//! Over 500 lines: thirteen handlers, each with its `#[utoipa::path]` operation (a third of the
//! file), and the answers whose types are their published schemas ([`Recovered`], [`Listed`],
//! [`Replay`]), so the published document of a route stays next to the route. The schemas of the
//! operator actions on webhook deliveries, whose parser and writer are shared, are [`operated`]'s.

pub mod operated;

use std::collections::HashMap;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;
use serde_json::json;

use super::acted::{self, DiscardAll, RetryAll};
use super::{bad, path_id};
use crate::auth::{Caller, IntegrationReader};
use crate::document::{params, problems, schemas};
use crate::problem::ApiError;
use crate::unit_of_work::{Answer, Mutation};
use crate::AppState;
use clinic_core::contract::webhook_bodies::ENDPOINT_STATUSES;
use clinic_core::db::Tx;
use clinic_core::domain::input::FieldError;
use clinic_core::error::{DomainError, DomainResult};
use clinic_core::ids::{EventId, WebhookEndpointId};
use clinic_core::lease::ActionKind;
use clinic_core::operator::{OperatedQueue, WebhookDeliveries};
use clinic_core::webhooks::endpoints::{
    self, Created, Endpoint, EndpointChange, NewEndpoint, Recovery, Rotation,
};
use clinic_core::webhooks::store::Numbered;
use clinic_core::webhooks::{guard, store};

/// The idempotency keys' name for this resource (it has no events, so no `ResourceType`).
const RESOURCE: &str = "webhook_endpoint";

fn actor(caller: &Caller) -> String {
    caller.subject.to_string()
}

/// The SSRF guard at save: the URL must resolve to allowed addresses now (422 naming `url`).
async fn check_url(state: &AppState, url: &str) -> Result<(), ApiError> {
    let check = guard::check_url(url, state.api.webhook_egress, &guard::SystemResolver);
    match tokio::time::timeout(std::time::Duration::from_secs(5), check).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(refused)) => Err(FieldError::new("url", refused.to_string()).into()),
        Err(_) => Err(FieldError::new("url", "the host did not resolve in time").into()),
    }
}

/// What create, rotate and update answer: the endpoint, with its new secret only in the first answer
/// of create and rotate (a replay reloads the endpoint, which has no secret).
pub struct Shown {
    endpoint: Endpoint,
    secret: Option<String>,
}

impl From<Created> for Shown {
    fn from(created: Created) -> Self {
        Shown { endpoint: created.endpoint, secret: Some(created.secret) }
    }
}

impl Answer for Shown {
    const RESOURCE: &'static str = RESOURCE;

    fn resource_id(&self) -> uuid::Uuid {
        self.endpoint.id.uuid()
    }

    async fn reload(tx: &Tx<'_>, caller: &Caller, id: uuid::Uuid) -> DomainResult<Option<Self>> {
        match endpoints::get(tx, caller.workspace_id, WebhookEndpointId::from_uuid(id)).await {
            Ok(endpoint) => Ok(Some(Shown { endpoint, secret: None })),
            Err(DomainError::NotFound) => Ok(None),
            Err(error) => Err(error),
        }
    }

    fn respond(self, status: StatusCode) -> Response {
        match self.secret {
            Some(secret) => (status, Json(Created { endpoint: self.endpoint, secret })).into_response(),
            None => (status, Json(self.endpoint)).into_response(),
        }
    }
}

/// The answer of a deletion: 204 (a replay needs no lookup: it is gone).
pub struct Deleted(WebhookEndpointId);

impl Answer for Deleted {
    const RESOURCE: &'static str = RESOURCE;

    fn resource_id(&self) -> uuid::Uuid {
        self.0.uuid()
    }

    async fn reload(_tx: &Tx<'_>, _caller: &Caller, id: uuid::Uuid) -> DomainResult<Option<Self>> {
        Ok(Some(Deleted(WebhookEndpointId::from_uuid(id))))
    }

    fn respond(self, status: StatusCode) -> Response {
        status.into_response()
    }
}

/// The answer of a recover; a replay knows neither the time nor the count (`null`). Its schema is
/// the component `WebhookRecovered`.
#[derive(Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Recovered {
    endpoint_id: WebhookEndpointId,
    /// Null in a replay of the same Idempotency-Key (the time is not stored)
    since: Option<chrono::DateTime<chrono::Utc>>,
    /// How many deliveries are pending again; null in a replay of the same Idempotency-Key (the count is not stored)
    recovered: Option<u64>,
}

impl Answer for Recovered {
    const RESOURCE: &'static str = RESOURCE;

    fn resource_id(&self) -> uuid::Uuid {
        self.endpoint_id.uuid()
    }

    async fn reload(_tx: &Tx<'_>, _caller: &Caller, id: uuid::Uuid) -> DomainResult<Option<Self>> {
        Ok(Some(Recovered { endpoint_id: WebhookEndpointId::from_uuid(id), since: None, recovered: None }))
    }

    fn respond(self, status: StatusCode) -> Response {
        (status, Json(self)).into_response()
    }
}

/// The answer of a list that has one page: `{ "items": [...], "nextCursor": null }`. Its schemas are
/// the components `WebhookEndpointList` and `WebhookDeliveryList`.
#[derive(Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Listed<T> {
    items: Vec<T>,
    next_cursor: (),
}

impl<T: Serialize> Listed<T> {
    fn respond(items: Vec<T>) -> Response {
        Json(Listed { items, next_cursor: () }).into_response()
    }
}

/// The answer of a replay by number. Its schema is the component `WebhookReplay`.
#[derive(Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Replay {
    endpoint_id: WebhookEndpointId,
    #[schemars(extend("enum" = ENDPOINT_STATUSES))]
    status: String,
    /// The endpoint's last number now
    #[schemars(range(min = 0))]
    last_sequence: i64,
    items: Vec<Numbered>,
    /// Set when the page is full: ask again with after=nextAfter
    next_after: Option<i64>,
}

/// The key that seals secrets; without one (a Lambda without `CLINIC_WEBHOOK_KEY_SECRET_ARN`) no secret
/// is created, so none is ever stored in clear.
fn sealing_key(state: &AppState) -> Result<clinic_core::webhooks::secret_box::WebhookKey, ApiError> {
    state.api.webhook_key.clone().ok_or_else(|| {
        ApiError::Domain(DomainError::Conflict(
            "webhook signing secrets cannot be sealed here: no webhook key is configured".into(),
        ))
    })
}

#[utoipa::path(
    post,
    path = "/v1/webhooks/endpoints",
    operation_id = "createWebhookEndpoint",
    summary = "Register a webhook endpoint; the answer shows its signing secret once (admin only)",
    tag = "webhooks",
    params(params::IdempotencyKeyWebhook, params::CorrelationIdPlain),
    request_body(content = schemas::NewWebhookEndpoint),
    responses(
        (status = 201, description = "Created", body = inline(schemas::EndpointWithSecretOrNot), content_type = "application/json"),
        problems::Unauthorized, problems::AdminOnly, problems::BadRequest, problems::TooLarge,
        problems::NotJson,
        (status = 422, description = "Invalid field (named in the problem document); nothing was written", body = schemas::Problem, content_type = "application/problem+json")
    )
)]
pub async fn create(State(state): State<AppState>, request: Mutation) -> Result<Response, ApiError> {
    request.caller.require_admin()?;
    let new = NewEndpoint::try_from(&request.json()?)?;
    check_url(&state, &new.url).await?;
    let actor = actor(&request.caller);
    let key = sealing_key(&state)?;
    request
        .run(StatusCode::CREATED, async move |tx, ctx| {
            Ok(Shown::from(endpoints::create(tx, &key, ctx.workspace_id, &new, &actor).await?))
        })
        .await
}

#[utoipa::path(
    get,
    path = "/v1/webhooks/endpoints",
    operation_id = "listWebhookEndpoints",
    summary = "The workspace's webhook endpoints (admin only)",
    tag = "webhooks",
    params(params::CorrelationIdPlain),
    responses(
        (status = 200, description = "The endpoints", body = schemas::WebhookEndpointList),
        problems::Unauthorized, problems::AdminOnly
    )
)]
pub async fn list(State(state): State<AppState>, caller: Caller) -> Result<Response, ApiError> {
    caller.require_admin()?;
    let conn = state.pool.get().await?;
    let items = endpoints::list(&conn, caller.workspace_id).await?;
    Ok(Listed::respond(items))
}

#[utoipa::path(
    get,
    path = "/v1/webhooks/endpoints/{id}",
    operation_id = "getWebhookEndpoint",
    summary = "One webhook endpoint (admin, or a partner's read-only integration token)",
    description = "Readable with the `integration` role (a token claim `role: integration`): that role may call only this route and the replay route (`/events`); every other route answers it 403.",
    tag = "webhooks",
    params(params::WebhookEndpointId, params::CorrelationIdPlain),
    responses(
        (status = 200, description = "The endpoint", body = schemas::WebhookEndpoint),
        (status = 400, description = "Malformed id", body = schemas::Problem, content_type = "application/problem+json"),
        problems::Unauthorized,
        (status = 403, description = "Role not allowed (admin or integration only)", body = schemas::Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such endpoint (or in another workspace)", body = schemas::Problem, content_type = "application/problem+json")
    )
)]
pub async fn get_one(
    State(state): State<AppState>,
    IntegrationReader(caller): IntegrationReader,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let id: WebhookEndpointId = path_id(&id)?;
    let conn = state.pool.get().await?;
    Ok(Json(endpoints::get(&conn, caller.workspace_id, id).await?).into_response())
}

#[utoipa::path(
    patch,
    path = "/v1/webhooks/endpoints/{id}",
    operation_id = "updateWebhookEndpoint",
    summary = "Change url, description, event types or enabled (admin only)",
    tag = "webhooks",
    params(params::WebhookEndpointId, params::IdempotencyKeyWebhook, params::CorrelationIdPlain),
    request_body(content = schemas::WebhookEndpointChange),
    responses(
        (status = 200, description = "The endpoint", body = schemas::WebhookEndpoint),
        problems::Unauthorized, problems::AdminOnly,
        (status = 404, description = "No such endpoint (or in another workspace)", body = schemas::Problem, content_type = "application/problem+json"),
        problems::BadRequest, problems::TooLarge, problems::NotJson,
        (status = 422, description = "Invalid field (named in the problem document); nothing was written", body = schemas::Problem, content_type = "application/problem+json")
    )
)]
pub async fn update(
    State(state): State<AppState>,
    Path(id): Path<String>,
    request: Mutation,
) -> Result<Response, ApiError> {
    request.caller.require_admin()?;
    let change = EndpointChange::try_from(&request.json()?)?;
    let id: WebhookEndpointId = path_id(&id)?;
    if let Some(url) = &change.url {
        check_url(&state, url).await?;
    }
    let actor = actor(&request.caller);
    request
        .run(StatusCode::OK, async move |tx, ctx| {
            let endpoint = endpoints::update(tx, ctx.workspace_id, id, &change, &actor).await?;
            Ok(Shown { endpoint, secret: None })
        })
        .await
}

#[utoipa::path(
    delete,
    path = "/v1/webhooks/endpoints/{id}",
    operation_id = "deleteWebhookEndpoint",
    summary = "Delete an endpoint with its deliveries (the audit keeps its history; admin only)",
    tag = "webhooks",
    params(params::WebhookEndpointId, params::IdempotencyKeyWebhook, params::CorrelationIdPlain),
    responses(
        (status = 204, description = "Deleted"),
        (status = 400, description = "Malformed id", body = schemas::Problem, content_type = "application/problem+json"),
        problems::Unauthorized, problems::AdminOnly,
        (status = 404, description = "No such endpoint (or in another workspace)", body = schemas::Problem, content_type = "application/problem+json"),
        (status = 422, description = "An Idempotency-Key used before with another request; nothing was written", body = schemas::Problem, content_type = "application/problem+json")
    )
)]
pub async fn delete(Path(id): Path<String>, request: Mutation) -> Result<Response, ApiError> {
    request.caller.require_admin()?;
    let id: WebhookEndpointId = path_id(&id)?;
    let actor = actor(&request.caller);
    request
        .run(StatusCode::NO_CONTENT, async move |tx, ctx| {
            endpoints::delete(tx, ctx.workspace_id, id, &actor).await?;
            Ok(Deleted(id))
        })
        .await
}

#[utoipa::path(
    post,
    path = "/v1/webhooks/endpoints/{id}/rotate",
    operation_id = "rotateWebhookSecret",
    summary = "New signing secret; the previous one keeps signing for overlapHours (admin only)",
    tag = "webhooks",
    params(params::WebhookEndpointId, params::IdempotencyKeyWebhook, params::CorrelationIdPlain),
    request_body(content = ref("#/components/schemas/WebhookRotateRequest")),
    responses(
        (status = 200, description = "The endpoint and its new secret", body = inline(schemas::EndpointWithSecretOrNot), content_type = "application/json"),
        problems::Unauthorized, problems::AdminOnly,
        (status = 404, description = "No such endpoint (or in another workspace)", body = schemas::Problem, content_type = "application/problem+json"),
        problems::BadRequest, problems::TooLarge, problems::NotJson,
        (status = 422, description = "Invalid field (named in the problem document); nothing was written", body = schemas::Problem, content_type = "application/problem+json")
    )
)]
pub async fn rotate(
    State(state): State<AppState>,
    Path(id): Path<String>,
    request: Mutation,
) -> Result<Response, ApiError> {
    request.caller.require_admin()?;
    // The body is optional here: none means the default overlap.
    let overlap = Rotation::try_from(&request.json()?)?.overlap_hours;
    let id: WebhookEndpointId = path_id(&id)?;
    let actor = actor(&request.caller);
    let key = sealing_key(&state)?;
    request
        .run(StatusCode::OK, async move |tx, ctx| {
            Ok(Shown::from(endpoints::rotate(tx, &key, ctx.workspace_id, id, overlap, &actor).await?))
        })
        .await
}

#[utoipa::path(
    post,
    path = "/v1/webhooks/endpoints/{id}/recover",
    operation_id = "recoverWebhookDeliveries",
    summary = "Send again every failed delivery created since a time (same webhook-id; admin only)",
    tag = "webhooks",
    params(params::WebhookEndpointId, params::IdempotencyKeyWebhook, params::CorrelationIdPlain),
    request_body(content = schemas::WebhookRecoverRequest),
    responses(
        (status = 200, description = "How many deliveries are pending again", body = schemas::WebhookRecovered),
        problems::Unauthorized, problems::AdminOnly,
        (status = 404, description = "No such endpoint (or in another workspace)", body = schemas::Problem, content_type = "application/problem+json"),
        problems::BadRequest, problems::TooLarge, problems::NotJson,
        (status = 422, description = "Invalid field (named in the problem document); nothing was written", body = schemas::Problem, content_type = "application/problem+json")
    )
)]
pub async fn recover(Path(id): Path<String>, request: Mutation) -> Result<Response, ApiError> {
    request.caller.require_admin()?;
    let since = Recovery::try_from(&request.json()?)?.since;
    let id: WebhookEndpointId = path_id(&id)?;
    let actor = actor(&request.caller);
    request
        .run(StatusCode::OK, async move |tx, ctx| {
            endpoints::get(tx, ctx.workspace_id, id).await?;
            let recovered = store::recover(tx, ctx.workspace_id, id, since).await?;
            let detail = json!({ "recovered": recovered });
            endpoints::audit(tx, ctx.workspace_id, id, "recover", &actor, detail).await?;
            Ok(Recovered { endpoint_id: id, since: Some(since), recovered: Some(recovered) })
        })
        .await
}

#[utoipa::path(
    get,
    path = "/v1/webhooks/deliveries",
    operation_id = "listWebhookDeliveries",
    summary = "The workspace's webhook deliveries, newest first (ids and codes only; admin only); selected by the bulk actions' filter fields and by event",
    tag = "webhooks",
    params(params::EndpointId, params::WebhookEventId, params::WebhookDeliveryStatus, params::WebhookEventType, params::LastErrorCode, params::Age, params::OnlyFrom, params::OnlyTo, params::WebhookLimit, params::CorrelationIdPlain),
    responses(
        (status = 200, description = "The deliveries", body = schemas::WebhookDeliveryList),
        (status = 400, description = "Invalid parameter", body = schemas::Problem, content_type = "application/problem+json"),
        problems::Unauthorized, problems::AdminOnly
    )
)]
pub async fn deliveries(
    State(state): State<AppState>,
    caller: Caller,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    caller.require_admin()?;
    let filter =
        WebhookDeliveries::parse_filter(|field| query.get(field).cloned()).map_err(ApiError::BadParameter)?;
    let event: Option<EventId> = query
        .get("eventId")
        .map(|raw| raw.parse().map_err(|_| bad("eventId", "must be a ULID")))
        .transpose()?;
    let limit = match query.get("limit") {
        None => 50,
        Some(raw) => raw
            .parse::<i64>()
            .ok()
            .filter(|n| (1..=100).contains(n))
            .ok_or_else(|| bad("limit", "must be 1 to 100"))?,
    };
    let conn = state.pool.get().await?;
    let items = clinic_core::operator::listing::webhook_deliveries_filtered(
        &conn,
        caller.workspace_id,
        &filter,
        event,
        limit,
    )
    .await?;
    Ok(Listed::respond(items))
}

#[utoipa::path(
    post,
    path = "/v1/system/webhook-deliveries/{id}/retry",
    operation_id = "retryWebhookDelivery",
    summary = "Send a failed or retrying webhook delivery again now, with a fresh attempt budget and the same webhook-id (admin only)",
    params(params::WebhookDeliveryId, params::IdempotencyKeyOperator, params::CorrelationId),
    request_body(content = schemas::OperatorReasonRequest),
    responses(
        (status = 200, description = "The action was applied and recorded", body = schemas::WebhookDeliveryAction),
        (status = 404, description = "No such delivery (or in another workspace)", body = schemas::Problem, content_type = "application/problem+json"),
        (status = 409, description = "The delivery is not failed or retry (pending, sending, delivered or discarded); nothing was recorded", body = schemas::Problem, content_type = "application/problem+json"),
        problems::DeliveryRowAction
    )
)]
pub async fn retry_delivery(Path(id): Path<String>, request: Mutation) -> Result<Response, ApiError> {
    acted::act::<WebhookDeliveries>(id, request, ActionKind::Retry).await
}

#[utoipa::path(
    post,
    path = "/v1/system/webhook-deliveries/{id}/discard",
    operation_id = "discardWebhookDelivery",
    summary = "Discard a failed or retrying webhook delivery for good (admin only)",
    params(params::WebhookDeliveryId, params::IdempotencyKeyOperator, params::CorrelationId),
    request_body(content = schemas::OperatorReasonRequest),
    responses(
        (status = 200, description = "The action was applied and recorded", body = schemas::WebhookDeliveryAction),
        (status = 404, description = "No such delivery (or in another workspace)", body = schemas::Problem, content_type = "application/problem+json"),
        (status = 409, description = "The delivery is not failed or retry (pending, sending, delivered or discarded); nothing was recorded", body = schemas::Problem, content_type = "application/problem+json"),
        problems::DeliveryRowAction
    )
)]
pub async fn discard_delivery(Path(id): Path<String>, request: Mutation) -> Result<Response, ApiError> {
    acted::act::<WebhookDeliveries>(id, request, ActionKind::Discard).await
}

#[utoipa::path(
    post,
    path = "/v1/system/webhook-deliveries/bulk/retry",
    operation_id = "bulkRetryWebhookDeliveries",
    summary = "Retry every failed or retrying webhook delivery matching a filter, each with a fresh attempt budget (admin only); dryRun answers the count and a sample",
    params(params::IdempotencyKeyOperator, params::CorrelationId),
    request_body(content = schemas::WebhookDeliveryBulkRequest),
    responses(
        (status = 200, description = "What matched and what was done (one audit row per target, one batch id)", body = schemas::BulkAnswer),
        (status = 409, description = "The state does not fit the action; nothing was recorded", body = schemas::Problem, content_type = "application/problem+json"),
        problems::DeliveryBulkAction
    )
)]
pub async fn bulk_retry(State(state): State<AppState>, request: Mutation) -> Result<Response, ApiError> {
    acted::bulk::<WebhookDeliveries, RetryAll>(state, request).await
}

#[utoipa::path(
    post,
    path = "/v1/system/webhook-deliveries/bulk/discard",
    operation_id = "bulkDiscardWebhookDeliveries",
    summary = "Discard every failed or retrying webhook delivery matching a filter (admin only); dryRun answers the count and a sample",
    params(params::IdempotencyKeyOperator, params::CorrelationId),
    request_body(content = schemas::WebhookDeliveryBulkRequest),
    responses(
        (status = 200, description = "What matched and what was done (one audit row per target, one batch id)", body = schemas::BulkAnswer),
        (status = 409, description = "The state does not fit the action; nothing was recorded", body = schemas::Problem, content_type = "application/problem+json"),
        problems::DeliveryBulkAction
    )
)]
pub async fn bulk_discard(State(state): State<AppState>, request: Mutation) -> Result<Response, ApiError> {
    acted::bulk::<WebhookDeliveries, DiscardAll>(state, request).await
}

/// The most numbered deliveries one replay answers.
const MAX_REPLAY: i64 = 100;

/// `GET /v1/webhooks/endpoints/{id}/events?after=N&limit=L`: replay by number (admin or
/// `integration`). `after` is 0 or more (default 0), `limit` 1–100 (default 100); anything else
/// answers 400 naming the parameter. `nextAfter` is the last number answered when the page is full
/// (ask again with it), else `null`.
#[utoipa::path(
    get,
    path = "/v1/webhooks/endpoints/{id}/events",
    operation_id = "replayWebhookEvents",
    summary = "Replay by number: the endpoint's numbered deliveries after N (admin, or a partner's read-only integration token)",
    description = "Ordered by number, identifiers only, whatever each delivery's state (pending, sending, retry, delivered, failed), so a receiver that sees a gap in `sequence` fills it itself. Delivered deliveries are kept for the retention window (CLINIC_RETENTION_HOURS), so a replay reaches back that far. The `integration` role may call only this route and GET of the endpoint.",
    tag = "webhooks",
    params(params::WebhookEndpointId, params::After, params::ReplayLimit, params::CorrelationIdPlain),
    responses(
        (status = 200, description = "The numbered deliveries after `after`", body = schemas::WebhookReplay),
        (status = 400, description = "Malformed id, `after` or `limit` (the problem names it)", body = schemas::Problem, content_type = "application/problem+json"),
        problems::Unauthorized,
        (status = 403, description = "Role not allowed (admin or integration only)", body = schemas::Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such endpoint (or in another workspace)", body = schemas::Problem, content_type = "application/problem+json")
    )
)]
pub async fn replay(
    State(state): State<AppState>,
    IntegrationReader(caller): IntegrationReader,
    Path(id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    let id: WebhookEndpointId = path_id(&id)?;
    let after = match query.get("after") {
        None => 0,
        Some(raw) => raw
            .parse::<i64>()
            .ok()
            .filter(|n| *n >= 0)
            .ok_or_else(|| bad("after", "must be a delivery number, 0 or more"))?,
    };
    let limit = match query.get("limit") {
        None => MAX_REPLAY,
        Some(raw) => raw
            .parse::<i64>()
            .ok()
            .filter(|n| (1..=MAX_REPLAY).contains(n))
            .ok_or_else(|| bad("limit", format!("must be 1 to {MAX_REPLAY}")))?,
    };
    let conn = state.pool.get().await?;
    let endpoint = endpoints::get(&conn, caller.workspace_id, id).await?;
    let items = store::replay(&conn, caller.workspace_id, id, after, limit).await?;
    let next_after = (items.len() as i64 == limit).then(|| items.last().map(|item| item.sequence)).flatten();
    Ok(Json(Replay {
        endpoint_id: endpoint.id,
        status: endpoint.status,
        last_sequence: endpoint.last_sequence,
        items,
        next_after,
    })
    .into_response())
}
