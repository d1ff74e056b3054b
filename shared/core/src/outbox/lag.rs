//! The outbox's lag gauges: how long the oldest due row has waited, the oldest live row's age and
//! the oldest unsettled listener start (custody). Read by the dispatcher's metrics, the operator's
//! stats and the drills.
//!
//! Invariants:
//! - Each gauge answers from a partial index over the live rows (`event_outbox_due_idx`, the custody
//!   indexes), so it costs the same however much history the table holds; 0 when there is nothing
//!   to measure.

use deadpool_postgres::GenericClient;

use crate::db::sql;

/// How long the oldest due outbox row has waited, in milliseconds: `now() − min(available_at)` over
/// rows a claim would take now (`pending`, `retry` whose backoff ended, `claimed` whose lease
/// expired); 0 when nothing is due. This is the dispatch lag; it answers from the partial index
/// `event_outbox_due_idx`, however much history the table holds.
pub async fn oldest_pending_age_ms(client: &impl GenericClient) -> Result<i64, tokio_postgres::Error> {
    let row = sql::query_one(client, OLDEST_DUE, &[]).await?;
    Ok(row.get::<_, i64>(0).max(0))
}

const OLDEST_DUE: &str = concat!(
    "SELECT coalesce((extract(epoch FROM now() - min(available_at)) * 1000)::bigint, 0) \
     FROM event_outbox WHERE ",
    crate::outbox_due_predicate!()
);

/// The three gauges in one round trip: oldest due (since `available_at`, from the due index), oldest
/// live (since `created_at`; a scan of the live rows through the same partial index — the backlog,
/// not the history) and oldest unsettled start (the view `listener_custody`: the partial indexes
/// `listener_starts_unsettled_idx` and `event_outbox_awaiting_idx`, pairs in custody only).
const AGES: &str = concat!(
    "SELECT coalesce((extract(epoch FROM now() - min(available_at) FILTER (WHERE available_at <= now())) \
                      * 1000)::bigint, 0), \
            coalesce((extract(epoch FROM now() - min(created_at)) * 1000)::bigint, 0), \
            (SELECT coalesce((extract(epoch FROM now() - min(s.started_at)) * 1000)::bigint, 0) \
             FROM listener_custody s WHERE NOT EXISTS \
                 (SELECT 1 FROM listener_receipts r WHERE r.listener = s.listener AND r.event_id = s.event_id)) \
     FROM event_outbox WHERE ",
    crate::outbox_live_predicate!()
);

/// The lag gauges (milliseconds, 0 when there is nothing to measure).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Ages {
    pub oldest_pending_ms: i64,
    pub oldest_live_ms: i64,
    pub oldest_unsettled_ms: i64,
}

/// Reads [`Ages`] in one statement.
pub async fn read_ages(client: &impl GenericClient) -> Result<Ages, tokio_postgres::Error> {
    let row = sql::query_one(client, AGES, &[]).await?;
    Ok(Ages {
        oldest_pending_ms: row.get::<_, i64>(0).max(0),
        oldest_live_ms: row.get::<_, i64>(1).max(0),
        oldest_unsettled_ms: row.get::<_, i64>(2).max(0),
    })
}
