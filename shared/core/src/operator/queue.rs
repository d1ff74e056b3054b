//! Operator actions generic over the lease queue ([`OperatedQueue`]): one trait that the outbox,
//! the notifications and the webhook deliveries implement, so the single-row routes, the bulk
//! recovery ([`super::bulk`]), the CLI and the console reach every queue through one path.
//!
//! | queue ([`OperatedQueue`]) | row id | audit column | bulk filter |
//! |---------------------------|--------|--------------|-------------|
//! | [`Outbox`]                | event id | `event_id` (the others `NULL`) | [`super::OutboxFilter`] |
//! | [`Notifications`]         | notification id | `notification_id` | [`RowFilter`]: status, age/period, errorCode, listener, template |
//! | [`WebhookDeliveries`]     | webhook delivery id | `webhook_delivery_id` | [`RowFilter`]: status, age/period, errorCode, endpointId, eventType |
//!
//! Invariants:
//! - Every action is decided by [`crate::lease::operator::Actions::decide`] (which states it
//!   accepts, the 409 naming why, the one SET clause: a fresh attempt budget for a retry), on a row
//!   locked `FOR UPDATE`, with one `operator_actions` row on the caller's transaction; a refusal
//!   writes nothing.
//! - Notifications and webhook deliveries share one implementation ([`perform_row`]); the
//!   outbox's adds replay's listener bookkeeping ([`super::actions`]).
//! - Audit rows and answers hold ids, statuses and names of listeners only; the reason is stored,
//!   never echoed or logged.
//!
//! Over 500 lines only with its tests; the code above them is under 500.

use std::fmt::Display;
use std::future::Future;
use std::str::FromStr;

use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;
use serde::Serialize;
use tokio_postgres::types::{FromSql, ToSql};

use super::actions::{self, ActionRecord, ActionRequest};
use super::filter::{Conditions, OutboxFilter};
use super::row_filter::RowFilter;
use super::Operator;
use crate::db::sql;
use crate::error::{DomainError, DomainResult};
use crate::ids::{EventId, NotificationId, OperatorActionId, WebhookDeliveryId, WorkspaceId};
use crate::lease::operator::{Actions, NOTIFICATION_ACTIONS, OUTBOX_ACTIONS, WEBHOOK_ACTIONS};
use crate::lease::ActionKind;
use crate::outbox::OutboxStatus;

/// A lease queue operators act on: its row id, its audit record, its rules and its bulk filter.
pub trait OperatedQueue: Send + Sync + 'static {
    /// The id of one row (its path segment over HTTP).
    type Id: Copy + Display + FromStr + Serialize + ToSql + Sync + Send + for<'a> FromSql<'a> + 'static;
    /// What an action answers (its audit record).
    type Record: Serialize + Send;
    /// The filter of a bulk action.
    type Filter: Clone + Send + Sync;

    /// Which states each action accepts, and how answers name a row.
    const ACTIONS: Actions;
    /// The `operator_actions` column naming the row.
    const AUDIT_COLUMN: &'static str;
    /// The table (and joins) a bulk selection reads, and its id column there.
    const FROM: &'static str;
    const ID: &'static str;
    /// The filter fields a bulk request may name (anything else is a 422 naming it).
    const FILTER_FIELDS: &'static [&'static str];

    /// Reads a bulk filter through `get` (a field's raw text).
    fn parse_filter(
        get: impl Fn(&str) -> Option<String>,
    ) -> Result<Self::Filter, crate::domain::input::FieldError>;

    /// Whether the filter names no field (a bulk request must name one).
    fn names_nothing(filter: &Self::Filter) -> bool;

    /// The filter's conditions, scoped to `workspace` and restricted to `accepted` statuses.
    fn conditions(
        filter: &Self::Filter,
        workspace: Option<WorkspaceId>,
        accepted: &[&'static str],
    ) -> Conditions;

    /// Performs `request` on row `id` (scoped to `workspace`; `None`: any, CLI only) and records it
    /// with `batch` (a bulk request's id), on the caller's transaction.
    fn perform<C: GenericClient>(
        tx: &C,
        workspace: Option<WorkspaceId>,
        id: Self::Id,
        request: &ActionRequest,
        operator: &Operator,
        batch: Option<ulid::Ulid>,
    ) -> impl Future<Output = DomainResult<Self::Record>> + Send;
}

