//! One interface for every housekeeping job (after River's maintenance services, which all start
//! through one interface): a [`Job`] has a [`JobKind`] (its stable name) and runs once within a
//! deadline, answering one [`JobReport`] or one [`JobError`].
//!
//! Invariants:
//! - The kinds are a fieldless enum with stable names ([`JobKind::as_str`], [`JobKind::parse`]):
//!   the housekeeping Lambda's `detail.mode` and `CLINIC_DISPATCH_MODE` name a job by them.
//! - [`Job::run`] is bounded by its deadline: a job starts no unit of work (one transaction, one
//!   send step, one sweep statement) that it cannot finish before it, and says in its report when it
//!   stopped early for that reason. `None`: no deadline (the CLI). The caller keeps its own margin
//!   (the Lambda: its invocation deadline minus `DEADLINE_MARGIN`).
//! - Every job keeps the shared rules of [`super`]: safe to repeat, overlap and stop anywhere; ids
//!   and counts only in logs and reports.
//! - A job owns what it needs (a pool, its config, its sender); jobs are built once per process
//!   ([`Jobs`]) and run many times.

use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use serde::Serialize;

use super::reconcile::ReconcileReport;
use super::reminders::ReminderReport;
use super::retention::SweepReport;

macro_rules! kinds {
    ($($variant:ident => $name:literal;)+) => {
        /// The housekeeping jobs, by stable name.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum JobKind {
            $($variant,)+
        }

        impl JobKind {
            pub const ALL: &'static [JobKind] = &[$(JobKind::$variant,)+];

            pub const fn as_str(self) -> &'static str {
                match self {
                    $(JobKind::$variant => $name,)+
                }
            }

            pub fn parse(name: &str) -> Option<JobKind> {
                match name {
                    $($name => Some(JobKind::$variant),)+
                    _ => None,
                }
            }
        }
    };
}

kinds! {
    Reminders => "reminders";
    Sweep => "sweep";
    Deliver => "deliver";
    Reconcile => "reconcile";
    Webhooks => "webhooks";
}

impl std::fmt::Display for JobKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What one run of a job did: the job's own counts, tagged with its name (`"job": "sweep"`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "job", rename_all = "lowercase")]
pub enum JobReport {
    Reminders(ReminderReport),
    Sweep(SweepReport),
    Deliver(crate::delivery::SendReport),
    Reconcile(ReconcileReport),
    Webhooks(crate::webhooks::WebhookReport),
}

impl JobReport {
    pub fn kind(&self) -> JobKind {
        match self {
            JobReport::Reminders(_) => JobKind::Reminders,
            JobReport::Sweep(_) => JobKind::Sweep,
            JobReport::Deliver(_) => JobKind::Deliver,
            JobReport::Reconcile(_) => JobKind::Reconcile,
            JobReport::Webhooks(_) => JobKind::Webhooks,
        }
    }
}

/// Why a run failed as a whole (per-row failures are counts in the report). The text holds ids and
/// codes only, like the errors it wraps.
#[derive(Debug, thiserror::Error)]
#[error("{job} failed: {source}")]
pub struct JobError {
    pub job: JobKind,
    #[source]
    pub source: Box<dyn std::error::Error + Send + Sync>,
}

impl JobError {
    pub fn new(job: JobKind, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        Self { job, source: Box::new(source) }
    }
}

/// A housekeeping job (see the module invariants).
#[async_trait]
pub trait Job: Send + Sync {
    fn kind(&self) -> JobKind;

    /// Runs once, done by `deadline` (`None`: unbounded).
    async fn run(&self, deadline: Option<Instant>) -> Result<JobReport, JobError>;
}

/// The jobs one process can run, built once.
#[derive(Clone, Default)]
pub struct Jobs(Vec<Arc<dyn Job>>);

impl std::fmt::Debug for Jobs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.0.iter().map(|job| job.kind())).finish()
    }
}

impl Jobs {
    /// Adds `job`, replacing one of the same kind.
    pub fn with(mut self, job: impl Job + 'static) -> Self {
        self.0.retain(|held| held.kind() != job.kind());
        self.0.push(Arc::new(job));
        self
    }

    /// The job of `kind`, when this process has it (`deliver` and `webhooks` need their senders).
    pub fn get(&self, kind: JobKind) -> Option<&Arc<dyn Job>> {
        self.0.iter().find(|job| job.kind() == kind)
    }
}

/// True when `needed` from now would reach `deadline` (with `needed` zero: the deadline has come;
/// never, without one).
pub(crate) fn too_close(deadline: Option<Instant>, needed: std::time::Duration) -> bool {
    deadline.is_some_and(|deadline| Instant::now().checked_add(needed).is_none_or(|done| done >= deadline))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_round_trip_by_name() {
        for kind in JobKind::ALL {
            assert_eq!(JobKind::parse(kind.as_str()), Some(*kind));
        }
        assert_eq!(JobKind::parse("drain"), None);
    }

    #[test]
    fn a_report_is_tagged_with_its_job() {
        let report = JobReport::Sweep(SweepReport::default());
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["job"], "sweep");
        assert_eq!(json["outboxRows"], 0);
        assert_eq!(report.kind(), JobKind::Sweep);
    }

    #[test]
    fn a_deadline_that_has_come_is_too_close_for_anything() {
        let now = Instant::now();
        assert!(too_close(Some(now), std::time::Duration::ZERO));
        assert!(too_close(Some(now + std::time::Duration::from_secs(5)), std::time::Duration::from_secs(6)));
        assert!(!too_close(
            Some(now + std::time::Duration::from_secs(60)),
            std::time::Duration::from_secs(6)
        ));
        assert!(!too_close(None, std::time::Duration::MAX));
    }
}
