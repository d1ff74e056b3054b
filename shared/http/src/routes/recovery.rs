//! Operating without SQL over HTTP (admin role only; the caller's workspace only):
//!
//! - `GET /v1/system/events/{id}` explains one event end to end ([`clinic_core::operator::explain`]).
//! - `GET /v1/system/overview`: counts by status, oldest due and live ages, dead rows by error code,
//!   paused listeners with what they hold.
//! - `POST /v1/system/outbox/bulk/retry|replay|discard` with
//!   `{ "reason": "…", "dryRun": true, "filter": { "status": "dead", "errorCode": "…", … },
//!   "listeners": [...], "limit": 1000 }`: a dry run answers the count and a sample; otherwise every
//!   target is acted on through the single-row action in bounded transactions, one audit row each
//!   under one batch id ([`clinic_core::operator::bulk`]). The reason is required either way.
//! - `GET /v1/system/listeners` and `POST /v1/system/listeners/pause|resume` with
//!   `{ "listener": "…", "reason": "…" }` ([`clinic_core::operator::pause`]).
//!
//! Every POST here honours `Idempotency-Key` ([`Mutation::run`]; the key is claimed in a transaction
//! held until the action committed): the same key with the same body answers the stored answer and
//! acts no second time; the same key with another body answers 422. A pause or resume replays its
//! audit record. A bulk request's batches commit on their own transactions while the key's
//! transaction waits (a request repeated meanwhile waits for it); its replay answers what the
//! batch's audit rows show (`applied` and `matched`: the rows it changed, `sample`: their first ids,
//! `skipped` empty, `remaining` 0 — the rest is not stored). A bulk request that fails midway keeps
//! the batches it committed and stores no key, so a repeat acts on what is left. A dry run writes
//! nothing and claims no key (a malformed one still answers 400).
//!
//! A bulk request must name at least one filter field (an empty filter answers 422 naming
//! `filter`): "every row of the workspace" is never one keystroke away.

use std::marker::PhantomData;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Map, Value};

use super::acted::{Acted, OPERATOR_ACTION};
use super::path_id;
use crate::auth::Caller;
use crate::problem::ApiError;
use crate::unit_of_work::{Answer, Mutation};
use crate::AppState;
use clinic_core::db::Tx;
use clinic_core::domain::input::{self, integer, FieldError, Fields};
use clinic_core::error::{DomainError, DomainResult};
use clinic_core::events::EventType;
use clinic_core::ids::{EventId, MemberId};
use clinic_core::lease::ActionKind;
use clinic_core::listeners::{listeners, Listener};
use clinic_core::operator::{
    self, bulk, pause, ActionRequest, BulkAnswer, BulkRequest, Operator, OutboxFilter, Reason,
};

fn operator_of(caller: &Caller) -> Operator {
    Operator::member(MemberId::from_ulid(caller.subject))
}

pub async fn explain(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    caller.require_admin()?;
    let event_id: EventId = path_id(&id)?;
    let conn = state.pool.get().await?;
    let explanation =
        operator::explain(&conn, Some(caller.workspace_id), event_id).await?.ok_or(DomainError::NotFound)?;
    Ok(Json(explanation).into_response())
}

pub async fn overview(State(state): State<AppState>, caller: Caller) -> Result<Response, ApiError> {
    caller.require_admin()?;
    let conn = state.pool.get().await?;
    Ok(Json(operator::overview(&conn, Some(caller.workspace_id)).await?).into_response())
}

/// Splits a bulk body into its filter, dry-run flag and limit, leaving the action's own fields.
fn bulk_request(action: ActionKind, body: Value) -> Result<BulkRequest, DomainError> {
    let Value::Object(mut body) = body else {
        return Err(FieldError::new("body", "must be a JSON object").into());
    };
    // Absent takes the default; null is not a boolean or an integer (the contract types them).
    let dry_run = input::boolean("dryRun", body.remove("dryRun").as_ref())?.unwrap_or(false);
    let limit = match body.remove("limit") {
        None => 1_000,
        Some(value) => {
            value.as_number().and_then(integer).filter(|n| (1..=bulk::MAX_LIMIT).contains(n)).ok_or_else(
                || FieldError::new("limit", format!("must be an integer from 1 to {}", bulk::MAX_LIMIT)),
            )?
        }
    };
    let filter = match body.remove("filter") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(filter)) => filter,
        Some(_) => return Err(FieldError::new("filter", "must be an object").into()),
    };
    // The reason first (the contract: a missing reason answers before anything else is considered).
    let action = ActionRequest::from_body(action, Value::Object(body))?;
    const KNOWN: &[&str] =
        &["status", "eventType", "olderThan", "listener", "errorCode", "from", "to", "resourceId"];
    for (key, value) in &filter {
        if !KNOWN.contains(&key.as_str()) {
            return Err(FieldError::new(format!("filter.{key}"), "is not a filter").into());
        }
        if !value.is_string() {
            return Err(FieldError::new(format!("filter.{key}"), "must be a string").into());
        }
    }
    let filter = OutboxFilter::parse(|field| filter.get(field).and_then(Value::as_str).map(str::to_owned))
        .map_err(|error| FieldError::new(format!("filter.{}", error.field), error.message))?;

    Ok(BulkRequest { filter, action, dry_run, limit })
}

