//! Appointment reminders: a scheduled job that emits `appointment.reminder_due` for booked
//! appointments starting within the lead time; the `patient_reminder` listener sends the reminder.
//!
//! Entry points: the [`Reminders`] job (the housekeeping Lambda's `reminders` mode) and [`run`]
//! (`clinic reminders run`), with [`ReminderConfig::read`] for the lead time.
//!
//! Invariants:
//! - Exactly once per (appointment, start time): in ONE transaction per appointment, the job locks
//!   the appointment, re-checks it (still booked, same start, still within the lead time), inserts
//!   `appointment_reminders (appointment_id, starts_at)` with `ON CONFLICT DO NOTHING`, and only when
//!   that insert wins appends the event (through [`crate::events::store::append`]) and records its id
//!   on the reminder row. Two overlapping runs serialise on the reminder row's primary key: the
//!   second waits for the first to commit, then sees the conflict and writes nothing. A repeated run
//!   finds the reminder row and does nothing.
//! - A reschedule (new `starts_at`) is a new key, so the reminder is armed again; moving an
//!   appointment back to a start time that was already reminded does not remind twice.
//! - The event is emitted with actor `system`, a fresh correlation id per run and causation = the
//!   run's id; its `resourceVersion` is the appointment's current version, so the listener skips a
//!   reminder that a later change made stale.
//! - Logs carry ids and counts only.

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use deadpool_postgres::Pool;
use serde::Serialize;
use ulid::Ulid;

use super::job::{too_close, Job, JobError, JobKind, JobReport};
use crate::appointments::{self, AppointmentStatus};
use crate::config::{ConfigError, Env};
use crate::db::sql;
use crate::error::DomainError;
use crate::events::store::{append, NewEvent};
use crate::events::{Actor, Cause, EventType, ResourceType};
use crate::ids::{AppointmentId, CausationId, CorrelationId, EventId, WorkspaceId};

/// Reminder settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReminderConfig {
    /// `CLINIC_REMINDER_LEAD_HOURS` (default 24, 1–720): remind this long before the start.
    pub lead: Duration,
}

impl Default for ReminderConfig {
    fn default() -> Self {
        Self { lead: Duration::from_secs(24 * 3600) }
    }
}

impl ReminderConfig {
    pub fn read(env: &Env) -> Result<Self, ConfigError> {
        Ok(Self { lead: Duration::from_secs(env.bounded("CLINIC_REMINDER_LEAD_HOURS", 24, 1..=720)? * 3600) })
    }
}

/// What one run did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReminderReport {
    /// The run's id: the causation id of every event it emitted.
    pub run_id: Ulid,
    pub correlation_id: CorrelationId,
    /// `appointment.reminder_due` events emitted.
    pub emitted: usize,
    /// Candidates another run reminded first, or that changed before they could be locked.
    pub skipped: usize,
    /// The run stopped before its deadline with candidates left (the next run takes them).
    pub stopped_at_deadline: bool,
}

/// Candidates per query.
const BATCH: i64 = 200;

const CANDIDATES: &str = "SELECT a.id, a.workspace_id, a.starts_at FROM appointments a \
     WHERE a.status = 'booked' AND a.starts_at > $1 AND a.starts_at <= $2 \
       AND NOT EXISTS (SELECT 1 FROM appointment_reminders r \
                       WHERE r.appointment_id = a.id AND r.starts_at = a.starts_at) \
       AND ($3::uuid IS NULL OR a.id > $3) \
     ORDER BY a.id LIMIT $4";

/// Claims the (appointment, start) pair for this run; the event id is filled in once it exists.
const CLAIM_REMINDER: &str = "INSERT INTO appointment_reminders (appointment_id, starts_at, event_id) \
     VALUES ($1, $2, $3) ON CONFLICT (appointment_id, starts_at) DO NOTHING";

const RECORD_EVENT: &str =
    "UPDATE appointment_reminders SET event_id = $3 WHERE appointment_id = $1 AND starts_at = $2";

/// Emits `appointment.reminder_due` for every booked appointment starting in `(now, now + lead]`
/// that has not been reminded for its current start time. Returns what it did. The run is one
/// `reminders.run` span, whose trace its events keep (`events.traceparent`), so a reminder's trace
/// starts at the cron run that emitted it.
#[tracing::instrument(skip_all, name = "reminders.run")]
pub async fn run(pool: &Pool, lead: Duration, now: DateTime<Utc>) -> Result<ReminderReport, DomainError> {
    run_until(pool, lead, now, None).await
}

/// The reminders job ([`run_until`] with its config), run by the housekeeping Lambda's
/// `reminders` mode.
#[derive(Debug, Clone)]
pub struct Reminders {
    pub pool: Pool,
    pub config: ReminderConfig,
}

