//! The one definition of which outbox rows are live and which are due. Every statement that asks
//! "is this row still the dispatcher's work?" (the claim, the lag metrics, the operator stats, the
//! bench's raw loop) is built from these, so the predicate exists once.
//!
//! - **live**: `pending`, `retry` or `claimed` — a dispatcher still owes the row a start. The partial
//!   index `event_outbox_due_idx` (V1) covers exactly these statuses.
//! - **due**: live and `available_at <= now()` — a claim would take it now (`available_at` is the
//!   creation time for `pending`, the backoff end for `retry`, the lease end for `claimed`).
//!
//! The predicates are macros expanding to string literals so `const` statements can `concat!` them;
//! they name the columns without a table alias (use them where `event_outbox` is the only table with
//! `status`/`available_at`, or qualify by a subquery).

use super::OutboxStatus;

/// `status IN (<live statuses>)`, as an SQL literal for `concat!`.
#[macro_export]
macro_rules! outbox_live_predicate {
    () => {
        "status IN ('pending', 'retry', 'claimed')"
    };
}

/// `<live> AND available_at <= now()`, as an SQL literal for `concat!`.
#[macro_export]
macro_rules! outbox_due_predicate {
    () => {
        concat!($crate::outbox_live_predicate!(), " AND available_at <= now()")
    };
}

/// The live statuses (what [`LIVE`] names).
pub const LIVE_STATUSES: [OutboxStatus; 3] =
    [OutboxStatus::Pending, OutboxStatus::Retry, OutboxStatus::Claimed];

/// The live predicate (see the module docs).
pub const LIVE: &str = outbox_live_predicate!();

/// The due predicate (see the module docs).
pub const DUE: &str = outbox_due_predicate!();

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_live_predicate_names_exactly_the_live_statuses() {
        for status in OutboxStatus::ALL {
            let quoted = format!("'{}'", status.as_str());
            assert_eq!(LIVE.contains(&quoted), LIVE_STATUSES.contains(status), "{status:?}");
        }
        assert!(DUE.starts_with(LIVE) && DUE.ends_with("available_at <= now()"));
    }

    /// The outbox's due and live predicates are the lease queue's rule for its table, and its status
    /// enum is the glossary's column for `event_outbox` (the lease module sits below the outbox and
    /// does not read it).
    #[test]
    fn the_outbox_is_the_lease_queues_outbox() {
        use crate::lease::OUTBOX;
        assert_eq!(OUTBOX.due(""), DUE);
        assert_eq!(OUTBOX.live(""), LIVE);
        let mut stored: Vec<&str> =
            super::super::OutboxStatus::ALL.iter().map(|status| status.as_str()).collect();
        let mut glossary = OUTBOX.statuses();
        stored.sort_unstable();
        glossary.sort_unstable();
        assert_eq!(stored, glossary);
    }
}
