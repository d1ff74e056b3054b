//! Idle-dispatcher registration (`outbox_waiters`): a one-shot request for a wake-up.
//!
//! Invariants:
//! - A writer sends `NOTIFY clinic_outbox` only when its event append takes registrations away
//!   (`DELETE ... FOR UPDATE SKIP LOCKED`, in the append's one statement: see
//!   [`crate::events::store`]). So each registration costs one notifying commit, whatever the rate of
//!   writes: PostgreSQL serialises notifying commits through their WAL flush, and a registration
//!   that stayed would make every commit pay that.
//! - A writer never waits on another for a registration (SKIP LOCKED): the one taking it notifies at
//!   its commit, or gives it back by rolling back. The others' events are found by the dispatcher's
//!   claims after that wake-up, or by the re-scan that follows its next registration.
//! - A dispatcher registers only while its `LISTEN` is active, and only after a claim came back
//!   empty, then claims once more before waiting (the re-scan), so a commit that saw the
//!   registration always wakes it; commits that raced the registration are caught by that re-scan
//!   or the poll. It treats its registration as gone once it has received a notification, and
//!   unregisters when it stops (`dispatch::drain`, `dispatch::overlap`).
//! - Rows of dispatchers that died while registered are taken by the next writer (one needless
//!   NOTIFY), or removed by the next registration once older than [`STALE_AFTER_SECS`].

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

/// Registers (or refreshes) `dispatcher_id` as idle and listening: the next writer wakes it.
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