/// `event_outbox`: an event's listener starts (retry, replay, discard).
pub struct Outbox;
/// `notifications`: a message to a person (retry, discard).
pub struct Notifications;
/// `webhook_deliveries`: an event posted to an endpoint (retry, discard).
pub struct WebhookDeliveries;

const OUTBOX_FIELDS: &[&str] =
    &["status", "eventType", "olderThan", "listener", "errorCode", "from", "to", "resourceId"];
const NOTIFICATION_FIELDS: &[&str] =
    &["status", "olderThan", "from", "to", "errorCode", "listener", "template"];
/// The `filter` object of a notification bulk body: the fields of `NOTIFICATION_FIELDS` as
/// [`RowFilter::parse`] reads them for [`Notifications`] (the route refuses a field that is not a
/// string, so none is nullable). Only its schema is used: the parser is what reads it, and the API
/// fuzzing checks they agree. A bulk request names at least one field (`minProperties`); `to` after
/// `from` is a rule between two fields.
#[derive(Default, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
#[schemars(extend("minProperties" = 1), transform = super::filter::without_defaults)]
pub struct NotificationFilter {
    #[schemars(with = "crate::delivery::DeliveryStatus")]
    status: Option<&'static str>,
    #[schemars(with = "super::Age")]
    older_than: Option<String>,
    #[schemars(with = "DateTime<Utc>")]
    from: Option<String>,
    #[schemars(with = "DateTime<Utc>")]
    to: Option<String>,
    #[schemars(with = "super::ErrorCode")]
    error_code: Option<String>,
    /// Notifications this listener made
    #[schemars(with = "crate::listeners::Listener")]
    listener: Option<String>,
    /// Notifications of this template
    #[schemars(with = "super::row_filter::TemplateName")]
    template: Option<String>,
}

const WEBHOOK_FIELDS: &[&str] =
    &["status", "olderThan", "from", "to", "errorCode", "endpointId", "eventType"];

impl OperatedQueue for Outbox {
    type Id = EventId;
    type Record = ActionRecord;
    type Filter = OutboxFilter;
    const ACTIONS: Actions = OUTBOX_ACTIONS;
    const AUDIT_COLUMN: &'static str = "event_id";
    const FROM: &'static str = "event_outbox o JOIN events e ON e.id = o.event_id";
    const ID: &'static str = "o.event_id";
    const FILTER_FIELDS: &'static [&'static str] = OUTBOX_FIELDS;

    fn parse_filter(
        get: impl Fn(&str) -> Option<String>,
    ) -> Result<OutboxFilter, crate::domain::input::FieldError> {
        OutboxFilter::parse(get)
    }

    fn names_nothing(filter: &OutboxFilter) -> bool {
        OutboxFilter { workspace: None, before: None, ..filter.clone() } == OutboxFilter::default()
    }

    fn conditions(
        filter: &OutboxFilter,
        workspace: Option<WorkspaceId>,
        accepted: &[&'static str],
    ) -> Conditions {
        let accepted: Vec<OutboxStatus> =
            accepted.iter().filter_map(|name| OutboxStatus::parse(name)).collect();
        let scoped = OutboxFilter { workspace: workspace.or(filter.workspace), ..filter.clone() };
        scoped.params(Some(&accepted)).conditions()
    }

    async fn perform<C: GenericClient>(
        tx: &C,
        workspace: Option<WorkspaceId>,
        id: EventId,
        request: &ActionRequest,
        operator: &Operator,
        batch: Option<ulid::Ulid>,
    ) -> DomainResult<ActionRecord> {
        actions::perform_in_batch(tx, workspace, id, request, operator, batch).await
    }
}