/// The action of a bulk route, known to a replay (whose batch may have no audit row to name it).
pub trait BulkAction: Send {
    const ACTION: ActionKind;
}

pub struct RetryAll;
pub struct ReplayAll;
pub struct DiscardAll;

impl BulkAction for RetryAll {
    const ACTION: ActionKind = ActionKind::Retry;
}
impl BulkAction for ReplayAll {
    const ACTION: ActionKind = ActionKind::Replay;
}
impl BulkAction for DiscardAll {
    const ACTION: ActionKind = ActionKind::Discard;
}

/// The answer of an applied bulk request; its stored id is the batch id (nil when nothing matched).
pub struct BulkDone<K>(BulkAnswer, PhantomData<K>);

impl<K: BulkAction> Answer for BulkDone<K> {
    const RESOURCE: &'static str = OPERATOR_ACTION;

    fn resource_id(&self) -> uuid::Uuid {
        self.0.batch_id.map_or(uuid::Uuid::nil(), uuid::Uuid::from)
    }

    async fn reload(tx: &Tx<'_>, caller: &Caller, id: uuid::Uuid) -> DomainResult<Option<Self>> {
        let batch = (!id.is_nil()).then(|| ulid::Ulid::from(id));
        let (applied, sample) = match batch {
            Some(batch) => bulk::applied_in(tx, caller.workspace_id, batch).await?,
            None => (0, Vec::new()),
        };
        let answer = BulkAnswer {
            action: K::ACTION,
            dry_run: false,
            matched: applied,
            sample,
            batch_id: batch,
            applied: usize::try_from(applied).unwrap_or(usize::MAX),
            skipped: Vec::new(),
            remaining: 0,
        };
        Ok(Some(BulkDone(answer, PhantomData)))
    }

    fn respond(self, status: StatusCode) -> Response {
        (status, Json(self.0)).into_response()
    }
}

async fn bulk_act<K: BulkAction + 'static>(state: AppState, request: Mutation) -> Result<Response, ApiError> {
    request.caller.require_admin()?;
    let mut bulk_request = bulk_request(K::ACTION, request.json()?)?;
    bulk_request.filter.workspace = Some(request.caller.workspace_id);
    let operator = operator_of(&request.caller);
    if bulk_request.dry_run {
        request.check_key()?;
        let mut conn = state.pool.get().await?;
        return Ok(Json(bulk::run(&mut conn, &bulk_request, &operator).await?).into_response());
    }
    request
        .run(StatusCode::OK, async move |_key_tx, _ctx| {
            // The batches commit on their own connection; the key's transaction commits after them.
            let mut conn = state.pool.get().await?;
            let answer = bulk::run(&mut conn, &bulk_request, &operator).await?;
            Ok(BulkDone::<K>(answer, PhantomData))
        })
        .await
}

pub async fn bulk_retry(State(state): State<AppState>, request: Mutation) -> Result<Response, ApiError> {
    bulk_act::<RetryAll>(state, request).await
}

pub async fn bulk_replay(State(state): State<AppState>, request: Mutation) -> Result<Response, ApiError> {
    bulk_act::<ReplayAll>(state, request).await
}

pub async fn bulk_discard(State(state): State<AppState>, request: Mutation) -> Result<Response, ApiError> {
    bulk_act::<DiscardAll>(state, request).await
}

pub async fn listener_list(State(state): State<AppState>, caller: Caller) -> Result<Response, ApiError> {
    caller.require_admin()?;
    let conn = state.pool.get().await?;
    let paused = pause::paused(&conn, Some(caller.workspace_id)).await?;
    let items: Vec<Value> = Listener::ALL
        .iter()
        .map(|listener| {
            let types: Vec<&str> = EventType::ALL
                .iter()
                .filter(|t| listeners(**t).contains(listener))
                .map(|t| t.as_str())
                .collect();
            let pause = paused.iter().find(|p| p.listener == listener.as_str());
            json!({
                "listener": listener.as_str(),
                "eventTypes": types,
                "paused": pause.is_some(),
                "pausedBy": pause.map(|p| p.paused_by.clone()),
                "pausedAt": pause.map(|p| p.paused_at),
                "held": pause.map_or(0, |p| p.held),
            })
        })
        .collect();
    Ok(Json(json!({ "items": items })).into_response())
}

async fn pause_act(request: Mutation, resume: bool) -> Result<Response, ApiError> {
    request.caller.require_admin()?;
    let mut fields = Fields::new(request.json()?)?;
    let reason = Reason::parse(&fields.required_str("reason")?)?;
    let name = fields.required_str("listener")?;
    fields.finish()?;
    let listener =
        Listener::parse(name.trim()).ok_or_else(|| FieldError::new("listener", "must be a listener name"))?;
    let operator = operator_of(&request.caller);
    request
        .run(StatusCode::OK, async move |tx, ctx| {
            let record = if resume {
                pause::resume(tx, ctx.workspace_id, listener, &operator, &reason).await?
            } else {
                pause::pause(tx, ctx.workspace_id, listener, &operator, &reason).await?
            };
            Ok(Acted(record))
        })
        .await
}

pub async fn pause_listener(request: Mutation) -> Result<Response, ApiError> {
    pause_act(request, false).await
}

pub async fn resume_listener(request: Mutation) -> Result<Response, ApiError> {
    pause_act(request, true).await
}
