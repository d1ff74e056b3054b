//! Lifecycle facts: one structured `tracing` event per outbox transition, target `clinic::outbox`.
//!
//! Fields: `transition` (claimed, lease_expired, started, dispatched, retry, dead, fenced),
//! `event_id`, `event_type`, `listener` (starts only), `attempt`, `age_ms` (since the event was
//! recorded) and `outcome`. Ids, names of types and stable codes only — never health data.
//! High-volume success transitions (claimed, started) log at DEBUG, `dispatched` at INFO, the rest at
//! WARN (`dead` at ERROR).

use chrono::Utc;

use crate::events::Envelope;
use crate::listeners::Listener;

/// An outbox transition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transition {
    Claimed,
    LeaseExpired,
    Started,
    Dispatched,
    Retry,
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
        Transition::LeaseExpired | Transition::Retry | Transition::Fenced => {
            fact!(Level::WARN, transition, envelope.id, event_type, listener, attempt, age_ms, outcome)
        }
        Transition::Dead => {
            fact!(Level::ERROR, transition, envelope.id, event_type, listener, attempt, age_ms, outcome)
        }
    }
}

/// The `dead` fact of a row whose event this build cannot read (no envelope to describe it).
pub fn emit_unreadable_dead(event_id: crate::ids::EventId, attempt: i32) {
    tracing::error!(
        target: "clinic::outbox",
        transition = Transition::Dead.as_str(),
        event_id = %event_id,
        attempt,
        outcome = "unreadable_event",
        "outbox transition"
    );
}