/// `OperatedQueue` for a row queue (notifications, webhook deliveries): one [`RowFilter`] over the
/// table under `$alias`, and [`perform_row`] on a [`QueueRow::$variant`].
macro_rules! row_queue {
    ($queue:ty, $id:ty, $variant:ident, $actions:expr, $column:literal, $table:literal, $alias:literal, $fields:expr) => {
        impl OperatedQueue for $queue {
            type Id = $id;
            type Record = RowActionRecord;
            type Filter = RowFilter;
            const ACTIONS: Actions = $actions;
            const AUDIT_COLUMN: &'static str = $column;
            const FROM: &'static str = concat!($table, " ", $alias);
            const ID: &'static str = concat!($alias, ".id");
            const FILTER_FIELDS: &'static [&'static str] = $fields;

            fn parse_filter(
                get: impl Fn(&str) -> Option<String>,
            ) -> Result<RowFilter, crate::domain::input::FieldError> {
                RowFilter::parse(&Self::ACTIONS.queue, Self::FILTER_FIELDS, get)
            }

            fn names_nothing(filter: &RowFilter) -> bool {
                *filter == RowFilter::default()
            }

            fn conditions(
                filter: &RowFilter,
                workspace: Option<WorkspaceId>,
                accepted: &[&'static str],
            ) -> Conditions {
                filter.conditions($alias, workspace, accepted)
            }

            async fn perform<C: GenericClient>(
                tx: &C,
                workspace: Option<WorkspaceId>,
                id: $id,
                request: &ActionRequest,
                operator: &Operator,
                batch: Option<ulid::Ulid>,
            ) -> DomainResult<RowActionRecord> {
                perform_row(tx, workspace, QueueRow::$variant(id), request, operator, batch).await
            }
        }
    };
}

row_queue!(
    Notifications,
    NotificationId,
    NotificationId,
    NOTIFICATION_ACTIONS,
    "notification_id",
    "notifications",
    "n",
    NOTIFICATION_FIELDS
);
row_queue!(
    WebhookDeliveries,
    WebhookDeliveryId,
    WebhookDeliveryId,
    WEBHOOK_ACTIONS,
    "webhook_delivery_id",
    "webhook_deliveries",
    "d",
    WEBHOOK_FIELDS
);

/// The row of a notification or webhook delivery action, answered under its own key
/// (`notificationId` or `webhookDeliveryId`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum QueueRow {
    NotificationId(NotificationId),
    WebhookDeliveryId(WebhookDeliveryId),
}

/// The audit row of an action on a notification or a webhook delivery (the reason is not echoed).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RowActionRecord {
    pub id: OperatorActionId,
    pub workspace_id: WorkspaceId,
    #[serde(flatten)]
    pub row: QueueRow,
    pub event_id: EventId,
    pub action: ActionKind,
    pub actor: String,
    pub status_before: String,
    pub status_after: String,
    /// The bulk request this action was part of (absent for single-row actions).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub batch_id: Option<ulid::Ulid>,
    pub created_at: DateTime<Utc>,
}

/// The answer of a single-row retry or discard of a notification (`DeliveryAction`): what
/// [`RowActionRecord`] writes for a [`QueueRow::NotificationId`] (a single-row action has no batch
/// id). Only its schema is used: the record is what writes it, and a test checks they agree.
#[derive(schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
#[allow(dead_code)]
pub struct NotificationAction {
    id: OperatorActionId,
    workspace_id: WorkspaceId,
    notification_id: NotificationId,
    event_id: EventId,
    #[schemars(with = "NotificationActionKind")]
    action: ActionKind,
    /// The acting admin's member id
    actor: String,
    #[schemars(with = "crate::delivery::DeliveryStatus")]
    status_before: String,
    #[schemars(with = "crate::delivery::DeliveryStatus")]
    status_after: String,
    created_at: DateTime<Utc>,
}

/// The actions the notifications' queue offers ([`NOTIFICATION_ACTIONS`]: retry and discard).
struct NotificationActionKind;

crate::inline_schema!(NotificationActionKind, |_: &mut schemars::SchemaGenerator| {
    schemars::json_schema!({ "type": "string", "enum": NOTIFICATION_ACTIONS.offered() })
});

/// How one of the row tables is locked, changed and audited.
struct RowTable {
    actions: Actions,
    audit_column: &'static str,
    /// The column copied into the audit row's `listeners` (the notification's listener).
    listener: Option<&'static str>,
}

const NOTIFICATION_ROWS: RowTable =
    RowTable { actions: NOTIFICATION_ACTIONS, audit_column: "notification_id", listener: Some("listener") };
const WEBHOOK_DELIVERY_ROWS: RowTable =
    RowTable { actions: WEBHOOK_ACTIONS, audit_column: "webhook_delivery_id", listener: None };