#[async_trait::async_trait]
impl Job for Reminders {
    fn kind(&self) -> JobKind {
        JobKind::Reminders
    }

    async fn run(&self, deadline: Option<Instant>) -> Result<JobReport, JobError> {
        run_until(&self.pool, self.config.lead, crate::domain::values::now(), deadline)
            .await
            .map(JobReport::Reminders)
            .map_err(|error| JobError::new(JobKind::Reminders, error))
    }
}

/// [`run`], starting no appointment's transaction once `deadline` has passed (one appointment is
/// one short transaction, within the caller's margin); the report says when it stopped early.
pub async fn run_until(
    pool: &Pool,
    lead: Duration,
    now: DateTime<Utc>,
    deadline: Option<Instant>,
) -> Result<ReminderReport, DomainError> {
    let lead = chrono::Duration::from_std(lead).unwrap_or(chrono::Duration::MAX);
    let until = now.checked_add_signed(lead).unwrap_or(DateTime::<Utc>::MAX_UTC);
    let run_id = crate::ids::new_ulid();
    let cause = Cause {
        actor: Actor::System,
        correlation_id: CorrelationId::generate(),
        causation_id: CausationId(run_id),
        idempotency_key: None,
        trace: Some(
            crate::telemetry::spans::traceparent_of(&tracing::Span::current())
                .unwrap_or_else(crate::telemetry::TraceParent::generate),
        ),
    };
    let mut report = ReminderReport {
        run_id,
        correlation_id: cause.correlation_id,
        emitted: 0,
        skipped: 0,
        stopped_at_deadline: false,
    };
    let mut client = pool.get().await?;
    let mut after: Option<AppointmentId> = None;
    'batches: loop {
        let rows = sql::query(&client, CANDIDATES, &[&now, &until, &after, &BATCH]).await?;
        for row in &rows {
            if too_close(deadline, Duration::ZERO) {
                report.stopped_at_deadline = true;
                break 'batches;
            }
            let id: AppointmentId = row.get(0);
            let workspace_id: WorkspaceId = row.get(1);
            let starts_at: DateTime<Utc> = row.get(2);
            let tx = client.transaction().await?;
            match remind(&tx, &cause, workspace_id, id, starts_at, now, until).await? {
                Some(event_id) => {
                    tx.commit().await?;
                    report.emitted += 1;
                    tracing::info!(run_id = %run_id, appointment_id = %id, event_id = %event_id, "reminder due emitted");
                }
                None => {
                    tx.rollback().await?;
                    report.skipped += 1;
                }
            }
            after = Some(id);
        }
        if (rows.len() as i64) < BATCH {
            break;
        }
    }
    tracing::info!(run_id = %run_id, emitted = report.emitted, skipped = report.skipped, "reminders run done");
    Ok(report)
}

/// One appointment, on its own transaction: lock, re-check, claim the reminder, append the event.
/// `None` when another run reminded it first or it no longer qualifies.
async fn remind(
    tx: &crate::db::Tx<'_>,
    cause: &Cause,
    workspace_id: WorkspaceId,
    id: AppointmentId,
    starts_at: DateTime<Utc>,
    now: DateTime<Utc>,
    until: DateTime<Utc>,
) -> Result<Option<EventId>, DomainError> {
    let Some(appointment) = appointments::repo::lock(tx, workspace_id, id).await? else {
        return Ok(None);
    };
    let qualifies = appointment.status == AppointmentStatus::Booked
        && appointment.starts_at == starts_at
        && appointment.starts_at > now
        && appointment.starts_at <= until;
    if !qualifies {
        return Ok(None);
    }
    // Nobody reads a reminder row before its transaction commits, and it commits with the real id.
    let placeholder = uuid::Uuid::nil();
    let claimed = sql::execute(tx, CLAIM_REMINDER, &[&id, &appointment.starts_at, &placeholder]).await?;
    if claimed == 0 {
        return Ok(None);
    }
    let event = append(
        tx,
        cause,
        NewEvent {
            event_type: EventType::AppointmentReminderDue,
            workspace_id,
            resource_id: id.ulid(),
            resource_version: appointment.version,
            occurred_at: now,
            also_links: vec![
                (ResourceType::Patient, appointment.patient_id.ulid()),
                (ResourceType::Practitioner, appointment.practitioner_id.ulid()),
            ],
            changed_fields: None,
        },
    )
    .await?;
    sql::execute(tx, RECORD_EVENT, &[&id, &appointment.starts_at, &event.id]).await?;
    Ok(Some(event.id))
}
