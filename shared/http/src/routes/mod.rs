//! Route handlers, one module per resource. Handlers parse, authorise, pass their use case to the
//! unit of work ([`super::unit_of_work::Mutation::run`]), and answer; they hold no business rules.

pub mod acted;
pub mod appointments;
pub mod console;
pub mod contract;
pub mod deliveries;
pub mod disclosures;
pub mod health;
pub mod lists;
pub mod notifications;
pub mod outbox;
pub mod patients;
pub mod practitioners;
pub mod recovery;
pub mod rejections;
pub mod timelines;
pub mod unsubscribe;
pub mod webhooks;

use std::str::FromStr;

use super::problem::ApiError;
use clinic_core::domain::input::FieldError;

/// A 400 problem naming the query parameter `field` (nothing is written).
pub fn bad(field: &str, message: impl Into<String>) -> ApiError {
    ApiError::BadParameter(FieldError::new(field, message))
}

/// Parses a path id; a malformed one answers 400 naming `id`.
pub fn path_id<T: FromStr>(raw: &str) -> Result<T, ApiError> {
    raw.parse().map_err(|_| ApiError::BadParameter(FieldError::new("id", "must be a ULID (26 characters)")))
}