impl QueueRow {
    fn table(&self) -> &'static RowTable {
        match self {
            QueueRow::NotificationId(_) => &NOTIFICATION_ROWS,
            QueueRow::WebhookDeliveryId(_) => &WEBHOOK_DELIVERY_ROWS,
        }
    }

    fn uuid(&self) -> uuid::Uuid {
        match self {
            QueueRow::NotificationId(id) => id.uuid(),
            QueueRow::WebhookDeliveryId(id) => id.uuid(),
        }
    }
}

/// Retries or discards one notification or webhook delivery and records the action, on the
/// caller's transaction. Errors: `NotFound` (no such row in scope), `Conflict` (the lease queue's
/// refusal naming why); neither writes anything.
pub async fn perform_row(
    tx: &impl GenericClient,
    workspace: Option<WorkspaceId>,
    row: QueueRow,
    request: &ActionRequest,
    operator: &Operator,
    batch: Option<ulid::Ulid>,
) -> DomainResult<RowActionRecord> {
    let table = row.table();
    let queue = table.actions.queue;
    let listener = table.listener.unwrap_or("NULL::text");
    let lock = format!(
        "SELECT status, workspace_id, event_id, {listener} FROM {table_name} \
         WHERE {id} = $1 AND ($2::uuid IS NULL OR workspace_id = $2) FOR UPDATE",
        table_name = queue.table,
        id = queue.id,
    );
    let id = row.uuid();
    let locked = sql::query_opt(tx, &lock, &[&id, &workspace]).await?.ok_or(DomainError::NotFound)?;
    let status_name: String = locked.get(0);
    let workspace_id: WorkspaceId = locked.get(1);
    let event_id: EventId = locked.get(2);
    let listeners: Option<Vec<String>> = locked.get::<_, Option<String>>(3).map(|name| vec![name]);
    let action = request.action;
    let decision = table.actions.decide(action, &status_name)?;
    let change = format!(
        "UPDATE {table_name} SET {set} WHERE {id} = $1",
        table_name = queue.table,
        set = decision.set,
        id = queue.id,
    );
    sql::execute(tx, &change, &[&id]).await?;
    let action_id = OperatorActionId::generate();
    let insert = format!(
        "INSERT INTO operator_actions (id, workspace_id, event_id, action, actor, reason, status_before, \
         status_after, listeners, {column}, batch_id) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) \
         RETURNING created_at",
        column = table.audit_column,
    );
    let inserted = sql::query_one(
        tx,
        &insert,
        &[
            &action_id,
            &workspace_id,
            &event_id,
            &action.as_str(),
            &operator.as_str(),
            &request.reason.as_str(),
            &decision.before,
            &decision.after,
            &listeners,
            &id,
            &batch.map(uuid::Uuid::from),
        ],
    )
    .await?;
    tracing::info!(
        action_id = %action_id,
        queue = queue.name,
        row_id = %ulid::Ulid::from(id),
        action = action.as_str(),
        status_before = decision.before,
        status_after = decision.after,
        "operator action recorded"
    );
    Ok(RowActionRecord {
        id: action_id,
        workspace_id,
        row,
        event_id,
        action,
        actor: operator.as_str().to_owned(),
        status_before: decision.before.to_owned(),
        status_after: decision.after.to_owned(),
        batch_id: batch,
        created_at: inserted.get(0),
    })
}

const RECORDED_ROW: &str = "SELECT id, workspace_id, notification_id, webhook_delivery_id, event_id, action, \
     actor, status_before, status_after, batch_id, created_at FROM operator_actions \
     WHERE id = $1 AND workspace_id = $2 AND (notification_id IS NOT NULL OR webhook_delivery_id IS NOT NULL)";

