//! Operator tooling for deliveries, like the outbox's: list, retry and discard — the use cases behind
//! `GET|POST /v1/system/deliveries…` (admin role) and `clinic deliveries …` (CLI).
//!
//! Which statuses each action accepts, the 409 naming why (a `sent` delivery took effect, a `stale`
//! or `opted_out` one is never sent, a `sending` one is leased, a `discarded` one is final) and the
//! change (retry: `pending` now with a fresh attempt budget, same idempotency key; discard:
//! `discarded`) are the lease queue's operator rules, written once for every queue
//! ([`crate::lease::operator::NOTIFICATION_ACTIONS`]): retry and discard take `dead`, `no_contact`,
//! `retry` and `uncertain` deliveries.
//!
//! Invariants:
//! - Each action locks the row (`FOR UPDATE`), checks its status, changes it and inserts one
//!   `operator_actions` row (with `notification_id`) on the caller's transaction; a status that does
//!   not fit is a `Conflict` (409) and writes nothing.
//! - Listings answer ids, names, statuses, counters, codes and times — never content.

use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;
use serde::Serialize;
use ulid::Ulid;

use super::DeliveryStatus;
use crate::db::sql;
use crate::error::{DomainError, DomainResult};
use crate::ids::{EventId, NotificationId, OperatorActionId, WorkspaceId};
use crate::lease::operator::NOTIFICATION_ACTIONS;
use crate::lease::ActionKind;
use crate::operator::{Operator, Reason};

/// One delivery as operators see it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DeliveryItem {
    pub id: NotificationId,
    pub workspace_id: WorkspaceId,
    pub event_id: EventId,
    pub listener: String,
    pub template: String,
    pub recipient_kind: String,
    pub recipient_id: String,
    pub channel: String,
    pub status: String,
    pub attempts: i32,
    pub last_error_code: Option<String>,
    pub provider_message_id: Option<String>,
    pub available_at: DateTime<Utc>,
    pub sent_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
}

const LIST: &str = "SELECT id, workspace_id, event_id, listener, template, recipient_kind, recipient_id, \
         channel, status, attempts, last_error_code, provider_message_id, available_at, sent_at, created_at \
     FROM notifications \
     WHERE ($1::uuid IS NULL OR workspace_id = $1) AND ($2::text IS NULL OR status = $2) \
       AND ($3::uuid IS NULL OR id < $3) \
     ORDER BY id DESC LIMIT $4";

/// Up to `limit` deliveries, newest first, filtered by workspace (always over HTTP) and status,
/// strictly older than `before` (keyset on the id).
pub async fn list(
    client: &impl GenericClient,
    workspace: Option<WorkspaceId>,
    status: Option<DeliveryStatus>,
    before: Option<NotificationId>,
    limit: i64,
) -> Result<Vec<DeliveryItem>, tokio_postgres::Error> {
    let status = status.map(DeliveryStatus::as_str);
    let rows = sql::query(client, LIST, &[&workspace, &status, &before, &limit]).await?;
    Ok(rows
        .iter()
        .map(|row| {
            let recipient_id: uuid::Uuid = row.get(6);
            DeliveryItem {
                id: row.get(0),
                workspace_id: row.get(1),
                event_id: row.get(2),
                listener: row.get(3),
                template: row.get(4),
                recipient_kind: row.get(5),
                recipient_id: Ulid::from(recipient_id).to_string(),
                channel: row.get(7),
                status: row.get(8),
                attempts: row.get(9),
                last_error_code: row.get(10),
                provider_message_id: row.get(11),
                available_at: row.get(12),
                sent_at: row.get(13),
                created_at: row.get(14),
            }
        })
        .collect())
}

/// The audit row of one delivery action (the reason is not echoed).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DeliveryActionRecord {
    pub id: OperatorActionId,
    pub workspace_id: WorkspaceId,
    pub notification_id: NotificationId,
    pub event_id: EventId,
    pub action: ActionKind,
    pub actor: String,
    pub status_before: String,
    pub status_after: String,
    pub created_at: DateTime<Utc>,
}

