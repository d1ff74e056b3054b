//! The schedule view: a workspace's appointments starting in a bounded window, ordered by
//! (`starts_at`, id) and paged by that keyset, optionally narrowed to one practitioner, one patient
//! and one status.
//!
//! Invariants:
//! - The window is half-open (`from` ≤ `starts_at` < `to`), non-empty and at most [`MAX_WINDOW_DAYS`]
//!   days long, so one request never walks an unbounded range.
//! - Each way of narrowing has its own statement and its own index (`appointments_schedule_idx`,
//!   `appointments_practitioner_schedule_idx`, `appointments_patient_schedule_idx`, V4): the keyset
//!   `(starts_at, id) > ($after, $after_id)` is the index range's start and `starts_at < $to` its end, so
//!   a page costs its own rows whatever page it is. The first page starts after (`from`, the nil id),
//!   which sorts before every real id.
//! - Rows are scoped by workspace in every statement.
//! - The statements are public so a test can `EXPLAIN` them under a generic plan and see the index.

use chrono::{DateTime, Duration, Utc};
use deadpool_postgres::GenericClient;

use super::{repo, Appointment, AppointmentStatus};
use crate::db::sql;
use crate::domain::input::FieldError;
use crate::ids::{AppointmentId, PatientId, PractitionerId, WorkspaceId};

/// The longest window one schedule request may cover.
pub const MAX_WINDOW_DAYS: i64 = 31;

/// Whole workspace: `appointments_schedule_idx`.
pub const IN_WORKSPACE: &str = "\
SELECT id, workspace_id, patient_id, practitioner_id, starts_at, ends_at, status, reason,
       cancellation_reason, version, created_at, updated_at, patient_erased
FROM appointments
WHERE workspace_id = $1 AND (starts_at, id) > ($2, $3) AND starts_at < $4
  AND ($5::text IS NULL OR status = $5)
ORDER BY starts_at, id
LIMIT $6";

/// One practitioner (and optionally one patient of theirs): `appointments_practitioner_schedule_idx`.
pub const OF_PRACTITIONER: &str = "\
SELECT id, workspace_id, patient_id, practitioner_id, starts_at, ends_at, status, reason,
       cancellation_reason, version, created_at, updated_at, patient_erased
FROM appointments
WHERE workspace_id = $1 AND practitioner_id = $7 AND (starts_at, id) > ($2, $3) AND starts_at < $4
  AND ($5::text IS NULL OR status = $5) AND ($8::uuid IS NULL OR patient_id = $8)
ORDER BY starts_at, id
LIMIT $6";

/// One patient: `appointments_patient_schedule_idx`.
pub const OF_PATIENT: &str = "\
SELECT id, workspace_id, patient_id, practitioner_id, starts_at, ends_at, status, reason,
       cancellation_reason, version, created_at, updated_at, patient_erased
FROM appointments
WHERE workspace_id = $1 AND patient_id = $7 AND (starts_at, id) > ($2, $3) AND starts_at < $4
  AND ($5::text IS NULL OR status = $5)
ORDER BY starts_at, id
LIMIT $6";

/// A validated schedule request (without its page position).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    pub practitioner: Option<PractitionerId>,
    pub patient: Option<PatientId>,
    pub status: Option<AppointmentStatus>,
}

impl Schedule {
    /// `to` must be after `from` and at most [`MAX_WINDOW_DAYS`] later; the error names `to`.
    pub fn new(
        from: DateTime<Utc>,
        to: DateTime<Utc>,
        practitioner: Option<PractitionerId>,
        patient: Option<PatientId>,
        status: Option<AppointmentStatus>,
    ) -> Result<Self, FieldError> {
        if to <= from {
            return Err(FieldError::new("to", "must be after from"));
        }
        if to - from > Duration::days(MAX_WINDOW_DAYS) {
            return Err(FieldError::new("to", format!("must be at most {MAX_WINDOW_DAYS} days after from")));
        }
        Ok(Self { from, to, practitioner, patient, status })
    }

    pub fn from(&self) -> DateTime<Utc> {
        self.from
    }

    pub fn to(&self) -> DateTime<Utc> {
        self.to
    }

    /// Narrows the schedule to one patient (a patient token sees only its own appointments).
    pub fn only_patient(self, patient: PatientId) -> Self {
        Self { patient: Some(patient), ..self }
    }
}

/// Up to `limit` appointments of `schedule` after `after` (`None`: from the window's start).
pub async fn list(
    client: &impl GenericClient,
    workspace_id: WorkspaceId,
    schedule: &Schedule,
    after: Option<(DateTime<Utc>, AppointmentId)>,
    limit: i64,
) -> Result<Vec<Appointment>, tokio_postgres::Error> {
    let (after_at, after_id) =
        after.map_or((schedule.from, uuid::Uuid::nil()), |(at, id)| (at.max(schedule.from), id.uuid()));
    let status = schedule.status.map(AppointmentStatus::as_str);
    let rows = match (schedule.practitioner, schedule.patient) {
        (Some(practitioner), patient) => {
            sql::query(
                client,
                OF_PRACTITIONER,
                &[
                    &workspace_id,
                    &after_at,
                    &after_id,
                    &schedule.to,
                    &status,
                    &limit,
                    &practitioner,
                    &patient,
                ],
            )
            .await?
        }
        (None, Some(patient)) => {
            sql::query(
                client,
                OF_PATIENT,
                &[&workspace_id, &after_at, &after_id, &schedule.to, &status, &limit, &patient],
            )
            .await?
        }
        (None, None) => {
            sql::query(
                client,
                IN_WORKSPACE,
                &[&workspace_id, &after_at, &after_id, &schedule.to, &status, &limit],
            )
            .await?
        }
    };
    Ok(rows.iter().map(repo::from_row).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(raw: &str) -> DateTime<Utc> {
        raw.parse().unwrap()
    }

    #[test]
    fn window_must_be_non_empty_and_bounded() {
        let from = at("2030-01-01T00:00:00Z");
        assert!(Schedule::new(from, at("2030-02-01T00:00:00Z"), None, None, None).is_ok());
        let long = Schedule::new(from, at("2030-02-01T00:00:01Z"), None, None, None).unwrap_err();
        assert_eq!(long.field, "to");
        assert_eq!(Schedule::new(from, from, None, None, None).unwrap_err().field, "to");
        assert_eq!(
            Schedule::new(from, at("2029-12-31T00:00:00Z"), None, None, None).unwrap_err().field,
            "to"
        );
    }
}
