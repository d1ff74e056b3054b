//! Notifications: the [`Notifier`] seam listeners write through, the built-in [`DeliveryLog`], and
//! the workspace's delivery log read for `GET /v1/notifications`.
//!
//! Invariants:
//! - A notification carries ids and a template name only — never names, contact details, reasons or
//!   any other content. Rendering (and looking up contact details) is the provider's business.
//! - Every notification has the idempotency key `"{event_id}:{listener}"`, unique in the database; a
//!   provider that sends for real (SES, SNS, an SMS API) passes the same key to the provider, so a
//!   redelivered event never notifies twice.
//! - The built-in notifier writes on the listener's transaction, so the notification, the listener's
//!   receipt and any other effect commit together or not at all.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;
use serde::Serialize;
use ulid::Ulid;

use crate::db::{sql, Tx};
use crate::ids::{EventId, NotificationId, WorkspaceId};
use crate::listeners::Listener;

/// Who a notification is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RecipientKind {
    Patient,
    Practitioner,
}

impl RecipientKind {
    pub const fn as_str(self) -> &'static str {
        match self {
            RecipientKind::Patient => "patient",
            RecipientKind::Practitioner => "practitioner",
        }
    }
}

/// What a listener asks to be sent: ids and a template, nothing else.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewNotification {
    pub workspace_id: WorkspaceId,
    pub event_id: EventId,
    pub listener: Listener,
    pub recipient_kind: RecipientKind,
    pub recipient_id: Ulid,
    /// A template name such as `appointment.booking_confirmation`.
    pub template: &'static str,
    /// `email`, `sms`, … — the channel the provider should use.
    pub channel: &'static str,
}

impl NewNotification {
    /// `"{event_id}:{listener}"`: the key every provider deduplicates on.
    pub fn idempotency_key(&self) -> String {
        format!("{}:{}", self.event_id, self.listener.as_str())
    }
}

/// Whether the notifier did something new.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Notified {
    Recorded(NotificationId),
    /// The idempotency key was already used: nothing new was sent.
    AlreadySent,
}

/// Why a notification could not be handed over.
#[derive(Debug, thiserror::Error)]
pub enum NotifyError {
    #[error("database error: {0}")]
    Db(#[from] tokio_postgres::Error),
    /// A provider refused or was unreachable; `code` is stable, `message` carries no health data.
    #[error("provider error {code}: {message}")]
    Provider { code: String, message: String, retryable: bool },
}

/// Where listeners send notifications. Implementations must deduplicate on
/// [`NewNotification::idempotency_key`].
#[async_trait]
pub trait Notifier: Send + Sync {
    async fn notify(&self, tx: &Tx<'_>, notification: &NewNotification) -> Result<Notified, NotifyError>;
}

/// The built-in notifier: records each notification in the `notifications` table (status `recorded`).
#[derive(Debug, Clone, Copy, Default)]
pub struct DeliveryLog;

const INSERT: &str = "INSERT INTO notifications (id, workspace_id, event_id, listener, idempotency_key, \
     recipient_kind, recipient_id, template, channel, status) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, 'recorded') \
     ON CONFLICT (idempotency_key) DO NOTHING";

#[async_trait]
impl Notifier for DeliveryLog {
    async fn notify(&self, tx: &Tx<'_>, n: &NewNotification) -> Result<Notified, NotifyError> {
        let id = NotificationId::generate();
        let inserted = sql::execute(
            tx,
            INSERT,
            &[
                &id,
                &n.workspace_id,
                &n.event_id,
                &n.listener.as_str(),
                &n.idempotency_key(),
                &n.recipient_kind.as_str(),
                &uuid::Uuid::from(n.recipient_id),
                &n.template,
                &n.channel,
            ],
        )
        .await?;
        Ok(if inserted == 1 { Notified::Recorded(id) } else { Notified::AlreadySent })
    }
}

/// One entry of the delivery log as answered by `GET /v1/notifications`: ids and names only.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NotificationItem {
    pub id: NotificationId,
    pub event_id: EventId,
    pub listener: String,
    pub recipient_kind: String,
    pub recipient_id: String,
    pub template: String,
    pub channel: String,
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
