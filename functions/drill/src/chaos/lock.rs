//! The lock fault: a listener blocked on a row lock past its session's `lock_timeout`. The run books
//! one appointment of its own and, before that booking commits, another session starts inserting the
//! practitioner's receipt for it and does not commit: the listener's receipt insert waits on that row
//! lock, its session gives up after `lock_timeout` (SQLSTATE 55P03, retryable `db_lock_timeout`),
//! and only that message is retried; once the blocker rolls back, the next delivery succeeds.

use std::time::{Duration, Instant};

use anyhow::Context;
use clinic_core::appointments::{self, NewAppointment};
use clinic_core::domain::values::TimeSlot;
use clinic_core::events::Envelope;
use clinic_core::ids::{PatientId, PractitionerId, WorkspaceId};
use clinic_core::listeners::Listener;

/// The listener the lock blocks.
pub const LOCKED_LISTENER: Listener = Listener::PractitionerScheduleChange;

/// A held lock: the blocker's open transaction (on its own connection) and the victim's event.
pub struct HeldLock {
    pub event: Envelope,
    pub held_since: Instant,
    blocker: tokio_postgres::Client,
}

/// Books the victim appointment through the real use case and takes the lock before it commits.
pub async fn take(
    url: &str,
    workspace: WorkspaceId,
    patient: PatientId,
    practitioner: PractitionerId,
) -> anyhow::Result<HeldLock> {
    let blocker = clinic_core::db::connect_single(url, None, None).await?;
    let owner_pool = clinic_core::db::connect_pool(url, 1, None)?;
    let mut owner = owner_pool.get().await?;
    let tx = owner.transaction().await?;
    let ctx = system_ctx(workspace);
    let starts = chrono::DateTime::parse_from_rfc3339("2039-01-02T09:00:00Z")?.to_utc();
    let slot = TimeSlot::new(starts, starts + chrono::Duration::minutes(30)).context("slot")?;
    let (_, event) =
        appointments::book(&tx, &ctx, NewAppointment::new(patient, practitioner, slot, None)).await?;
    blocker.batch_execute("BEGIN").await?;
    blocker
        .execute(
            "INSERT INTO listener_receipts (listener, event_id) VALUES ($1, $2)",
            &[&LOCKED_LISTENER.as_str(), &event.id],
        )
        .await?;
    tx.commit().await?;
    Ok(HeldLock { event, held_since: Instant::now(), blocker })
}

/// A use-case context of the run itself (actor `system`).
fn system_ctx(workspace_id: WorkspaceId) -> clinic_core::context::Ctx {
    use clinic_core::events::{Actor, Cause};
    use clinic_core::ids::{CorrelationId, RequestId};
    clinic_core::context::Ctx {
        workspace_id,
        cause: Cause {
            actor: Actor::System,
            correlation_id: CorrelationId::generate(),
            causation_id: RequestId::generate().into(),
            idempotency_key: None,
            trace: None,
        },
    }
}

impl HeldLock {
    /// Holds the lock at least `at_least`, then until `blocked()` says the listener hit its lock
    /// timeout (bounded by `bound`), and rolls the blocker back. Answers how long it was held and
    /// whether the listener was seen failing on it.
    pub async fn release_after<F, Fut>(
        self,
        at_least: Duration,
        bound: Duration,
        mut blocked: F,
    ) -> (Duration, bool)
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = bool>,
    {
        tokio::time::sleep_until(tokio::time::Instant::from_std(self.held_since + at_least)).await;
        let mut seen = blocked().await;
        while !seen && self.held_since.elapsed() < bound {
            tokio::time::sleep(Duration::from_millis(200)).await;
            seen = blocked().await;
        }
        let _ = self.blocker.batch_execute("ROLLBACK").await;
        (self.held_since.elapsed(), seen)
    }
}
