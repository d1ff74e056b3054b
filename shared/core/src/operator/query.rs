//! Reading the outbox for operators: a filtered keyset listing, one row in detail, and counts.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;
use serde::Serialize;
use tokio_postgres::Row;

use super::filter::OutboxFilter;
use crate::db::sql;
use crate::events::EventType;
use crate::ids::{EventId, OperatorActionId, WorkspaceId};
use crate::outbox::OutboxStatus;

/// One outbox row as operators see it: ids, type names, status, counters, times and error codes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OutboxItem {
    pub event_id: EventId,
    pub workspace_id: WorkspaceId,
    #[serde(rename = "type")]
    #[schemars(with = "EventType")]
    pub event_type: String,
    /// The published name clinic.<type>.v<version>, beside the short type
    pub published_name: String,
    #[schemars(with = "crate::events::ResourceType")]
    pub resource_type: String,
    #[schemars(with = "crate::ids::UlidSchema")]
    pub resource_id: String,
    #[schemars(with = "OutboxStatus")]
    pub status: String,
    #[schemars(range(min = 0))]
    pub attempts: i32,
    pub available_at: DateTime<Utc>,
    pub last_error_code: Option<String>,
    pub last_error: Option<String>,
    pub only_listeners: Option<Vec<String>>,
    pub dispatched_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// The columns [`item_from_row`] reads, as a literal so [`ONE`] is a compile-time `concat!`; the
/// listing composes its statement per filter shape around [`ITEM_COLUMNS`] (see
/// [`super::filter::Conditions`]).
macro_rules! item_columns {
    () => {
        "o.event_id, o.workspace_id, e.type, e.resource_type, e.resource_id, o.status, \
         o.attempts, o.available_at, o.last_error_code, o.last_error, o.only_listeners, o.dispatched_at, \
         o.created_at, o.updated_at, e.version"
    };
}
pub(super) const ITEM_COLUMNS: &str = item_columns!();

pub(super) fn item_from_row(row: &Row) -> OutboxItem {
    let resource_id: uuid::Uuid = row.get(4);
    let event_type: String = row.get(2);
    let version: i32 = row.get(14);
    OutboxItem {
        event_id: row.get(0),
        workspace_id: row.get(1),
        published_name: format!("clinic.{event_type}.v{version}"),
        event_type,
        resource_type: row.get(3),
        resource_id: ulid::Ulid::from(resource_id).to_string(),
        status: row.get(5),
        attempts: row.get(6),
        available_at: row.get(7),
        last_error_code: row.get(8),
        last_error: row.get(9),
        only_listeners: row.get(10),
        dispatched_at: row.get(11),
        created_at: row.get(12),
        updated_at: row.get(13),
    }
}

const LIST_FROM: &str = "FROM event_outbox o JOIN events e ON e.id = o.event_id";

/// Up to `limit` rows matching `filter`, newest first (keyset on the event id: pass the last item's
/// id as `before` for the next page).
pub async fn list(
    client: &impl GenericClient,
    filter: &OutboxFilter,
    limit: i64,
) -> Result<Vec<OutboxItem>, tokio_postgres::Error> {
    Ok(run_list(client, filter, limit, "").await?.iter().map(item_from_row).collect())
}

/// The server's own account of [`list`] for `filter`: planning and execution time in milliseconds
/// (`EXPLAIN (ANALYZE)` of the same statement with the same parameters; it reads, never writes).
pub async fn explain_list(
    client: &impl GenericClient,
    filter: &OutboxFilter,
    limit: i64,
) -> Result<(f64, f64), tokio_postgres::Error> {
    Ok(plan_times(&run_list(client, filter, limit, EXPLAIN).await?))
}

