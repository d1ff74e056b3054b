//! The one lease queue (DESIGN §5d): every deferred effect — an outbox row's listener starts, a
//! notification's send, a webhook delivery — moves through one lifecycle, whose rules are written
//! here once and used by each table:
//!
//! ```text
//! ready ──claim──▶ leased ──mark──▶ done | retry | held | dead | stale
//!   ▲                │ lease expired: uncertain (where the queue has it), else re-claimable;
//!   │                │ at the attempt ceiling: dead (`attempts_exhausted`), never claimed again
//!   └── operator retry / replay (fresh attempt budget) ◀── dead | retry | uncertain
//!                       operator discard ──▶ discarded
//! ```
//!
//! The tables stay separate and keep their column and status names; this glossary maps each
//! stored status onto the lifecycle ([`Queue::state_of`]), and the Rust names follow the lifecycle.
//!
//! | lifecycle   | meaning | `event_outbox` ([`OUTBOX`]) | `notifications` ([`NOTIFICATIONS`]) | `webhook_deliveries` ([`WEBHOOK_DELIVERIES`]) |
//! |-------------|---------|-----------------------------|-------------------------------------|-----------------------------------------------|
//! | `ready`     | due once `available_at` has come | `pending` | `pending` | `pending` |
//! | `leased`    | claimed under a token and a lease (`available_at` = lease end) | `claimed` | `sending` | `sending` |
//! | `done`      | the effect happened (final) | `dispatched` | `sent` | `delivered` |
//! | `retry`     | failed, due again after the [`RetryPolicy`]'s delay | `retry` | `retry` | `retry` |
//! | `held`      | unavailable, not rejected: the attempt is given back ([`Queue::give_back`]) | `retry` (`last_error_code` says why: an outage, a paused listener, a build that does not know the type) | `deferred` (the contact policy's delay to the end of quiet hours, DESIGN §5e; a provider failure spends its attempt) | `pending`/`retry` of a disabled endpoint (never claimed while it is off); `retry` with `receiver_throttled` (a 429, or a 503 with `Retry-After`) |
//! | `uncertain` | the lease expired after a provider call may have been made | — (expiry re-claims; receipts absorb a duplicate start) | `uncertain` | — (expiry re-claims; receivers dedupe on `webhook-id`) |
//! | `dead`      | the attempt ceiling was reached or the failure is permanent; waits for an operator | `dead` | `dead`, `no_contact` (no usable address) | `failed` |
//! | `discarded` | an operator gave it up (final) | `discarded` | `discarded` | `discarded` (V21) |
//! | `stale`     | final: the effect no longer applies | — | `stale`, `suppressed` (the contact policy said never), `opted_out` (before V22) | — |
//!
//! Rules (each one a piece of SQL built from a [`Queue`] descriptor in [`sql`], or a Rust function):
//! - **Due** ([`Queue::due`]): `ready`, `retry` or `held` whose `available_at` has come, and — for queues
//!   whose expiry re-claims — `leased` whose lease expired.
//! - **Claim** ([`Queue::claim_set`]): a fresh token, a lease (`available_at` and the lease column
//!   set to its end) and `attempts + 1`, in one statement with `FOR UPDATE SKIP LOCKED`.
//! - **Ceiling** ([`Queue::exhausted`], [`exhausted`]): a row whose lease expired with its attempts
//!   at the ceiling is buried `dead` with `attempts_exhausted` ([`Queue::bury_set`]), never claimed
//!   again — else a sender that dies on every attempt would loop for ever.
//! - **Expiry** ([`Queue::expiry_set`]): a leased row whose lease ended goes to `uncertain` where the
//!   queue has it (the provider may have accepted it), else it is re-claimable.
//! - **Fence** ([`Queue::fence`], [`Queue::release_set`]): the token is the whole fence. Only a claim
//!   sets it; every move out of `leased` clears it (the marks, the expiry, the burial, the operator
//!   actions all use [`Queue::release_set`]), so `token = $token` means "still leased by this claim"
//!   and a mark by a claim that was taken over changes nothing.
//! - **Renew** ([`Queue::renew_set`], [`Queue::lease_running`]): fenced by the token *and* the lease
//!   still running, so no provider call starts under a lease that already ended.
//! - **Hold** ([`Queue::give_back`]): `attempts - 1` — an outage never brings a row closer to `dead`.
//! - **Operator actions** ([`Queue::retry_set`], [`Queue::discard_set`]): a retry or replay makes
//!   the row `ready` now with `attempts = 0` (a fresh budget: it always leads to a real attempt;
//!   history and the audit row keep the old ones); a discard makes it `discarded`.
//! - **Retry policy** ([`RetryPolicy`]): exponential backoff with jitter, or a fixed schedule, and
//!   one attempt ceiling.
//!
//! - **Fair pick** ([`Queue::fair_pick`]): a claim takes rows by priority, then in turns across the
//!   workspaces with due rows (weighted by `workspaces.delivery_weight`; the turns carry over from
//!   claim to claim in `fair_turns`), then oldest first, ranking only each (workspace, priority)'s
//!   first due rows ([`Queue::groups`], [`Queue::charge`]).
//! - **Pace** ([`rate`]): a provider's rate is one token bucket per provider and region in
//!   PostgreSQL, shared by every sender, which reserves tokens before it claims ([`rate::reserve`])
//!   and gives back the ones it did not use; a throttling answer is a hold and slows the bucket.
//!
//! Custody restarts ([`crate::housekeeping::reconcile`]) count restarts against their own ceiling
//! with [`exhausted`].

