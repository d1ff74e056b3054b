//! Heartbeats (DESIGN.md §5f): an endpoint with nothing sent to it for `heartbeat_seconds` (per
//! endpoint, default 300, 0 = off) gets a signed heartbeat carrying its status and the number of its
//! last delivery, so a receiver tells an idle feed from a broken one and sees a gap at the tail of
//! its sequence within one heartbeat.
//!
//! Invariants:
//! - Sent by the scheduled sender step ([`super::WebhookSender::send_due_until`]: the housekeeping
//!   `webhooks` job, `clinic webhooks send`, `clinic dev`'s loop), only to enabled endpoints, with
//!   the same Standard Webhooks signature, SSRF guard and timeouts as a delivery.
//! - The claim ([`claim`]) moves the endpoint's heartbeat clock (`last_contact_at`) before the
//!   request, under `FOR UPDATE SKIP LOCKED`, so two senders never send the same heartbeat; every
//!   delivery attempt moves the clock too ([`super::store::record_health`]), so a busy endpoint gets
//!   none. A heartbeat is never retried: the next one is due one interval later.
//! - A heartbeat is not a delivery: it has no number of its own (no `sequence` attribute), no row
//!   and no attempt row; its `webhook-id` is a fresh ULID. It carries ids, counters and codes only.

use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;
use serde_json::{json, Value};

use super::sequence::Sequence;
use crate::contract::webhook_bodies::HeartbeatData;
use crate::db::sql;
use crate::ids::{WebhookEndpointId, WorkspaceId};

pub use crate::contract::webhook_bodies::HEARTBEAT_TYPE;

/// A heartbeat due for one endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Heartbeat {
    /// Its `webhook-id` (and CloudEvent `id`).
    pub id: ulid::Ulid,
    pub endpoint_id: WebhookEndpointId,
    pub workspace_id: WorkspaceId,
    pub url: String,
    /// The endpoint's last delivery number (0: none yet).
    pub last_sequence: Sequence,
    /// `active`, `error`, or `off` while the workspace's fan-out is paused (a disabled endpoint
    /// gets none).
    pub status: String,
    pub heartbeat_seconds: i32,
    /// The endpoint's body format ([`super::fhir`] or the CloudEvent below).
    pub payload_format: String,
    pub at: DateTime<Utc>,
}

/// Enabled endpoints whose heartbeat clock ran out, at most `$1`, oldest clock first; the clock is
/// moved now (the claim).
static CLAIM: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!(
        "UPDATE webhook_endpoints w SET last_contact_at = now() \
     FROM (SELECT id FROM webhook_endpoints \
           WHERE enabled AND heartbeat_seconds > 0 \
             AND COALESCE(last_contact_at, created_at) <= now() - heartbeat_seconds * interval '1 second' \
           ORDER BY COALESCE(last_contact_at, created_at) LIMIT $1 FOR UPDATE SKIP LOCKED) due \
     WHERE w.id = due.id \
     RETURNING w.id, w.workspace_id, w.url, w.last_sequence, {seen}, w.heartbeat_seconds, now(), \
       w.payload_format",
        seen = super::endpoints::STATUS_SEEN
    )
});

/// Claims the heartbeats due now (at most `batch`).
pub async fn claim(client: &impl GenericClient, batch: i64) -> Result<Vec<Heartbeat>, tokio_postgres::Error> {
    let rows = sql::query(client, &CLAIM, &[&batch]).await?;
    Ok(rows
        .iter()
        .map(|row| Heartbeat {
            id: ulid::Ulid::generate(),
            endpoint_id: row.get(0),
            workspace_id: row.get(1),
            url: row.get(2),
            last_sequence: Sequence(row.get(3)),
            status: row.get(4),
            heartbeat_seconds: row.get(5),
            at: row.get(6),
            payload_format: row.get(7),
        })
        .collect())
}

/// The heartbeat as a CloudEvent (`source` as the events' of its workspace).
pub fn to_cloud_event(heartbeat: &Heartbeat, source_prefix: &str) -> Value {
    json!({
        "specversion": crate::contract::cloudevent::SPEC_VERSION,
        "id": heartbeat.id.to_string(),
        "source": crate::contract::cloudevent::event_source(source_prefix, heartbeat.workspace_id),
        "type": HEARTBEAT_TYPE,
        "subject": heartbeat.endpoint_id.to_string(),
        "time": heartbeat.at,
        "datacontenttype": crate::contract::cloudevent::DATA_CONTENT_TYPE,
        "dataschema": crate::contract::webhook_bodies::heartbeat_dataschema(),
        "tenantid": heartbeat.workspace_id.to_string(),
        "data": HeartbeatData {
            endpoint_id: heartbeat.endpoint_id.to_string(),
            status: heartbeat.status.clone(),
            last_sequence: heartbeat.last_sequence.0,
            heartbeat_seconds: heartbeat.heartbeat_seconds,
        },
    })
}