/// The server's own account of [`stats`] of one workspace: the planning and execution times of its
/// statements, summed, in milliseconds.
pub async fn explain_stats(
    client: &impl GenericClient,
    workspace: WorkspaceId,
) -> Result<(f64, f64), tokio_postgres::Error> {
    let explained = |statement: &str| format!("{EXPLAIN}{statement}");
    let runs = [
        sql::query(client, &explained(BY_STATUS_IN), &[&workspace]).await?,
        sql::query(client, &explained(DISPATCHED_IN), &[&workspace, &DISPATCHED_COUNT_LIMIT]).await?,
        sql::query(client, &explained(DEAD_BY_CODE_IN), &[&workspace]).await?,
        sql::query(client, &explained(OLDEST_DUE_IN), &[&workspace]).await?,
    ];
    Ok(runs.iter().map(|rows| plan_times(rows)).fold((0.0, 0.0), |(p, e), (dp, de)| (p + dp, e + de)))
}

const EXPLAIN: &str = "EXPLAIN (ANALYZE, FORMAT JSON) ";

/// Planning and execution time (ms) of an `EXPLAIN (ANALYZE, FORMAT JSON)` answer.
fn plan_times(rows: &[Row]) -> (f64, f64) {
    let plan: serde_json::Value = rows.first().map(|row| row.get(0)).unwrap_or_default();
    let time = |key: &str| plan[0][key].as_f64().unwrap_or(0.0);
    (time("Planning Time"), time("Execution Time"))
}

async fn run_list(
    client: &impl GenericClient,
    filter: &OutboxFilter,
    limit: i64,
    prefix: &str,
) -> Result<Vec<Row>, tokio_postgres::Error> {
    let params = filter.params(None);
    let mut query = params.conditions();
    if let Some(before) = filter.before {
        query.and("o.event_id < $", before);
    }
    let limit_param = query.bind(limit);
    let statement = format!(
        "{prefix}SELECT {ITEM_COLUMNS} {LIST_FROM} {} ORDER BY o.event_id DESC LIMIT {limit_param}",
        query.where_clause()
    );
    sql::query(client, &statement, &query.params()).await
}

/// A listener recorded as started for an event (kept only for partly failed attempts).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ListenerStart {
    pub listener: String,
    pub started_at: DateTime<Utc>,
    pub transport_message_id: Option<String>,
}

/// One past operator action on the row (the CLI's `show` includes the reason: it is the audit).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ActionHistory {
    pub id: OperatorActionId,
    pub action: String,
    pub actor: String,
    pub reason: String,
    pub status_before: String,
    pub status_after: String,
    pub listeners: Option<Vec<String>>,
    pub created_at: DateTime<Utc>,
}

/// One row in detail: the item, its listener starts and receipts, and its operator history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OutboxDetail {
    #[serde(flatten)]
    pub item: OutboxItem,
    /// The listeners routed for the event type.
    pub routed_listeners: Vec<String>,
    pub listener_starts: Vec<ListenerStart>,
    /// Listeners that committed their effects (receipt time by listener name).
    pub receipts: BTreeMap<String, DateTime<Utc>>,
    pub actions: Vec<ActionHistory>,
}

const STARTS: &str = "SELECT listener, started_at, transport_message_id FROM listener_starts \
     WHERE event_id = $1 ORDER BY started_at, listener";
const RECEIPTS: &str = "SELECT listener, received_at FROM listener_receipts WHERE event_id = $1";
const HISTORY: &str = "SELECT id, action, actor, reason, status_before, status_after, listeners, created_at \
     FROM operator_actions WHERE event_id = $1 ORDER BY created_at, id";

const ONE: &str = concat!(
    "SELECT ",
    item_columns!(),
    " FROM event_outbox o JOIN events e ON e.id = o.event_id \
     WHERE o.event_id = $1 AND ($2::uuid IS NULL OR o.workspace_id = $2)"
);

