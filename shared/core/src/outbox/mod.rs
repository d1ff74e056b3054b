//! The transactional outbox: one `event_outbox` row per event, moved through a small state machine.
//!
//! `event_outbox` is a lease queue ([`crate::lease`], [`crate::lease::OUTBOX`]): the claim's SET
//! clause and its burial at the ceiling, the fenced marks, the hold (attempt given back) and the
//! operator retry/replay/discard are built from the lease module's pieces; the backoff is its
//! [`crate::lease::RetryPolicy`].
//!
//! Which rows are live and due is defined once, in [`due`] (checked equal to the lease rule). `available_at` is the single "due" clock
//! of every live status (creation time for `pending`, backoff end for `retry`, lease end for
//! `claimed`), so one partial index (`event_outbox_due_idx`) answers the claim scan however much
//! history accumulates.
//!
//! | status       | moved in by                                                        | moved out by |
//! |--------------|--------------------------------------------------------------------|--------------|
//! | `pending`    | [`crate::events::store::append`], in the mutation's own transaction; an operator `retry` or `replay` ([`crate::operator`]), with a fresh attempt budget (`attempts` = 0) | [`claim`] → `claimed` |
//! | `claimed`    | [`claim`]: a due `pending` or `retry` row, or a `claimed` row whose lease (`available_at` = `claimed_until`) expired — its dispatcher is presumed dead (`lease_expired`) | the claim-token holder's mark: [`mark_dispatched`] → `dispatched`, [`mark_failed`] → `retry`/`dead`; or another dispatcher's [`claim`] after the lease expired |
//! | `dispatched` | [`mark_dispatched`]: every listener of the event has started (the transport accepted it; for `local` the listener committed its receipt) | final for dispatchers; an operator `replay` ([`crate::operator`]) re-queues it with `only_listeners` |
//! | `retry`      | [`mark_failed`]: some listener failed to start and `attempts` < the ceiling; `available_at` = now + jittered exponential backoff. Or a hold ([`Failure::Hold`]): the transport was unavailable (including SQS entries failed on the service's side, `SenderFault = false`), a listener is paused, or the row names a type or listener this build does not know — the attempt is given back | [`claim`] once `available_at` has come; an operator `retry` makes it due now |
//! | `dead`       | [`mark_failed`]: the attempt ceiling was reached on per-message failures, a start failed permanently, or the stored event is corrupt; or [`claim_with_ceiling`]: a row reclaimed after its lease with its attempts at the ceiling (`attempts_exhausted`) | operator `retry` (→ `pending`, a fresh attempt budget, so the next claim starts its listeners instead of burying it again) or `discard` ([`crate::operator`]) |
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
//! - Custody until receipt (DESIGN §5a, V8 and V10): the mark that turns a row `dispatched` records
//!   on the row itself the listeners it started whose receipt is not in yet (`awaiting`, the same
//!   statement, no insert); each receipt removes its listener in the listener's own transaction (a
//!   trigger). Starts of an attempt that did not finish its row (a partial failure, a hold) are
//!   `listener_starts` rows instead, written beside the failure mark and not fenced: a re-claimed row
//!   (more than one attempt, or any row an earlier attempt marked — held, failed, or re-queued by an
//!   operator with a fresh budget) loads them so only missing listeners start: a row held on its
//!   first attempt never starts again the listeners that attempt started. The view
//!   `listener_custody` is every pair still in custody, over both records; the reconciler
//!   ([`crate::housekeeping::reconcile`]) moves overdue awaited pairs into `listener_starts` to count
//!   their restarts. A crash between start and mark loses nothing: the lease expires, the row is
//!   claimed again and duplicate starts are absorbed by listener receipts.
//! - A row is buried at claim time when its attempts already reached the ceiling (its last
//!   dispatcher died before marking it), so lease expiry cannot reclaim it forever.
//! - Holds ([`Failure::Hold`]) give the attempt back: a transport outage, an open breaker, an SQS
//!   entry failed on the service's side, a paused listener or an event type or listener this build
//!   does not know never brings a row closer to `dead`. A hold records the starts that succeeded.
//! - An operator `retry` or `replay` starts a fresh attempt budget (`attempts` = 0) and so always
//!   leads to at least one real attempt; the spent attempts stay in `outbox_history`.
//! - `dispatched` rows are kept (an operator replay needs them; a retention sweep may delete them
//!   later). The due index covers live statuses only, so the claim scan does not slow down as they
//!   accumulate; `events` stays the durable log either way.
//! - `last_error_code` / `last_error` come from transports and listeners and hold ids and codes only,
//!   never health data.

mod claim;
pub mod due;
mod hold;
pub mod lag;
mod mark;
pub mod waiters;

/// The outbox's backoff is the lease queue's ([`crate::lease`]).
pub use crate::lease::{Backoff, Jitter};
pub use claim::{claim, claim_above, claim_with_ceiling, Buried, Claim, Claimed, Unreadable};
pub use due::{DUE, LIVE, LIVE_STATUSES};
pub use hold::{HELD_CODE, HOLD_RECHECK};
pub use mark::{
    mark_dispatched, mark_dispatched_awaiting, mark_failed, record_starts, DispatchedRow, Failure,
    FailureMark, StartRecord,
};

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

// The stored names, in [`OutboxStatus::ALL`] order.
crate::inline_schema!(OutboxStatus, |_: &mut schemars::SchemaGenerator| {
    let names: Vec<&str> = OutboxStatus::ALL.iter().map(|status| status.as_str()).collect();
    schemars::json_schema!({ "type": "string", "enum": names })
});
