//! The record of rejected deliveries (`listener_rejections`, V10): what [`super::pointer`] refused,
//! kept so that operators can see it (`explain`, `GET /v1/system/rejections`, `clinic rejections`).
//!
//! Invariants:
//! - Written only on the rejection path, after the rejected transaction rolled back, on the same
//!   connection ([`record`]): the happy path pays nothing. A failed write is logged and does not hide
//!   the rejection (the log line and the metric are still the primary signal).
//! - Ids and codes only: the event id AS SENT (a forged id that matches no event is recorded under
//!   the id it claimed), the listener, the reason code, the transport and its message id, the time.
//! - Filed under the stored event's workspace when the id exists, else under the claimed one, so a
//!   message that claims another tenant never shows up in that tenant's listing.
//! - Bounded: the retention sweep deletes rows older than `CLINIC_REJECTION_RETENTION_HOURS`
//!   (docs/retention.md); reads are bounded by their `limit`.

use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;
use serde::Serialize;

use super::pointer::{Delivery, Rejection};
use crate::db::sql;
use crate::ids::{EventId, RejectionId, WorkspaceId};

/// The longest transport message id kept (SQS ids are 36 characters).
const MAX_MESSAGE_ID: usize = 200;

const RECORD: &str = "INSERT INTO listener_rejections \
         (id, event_id, workspace_id, listener, reason, transport, message_id) \
     SELECT $1, $2, coalesce((SELECT e.workspace_id FROM events e WHERE e.id = $2), $3), $4, $5, $6, $7";

/// Records one rejection (best effort: a failure is logged, never returned).
pub async fn record(client: &impl GenericClient, delivery: &Delivery<'_>, rejection: Rejection) {
    let message_id: Option<String> = delivery.message_id.map(|id| id.chars().take(MAX_MESSAGE_ID).collect());
    let result = sql::execute(
        client,
        RECORD,
        &[
            &RejectionId::generate(),
            &delivery.envelope.id,
            &delivery.envelope.workspace_id,
            &delivery.listener.as_str(),
            &rejection.as_str(),
            &delivery.transport,
            &message_id,
        ],
    )
    .await;
    if let Err(error) = result {
        tracing::warn!(
            event_id = %delivery.envelope.id,
            listener = delivery.listener.as_str(),
            code = rejection.as_str(),
            sqlstate = error.code().map(|c| c.code()).unwrap_or("connection"),
            "the rejection could not be recorded (it was logged and counted)"
        );
    }
}

/// One recorded rejection.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(inline, deny_unknown_fields)]
pub struct RejectionRecord {
    pub id: RejectionId,
    /// The event id the message claimed (it may match no event)
    pub event_id: EventId,
    pub workspace_id: WorkspaceId,
    pub listener: String,
    #[schemars(with = "Rejection")]
    pub reason: String,
    pub transport: String,
    pub message_id: Option<String>,
    pub rejected_at: DateTime<Utc>,
}

/// What to list: newest first, within a workspace (always over HTTP), of one event, before a cursor.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RejectionFilter {
    pub workspace: Option<WorkspaceId>,
    pub event_id: Option<EventId>,
    pub reason: Option<Rejection>,
    /// Keyset: only rows with a smaller id (ids are ULIDs, so older).
    pub before: Option<RejectionId>,
}

const LIST: &str = "SELECT id, event_id, workspace_id, listener, reason, transport, message_id, rejected_at \
     FROM listener_rejections \
     WHERE ($1::uuid IS NULL OR workspace_id = $1) AND ($2::uuid IS NULL OR event_id = $2) \
       AND ($3::text IS NULL OR reason = $3) AND ($4::uuid IS NULL OR id < $4) \
     ORDER BY id DESC LIMIT $5";

/// Lists recorded rejections, newest first, at most `limit` (1–1000).
pub async fn list(
    client: &impl GenericClient,
    filter: &RejectionFilter,
    limit: i64,
) -> Result<Vec<RejectionRecord>, tokio_postgres::Error> {
    let reason = filter.reason.map(Rejection::as_str);
    let limit = limit.clamp(1, 1000);
    let rows =
        sql::query(client, LIST, &[&filter.workspace, &filter.event_id, &reason, &filter.before, &limit])
            .await?;
    Ok(rows
        .iter()
        .map(|row| RejectionRecord {
            id: row.get(0),
            event_id: row.get(1),
            workspace_id: row.get(2),
            listener: row.get(3),
            reason: row.get(4),
            transport: row.get(5),
            message_id: row.get(6),
            rejected_at: row.get(7),
        })
        .collect())
}
