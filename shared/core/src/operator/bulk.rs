//! Bulk recovery, generic over the queue ([`OperatedQueue`]: the outbox, notifications, webhook
//! deliveries): retry, replay or discard every row matching a filter, or only count them (dry run).
//!
//! Invariants:
//! - One code path with single-row actions: each target goes through
//!   [`OperatedQueue::perform`] (lock, status check, change, audit row), so a bulk action
//!   cannot do anything a single action would refuse.
//! - A dry run counts the matching rows the action accepts and answers a sample of their ids; it
//!   changes nothing and writes no audit row.
//! - Applying works in id order (ascending row id, keyset), [`CHUNK`] targets per transaction,
//!   at most `limit` targets per request ([`MAX_LIMIT`]); every audit row of one request carries the
//!   same batch id. A row whose status changed between selection and lock is skipped with its code
//!   (`conflict`, `not_found`, `invalid`) and changes nothing; the answer says how many remain.
//! - A request names at least one filter field besides the workspace (422 naming `filter`).
//! - Only rows in a status the action accepts are selected; a `status` filter the action does not
//!   accept selects nothing.

use deadpool_postgres::{GenericClient, Object};
use serde::Serialize;

use super::actions::ActionRequest;
use super::filter::Conditions;
use super::queue::OperatedQueue;
use super::Operator;
use crate::db::sql;
use crate::domain::input::FieldError;
use crate::error::{DomainError, DomainResult};
use crate::ids::WorkspaceId;
use crate::lease::ActionKind;

/// Targets per transaction.
pub const CHUNK: i64 = 200;
/// The most targets one request changes (repeat the request for the rest).
pub const MAX_LIMIT: i64 = 5_000;
/// Ids answered as the sample of a dry run or an applied request.
pub const SAMPLE: i64 = 20;

/// A bulk request: the filter (scoped to `workspace`), the action (with its reason and, for replay,
/// listeners), and whether to only count.
#[derive(Debug, Clone)]
pub struct BulkRequest<F> {
    pub filter: F,
    /// Scope to one workspace (always set over HTTP; `None`: every workspace, CLI only).
    pub workspace: Option<WorkspaceId>,
    pub action: ActionRequest,
    pub dry_run: bool,
    /// At most this many targets are changed (1..=[`MAX_LIMIT`]).
    pub limit: i64,
}

/// A target left unchanged, with the code of why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(inline)]
pub struct Skipped<I> {
    pub id: I,
    #[schemars(with = "SkipCode")]
    pub code: &'static str,
}

/// A [`Skipped`] target's code: the refusal of the single-row action ([`run`] names them).
struct SkipCode;

crate::inline_schema!(SkipCode, |_: &mut schemars::SchemaGenerator| {
    schemars::json_schema!({ "type": "string", "enum": ["conflict", "not_found", "invalid"] })
});

/// What a bulk request matched and did (the same answer for every queue; ids are the queue's row
/// ids: event ids for the outbox).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BulkAnswer<I> {
    /// The queue acted on
    #[schemars(with = "crate::lease::QueueName")]
    pub queue: &'static str,
    pub action: ActionKind,
    pub dry_run: bool,
    /// Rows matching the filter in a status the action accepts (before anything changed).
    pub matched: i64,
    /// The first matching ids in id order.
    pub sample: Vec<I>,
    /// The batch id on every audit row written (absent for a dry run).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "crate::ids::UlidSchema")]
    pub batch_id: Option<ulid::Ulid>,
    pub applied: usize,
    pub skipped: Vec<Skipped<I>>,
    /// Matching rows not reached because of limit (repeat the request for them).
    pub remaining: i64,
}

/// How many rows the conditions match.
async fn count<Q: OperatedQueue>(
    client: &impl GenericClient,
    query: &Conditions,
) -> Result<i64, tokio_postgres::Error> {
    let statement = format!("SELECT count(*) FROM {} {}", Q::FROM, query.where_clause());
    Ok(sql::query_one(client, &statement, &query.params()).await?.get(0))
}

