//! The transactional outbox: one `event_outbox` row per event, moved through a small state machine.
//!
//! `available_at` is the single "due" clock of every live status (creation time for `pending`, backoff
//! end for `retry`, lease end for `claimed`), so one partial index (`event_outbox_due_idx`) answers the
//! claim scan however much history accumulates.
//!
//! | status       | moved in by                                                        | moved out by |
//! |--------------|--------------------------------------------------------------------|--------------|
//! | `pending`    | [`crate::events::store::append`], in the mutation's own transaction; an operator `retry` or `replay` ([`crate::operator`]) | [`claim`] → `claimed` |
//! | `claimed`    | [`claim`]: a due `pending` or `retry` row, or a `claimed` row whose lease (`available_at` = `claimed_until`) expired — its dispatcher is presumed dead (`lease_expired`) | the claim-token holder's mark: [`mark_dispatched`] → `dispatched`, [`mark_failed`] → `retry`/`dead`; or another dispatcher's [`claim`] after the lease expired |
//! | `dispatched` | [`mark_dispatched`]: every listener of the event has started (the transport accepted it; for `local` the listener committed its receipt) | final for dispatchers; an operator `replay` ([`crate::operator`]) re-queues it with `only_listeners` |
//! | `retry`      | [`mark_failed`]: some listener failed to start and `attempts` < the ceiling; `available_at` = now + jittered exponential backoff | [`claim`] once `available_at` has come |
//! | `dead`       | [`mark_failed`]: the attempt ceiling was reached, a start failed permanently, or the stored event cannot be read by this build | operator `retry` (→ `pending`) or `discard` ([`crate::operator`]) |
//! | `discarded`  | operator `discard` ([`crate::operator`])                                 | final |
//!
//! Invariants:
//! - A claim is one statement (`FOR UPDATE SKIP LOCKED`): concurrent dispatchers never claim the same
//!   row at the same time, and every claim mints a fresh [`ClaimToken`] and a lease.
//! - Every mark is fenced by the claim token: a dispatcher whose lease was taken over updates zero
//!   rows and changes nothing (it reports the rows as `fenced`).
//! - Claims and `dispatched` marks commit without waiting for their WAL flush (`synchronous_commit`
//!   off for that transaction only, set inside the statement): losing one in a server crash only
//!   re-runs the claim scan — at-least-once holds and receipts absorb the repeat — and a flush wait
//!   there would add a disk sync to every event's latency. Writers' events and listeners' receipts
//!   stay fully durable.
//! - No transaction is held open across a transport call: claim, start and mark are separate.
//! - `listener_starts` records which listeners of an event have started — written only for events
//!   whose attempt partly failed (a fully successful event goes straight to `dispatched`, which makes
//!   the starts redundant). A re-claimed row (`attempts` > 1) loads them so only missing listeners
//!   start. A crash between start and mark loses nothing: the lease expires, the row is claimed again
//!   and duplicate starts are absorbed by listener receipts.
//! - `dispatched` rows are kept (an operator replay needs them; a retention sweep may delete them
//!   later). The due index covers live statuses only, so the claim scan does not slow down as they
//!   accumulate; `events` stays the durable log either way.
//! - `last_error_code` / `last_error` come from transports and listeners and hold ids and codes only,
//!   never health data.

mod backoff;
mod claim;
mod hold;
mod mark;
pub mod waiters;

pub use backoff::{Backoff, Jitter};
pub use claim::{claim, Claim, Claimed, Unreadable};
pub use hold::{mark_held, HELD_CODE, HOLD_RECHECK};
pub use mark::{mark_dispatched, mark_failed, record_starts, Failure, FailureMark, StartRecord};

pub use crate::ids::ClaimToken;

/// The statuses of an outbox row (names as stored).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OutboxStatus {
    Pending,
    Claimed,
    Dispatched,
    Retry,
    Dead,
    Discarded,
}

impl OutboxStatus {
    pub const ALL: &'static [OutboxStatus] = &[
        OutboxStatus::Pending,
        OutboxStatus::Claimed,
        OutboxStatus::Dispatched,
        OutboxStatus::Retry,
        OutboxStatus::Dead,
        OutboxStatus::Discarded,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            OutboxStatus::Pending => "pending",
            OutboxStatus::Claimed => "claimed",
            OutboxStatus::Dispatched => "dispatched",
            OutboxStatus::Retry => "retry",
            OutboxStatus::Dead => "dead",
            OutboxStatus::Discarded => "discarded",
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|status| status.as_str() == name)
    }
}