/// The row of `event_id` (within `workspace` when given) in detail; `None` when there is none.
pub async fn show(
    client: &impl GenericClient,
    workspace: Option<WorkspaceId>,
    event_id: EventId,
) -> Result<Option<OutboxDetail>, tokio_postgres::Error> {
    let Some(row) = sql::query_opt(client, ONE, &[&event_id, &workspace]).await? else {
        return Ok(None);
    };
    let item = item_from_row(&row);
    let routed_listeners = EventType::parse(&item.event_type)
        .map(|event_type| {
            crate::listeners::listeners(event_type).iter().map(|l| l.as_str().to_owned()).collect()
        })
        .unwrap_or_default();
    let listener_starts = sql::query(client, STARTS, &[&event_id])
        .await?
        .iter()
        .map(|row| ListenerStart {
            listener: row.get(0),
            started_at: row.get(1),
            transport_message_id: row.get(2),
        })
        .collect();
    let receipts = sql::query(client, RECEIPTS, &[&event_id])
        .await?
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect();
    let actions = sql::query(client, HISTORY, &[&event_id])
        .await?
        .iter()
        .map(|row| ActionHistory {
            id: row.get(0),
            action: row.get(1),
            actor: row.get(2),
            reason: row.get(3),
            status_before: row.get(4),
            status_after: row.get(5),
            listeners: row.get(6),
            created_at: row.get(7),
        })
        .collect();
    Ok(Some(OutboxDetail { item, routed_listeners, listener_starts, receipts, actions }))
}

/// Counts for `clinic outbox stats`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Stats {
    /// Rows by status; every status is listed, with 0 when it has none. Exact for every status but dispatched, which is counted up to a limit (see dispatchedCapped).
    // The limit is DISPATCHED_COUNT_LIMIT.
    pub by_status: BTreeMap<String, i64>,
    /// True when byStatus.dispatched shows the counting limit: there are at least that many dispatched rows (the history of delivered events is not counted in full, so the figures cost the same at any history size).
    pub dispatched_capped: bool,
    /// How long the oldest due row has waited, in milliseconds; 0 when nothing is due.
    // See crate::outbox::lag::oldest_pending_age_ms.
    pub oldest_pending_age_ms: i64,
    /// Age of the oldest dispatched event still missing a listener's receipt, deployment-wide: the OldestUnsettledAgeMs metric (0 when every start is settled)
    // Read by the metric's own function (crate::outbox::lag::read_ages), so it is deployment-wide
    // even when the other figures are one workspace's.
    pub oldest_unsettled_age_ms: i64,
    /// Dead rows by their last error code (none when a row has no code).
    pub dead_by_error_code: BTreeMap<String, i64>,
}

/// Dispatched rows are counted up to this many (an index-only walk of at most this many entries).
pub const DISPATCHED_COUNT_LIMIT: i64 = 1_000;

/// Statuses other than `dispatched` — what needs (or needed) attention — are counted exactly: these
/// rows are few in a healthy system (live rows are drained, dead ones acted on, discarded ones
/// swept). One statement per shape (a workspace, or all of them), each served by
/// `event_outbox_status_workspace_idx (status, workspace_id, event_id)`.
const BY_STATUS_IN: &str = "SELECT o.status, count(*) FROM event_outbox o \
     WHERE o.status IN ('pending', 'claimed', 'retry', 'dead', 'discarded') AND o.workspace_id = $1 \
     GROUP BY o.status";
const BY_STATUS_ALL: &str = "SELECT o.status, count(*) FROM event_outbox o \
     WHERE o.status IN ('pending', 'claimed', 'retry', 'dead', 'discarded') GROUP BY o.status";
const DISPATCHED_IN: &str = "SELECT count(*) FROM (SELECT 1 FROM event_outbox o \
     WHERE o.status = 'dispatched' AND o.workspace_id = $1 LIMIT $2) AS capped";
const DISPATCHED_ALL: &str =
    "SELECT count(*) FROM (SELECT 1 FROM event_outbox o WHERE o.status = 'dispatched' LIMIT $1) AS capped";
const DEAD_BY_CODE_IN: &str = "SELECT coalesce(o.last_error_code, 'none'), count(*) FROM event_outbox o \
     WHERE o.status = 'dead' AND o.workspace_id = $1 GROUP BY 1";
