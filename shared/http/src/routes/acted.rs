//! Operator actions on every lease queue over HTTP, one generic path over the queue
//! ([`OperatedQueue`]: the outbox, notifications, webhook deliveries), and the one answer type of
//! every operator action (outbox rows, deliveries, webhook deliveries, listener pauses): its audit
//! record, read back by its id when a request is repeated with its `Idempotency-Key`.
//!
//! - [`act`]: `POST /v1/system/{queue}/{id}/retry|replay|discard` with `{ "reason": "…",
//!   "listeners": [...] }` (listeners: outbox replay only). The body is checked (400/422) before the
//!   row's status is considered; a status the action does not fit answers 409 naming why and
//!   records nothing; a row of another workspace answers 404. Each action is one transaction: lock,
//!   change, audit, commit. Answer: the audit record.
//! - [`bulk`]: `POST /v1/system/{queue}/bulk/retry|replay|discard` with `{ "reason": "…",
//!   "dryRun": true, "filter": {…}, "limit": 1000 }`: a dry run answers the count and a sample and
//!   writes nothing; otherwise every target goes through the single-row action in bounded
//!   transactions, one audit row each under one batch id ([`clinic_core::operator::bulk`]). The
//!   filter fields are the queue's ([`OperatedQueue::FILTER_FIELDS`]); it must name one (422
//!   naming `filter`), and an unknown one is a 422 naming `filter.<field>`. Every queue answers
//!   the same [`BulkAnswer`] shape.
//!
//! Every POST honours `Idempotency-Key` ([`Mutation::run`]: the key is claimed in a transaction held
//! until the action committed): the same key with the same body answers the stored answer and acts
//! no second time (one key is one audit row and one fresh attempt budget); the same key with another
//! body answers 422. A bulk request's batches commit on their own transactions while the key's
//! transaction waits; its replay answers what the batch's audit rows show (`applied` and `matched`:
//! the rows it changed, `sample`: their first ids, `skipped` empty, `remaining` 0). A dry run writes
//! nothing and claims no key (a malformed one still answers 400).

use std::future::Future;
use std::marker::PhantomData;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;
use serde_json::{Map, Value};

use super::path_id;
use crate::auth::Caller;
use crate::problem::ApiError;
use crate::unit_of_work::{Answer, Mutation};
use crate::AppState;
use clinic_core::db::Tx;
use clinic_core::domain::input::{self, integer, FieldError};
use clinic_core::error::{DomainError, DomainResult};
use clinic_core::ids::{MemberId, OperatorActionId, WorkspaceId};
use clinic_core::lease::ActionKind;
use clinic_core::operator::pause::{self, PauseRecord};
use clinic_core::operator::queue::recorded_row;
use clinic_core::operator::{
    self, bulk, ActionRecord, ActionRequest, BulkAnswer, BulkRequest, OperatedQueue, Operator,
    RowActionRecord,
};

/// The resource type an operator action's idempotency key names.
pub(crate) const OPERATOR_ACTION: &str = "operator_action";

/// An audit record of an operator action that can be read back by its id.
pub trait Recorded: Serialize + Sized + Send {
    fn action_id(&self) -> OperatorActionId;

    /// The record `id` of `workspace`, as the action answered it (`None`: there is none).
    fn recorded(
        tx: &Tx<'_>,
        workspace: WorkspaceId,
        id: OperatorActionId,
    ) -> impl Future<Output = DomainResult<Option<Self>>> + Send;
}

/// The answer of an operator action: its audit record.
pub struct Acted<R>(pub R);

impl<R: Recorded> Answer for Acted<R> {
    const RESOURCE: &'static str = OPERATOR_ACTION;

    fn resource_id(&self) -> uuid::Uuid {
        self.0.action_id().uuid()
    }

    async fn reload(tx: &Tx<'_>, caller: &Caller, id: uuid::Uuid) -> DomainResult<Option<Self>> {
        Ok(R::recorded(tx, caller.workspace_id, OperatorActionId::from_uuid(id)).await?.map(Acted))
    }

    fn respond(self, status: StatusCode) -> Response {
        (status, Json(self.0)).into_response()
    }
}

/// `Recorded` for an audit record type whose `id` is its action id, read back by `$recorded`.
macro_rules! recorded {
    ($record:ty, $recorded:path) => {
        impl Recorded for $record {
            fn action_id(&self) -> OperatorActionId {
                self.id
            }

            async fn recorded(
                tx: &Tx<'_>,
                workspace: WorkspaceId,
                id: OperatorActionId,
            ) -> DomainResult<Option<Self>> {
                $recorded(tx, workspace, id).await
            }
        }
    };
}

recorded!(ActionRecord, operator::recorded);
recorded!(RowActionRecord, recorded_row);
recorded!(PauseRecord, pause::recorded);

/// The operator acting: the caller's member id.
pub(crate) fn operator_of(caller: &Caller) -> Operator {
    Operator::member(MemberId::from_ulid(caller.subject))
}

