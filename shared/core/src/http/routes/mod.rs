//! Route handlers, one module per resource. Handlers parse, authorise, call a use case inside a unit
//! of work, and answer; they hold no business rules of their own.

pub mod appointments;
pub mod health;
pub mod lists;
pub mod notifications;
pub mod outbox;
pub mod patients;
pub mod practitioners;
pub mod timelines;

use std::str::FromStr;

use super::auth::Caller;
use super::problem::ApiError;
use super::request::RequestIds;
use crate::context::Ctx;
use crate::domain::input::FieldError;
use crate::events::Cause;

/// Parses a path id; a malformed one answers 400 naming `id`.
pub fn path_id<T: FromStr>(raw: &str) -> Result<T, ApiError> {
    raw.parse().map_err(|_| ApiError::BadParameter(FieldError::new("id", "must be a ULID (26 characters)")))
}

/// The use-case context of a request: the caller's workspace, actor and causal ids.
pub fn context(caller: &Caller, ids: &RequestIds) -> Ctx {
    Ctx {
        workspace_id: caller.workspace_id,
        cause: Cause {
            actor: caller.actor(),
            correlation_id: ids.correlation_id,
            causation_id: ids.request_id.into(),
        },
    }
}
