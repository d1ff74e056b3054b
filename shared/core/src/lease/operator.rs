//! Operator actions on a lease queue, decided once for every queue: which lifecycle states each
//! action accepts, the 409 that names why an action is stale or pointless, and the one statement
//! that makes the change (a fresh attempt budget for retry and replay, `discarded` for discard).
//!
//! | action    | accepts (lifecycle)          | becomes |
//! |-----------|------------------------------|---------|
//! | `retry`   | per queue, from `dead`, `retry`, `uncertain` | `ready` now, `attempts` = 0 |
//! | `replay`  | `done` (queues that replay)  | `ready` now, `attempts` = 0 |
//! | `discard` | per queue, from `dead`, `retry`, `uncertain` | `discarded` (final) |
//!
//! Invariants:
//! - A `leased` row is never touched (its holder's mark is fenced anyway); a final row (`done` for
//!   a retry, `discarded`, `stale`) answers a `Conflict` naming its status and why; nothing is
//!   written before [`decide`] says yes.
//! - Retry and replay start a fresh attempt budget ([`crate::lease::Queue::retry_set`]), so they
//!   always lead to at least one real attempt; the old attempts stay in the history and the audit
//!   row (written by the caller, on the same transaction).

use serde::Serialize;

use super::{Queue, State, NOTIFICATIONS, OUTBOX, WEBHOOK_DELIVERIES};
use crate::error::DomainError;

/// What an operator does to a row of any queue.
// The name is stored in `operator_actions.action`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
#[schemars(inline)]
pub enum ActionKind {
    Retry,
    Replay,
    Discard,
}

impl ActionKind {
    pub const ALL: &'static [ActionKind] = &[ActionKind::Retry, ActionKind::Replay, ActionKind::Discard];

    /// The name stored in `operator_actions.action`.
    pub const fn as_str(self) -> &'static str {
        match self {
            ActionKind::Retry => "retry",
            ActionKind::Replay => "replay",
            ActionKind::Discard => "discard",
        }
    }

    pub fn parse(name: &str) -> Option<ActionKind> {
        Self::ALL.iter().copied().find(|action| action.as_str() == name)
    }
}

impl std::fmt::Display for ActionKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which lifecycle states each operator action accepts on one queue (empty: not offered there).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Actions {
    pub queue: Queue,
    /// How answers name one row ("outbox row", "delivery", "webhook delivery").
    pub noun: &'static str,
    pub retry: &'static [State],
    pub replay: &'static [State],
    pub discard: &'static [State],
}

/// The outbox: retry a dead or retrying row, replay a dispatched one, discard a dead one.
pub const OUTBOX_ACTIONS: Actions = Actions {
    queue: OUTBOX,
    noun: "outbox row",
    retry: &[State::Dead, State::Retry],
    replay: &[State::Done],
    discard: &[State::Dead],
};

/// Notifications: retry or discard a dead (`dead`, `no_contact`), retrying or uncertain one; discard
/// a deferred one (a retry of it would only be deferred again).
pub const NOTIFICATION_ACTIONS: Actions = Actions {
    queue: NOTIFICATIONS,
    noun: "delivery",
    retry: &[State::Dead, State::Retry, State::Uncertain],
    replay: &[],
    discard: &[State::Dead, State::Retry, State::Held, State::Uncertain],
};

/// Webhook deliveries: retry (or recover) or discard a failed or retrying one.
pub const WEBHOOK_ACTIONS: Actions = Actions {
    queue: WEBHOOK_DELIVERIES,
    noun: "webhook delivery",
    retry: &[State::Dead, State::Retry],
    replay: &[],
    discard: &[State::Dead, State::Retry],
};

/// What an accepted action does: the stored statuses before and after, and the change's SET clause.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub before: &'static str,
    pub after: &'static str,
    pub set: String,
}

