//! Operator tooling for deliveries: the row the listing behind `GET /v1/system/deliveries` (admin
//! role) and `clinic deliveries list` (CLI) answers ([`crate::operator::listing`] selects the rows). Retry and discard, single and bulk, are the lease queue's operator
//! actions, generic over the queue ([`crate::operator::queue::Notifications`]).
//!
//! Which statuses each action accepts, the 409 naming why (a `sent` delivery took effect, a `stale`
//! or `opted_out` one is never sent, a `sending` one is leased, a `discarded` one is final) and the
//! change (retry: `pending` now with a fresh attempt budget, same idempotency key; discard:
//! `discarded`) are the lease queue's operator rules, written once for every queue
//! ([`crate::lease::operator::NOTIFICATION_ACTIONS`]): retry and discard take `dead`, `no_contact`,
//! `retry` and `uncertain` deliveries.
//!
//! Invariants:
//! - Listings answer ids, names, statuses, counters, codes and times — never content.

use chrono::{DateTime, Utc};
use serde::Serialize;
use ulid::Ulid;

use crate::ids::{EventId, NotificationId, WorkspaceId};

/// One delivery as operators see it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(rename = "Delivery")]
pub struct DeliveryItem {
    pub id: NotificationId,
    pub workspace_id: WorkspaceId,
    pub event_id: EventId,
    pub listener: String,
    pub template: String,
    #[schemars(with = "super::RecipientKind")]
    pub recipient_kind: String,
    #[schemars(with = "crate::ids::UlidSchema")]
    pub recipient_id: String,
    /// auto until the sender chose from the recipient's contact data
    #[schemars(with = "super::StoredChannel")]
    pub channel: String,
    #[schemars(with = "super::DeliveryStatus")]
    pub status: String,
    #[schemars(range(min = 0))]
    pub attempts: i32,
    pub last_error_code: Option<String>,
    pub provider_message_id: Option<String>,
    pub available_at: DateTime<Utc>,
    pub sent_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
}

/// The columns of a [`DeliveryItem`] (from `notifications n`), as [`delivery_item`] reads them.
pub const LIST_COLUMNS: &str = "SELECT n.id, n.workspace_id, n.event_id, n.listener, n.template, \
         n.recipient_kind, n.recipient_id, n.channel, n.status, n.attempts, n.last_error_code, \
         n.provider_message_id, n.available_at, n.sent_at, n.created_at \
     FROM notifications n";

/// A row of [`LIST_COLUMNS`].
pub fn delivery_item(row: &tokio_postgres::Row) -> DeliveryItem {
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
}
