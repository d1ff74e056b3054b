//! Operator tooling for the outbox: find, inspect, retry, replay and discard stuck events — the same
//! use cases behind `GET|POST /v1/system/outbox…` (admin role) and `clinic outbox …` (CLI).
//!
//! The actions, and the statuses they accept (see the state machine in [`crate::outbox`]):
//!
//! | action    | accepted status     | becomes   | what else changes |
//! |-----------|---------------------|-----------|-------------------|
//! | `retry`   | `dead`, `retry`     | `pending` | due now (`available_at = now()`); same event id; a fresh attempt budget (`attempts` = 0); `last_error*` and `only_listeners` kept |
//! | `replay`  | `dispatched`        | `pending` | due now; `only_listeners` = the named listeners, or NULL for all of them; their `listener_starts` rows are removed so the dispatcher starts them again; same event id; a fresh attempt budget |
//! | `discard` | `dead`              | `discarded` | nothing else; final |
//!
//! Invariants:
//! - Every action runs on the caller's transaction: the outbox row is locked (`SELECT … FOR UPDATE`),
//!   its status checked, changed, and one `operator_actions` row (actor, reason, status before and
//!   after, listeners) inserted — so the change and its audit row commit together or not at all.
//! - The reason is checked (non-blank, bounded) and named listeners are parsed before the row is
//!   looked at; an action that does not fit the row's status is a [`DomainError::Conflict`] (409)
//!   and writes nothing, not even an audit row.
//! - A dispatcher never holds the row across an operator action: claims skip locked rows and every
//!   dispatcher mark is fenced by its claim token, which a row holds only while `claimed` (V15), a
//!   status no action accepts. Retried or replayed rows are ordinary `pending` rows for the claim scan.
//! - Replay never removes listener receipts: a listener that already committed its effects sees a
//!   duplicate delivery and does nothing, so a replay re-runs only what was not done, and
//!   notifications keep their unique idempotency key `"{event_id}:{listener}"`.
//! - Every read and action is scoped by the workspace of the event (`events.workspace_id`) when a
//!   workspace is given (always, over HTTP); another workspace's event answers like a missing one.
//! - Listings answer ids, type names, statuses, counters, times and error codes — never reasons,
//!   names or other health data. The operator's reason is stored in `operator_actions` only and is
//!   never logged; logs carry event ids, actions and statuses.
//! - Every queue (the outbox, notifications, webhook deliveries) is acted on through one trait,
//!   [`queue::OperatedQueue`]: single-row actions, bulk recovery by filter with a dry run, the CLI
//!   and the HTTP routes.
//! - Bulk actions ([`bulk`]) run every target through the single-row action (one code path), and
//!   pauses ([`pause`]) are rows with their own audit table; [`explain`] answers an event's whole
//!   path as a list of sections, one per table.

mod actions;
pub mod bulk;
pub mod explain;
mod filter;
pub mod listing;
pub mod pause;
mod query;
pub mod queue;
mod row_filter;
pub mod trail;

use std::time::Duration;

use crate::domain::input::FieldError;
use crate::ids::MemberId;

pub use actions::{perform, perform_in_batch, recorded, ActionRecord, ActionRequest, ReasonOnly};
pub use bulk::{BulkAnswer, BulkRequest};
pub use explain::{explain, Explanation, Section};
pub use filter::{ErrorCode, OutboxFilter};
pub use query::{
    explain_list, explain_stats, list, overview, show, stats, ActionHistory, ListenerStart, OutboxDetail,
    OutboxItem, Overview, Stats, DISPATCHED_COUNT_LIMIT,
};
pub use queue::{
    NotificationAction, NotificationFilter, Notifications, OperatedQueue, Outbox, QueueRow, RowActionRecord,
    WebhookDeliveries,
};
pub use row_filter::RowFilter;

/// The longest reason kept, in characters.
pub const MAX_REASON_CHARS: usize = 1000;
/// The longest CLI actor name, in characters.
pub const MAX_ACTOR_CHARS: usize = 200;

/// Why an operator acted: required, not blank, at most [`MAX_REASON_CHARS`] characters (trimmed;
/// a NUL character, which PostgreSQL text cannot hold, is stored as U+FFFD).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reason(String);