/// `action` on row `raw_id` of queue `Q` (see the module docs).
pub async fn act<Q>(raw_id: String, request: Mutation, action: ActionKind) -> Result<Response, ApiError>
where
    Q: OperatedQueue,
    Q::Record: Recorded,
{
    request.caller.require_admin()?;
    let action_request = ActionRequest::from_body(action, request.json()?)?;
    let id: Q::Id = path_id(&raw_id)?;
    let operator = operator_of(&request.caller);
    request
        .run(StatusCode::OK, async move |tx, ctx| {
            let workspace = Some(ctx.workspace_id);
            Ok(Acted(Q::perform(tx, workspace, id, &action_request, &operator, None).await?))
        })
        .await
}

/// A bulk request's `limit` when it names none.
const DEFAULT_LIMIT: i64 = 1_000;

const fn default_limit() -> i64 {
    DEFAULT_LIMIT
}

/// A bulk body as [`bulk_request`] reads it: the action's fields (`A`:
/// [`clinic_core::operator::ReasonOnly`] for retry and discard, [`ActionRequest`] for replay), the
/// queue's filter `F`, `dryRun` and `limit`. Only its schema is used: the parser is what reads it,
/// and the API fuzzing checks they agree.
#[derive(schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[allow(dead_code)]
pub struct BulkBody<F, A> {
    #[serde(flatten)]
    action: A,
    #[serde(default)]
    dry_run: bool,
    /// Every field optional, but a bulk request names at least one. from/to: to must be after from when both are given.
    filter: F,
    #[serde(default = "default_limit")]
    #[schemars(range(min = 1, max = bulk::MAX_LIMIT))]
    limit: i64,
}

/// Splits a bulk body into its filter (the fields of queue `Q`), dry-run flag and limit, leaving the
/// action's own fields.
fn bulk_request<Q: OperatedQueue>(
    action: ActionKind,
    body: Value,
) -> Result<BulkRequest<Q::Filter>, DomainError> {
    let Value::Object(mut body) = body else {
        return Err(FieldError::new("body", "must be a JSON object").into());
    };
    // Absent takes the default; null is not a boolean or an integer (the contract types them).
    let dry_run = input::boolean("dryRun", body.remove("dryRun").as_ref())?.unwrap_or(false);
    let limit = match body.remove("limit") {
        None => DEFAULT_LIMIT,
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
    for (key, value) in &filter {
        if !Q::FILTER_FIELDS.contains(&key.as_str()) {
            return Err(FieldError::new(format!("filter.{key}"), "is not a filter").into());
        }
        if !value.is_string() {
            return Err(FieldError::new(format!("filter.{key}"), "must be a string").into());
        }
    }
    let filter = Q::parse_filter(|field| filter.get(field).and_then(Value::as_str).map(str::to_owned))
        .map_err(|error| FieldError::new(format!("filter.{}", error.field), error.message))?;
    Ok(BulkRequest { filter, workspace: None, action, dry_run, limit })
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
pub struct BulkDone<Q: OperatedQueue, K>(BulkAnswer<Q::Id>, PhantomData<K>);

impl<Q: OperatedQueue, K: BulkAction> Answer for BulkDone<Q, K> {
    const RESOURCE: &'static str = OPERATOR_ACTION;

    fn resource_id(&self) -> uuid::Uuid {
        self.0.batch_id.map_or(uuid::Uuid::nil(), uuid::Uuid::from)
    }

    async fn reload(tx: &Tx<'_>, caller: &Caller, id: uuid::Uuid) -> DomainResult<Option<Self>> {
        let batch = (!id.is_nil()).then(|| ulid::Ulid::from(id));
        let (applied, sample) = match batch {
            Some(batch) => bulk::applied_in::<Q>(tx, caller.workspace_id, batch).await?,
            None => (0, Vec::new()),
        };
        let answer = BulkAnswer {
            queue: Q::ACTIONS.queue.name,
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

/// A bulk action `K` over queue `Q` (see the module docs).
pub async fn bulk<Q: OperatedQueue, K: BulkAction + 'static>(
    state: AppState,
    request: Mutation,
) -> Result<Response, ApiError> {
    request.caller.require_admin()?;
    let mut bulk_request = bulk_request::<Q>(K::ACTION, request.json()?)?;
    bulk_request.workspace = Some(request.caller.workspace_id);
    let operator = operator_of(&request.caller);
    if bulk_request.dry_run {
        request.check_key()?;
        let mut conn = state.pool.get().await?;
        return Ok(Json(bulk::run::<Q>(&mut conn, &bulk_request, &operator).await?).into_response());
    }
    request
        .run(StatusCode::OK, async move |_key_tx, _ctx| {
            // The batches commit on their own connection; the key's transaction commits after them.
            let mut conn = state.pool.get().await?;
            let answer = bulk::run::<Q>(&mut conn, &bulk_request, &operator).await?;
            Ok(BulkDone::<Q, K>(answer, PhantomData))
        })
        .await
}
