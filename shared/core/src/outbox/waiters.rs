//! Idle-dispatcher registration (`outbox_waiters`).
//!
//! Writers send `NOTIFY clinic_outbox` only while some row exists here (see
//! [`crate::events::store`]), so a pipeline with a backlog pays nothing for wake-ups. A dispatcher
//! registers only after its `LISTEN` is active, then re-scans once before waiting; it stays
//! registered while it keeps up and unregisters when a burst meets a backlog (a full claim) and when
//! it stops (`dispatch::drain`). Rows of dispatchers that died while registered are removed by the
//! next registration once they are older than [`STALE_AFTER_SECS`] (until then they merely cause
//! unneeded NOTIFYs).

use deadpool_postgres::GenericClient;

use crate::db::sql;

/// A registration older than this (seconds) is presumed to belong to a dead dispatcher.
pub const STALE_AFTER_SECS: f64 = 300.0;

const REGISTER: &str = "WITH stale AS ( \
         DELETE FROM outbox_waiters \
         WHERE dispatcher_id <> $1 AND since < now() - $2::float8 * interval '1 second' \
     ) \
     INSERT INTO outbox_waiters (dispatcher_id, since) VALUES ($1, now()) \
     ON CONFLICT (dispatcher_id) DO UPDATE SET since = now()";

const UNREGISTER: &str = "DELETE FROM outbox_waiters WHERE dispatcher_id = $1";

/// Registers (or refreshes) `dispatcher_id` as idle and listening.
pub async fn register(client: &impl GenericClient, dispatcher_id: &str) -> Result<(), tokio_postgres::Error> {
    sql::execute(client, REGISTER, &[&dispatcher_id, &STALE_AFTER_SECS]).await.map(drop)
}

/// Removes `dispatcher_id`'s registration: it is busy (or stopping) and needs no wake-ups.
pub async fn unregister(
    client: &impl GenericClient,
    dispatcher_id: &str,
) -> Result<(), tokio_postgres::Error> {
    sql::execute(client, UNREGISTER, &[&dispatcher_id]).await.map(drop)
}