impl Reason {
    pub fn parse(text: &str) -> Result<Reason, FieldError> {
        let text = text.trim();
        if text.is_empty() {
            return Err(FieldError::new("reason", "is required and must not be blank"));
        }
        if text.chars().count() > MAX_REASON_CHARS {
            return Err(FieldError::new("reason", format!("must be at most {MAX_REASON_CHARS} characters")));
        }
        // PostgreSQL text cannot hold NUL; keep the rest of the operator's words as written.
        Ok(Reason(text.replace('\0', "\u{FFFD}")))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// At least one character that is not white space (white space as Rust's `trim` sees it); a NUL is
/// allowed (stored as U+FFFD).
const NOT_BLANK: &str = concat!("[^", crate::domain::schema::white_space!(), "]");

// The schema of a reason as [`Reason::parse`] reads it.
crate::inline_schema!(Reason as "OperatorReason", |_: &mut schemars::SchemaGenerator| {
    schemars::json_schema!({
        "type": "string",
        "minLength": 1,
        "maxLength": MAX_REASON_CHARS,
        "pattern": NOT_BLANK
    })
});

/// Who acted, as recorded in `operator_actions.actor`: the caller's member id over HTTP, the
/// `--actor` given to the CLI.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Operator(String);

impl Operator {
    /// An admin calling the API: recorded as the member id (26-character ULID).
    pub fn member(id: MemberId) -> Operator {
        Operator(id.to_string())
    }

    /// A CLI operator: non-blank, at most [`MAX_ACTOR_CHARS`] characters, no control characters.
    pub fn parse(text: &str) -> Result<Operator, FieldError> {
        let text = text.trim();
        if text.is_empty() {
            return Err(FieldError::new("actor", "is required and must not be blank"));
        }
        if text.chars().count() > MAX_ACTOR_CHARS || text.chars().any(char::is_control) {
            return Err(FieldError::new(
                "actor",
                format!("must be at most {MAX_ACTOR_CHARS} characters without control characters"),
            ));
        }
        Ok(Operator(text.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Parses an age such as `90`, `90s`, `15m`, `2h` or `7d` (a whole number with an optional unit;
/// seconds when none), as accepted by `olderThan` and `--older-than`.
pub fn parse_age(text: &str) -> Option<Duration> {
    let text = text.trim();
    let (digits, unit) = match text.char_indices().last() {
        Some((index, last)) if last.is_ascii_alphabetic() => (&text[..index], Some(last)),
        _ => (text, None),
    };
    if digits.is_empty() || digits.len() > 9 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let value: u64 = digits.parse().ok()?;
    let seconds = match unit {
        None | Some('s') => value,
        Some('m') => value * 60,
        Some('h') => value * 3_600,
        Some('d') => value * 86_400,
        Some(_) => return None,
    };
    Some(Duration::from_secs(seconds))
}

/// An age as [`parse_age`] reads it (`olderThan`). Use with `#[schemars(with = "Age")]`.
pub struct Age;

crate::inline_schema!(Age, |_: &mut schemars::SchemaGenerator| {
    schemars::json_schema!({
        "type": "string",
        "pattern": "^[0-9]{1,9}[smhd]?$",
        "examples": ["15m"],
        "description": "An age: seconds, or a number with s, m, h or d."
    })
});

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_must_say_something() {
        assert!(Reason::parse("").is_err());
        assert!(Reason::parse("   \n").is_err());
        assert_eq!(Reason::parse("  provider fixed ").unwrap().as_str(), "provider fixed");
        assert!(Reason::parse(&"x".repeat(MAX_REASON_CHARS + 1)).is_err());
        assert_eq!(Reason::parse("").unwrap_err().field, "reason");
        assert_eq!(Reason::parse("a\0b").unwrap().as_str(), "a\u{FFFD}b");
    }

    #[test]
    fn cli_actors_are_bounded_and_printable() {
        assert!(Operator::parse("ops:alice").is_ok());
        assert!(Operator::parse(" ").is_err());
        assert!(Operator::parse("a\u{7}b").is_err());
        assert!(Operator::parse(&"a".repeat(MAX_ACTOR_CHARS + 1)).is_err());
    }

    #[test]
    fn ages_take_an_optional_unit() {
        assert_eq!(parse_age("90"), Some(Duration::from_secs(90)));
        assert_eq!(parse_age("90s"), Some(Duration::from_secs(90)));
        assert_eq!(parse_age("15m"), Some(Duration::from_secs(900)));
        assert_eq!(parse_age("2h"), Some(Duration::from_secs(7_200)));
        assert_eq!(parse_age("7d"), Some(Duration::from_secs(604_800)));
        for bad in ["", "h", "-1", "1.5h", "2w", "1234567890", "1 h"] {
            assert_eq!(parse_age(bad), None, "{bad}");
        }
    }

    #[test]
    fn action_names_round_trip() {
        use crate::lease::ActionKind;
        for action in ActionKind::ALL {
            assert_eq!(ActionKind::parse(action.as_str()), Some(*action));
        }
    }
}