mod backoff;
pub mod operator;
mod policy;
pub mod rate;
pub mod sql;

pub use backoff::{Backoff, Jitter};
pub use operator::ActionKind;
pub use policy::{exhausted, Delays, RetryPolicy, Verdict};

/// The one lifecycle (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum State {
    Ready,
    Leased,
    Done,
    Retry,
    Held,
    Uncertain,
    Dead,
    Discarded,
    Stale,
}

/// The error code of a row buried at the ceiling after its lease expired.
pub const ATTEMPTS_EXHAUSTED: &str = "attempts_exhausted";
/// The error code of a row whose lease expired (`uncertain`).
pub const LEASE_EXPIRED: &str = "lease_expired";

/// What a queue does with a leased row whose lease expired below the ceiling.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expiry {
    /// It is due again: the next claim takes it (duplicates are absorbed downstream).
    Reclaim,
    /// It becomes `uncertain` (the provider may have accepted it); a policy decides what next.
    Uncertain,
}

/// The stored names of a queue's lifecycle states (`None`: the queue has no such state).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stored {
    pub ready: &'static str,
    pub leased: &'static str,
    pub done: &'static str,
    pub retry: &'static str,
    pub dead: &'static str,
    pub uncertain: Option<&'static str>,
    pub discarded: Option<&'static str>,
    /// Further stored names and the state each one is (`no_contact` is dead, `opted_out` stale, …).
    pub others: &'static [(&'static str, State)],
}

/// One table run as a lease queue: its name, its columns and its stored status names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Queue {
    /// The queue's name in answers and audit rows (`outbox`, `notifications`, `webhook_deliveries`).
    pub name: &'static str,
    pub table: &'static str,
    pub id: &'static str,
    pub stored: Stored,
    pub attempts: &'static str,
    pub token: &'static str,
    /// The lease's end kept beside `available_at` (`claimed_until`), when the table has it.
    pub lease_until: Option<&'static str>,
    /// Who holds the lease, when the table records it.
    pub claimer: Option<&'static str>,
    pub error_code: &'static str,
    /// The error text kept beside the code, when the table has it.
    pub error_text: Option<&'static str>,
    pub expiry: Expiry,
}

/// A queue's [`Queue::name`] in answers: `outbox`, `notifications` or `webhook_deliveries`. Use with
/// `#[schemars(with = "QueueName")]`.
pub struct QueueName;

crate::inline_schema!(QueueName, |_: &mut schemars::SchemaGenerator| {
    let names = [OUTBOX.name, NOTIFICATIONS.name, WEBHOOK_DELIVERIES.name];
    schemars::json_schema!({ "type": "string", "enum": names })
});

/// `event_outbox`: an event's listener starts.
pub const OUTBOX: Queue = Queue {
    name: "outbox",
    table: "event_outbox",
    id: "event_id",
    stored: Stored {
        ready: "pending",
        leased: "claimed",
        done: "dispatched",
        retry: "retry",
        dead: "dead",
        uncertain: None,
        discarded: Some("discarded"),
        others: &[],
    },
    attempts: "attempts",
    token: "claim_token",
    lease_until: Some("claimed_until"),
    claimer: Some("claimed_by"),
    error_code: "last_error_code",
    error_text: Some("last_error"),
    expiry: Expiry::Reclaim,
};

