//! One outcome per claimed row: what a step did to it, computed once in the mark and folded into the
//! step report, the metrics and the lifecycle facts (so a new transition is added in one place).

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::StepReport;
use crate::events::EventType;
use crate::ids::EventId;

/// What became of one row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fate {
    /// Every listener started; marked `dispatched`.
    Dispatched,
    /// Some start failed; marked `retry`, due again after `delay`; the attempt counts.
    Retry { delay: Duration, code: String },
    /// Kept live without spending the attempt, due again after `delay`: the transport was
    /// unavailable (outage, open breaker) or the row names a type or listener this build does not know.
    Held { delay: Duration, code: String },
    /// Marked `dead`: a permanent failure, the attempt ceiling, a corrupt event; or buried by the
    /// claim (`attempts_exhausted`).
    Dead { code: String },
    /// The mark changed nothing: another dispatcher had taken the claim over. `intended` is the
    /// transition this step meant to make.
    Fenced { intended: &'static str },
}

impl Fate {
    /// The name of the transition this fate stands for (lifecycle facts use the same names).
    pub fn name(&self) -> &'static str {
        match self {
            Fate::Dispatched => "dispatched",
            Fate::Retry { .. } => "retry",
            Fate::Held { .. } => "held",
            Fate::Dead { .. } => "dead",
            Fate::Fenced { .. } => "fenced",
        }
    }
}

/// One claimed row's outcome with what the report, the metrics and the facts need to know about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowOutcome {
    pub event_id: EventId,
    /// `None` when this build cannot read the event.
    pub event_type: Option<EventType>,
    /// When the event was recorded (for the facts' `age_ms`), when readable.
    pub recorded_at: Option<DateTime<Utc>>,
    /// Attempts including this one.
    pub attempts: i32,
    /// The row's previous claim had expired.
    pub lease_expired: bool,
    /// Listener starts of this step that succeeded / failed.
    pub started: usize,
    pub failed_starts: usize,
    pub fate: Fate,
}

impl StepReport {
    /// The report of a step: a fold over its outcomes.
    pub fn of(outcomes: &[RowOutcome]) -> StepReport {
        outcomes.iter().fold(StepReport::default(), |mut report, row| {
            report.claimed += 1;
            report.lease_expired += usize::from(row.lease_expired);
            report.started += row.started;
            report.failed_starts += row.failed_starts;
            match row.fate {
                Fate::Dispatched => report.dispatched += 1,
                Fate::Retry { .. } => report.retried += 1,
                Fate::Held { .. } => report.held += 1,
                Fate::Dead { .. } => report.dead += 1,
                Fate::Fenced { .. } => report.fenced += 1,
            }
            report
        })
    }
}
