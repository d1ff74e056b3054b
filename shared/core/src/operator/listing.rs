//! The delivery queues listed by the bulk actions' filter: a list shows exactly the rows a bulk
//! action with the same [`RowFilter`] would consider (in any status), so what an operator sees is
//! what a bulk retry or discard would touch.
//!
//! Invariants:
//! - The conditions are the queue's own ([`OperatedQueue::conditions`], the code the bulk actions
//!   run), scoped to the caller's workspace over HTTP; the rows are read by the queue's module
//!   ([`crate::delivery::admin::delivery_item`], [`crate::webhooks::store::delivery_item`]).
//! - Ids, statuses, codes, counters and times only.
//! - Here rather than beside each queue because the filter belongs to the operator layer, which
//!   imports the queues and not the other way round.

use deadpool_postgres::GenericClient;

use super::{Notifications, OperatedQueue, RowFilter, WebhookDeliveries};
use crate::db::sql;
use crate::delivery::{admin, DeliveryStatus};
use crate::error::DomainResult;
use crate::ids::{EventId, NotificationId, WebhookEndpointId, WorkspaceId};
use crate::lease::operator::WEBHOOK_ACTIONS;
use crate::webhooks::store;

/// Up to `limit` notifications, newest first, filtered by workspace (always over HTTP) and status,
/// strictly older than `before` (keyset on the id).
pub async fn notifications(
    client: &impl GenericClient,
    workspace: Option<WorkspaceId>,
    status: Option<DeliveryStatus>,
    before: Option<NotificationId>,
    limit: i64,
) -> Result<Vec<admin::DeliveryItem>, tokio_postgres::Error> {
    let filter = RowFilter { status: status.map(DeliveryStatus::as_str), ..RowFilter::default() };
    notifications_filtered(client, workspace, &filter, before, limit).await
}

/// Up to `limit` notifications, newest first, selected by [`Notifications`]' filter (status, age or
/// period, error code, listener, template), strictly older than `before`.
pub async fn notifications_filtered(
    client: &impl GenericClient,
    workspace: Option<WorkspaceId>,
    filter: &RowFilter,
    before: Option<NotificationId>,
    limit: i64,
) -> Result<Vec<admin::DeliveryItem>, tokio_postgres::Error> {
    let mut query = Notifications::conditions(filter, workspace, &Notifications::ACTIONS.queue.statuses());
    if let Some(before) = before {
        query.and("n.id < $", before);
    }
    let limit = query.bind(limit);
    let statement =
        format!("{} {} ORDER BY n.id DESC LIMIT {limit}", admin::LIST_COLUMNS, query.where_clause());
    let rows = sql::query(client, &statement, &query.params()).await?;
    Ok(rows.iter().map(admin::delivery_item).collect())
}

/// A workspace's webhook deliveries, newest first: by endpoint, event and status when given (a
/// status the queue does not have matches no row).
pub async fn webhook_deliveries(
    client: &impl GenericClient,
    workspace: WorkspaceId,
    endpoint: Option<WebhookEndpointId>,
    event: Option<EventId>,
    status: Option<&str>,
    limit: i64,
) -> DomainResult<Vec<store::DeliveryItem>> {
    let known = status.map(|raw| WEBHOOK_ACTIONS.queue.statuses().into_iter().find(|name| *name == raw));
    if let Some(None) = known {
        return Ok(Vec::new());
    }
    let filter = RowFilter { status: known.flatten(), endpoint_id: endpoint, ..RowFilter::default() };
    webhook_deliveries_filtered(client, workspace, &filter, event, limit).await
}

/// A workspace's webhook deliveries, newest first, selected by [`WebhookDeliveries`]' filter
/// (status, age or period, error code, endpoint, event type) and by event when given.
pub async fn webhook_deliveries_filtered(
    client: &impl GenericClient,
    workspace: WorkspaceId,
    filter: &RowFilter,
    event: Option<EventId>,
    limit: i64,
) -> DomainResult<Vec<store::DeliveryItem>> {
    let mut query = WebhookDeliveries::conditions(filter, Some(workspace), &WEBHOOK_ACTIONS.queue.statuses());
    if let Some(event) = event {
        query.and("d.event_id = $", event);
    }
    let limit = query.bind(limit);
    let statement = format!(
        "{} {} ORDER BY d.created_at DESC, d.id DESC LIMIT {limit}",
        store::LIST_COLUMNS,
        query.where_clause()
    );
    let rows = sql::query(client, &statement, &query.params()).await?;
    Ok(rows.iter().map(store::delivery_item).collect())
}
