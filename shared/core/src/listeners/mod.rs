//! Listener workflows: what happens because an event was recorded.
//!
//! Invariants:
//! - The listener map ([`map::listeners`]) is exhaustive over event types; see [`map`].
//! - A message is an untrusted pointer ([`pointer`]): before anything acts, the delivery is checked
//!   against the `events` row inside the run's transaction, folded into the receipt insert; a
//!   mismatch is a [`Rejection`] (permanent, nothing written by the run, one log line, one `Rejected`
//!   metric, and one row in `listener_rejections` written after the rollback: [`rejections`]).
//! - A listener run is ONE transaction: it first inserts its receipt `(listener, event_id)`; when the
//!   receipt already exists the run is a duplicate delivery, rolls back and reports success
//!   ([`ListenerOutcome::Duplicate`]). Otherwise it reloads what it needs through the repositories
//!   (envelopes carry ids only), skips work the current state has made stale (the receipt is still
//!   committed, so a redelivery is a duplicate), writes its effects — notifications with idempotency
//!   key `"{event_id}:{listener}"`, or chained mutations that emit their own events with actor
//!   `system`, causation = this event and the same correlation id — and commits receipt and effects
//!   together.
//! - Every transport runs listeners through one [`host::ListenerHost`]: the run, then one
//!   after-commit step (the notification fast path, a fan-out's first webhook attempts), bounded by
//!   a deadline.
//! - Errors say whether trying again can help ([`ListenerError::Retryable`]) or not
//!   ([`ListenerError::Permanent`]) and carry a stable code; their text holds ids only.

pub mod host;
pub mod map;
pub mod notify;
pub mod pointer;
pub mod rejections;
mod workflows;

pub use host::{Deadline, ListenerHost, RunFailure};
pub use map::{is_routed, listeners, routed, Listener};
pub use pointer::{event_source, Delivery, Rejection, SourceClaim};
pub use workflows::deliver;
#[cfg(any(test, feature = "testing"))]
pub use workflows::run;

/// What a listener run did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListenerOutcome {
    /// Effects written and receipt committed; `effects` counts notifications or chained mutations.
    Applied { effects: usize },
    /// The current state made the work stale; the receipt was committed, nothing else.
    Stale { reason: &'static str },
    /// The receipt existed: an earlier delivery already did the work. Nothing changed.
    Duplicate,
    /// The receipt was new but the notification's idempotency key was already used (an earlier run
    /// recorded it): the receipt was committed, nothing new will be sent.
    AlreadySent,
}

impl ListenerOutcome {
    pub const fn as_str(&self) -> &'static str {
        match self {
            ListenerOutcome::Applied { .. } => "applied",
            ListenerOutcome::Stale { .. } => "stale",
            ListenerOutcome::Duplicate => "duplicate",
            ListenerOutcome::AlreadySent => "already_sent",
        }
    }
}

/// Why a listener run failed. `code` is stable (metrics, `last_error_code`); `message` has ids only.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ListenerError {
    /// Trying again later may succeed (database unavailable, serialization failure, provider down).
    #[error("retryable {code}: {message}")]
    Retryable { code: &'static str, message: String },
    /// Trying again cannot help (a listener not routed for this event type, an unknown event).
    #[error("permanent {code}: {message}")]
    Permanent { code: &'static str, message: String },
}

impl ListenerError {
    pub fn code(&self) -> &'static str {
        match self {
            ListenerError::Retryable { code, .. } | ListenerError::Permanent { code, .. } => code,
        }
    }

    pub fn message(&self) -> &str {
        match self {
            ListenerError::Retryable { message, .. } | ListenerError::Permanent { message, .. } => message,
        }
    }

    pub fn is_permanent(&self) -> bool {
        matches!(self, ListenerError::Permanent { .. })
    }

    /// The rejection this error reports, when the message did not match the event log.
    pub fn rejection(&self) -> Option<Rejection> {
        match self {
            ListenerError::Permanent { code, .. } => Rejection::parse(code),
            ListenerError::Retryable { .. } => None,
        }
    }
}

impl From<tokio_postgres::Error> for ListenerError {
    fn from(error: tokio_postgres::Error) -> Self {
        // Database errors are a property of the database, not of the message: always retryable.
        // The text of a database error never contains row values here (no data in constraint
        // messages of the tables listeners touch), but keep only the SQLSTATE to be safe.
        use tokio_postgres::error::SqlState;
        let code = match error.code() {
            // `lock_timeout` / `statement_timeout` of the session: this run waited too long.
            Some(code) if *code == SqlState::LOCK_NOT_AVAILABLE => "db_lock_timeout",
            Some(code) if *code == SqlState::QUERY_CANCELED => "db_statement_timeout",
            _ if crate::db::is_transient(&error) => "db_unavailable",
            _ => "db_error",
        };
        let state = error.code().map(|c| c.code().to_owned()).unwrap_or_else(|| "connection".into());
        ListenerError::Retryable { code, message: format!("database error (SQLSTATE {state})") }
    }
}

impl From<deadpool_postgres::PoolError> for ListenerError {
    fn from(_: deadpool_postgres::PoolError) -> Self {
        ListenerError::Retryable { code: "db_unavailable", message: "no database connection".into() }
    }
}

impl From<crate::error::DomainError> for ListenerError {
    fn from(error: crate::error::DomainError) -> Self {
        use crate::error::DomainError;
        match error {
            DomainError::Db(db) => db.into(),
            DomainError::Unavailable(pool) => pool.into(),
            other => ListenerError::Permanent {
                code: "domain_rejected",
                // Domain errors name fields and statuses, never values.
                message: other.to_string(),
            },
        }
    }
}

impl From<notify::NotifyError> for ListenerError {
    fn from(error: notify::NotifyError) -> Self {
        use notify::NotifyError;
        match error {
            NotifyError::Db(db) => db.into(),
            NotifyError::Provider { message, retryable: true, .. } => {
                ListenerError::Retryable { code: "notifier_failed", message }
            }
            NotifyError::Provider { message, retryable: false, .. } => {
                ListenerError::Permanent { code: "notifier_rejected", message }
            }
        }
    }
}
