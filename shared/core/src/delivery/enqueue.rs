//! The listener's side of delivery: commit what must be sent (ids and a template id) on the
//! listener's transaction, and the workspace's delivery log read for `GET /v1/notifications`.

use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;
use serde::Serialize;
use ulid::Ulid;

use super::RecipientKind;
use crate::db::sql;
use crate::ids::{EventId, NotificationId, WorkspaceId};

/// What must be sent: ids and a template id, nothing else. The channel is chosen at send time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewDelivery<'a> {
    pub workspace_id: WorkspaceId,
    pub event_id: EventId,
    /// The listener's stable name (part of the idempotency key).
    pub listener: &'a str,
    pub recipient_kind: RecipientKind,
    pub recipient_id: Ulid,
    /// A template id such as `appointment.booking_confirmation` (see [`super::render`]).
    pub template: &'a str,
    /// How soon it should go out ([`super::Priority::of`]).
    pub priority: super::Priority,
}

impl NewDelivery<'_> {
    /// `"{event_id}:{listener}"`: the key every provider deduplicates on.
    pub fn idempotency_key(&self) -> String {
        format!("{}:{}", self.event_id, self.listener)
    }
}

const INSERT: &str = "INSERT INTO notifications (id, workspace_id, event_id, listener, idempotency_key, \
     recipient_kind, recipient_id, template, channel, status, priority) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 'auto', 'pending', $9) \
     ON CONFLICT (idempotency_key) DO NOTHING";

/// Inserts a `pending` delivery on the caller's transaction; `None` when its idempotency key was
/// already used (nothing new will be sent).
pub async fn enqueue(
    client: &impl GenericClient,
    delivery: &NewDelivery<'_>,
) -> Result<Option<NotificationId>, tokio_postgres::Error> {
    let id = NotificationId::generate();
    let inserted = sql::execute(
        client,
        INSERT,
        &[
            &id,
            &delivery.workspace_id,
            &delivery.event_id,
            &delivery.listener,
            &delivery.idempotency_key(),
            &delivery.recipient_kind.as_str(),
            &uuid::Uuid::from(delivery.recipient_id),
            &delivery.template,
            &delivery.priority.rank(),
        ],
    )
    .await?;
    Ok((inserted == 1).then_some(id))
}

/// One entry of the delivery log as answered by `GET /v1/notifications`: ids and names only.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(rename = "Notification")]
pub struct NotificationItem {
    pub id: NotificationId,
    pub event_id: EventId,
    pub listener: String,
    #[schemars(with = "super::RecipientKind")]
    pub recipient_kind: String,
    #[schemars(with = "crate::ids::UlidSchema")]
    pub recipient_id: String,
    pub template: String,
    #[schemars(with = "super::StoredChannel")]
    pub channel: String,
    #[schemars(with = "super::DeliveryStatus")]
    pub status: String,
    pub created_at: DateTime<Utc>,
}

/// The first page, newest first (served by `notifications_workspace_created_idx`).
const LIST_FIRST: &str = "SELECT id, event_id, listener, recipient_kind, recipient_id, template, channel, \
     status, created_at FROM notifications \
     WHERE workspace_id = $1 ORDER BY created_at DESC, id DESC LIMIT $2";

/// A later page: strictly after the cursor's row in (created_at, id) order. A cursor whose row is gone
/// (retention) ends the list.
const LIST_AFTER: &str = "SELECT id, event_id, listener, recipient_kind, recipient_id, template, channel, \
     status, created_at FROM notifications \
     WHERE workspace_id = $1 AND (created_at, id) < \
       (SELECT created_at, id FROM notifications WHERE workspace_id = $1 AND id = $2) \
     ORDER BY created_at DESC, id DESC LIMIT $3";

/// Up to `limit` notifications of a workspace, newest first by `created_at` (ties by id), strictly
/// after the notification `after` in that order when given (keyset; use the last item's id as the next
/// cursor).
pub async fn list(
    client: &impl GenericClient,
    workspace_id: WorkspaceId,
    after: Option<NotificationId>,
    limit: i64,
) -> Result<Vec<NotificationItem>, tokio_postgres::Error> {
    let rows = match after {
        None => sql::query(client, LIST_FIRST, &[&workspace_id, &limit]).await?,
        Some(after) => sql::query(client, LIST_AFTER, &[&workspace_id, &after, &limit]).await?,
    };
    Ok(rows
        .iter()
        .map(|row| {
            let recipient_id: uuid::Uuid = row.get(4);
            NotificationItem {
                id: row.get(0),
                event_id: row.get(1),
                listener: row.get(2),
                recipient_kind: row.get(3),
                recipient_id: Ulid::from(recipient_id).to_string(),
                template: row.get(5),
                channel: row.get(6),
                status: row.get(7),
                created_at: row.get(8),
            }
        })
        .collect())
}
