//! The recorded trail of one event that [`super::explain`] shows: its custody (each listener start
//! and whether its receipt settled it), the rejections of deliveries that claimed its id, and its
//! outbox row's history. One function per record, each reading one table, so a change of where a
//! fact is kept (e.g. a cheaper per-event custody record instead of `listener_starts`) changes one
//! function here and nothing in the explain view.
//!
//! Invariants: ids, listener names, codes, counters and times only; each read is bounded by
//! [`super::explain::MAX_ROWS`].

use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;
use serde::Serialize;

use super::explain::MAX_ROWS;
use crate::db::sql;
use crate::ids::{EventId, WorkspaceId};

/// One listener start of an event and where its custody stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Custody {
    pub listener: String,
    pub started_at: DateTime<Utc>,
    pub transport_message_id: Option<String>,
    /// When the listener's receipt settled the start (`None`: still in custody).
    pub settled_at: Option<DateTime<Utc>>,
    /// How often the custody reconciler started it again, and when it last did.
    pub restarts: i32,
    pub restarted_at: Option<DateTime<Utc>>,
    /// When the reconciler gave up and handed the pair to operators.
    pub stuck_at: Option<DateTime<Utc>>,
}

/// Custody is kept in two places (V13): a pair that needed its own row (a partial attempt, a restart
/// by the reconciler) is in `listener_starts`; every other start of a dispatched row is on the outbox
/// row itself — still `awaiting` until its receipt, then known by that receipt. Both read here, with
/// the dispatch time as the start time of the per-event record.
const CUSTODY: &str = "\
    SELECT listener, started_at, transport_message_id, settled_at, restarts, restarted_at, stuck_at \
    FROM listener_starts WHERE event_id = $1 \
    UNION ALL \
    SELECT a.listener, o.dispatched_at, NULL, NULL, 0, NULL, NULL \
    FROM event_outbox o CROSS JOIN LATERAL unnest(o.awaiting) AS a (listener) \
    WHERE o.event_id = $1 AND NOT EXISTS \
        (SELECT 1 FROM listener_starts s WHERE s.event_id = o.event_id AND s.listener = a.listener) \
    UNION ALL \
    SELECT r.listener, o.dispatched_at, NULL, r.received_at, 0, NULL, NULL \
    FROM listener_receipts r JOIN event_outbox o ON o.event_id = r.event_id \
    WHERE r.event_id = $1 AND o.dispatched_at IS NOT NULL AND NOT EXISTS \
        (SELECT 1 FROM listener_starts s WHERE s.event_id = r.event_id AND s.listener = r.listener) \
    ORDER BY 1 LIMIT $2";

/// Every start of `event_id` with its custody state, from both custody records.
pub async fn custody_of(
    client: &impl GenericClient,
    event_id: EventId,
) -> Result<Vec<Custody>, tokio_postgres::Error> {
    let rows = sql::query(client, CUSTODY, &[&event_id, &MAX_ROWS]).await?;
    Ok(rows
        .iter()
        .map(|row| Custody {
            listener: row.get(0),
            started_at: row.get(1),
            transport_message_id: row.get(2),
            settled_at: row.get(3),
            restarts: row.get(4),
            restarted_at: row.get(5),
            stuck_at: row.get(6),
        })
        .collect())
}

/// The recorded rejections of deliveries that claimed `event_id`, filed under `workspace`, oldest
/// first (`listener_rejections`, V10).
pub async fn rejections_of(
    client: &impl GenericClient,
    workspace: WorkspaceId,
    event_id: EventId,
) -> Result<Vec<crate::listeners::rejections::RejectionRecord>, tokio_postgres::Error> {
    use crate::listeners::rejections::{list, RejectionFilter};
    let filter =
        RejectionFilter { workspace: Some(workspace), event_id: Some(event_id), ..Default::default() };
    let mut newest_first = list(client, &filter, MAX_ROWS).await?;
    newest_first.reverse();
    Ok(newest_first)
}

/// One recorded transition of an outbox row (V10's trigger): a failure, a hold, a burial, a lease
/// takeover.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HistoryEntry {
    pub at: DateTime<Utc>,
    pub kind: String,
    pub status_before: String,
    pub status: String,
    /// The attempt this transition ended (1 = the first).
    pub attempt: i32,
    pub error_code: Option<String>,
    pub claimed_by: Option<String>,
    /// Takeovers: the dispatcher whose lease expired.
    pub previous_claimed_by: Option<String>,
}

const HISTORY: &str = "SELECT at, kind, status_before, status_after, attempt, error_code, claimed_by, \
     previous_claimed_by FROM outbox_history WHERE event_id = $1 ORDER BY at, id LIMIT $2";

/// The recorded history of `event_id`'s outbox row (`outbox_history`, V10), oldest first.
pub async fn history_of(
    client: &impl GenericClient,
    event_id: EventId,
) -> Result<Vec<HistoryEntry>, tokio_postgres::Error> {
    let rows = sql::query(client, HISTORY, &[&event_id, &MAX_ROWS]).await?;
    Ok(rows
        .iter()
        .map(|row| HistoryEntry {
            at: row.get(0),
            kind: row.get(1),
            status_before: row.get(2),
            status: row.get(3),
            attempt: row.get(4),
            error_code: row.get(5),
            claimed_by: row.get(6),
            previous_claimed_by: row.get(7),
        })
        .collect())
}