const DEAD_BY_CODE_ALL: &str =
    "SELECT coalesce(o.last_error_code, 'none'), count(*) FROM event_outbox o WHERE o.status = 'dead' GROUP BY 1";
const OLDEST_DUE_IN: &str = concat!(
    "SELECT coalesce((extract(epoch FROM now() - min(o.available_at)) * 1000)::bigint, 0) \
     FROM event_outbox o WHERE o.workspace_id = $1 AND o.",
    crate::outbox_due_predicate!()
);

/// Counts by status, dead rows by error code, and the oldest due row's wait (within `workspace` when
/// given).
pub async fn stats(
    client: &impl GenericClient,
    workspace: Option<WorkspaceId>,
) -> Result<Stats, tokio_postgres::Error> {
    let mut by_status: BTreeMap<String, i64> =
        OutboxStatus::ALL.iter().map(|status| (status.as_str().to_owned(), 0)).collect();
    let (counted, dispatched, dead) = match &workspace {
        Some(workspace) => (
            sql::query(client, BY_STATUS_IN, &[workspace]).await?,
            sql::query_one(client, DISPATCHED_IN, &[workspace, &DISPATCHED_COUNT_LIMIT]).await?,
            sql::query(client, DEAD_BY_CODE_IN, &[workspace]).await?,
        ),
        None => (
            sql::query(client, BY_STATUS_ALL, &[]).await?,
            sql::query_one(client, DISPATCHED_ALL, &[&DISPATCHED_COUNT_LIMIT]).await?,
            sql::query(client, DEAD_BY_CODE_ALL, &[]).await?,
        ),
    };
    for row in counted {
        by_status.insert(row.get(0), row.get(1));
    }
    let dispatched: i64 = dispatched.get(0);
    by_status.insert(OutboxStatus::Dispatched.as_str().to_owned(), dispatched);
    let dead_by_error_code = dead.iter().map(|row| (row.get(0), row.get(1))).collect();
    let oldest_pending_age_ms = match workspace {
        None => crate::outbox::lag::oldest_pending_age_ms(client).await?,
        Some(workspace) => {
            sql::query_one(client, OLDEST_DUE_IN, &[&workspace]).await?.get::<_, i64>(0).max(0)
        }
    };
    let oldest_unsettled_age_ms = crate::outbox::lag::read_ages(client).await?.oldest_unsettled_ms;
    Ok(Stats {
        by_status,
        dispatched_capped: dispatched >= DISPATCHED_COUNT_LIMIT,
        oldest_pending_age_ms,
        oldest_unsettled_age_ms,
        dead_by_error_code,
    })
}

/// The console's overview: the stats, the oldest live row's age, and the paused listeners.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Overview {
    #[serde(flatten)]
    pub stats: Stats,
    /// Age of the oldest live row (pending, claimed or retry, due or not), in milliseconds; 0 when none.
    pub oldest_live_age_ms: i64,
    pub paused_listeners: Vec<super::pause::Paused>,
}

const OLDEST_LIVE: &str = concat!(
    "SELECT coalesce((extract(epoch FROM now() - min(o.created_at)) * 1000)::bigint, 0) \
     FROM event_outbox o WHERE ($1::uuid IS NULL OR o.workspace_id = $1) AND o.",
    crate::outbox_live_predicate!()
);

/// [`stats`] plus the oldest live age and the paused listeners (within `workspace` when given).
pub async fn overview(
    client: &impl GenericClient,
    workspace: Option<WorkspaceId>,
) -> Result<Overview, tokio_postgres::Error> {
    let stats = stats(client, workspace).await?;
    let oldest_live_age_ms =
        sql::query_one(client, OLDEST_LIVE, &[&workspace]).await?.get::<_, i64>(0).max(0);
    let paused_listeners = super::pause::paused(client, workspace).await?;
    Ok(Overview { stats, oldest_live_age_ms, paused_listeners })
}