/// The audit record of an earlier notification or webhook delivery action `id` of `workspace`, as
/// [`perform_row`] answered it (what a request repeated with its `Idempotency-Key` answers).
pub async fn recorded_row(
    client: &impl GenericClient,
    workspace: WorkspaceId,
    id: OperatorActionId,
) -> DomainResult<Option<RowActionRecord>> {
    let Some(row) = sql::query_opt(client, RECORDED_ROW, &[&id, &workspace]).await? else {
        return Ok(None);
    };
    let notification: Option<NotificationId> = row.get(2);
    let delivery: Option<WebhookDeliveryId> = row.get(3);
    let queue_row = match (notification, delivery) {
        (Some(id), _) => QueueRow::NotificationId(id),
        (None, Some(id)) => QueueRow::WebhookDeliveryId(id),
        (None, None) => return Ok(None),
    };
    let action: String = row.get(5);
    let action = ActionKind::parse(&action)
        .ok_or_else(|| DomainError::Conflict(format!("the audit row has an unknown action {action}")))?;
    Ok(Some(RowActionRecord {
        id: row.get(0),
        workspace_id: row.get(1),
        row: queue_row,
        event_id: row.get(4),
        action,
        actor: row.get(6),
        status_before: row.get(7),
        status_after: row.get(8),
        batch_id: row.get::<_, Option<uuid::Uuid>>(9).map(ulid::Ulid::from),
        created_at: row.get(10),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_record_names_its_row_under_the_queues_key() {
        let id = NotificationId::generate();
        let record = RowActionRecord {
            id: OperatorActionId::generate(),
            workspace_id: WorkspaceId::generate(),
            row: QueueRow::NotificationId(id),
            event_id: EventId::generate(),
            action: ActionKind::Retry,
            actor: "ops".into(),
            status_before: "dead".into(),
            status_after: "pending".into(),
            batch_id: None,
            created_at: Utc::now(),
        };
        let json = serde_json::to_value(&record).unwrap();
        assert_eq!(json["notificationId"], id.to_string());
        assert!(json.get("batchId").is_none() && json.get("row").is_none(), "{json}");
        let delivery = WebhookDeliveryId::generate();
        let json =
            serde_json::to_value(RowActionRecord { row: QueueRow::WebhookDeliveryId(delivery), ..record })
                .unwrap();
        assert_eq!(json["webhookDeliveryId"], delivery.to_string());
    }

    fn schema<T: schemars::JsonSchema>(deserialize: bool) -> serde_json::Value {
        let settings = schemars::generate::SchemaSettings::draft2020_12();
        let settings = if deserialize { settings.for_deserialize() } else { settings.for_serialize() };
        settings.into_generator().into_root_schema_for::<T>().to_value()
    }

    fn names(value: &serde_json::Value) -> Vec<String> {
        let mut names: Vec<String> = match value {
            serde_json::Value::Object(object) => object.keys().cloned().collect(),
            serde_json::Value::Array(items) => {
                items.iter().filter_map(|n| n.as_str().map(str::to_owned)).collect()
            }
            _ => Vec::new(),
        };
        names.sort();
        names
    }

    #[test]
    fn a_notification_action_answer_states_what_the_record_writes() {
        let record = RowActionRecord {
            id: OperatorActionId::generate(),
            workspace_id: WorkspaceId::generate(),
            row: QueueRow::NotificationId(NotificationId::generate()),
            event_id: EventId::generate(),
            action: ActionKind::Discard,
            actor: "ops".into(),
            status_before: "dead".into(),
            status_after: "discarded".into(),
            batch_id: None,
            created_at: Utc::now(),
        };
        let written = serde_json::to_value(&record).unwrap();
        let answer = schema::<NotificationAction>(false);
        assert_eq!(names(&answer["properties"]), names(&written));
        assert_eq!(names(&answer["required"]), names(&written));
        assert_eq!(answer["properties"]["action"]["enum"], serde_json::json!(["retry", "discard"]));
    }

    #[test]
    fn the_bulk_filters_name_exactly_their_queues_filter_fields() {
        let sorted = |fields: &[&str]| {
            let mut fields: Vec<String> = fields.iter().map(|f| (*f).to_owned()).collect();
            fields.sort();
            fields
        };
        let outbox = schema::<OutboxFilter>(true);
        assert_eq!(names(&outbox["properties"]), sorted(Outbox::FILTER_FIELDS));
        let notifications = schema::<NotificationFilter>(true);
        assert_eq!(names(&notifications["properties"]), sorted(Notifications::FILTER_FIELDS));
        for filter in [outbox, notifications] {
            assert_eq!(filter["additionalProperties"], false);
            assert!(filter.get("required").is_none(), "{filter}");
            let nullable = filter["properties"]
                .as_object()
                .unwrap()
                .values()
                .any(|field| field.get("default").is_some() || field["type"].as_array().is_some());
            assert!(!nullable, "a filter field is never null: {filter}");
        }
    }
}
