//! Bulk recovery: retry, replay or discard every outbox row matching a filter.
//!
//! Invariants:
//! - One code path with single-row actions: each target goes through
//!   [`super::actions::perform_in_batch`] (lock, status check, change, audit row), so a bulk action
//!   cannot do anything a single action would refuse.
//! - A dry run counts the matching rows the action accepts and answers a sample of their ids; it
//!   changes nothing and writes no audit row.
//! - Applying works in event order (ascending event id, keyset), [`CHUNK`] targets per transaction,
//!   at most `limit` targets per request ([`MAX_LIMIT`]); every audit row of one request carries the
//!   same batch id. A row whose status changed between selection and lock is skipped with its code
//!   (`conflict`, `not_found`, `invalid`) and changes nothing; the answer says how many remain.
//! - A request names at least one filter field besides the workspace (422 naming `filter`).
//! - Only rows in a status the action accepts are selected; a `status` filter the action does not
//!   accept selects nothing.

use deadpool_postgres::{GenericClient, Object};
use serde::Serialize;

use super::actions::{accepted, perform_in_batch, ActionRequest};
use super::filter::{OutboxFilter, Params};
use super::Operator;
use crate::db::sql;
use crate::error::{DomainError, DomainResult};
use crate::ids::{EventId, WorkspaceId};
use crate::lease::ActionKind;

/// Targets per transaction.
pub const CHUNK: i64 = 200;
/// The most targets one request changes (repeat the request for the rest).
pub const MAX_LIMIT: i64 = 5_000;
/// Ids answered as the sample of a dry run or an applied request.
pub const SAMPLE: i64 = 20;

/// A bulk request: the filter, the action (with its reason and, for replay, listeners), and whether
/// to only count.
#[derive(Debug, Clone)]
pub struct BulkRequest {
    pub filter: OutboxFilter,
    pub action: ActionRequest,
    pub dry_run: bool,
    /// At most this many targets are changed (1..=[`MAX_LIMIT`]).
    pub limit: i64,
}

/// A target left unchanged, with the code of why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Skipped {
    pub event_id: EventId,
    pub code: &'static str,
}

/// What a bulk request matched and did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BulkAnswer {
    pub action: ActionKind,
    pub dry_run: bool,
    /// Rows matching the filter in a status the action accepts (before anything changed).
    pub matched: i64,
    /// The first matching ids in event order.
    pub sample: Vec<EventId>,
    /// The batch id on every audit row written (absent for a dry run).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub batch_id: Option<ulid::Ulid>,
    pub applied: usize,
    pub skipped: Vec<Skipped>,
    /// Matching rows not reached because of `limit` (repeat the request for them).
    pub remaining: i64,
}

const FROM: &str = "FROM event_outbox o JOIN events e ON e.id = o.event_id";

/// How many rows the filter's values match.
async fn count(client: &impl GenericClient, params: &Params) -> Result<i64, tokio_postgres::Error> {
    let query = params.conditions();
    let statement = format!("SELECT count(*) {FROM} {}", query.where_clause());
    Ok(sql::query_one(client, &statement, &query.params).await?.get(0))
}

/// The next `limit` matching ids after `after`, in event order.
async fn targets(
    client: &impl GenericClient,
    params: &Params,
    after: Option<EventId>,
    limit: i64,
) -> Result<Vec<EventId>, tokio_postgres::Error> {
    let mut query = params.conditions();
    if let Some(after) = &after {
        query.and("o.event_id > $", after);
    }
    let limit_param = query.bind(&limit);
    let statement =
        format!("SELECT o.event_id {FROM} {} ORDER BY o.event_id LIMIT {limit_param}", query.where_clause());
    Ok(sql::query(client, &statement, &query.params).await?.iter().map(|row| row.get(0)).collect())
}

const APPLIED_IN: &str = "SELECT count(*), (array_agg(event_id ORDER BY event_id))[1:20] \
     FROM operator_actions WHERE batch_id = $1 AND workspace_id = $2";

/// What an earlier bulk request's batch `batch` of `workspace` did, as far as its audit rows tell
/// (what a request repeated with its `Idempotency-Key` answers): the rows it applied and the first
/// [`SAMPLE`] of their ids. What it matched, skipped or left is not stored.
pub async fn applied_in(
    client: &impl GenericClient,
    workspace: WorkspaceId,
    batch: ulid::Ulid,
) -> Result<(i64, Vec<EventId>), tokio_postgres::Error> {
    let row = sql::query_one(client, APPLIED_IN, &[&uuid::Uuid::from(batch), &workspace]).await?;
    Ok((row.get(0), row.get::<_, Option<Vec<EventId>>>(1).unwrap_or_default()))
}

/// Runs `request` over the rows its filter matches (scoped by `request.filter.workspace`).
pub async fn run(
    client: &mut Object,
    request: &BulkRequest,
    operator: &Operator,
) -> DomainResult<BulkAnswer> {
    if !(1..=MAX_LIMIT).contains(&request.limit) {
        return Err(
            crate::domain::input::FieldError::new("limit", format!("must be 1 to {MAX_LIMIT}")).into()
        );
    }
    let unscoped = OutboxFilter { workspace: None, ..request.filter.clone() };
    if unscoped == OutboxFilter::default() {
        return Err(crate::domain::input::FieldError::new(
            "filter",
            "must name at least one field (status, eventType, listener, errorCode, from, to, resourceId)",
        )
        .into());
    }
    let action = request.action.action;
    let accepted = accepted(action);
    let params = request.filter.params(Some(&accepted));
    let matched = count(&*client, &params).await?;
    let sample = targets(&*client, &params, None, SAMPLE).await?;
    let mut answer = BulkAnswer {
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
    let mut after: Option<EventId> = None;
    let mut reached: i64 = 0;
    while reached < request.limit {
        let chunk = CHUNK.min(request.limit - reached);
        let tx = client.transaction().await?;
        let ids = targets(&tx, &params, after, chunk).await?;
        if ids.is_empty() {
            break;
        }
        for id in &ids {
            match perform_in_batch(&tx, request.filter.workspace, *id, &request.action, operator, Some(batch))
                .await
            {
                Ok(_) => answer.applied += 1,
                Err(DomainError::Conflict(_)) => {
                    answer.skipped.push(Skipped { event_id: *id, code: "conflict" })
                }
                Err(DomainError::NotFound) => {
                    answer.skipped.push(Skipped { event_id: *id, code: "not_found" })
                }
                Err(DomainError::Invalid(_)) => {
                    answer.skipped.push(Skipped { event_id: *id, code: "invalid" })
                }
                Err(other) => return Err(other),
            }
        }
        tx.commit().await?;
        reached += ids.len() as i64;
        after = ids.last().copied();
    }
    answer.remaining = count(&*client, &params).await?;
    tracing::info!(
        batch_id = %batch,
        action = action.as_str(),
        matched,
        applied = answer.applied,
        skipped = answer.skipped.len(),
        "bulk operator action recorded"
    );
    Ok(answer)
}
