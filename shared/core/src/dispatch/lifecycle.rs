//! Lifecycle facts: one structured `tracing` event per outbox transition, target `clinic::outbox`.
//!
//! Fields: `transition` (claimed, lease_expired, started, dispatched, retry, held, dead, fenced),
//! `event_id`, `event_type`, `listener` (starts only), `attempt`, `age_ms` (since the event was
//! recorded) and `outcome`. Ids, names of types and stable codes only — never health data.
//! High-volume success transitions (claimed, started) log at DEBUG, `dispatched` at INFO, the rest at
//! WARN (`dead` at ERROR).

use chrono::Utc;

use super::outcome::{Fate, RowOutcome};
use crate::events::{Envelope, EventType};
use crate::listeners::Listener;

/// An outbox transition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transition {
    Claimed,
    LeaseExpired,
    Started,
    Dispatched,
    Retry,
    Held,
    Dead,
    Fenced,
}

impl Transition {
    pub const fn as_str(self) -> &'static str {
        match self {
            Transition::Claimed => "claimed",
            Transition::LeaseExpired => "lease_expired",
            Transition::Started => "started",
            Transition::Dispatched => "dispatched",
            Transition::Retry => "retry",
            Transition::Held => "held",
            Transition::Dead => "dead",
            Transition::Fenced => "fenced",
        }
    }
}

macro_rules! fact {
    ($level:expr, $transition:expr, $event_id:expr, $event_type:expr, $listener:expr, $attempt:expr, $age:expr, $outcome:expr) => {
        tracing::event!(
            target: "clinic::outbox",
            $level,
            transition = $transition.as_str(),
            event_id = %$event_id,
            event_type = $event_type,
            listener = $listener,
            attempt = $attempt,
            age_ms = $age,
            outcome = $outcome,
            "outbox transition"
        )
    };
}

/// Emits the fact of `transition` for `envelope` (and `listener` for starts).
pub fn emit(
    transition: Transition,
    envelope: &Envelope,
    listener: Option<Listener>,
    attempt: i32,
    outcome: &str,
) {
    use tracing::Level;
    let age_ms = (Utc::now() - envelope.recorded_at).num_milliseconds();
    let event_type = envelope.event_type.as_str();
    let listener = listener.map(Listener::as_str);
    match transition {
        Transition::Claimed | Transition::Started => {
            fact!(Level::DEBUG, transition, envelope.id, event_type, listener, attempt, age_ms, outcome)
        }
        Transition::Dispatched => {
            fact!(Level::INFO, transition, envelope.id, event_type, listener, attempt, age_ms, outcome)
        }
        Transition::LeaseExpired | Transition::Retry | Transition::Held | Transition::Fenced => {
            fact!(Level::WARN, transition, envelope.id, event_type, listener, attempt, age_ms, outcome)
        }
        Transition::Dead => {
            fact!(Level::ERROR, transition, envelope.id, event_type, listener, attempt, age_ms, outcome)
        }
    }
}

/// The fact of one row's outcome in a step (see [`RowOutcome`]); rows this build cannot read have
/// no type or age.
pub fn emit_outcome(row: &RowOutcome) {
    use tracing::Level;
    let (transition, outcome) = match &row.fate {
        Fate::Dispatched => (Transition::Dispatched, "ok".to_owned()),
        Fate::Retry { delay, code } => {
            (Transition::Retry, format!("{code} retry_in_ms={}", delay.as_millis()))
        }
        Fate::Held { delay, code } => (Transition::Held, format!("{code} retry_in_ms={}", delay.as_millis())),
        Fate::Dead { code } => (Transition::Dead, code.clone()),
        Fate::Fenced { intended } => (Transition::Fenced, (*intended).to_owned()),
    };
    let age_ms = row.recorded_at.map(|at| (Utc::now() - at).num_milliseconds());
    let event_type = row.event_type.map(EventType::as_str);
    let (id, attempt, listener): (_, _, Option<&str>) = (row.event_id, row.attempts, None);
    match transition {
        Transition::Dispatched => {
            fact!(Level::INFO, transition, id, event_type, listener, attempt, age_ms, outcome.as_str())
        }
        Transition::Dead => {
            fact!(Level::ERROR, transition, id, event_type, listener, attempt, age_ms, outcome.as_str())
        }
        _ => fact!(Level::WARN, transition, id, event_type, listener, attempt, age_ms, outcome.as_str()),
    }
}
