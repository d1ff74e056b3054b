//! The error every use case returns. The HTTP layer's `ApiError` alone turns it into a status code
//! and a problem document; listeners classify it as retryable or permanent.

use crate::domain::input::FieldError;

#[derive(Debug, thiserror::Error)]
pub enum DomainError {
    /// Input that parsed as JSON but breaks a rule; names the field.
    #[error("invalid input: {0}")]
    Invalid(#[from] FieldError),
    /// Missing, deleted, or in another workspace: all look the same.
    #[error("not found")]
    NotFound,
    /// The caller may not do this (patient role touching what is not theirs, non-admin on admin routes).
    #[error("forbidden")]
    Forbidden,
    #[error("expected version {expected}, current version is {actual}")]
    VersionMismatch { expected: i32, actual: i32 },
    #[error("the practitioner already has a booked appointment overlapping this time")]
    DoubleBooked,
    /// The practitioner was deactivated and takes no new bookings.
    #[error("the practitioner is inactive and cannot be booked")]
    PractitionerInactive,
    /// The appointment's patient was deleted: its appointments take no change any more (409
    /// `patient-deleted`; DESIGN.md §6c).
    #[error("the patient of this appointment is deleted; the appointment cannot be changed")]
    PatientDeleted,
    /// The resource's status does not allow the action (cancelling a completed appointment).
    #[error("cannot {action} an appointment that is {status}")]
    InvalidTransition { action: &'static str, status: &'static str },
    /// An operator action that does not fit the outbox row's status.
    #[error("{0}")]
    Conflict(String),
    /// A replay whose named listeners are all unknown to this build (409; the names are listener
    /// identifiers, not data).
    #[error("this build knows none of the listeners named: {}", .0.join(", "))]
    UnknownListeners(Vec<String>),
    #[error("database unavailable: {0}")]
    Unavailable(#[from] deadpool_postgres::PoolError),
    /// The key service that seals webhook secrets did not answer or refused (503; nothing was
    /// written).
    #[error("webhook secrets cannot be sealed now: the key service is unavailable")]
    SealingUnavailable,
    #[error("database error: {0}")]
    Db(#[from] tokio_postgres::Error),
}

impl DomainError {
    /// True when trying again later may succeed (database down, serialization failure, deadlock).
    pub fn is_transient(&self) -> bool {
        match self {
            DomainError::Unavailable(_) | DomainError::SealingUnavailable => true,
            DomainError::Db(error) => crate::db::is_transient(error),
            _ => false,
        }
    }
}

pub type DomainResult<T> = Result<T, DomainError>;