impl Actions {
    /// The states `action` accepts here.
    pub fn accepted(&self, action: ActionKind) -> &'static [State] {
        match action {
            ActionKind::Retry => self.retry,
            ActionKind::Replay => self.replay,
            ActionKind::Discard => self.discard,
        }
    }

    /// The actions this queue offers (those that accept some state), in [`ActionKind::ALL`] order:
    /// what its answers' `action` may name.
    pub fn offered(&self) -> Vec<&'static str> {
        ActionKind::ALL
            .iter()
            .filter(|action| !self.accepted(**action).is_empty())
            .map(|action| action.as_str())
            .collect()
    }

    /// The stored statuses `action` accepts here (what a bulk action selects).
    pub fn accepted_statuses(&self, action: ActionKind) -> Vec<&'static str> {
        let accepted = self.accepted(action);
        self.queue
            .statuses()
            .into_iter()
            .filter(|name| self.queue.state_of(name).is_some_and(|state| accepted.contains(&state)))
            .collect()
    }

    /// Whether `action` may run on a row stored as `status`; `Conflict` naming why when it may not.
    pub fn decide(&self, action: ActionKind, status: &str) -> Result<Decision, DomainError> {
        let noun = self.noun;
        let accepted = self.accepted(action);
        if accepted.is_empty() {
            return Err(DomainError::Conflict(format!("a {noun} cannot be {}", past(action))));
        }
        let state = self
            .queue
            .state_of(status)
            .ok_or_else(|| DomainError::Conflict(format!("the {noun} has an unknown status {status}")))?;
        let before = self.queue.statuses().into_iter().find(|name| *name == status).unwrap_or("unknown");
        if !accepted.contains(&state) {
            let why = match state {
                State::Leased => "it is being worked on now (leased); try again once its attempt ends",
                State::Done => "it already took effect",
                State::Discarded => "it was discarded (final)",
                State::Stale => "the effect no longer applies and is never carried out (final)",
                _ => "",
            };
            let needs = self.accepted_statuses(action).join(" or ");
            let why = if why.is_empty() { String::new() } else { format!(": {why}") };
            return Err(DomainError::Conflict(format!(
                "cannot {action} a {noun} that is {status}{why}; {action} needs a {needs} {noun}"
            )));
        }
        let (after, set) = match action {
            ActionKind::Retry | ActionKind::Replay => (self.queue.stored.ready, self.queue.retry_set()),
            ActionKind::Discard => {
                let discarded = self
                    .queue
                    .stored
                    .discarded
                    .ok_or_else(|| DomainError::Conflict(format!("a {noun} cannot be discarded")))?;
                (discarded, self.queue.discard_set().unwrap_or_default())
            }
        };
        Ok(Decision { before, after, set })
    }
}

fn past(action: ActionKind) -> &'static str {
    match action {
        ActionKind::Retry => "retried",
        ActionKind::Replay => "replayed",
        ActionKind::Discard => "discarded",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn accepted(actions: &Actions, action: ActionKind) -> Vec<&'static str> {
        let mut names = actions.accepted_statuses(action);
        names.sort_unstable();
        names
    }

    #[test]
    fn each_queue_accepts_its_statuses_only() {
        assert_eq!(accepted(&OUTBOX_ACTIONS, ActionKind::Retry), ["dead", "retry"]);
        assert_eq!(accepted(&OUTBOX_ACTIONS, ActionKind::Replay), ["dispatched"]);
        assert_eq!(accepted(&OUTBOX_ACTIONS, ActionKind::Discard), ["dead"]);
        let notifications = ["dead", "no_contact", "retry", "uncertain"];
        assert_eq!(accepted(&NOTIFICATION_ACTIONS, ActionKind::Retry), notifications);
        assert_eq!(
            accepted(&NOTIFICATION_ACTIONS, ActionKind::Discard),
            ["dead", "deferred", "no_contact", "retry", "uncertain"]
        );
        assert_eq!(accepted(&WEBHOOK_ACTIONS, ActionKind::Retry), ["failed", "retry"]);
        assert_eq!(accepted(&WEBHOOK_ACTIONS, ActionKind::Discard), ["failed", "retry"]);
    }

    #[test]
    fn a_stale_or_pointless_action_is_a_conflict_naming_why() {
        let refused = |actions: &Actions, action, status| match actions.decide(action, status) {
            Err(DomainError::Conflict(message)) => message,
            other => panic!("{other:?}"),
        };
        let message = refused(&OUTBOX_ACTIONS, ActionKind::Retry, "claimed");
        assert!(message.contains("claimed") && message.contains("leased"), "{message}");
        let message = refused(&NOTIFICATION_ACTIONS, ActionKind::Retry, "stale");
        assert!(message.contains("no longer applies"), "{message}");
        let message = refused(&NOTIFICATION_ACTIONS, ActionKind::Replay, "sent");
        assert!(message.contains("cannot be replayed"), "{message}");
        let message = refused(&OUTBOX_ACTIONS, ActionKind::Discard, "discarded");
        assert!(message.contains("final"), "{message}");
    }

    #[test]
    fn retry_and_replay_start_a_fresh_budget() {
        let decision = OUTBOX_ACTIONS.decide(ActionKind::Retry, "dead").unwrap();
        assert_eq!((decision.before, decision.after), ("dead", "pending"));
        assert!(decision.set.contains("attempts = 0"), "{}", decision.set);
        let decision = NOTIFICATION_ACTIONS.decide(ActionKind::Discard, "uncertain").unwrap();
        assert_eq!(decision.after, "discarded");
    }
}