/// `notifications`: a message to a person.
pub const NOTIFICATIONS: Queue = Queue {
    name: "notifications",
    table: "notifications",
    id: "id",
    stored: Stored {
        ready: "pending",
        leased: "sending",
        done: "sent",
        retry: "retry",
        dead: "dead",
        uncertain: Some("uncertain"),
        discarded: Some("discarded"),
        others: &[
            ("no_contact", State::Dead),
            ("opted_out", State::Stale),
            ("stale", State::Stale),
            ("deferred", State::Held),
            ("suppressed", State::Stale),
        ],
    },
    attempts: "attempts",
    token: "claim_token",
    lease_until: Some("claimed_until"),
    claimer: None,
    error_code: "last_error_code",
    error_text: None,
    expiry: Expiry::Uncertain,
};

/// `webhook_deliveries`: an event posted to a subscribed endpoint.
pub const WEBHOOK_DELIVERIES: Queue = Queue {
    name: "webhook_deliveries",
    table: "webhook_deliveries",
    id: "id",
    stored: Stored {
        ready: "pending",
        leased: "sending",
        done: "delivered",
        retry: "retry",
        dead: "failed",
        uncertain: None,
        discarded: Some("discarded"),
        others: &[],
    },
    attempts: "attempts",
    token: "claim_token",
    lease_until: None,
    claimer: None,
    error_code: "last_error_code",
    error_text: None,
    expiry: Expiry::Reclaim,
};

impl Queue {
    /// The stored name of `state` in this queue (`None`: the queue has no such stored state; `held`
    /// is stored as `retry` with the attempt given back).
    pub fn stored_name(&self, state: State) -> Option<&'static str> {
        let s = &self.stored;
        match state {
            State::Ready => Some(s.ready),
            State::Leased => Some(s.leased),
            State::Done => Some(s.done),
            State::Retry => Some(s.retry),
            // A queue may store its holds apart (`deferred`); else a hold is a `retry` row.
            State::Held => {
                Some(s.others.iter().find(|(_, st)| *st == State::Held).map_or(s.retry, |(name, _)| *name))
            }
            State::Dead => Some(s.dead),
            State::Uncertain => s.uncertain,
            State::Discarded => s.discarded,
            State::Stale => s.others.iter().find(|(_, st)| *st == State::Stale).map(|(name, _)| *name),
        }
    }

    /// The lifecycle state of a stored status name (`None`: not a status of this queue).
    pub fn state_of(&self, name: &str) -> Option<State> {
        let s = &self.stored;
        let main = [
            (s.ready, State::Ready),
            (s.leased, State::Leased),
            (s.done, State::Done),
            (s.retry, State::Retry),
            (s.dead, State::Dead),
        ];
        main.into_iter()
            .chain(s.uncertain.map(|n| (n, State::Uncertain)))
            .chain(s.discarded.map(|n| (n, State::Discarded)))
            .chain(s.others.iter().copied())
            .find(|(stored, _)| *stored == name)
            .map(|(_, state)| state)
    }

    /// Every stored status name of this queue.
    pub fn statuses(&self) -> Vec<&'static str> {
        let s = &self.stored;
        let mut names = vec![s.ready, s.leased, s.done, s.retry, s.dead];
        names.extend(s.uncertain);
        names.extend(s.discarded);
        names.extend(s.others.iter().map(|(name, _)| *name));
        names
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_stored_status_maps_onto_the_lifecycle_and_back() {
        for queue in [OUTBOX, NOTIFICATIONS, WEBHOOK_DELIVERIES] {
            for name in queue.statuses() {
                let state = queue.state_of(name).unwrap_or_else(|| panic!("{}: {name}", queue.name));
                if !queue.stored.others.iter().any(|(other, _)| *other == name) {
                    assert_eq!(queue.stored_name(state), Some(name), "{}: {name}", queue.name);
                }
            }
        }
        assert_eq!(OUTBOX.state_of("claimed"), Some(State::Leased));
        assert_eq!(NOTIFICATIONS.state_of("no_contact"), Some(State::Dead));
        assert_eq!(WEBHOOK_DELIVERIES.state_of("failed"), Some(State::Dead));
        assert_eq!(WEBHOOK_DELIVERIES.stored_name(State::Uncertain), None);
    }
}