/// The next `limit` matching ids after `after`, in id order.
async fn targets<Q: OperatedQueue>(
    client: &impl GenericClient,
    mut query: Conditions,
    after: Option<Q::Id>,
    limit: i64,
) -> Result<Vec<Q::Id>, tokio_postgres::Error> {
    if let Some(after) = after {
        query.and(&format!("{} > $", Q::ID), after);
    }
    let limit_param = query.bind(limit);
    let statement = format!(
        "SELECT {id} FROM {from} {where_clause} ORDER BY {id} LIMIT {limit_param}",
        id = Q::ID,
        from = Q::FROM,
        where_clause = query.where_clause()
    );
    Ok(sql::query(client, &statement, &query.params()).await?.iter().map(|row| row.get(0)).collect())
}

/// What an earlier bulk request's batch `batch` of `workspace` did on queue `Q`, as far as its audit
/// rows tell (what a request repeated with its `Idempotency-Key` answers): the rows it applied and
/// the first [`SAMPLE`] of their ids. What it matched, skipped or left is not stored.
pub async fn applied_in<Q: OperatedQueue>(
    client: &impl GenericClient,
    workspace: WorkspaceId,
    batch: ulid::Ulid,
) -> Result<(i64, Vec<Q::Id>), tokio_postgres::Error> {
    let statement = format!(
        "SELECT count(*), (array_agg({column} ORDER BY {column}))[1:{SAMPLE}] \
         FROM operator_actions WHERE batch_id = $1 AND workspace_id = $2",
        column = Q::AUDIT_COLUMN
    );
    let row = sql::query_one(client, &statement, &[&uuid::Uuid::from(batch), &workspace]).await?;
    Ok((row.get(0), row.get::<_, Option<Vec<Q::Id>>>(1).unwrap_or_default()))
}

/// Runs `request` over the rows of queue `Q` its filter matches (scoped by `request.workspace`).
pub async fn run<Q: OperatedQueue>(
    client: &mut Object,
    request: &BulkRequest<Q::Filter>,
    operator: &Operator,
) -> DomainResult<BulkAnswer<Q::Id>> {
    if !(1..=MAX_LIMIT).contains(&request.limit) {
        return Err(FieldError::new("limit", format!("must be 1 to {MAX_LIMIT}")).into());
    }
    if Q::names_nothing(&request.filter) {
        return Err(FieldError::new(
            "filter",
            format!("must name at least one field ({})", Q::FILTER_FIELDS.join(", ")),
        )
        .into());
    }
    let action = request.action.action;
    let accepted = Q::ACTIONS.accepted_statuses(action);
    let conditions = || Q::conditions(&request.filter, request.workspace, &accepted);
    let matched = count::<Q>(&*client, &conditions()).await?;
    let sample = targets::<Q>(&*client, conditions(), None, SAMPLE).await?;
    let mut answer = BulkAnswer {
        queue: Q::ACTIONS.queue.name,
        action,
        dry_run: request.dry_run,
        matched,
        sample,
        batch_id: None,
        applied: 0,
        skipped: Vec::new(),
        remaining: matched,
    };
    if request.dry_run || matched == 0 {
        return Ok(answer);
    }
    let batch = ulid::Ulid::generate();
    answer.batch_id = Some(batch);
    let mut after: Option<Q::Id> = None;
    let mut reached: i64 = 0;
    while reached < request.limit {
        let chunk = CHUNK.min(request.limit - reached);
        let tx = client.transaction().await?;
        let ids = targets::<Q>(&tx, conditions(), after, chunk).await?;
        if ids.is_empty() {
            break;
        }
        for id in &ids {
            match Q::perform(&tx, request.workspace, *id, &request.action, operator, Some(batch)).await {
                Ok(_) => answer.applied += 1,
                Err(DomainError::Conflict(_)) => answer.skipped.push(Skipped { id: *id, code: "conflict" }),
                Err(DomainError::NotFound) => answer.skipped.push(Skipped { id: *id, code: "not_found" }),
                Err(DomainError::Invalid(_)) => answer.skipped.push(Skipped { id: *id, code: "invalid" }),
                Err(other) => return Err(other),
            }
        }
        tx.commit().await?;
        reached += ids.len() as i64;
        after = ids.last().copied();
    }
    answer.remaining = count::<Q>(&*client, &conditions()).await?;
    tracing::info!(
        batch_id = %batch,
        queue = Q::ACTIONS.queue.name,
        action = action.as_str(),
        matched,
        applied = answer.applied,
        skipped = answer.skipped.len(),
        "bulk operator action recorded"
    );
    Ok(answer)
}