const LOCK: &str = "SELECT status, workspace_id, event_id, listener FROM notifications \
     WHERE id = $1 AND ($2::uuid IS NULL OR workspace_id = $2) FOR UPDATE";

const INSERT_ACTION: &str = "INSERT INTO operator_actions \
     (id, workspace_id, event_id, action, actor, reason, status_before, status_after, listeners, \
      notification_id) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, ARRAY[$9::text], $10) RETURNING created_at";

/// Retries or discards one delivery and records the action, on the caller's transaction.
/// `workspace` scopes the lookup (`None`: any workspace, CLI only). Replay is not a delivery action.
pub async fn perform(
    tx: &impl GenericClient,
    workspace: Option<WorkspaceId>,
    id: NotificationId,
    action: ActionKind,
    reason: &Reason,
    operator: &Operator,
) -> DomainResult<DeliveryActionRecord> {
    let row = sql::query_opt(tx, LOCK, &[&id, &workspace]).await?.ok_or(DomainError::NotFound)?;
    let status_name: String = row.get(0);
    let workspace_id: WorkspaceId = row.get(1);
    let event_id: EventId = row.get(2);
    let listener: String = row.get(3);
    // The state check (409 naming why: a sent delivery took effect, a stale one is never sent, a
    // sending one is leased) and the change (a fresh attempt budget for retry) are the lease
    // queue's, written once for every queue.
    let decision = NOTIFICATION_ACTIONS.decide(action, &status_name)?;
    let statement = format!("UPDATE notifications SET {} WHERE id = $1", decision.set);
    sql::execute(tx, &statement, &[&id]).await?;
    let (before, after) = (decision.before, decision.after);
    let action_id = OperatorActionId::generate();
    let inserted = sql::query_one(
        tx,
        INSERT_ACTION,
        &[
            &action_id,
            &workspace_id,
            &event_id,
            &action.as_str(),
            &operator.as_str(),
            &reason.as_str(),
            &before,
            &after,
            &listener,
            &id,
        ],
    )
    .await?;
    tracing::info!(
        action_id = %action_id,
        notification_id = %id,
        action = action.as_str(),
        status_before = before,
        status_after = after,
        "operator action on a delivery recorded"
    );
    Ok(DeliveryActionRecord {
        id: action_id,
        workspace_id,
        notification_id: id,
        event_id,
        action,
        actor: operator.as_str().to_owned(),
        status_before: before.to_owned(),
        status_after: after.to_owned(),
        created_at: inserted.get(0),
    })
}

const RECORDED: &str = "SELECT id, workspace_id, notification_id, event_id, action, actor, status_before, \
     status_after, created_at FROM operator_actions \
     WHERE id = $1 AND workspace_id = $2 AND notification_id IS NOT NULL";

/// The audit record of an earlier delivery action `id` of `workspace`, as [`perform`] answered it
/// (what a request repeated with its `Idempotency-Key` answers); `None` when there is none.
pub async fn recorded(
    client: &impl GenericClient,
    workspace: WorkspaceId,
    id: OperatorActionId,
) -> DomainResult<Option<DeliveryActionRecord>> {
    let Some(row) = sql::query_opt(client, RECORDED, &[&id, &workspace]).await? else {
        return Ok(None);
    };
    let action: String = row.get(4);
    let action = ActionKind::parse(&action)
        .ok_or_else(|| DomainError::Conflict(format!("the audit row has an unknown action {action}")))?;
    Ok(Some(DeliveryActionRecord {
        id: row.get(0),
        workspace_id: row.get(1),
        notification_id: row.get(2),
        event_id: row.get(3),
        action,
        actor: row.get(5),
        status_before: row.get(6),
        status_after: row.get(7),
        created_at: row.get(8),
    }))
}
