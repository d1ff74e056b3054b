//! Delivery to people (DESIGN.md §5b): the `notifications` table is a small outbox of its own.
//!
//! A listener commits what must be sent — ids and a template id only — with its receipt
//! ([`enqueue`], through the listeners' `Notifier` seam). A [`Sender`] then claims due rows with
//! `FOR UPDATE SKIP LOCKED` under a lease, renders the message from the reloaded resources, calls a
//! [`Provider`] (SES v2, SNS, files, logs) with no transaction open, and marks the row, fenced by its
//! claim token. `available_at` is the one due clock of every live status (creation, backoff end,
//! lease end), served by one partial index.
//!
//! | status       | moved in by | moved out by |
//! |--------------|-------------|--------------|
//! | `pending`    | [`enqueue`] in the listener's transaction; an operator `retry` ([`admin`]) | [`Sender`] claim → `sending` |
//! | `sending`    | claim: a due `pending`/`retry`/`deferred` row, or an `uncertain` row when the policy is [`UncertainPolicy::Resend`]; lease = `available_at` | the claim holder's mark → `sent`, `retry`, `deferred`, `suppressed`, `dead`, `no_contact`, `stale`; or, when the lease expired (the sender died), the next claim → `uncertain` (→ `dead`, `attempts_exhausted`, once `attempts` reached the ceiling) |
//! | `uncertain`  | claim: a `sending` row whose lease expired — the provider may or may not have accepted it | [`UncertainPolicy::Resend`]: the next claim (same idempotency key); [`UncertainPolicy::Hold`]: an operator `retry` or `discard` |
//! | `sent`       | mark: the provider accepted it (`provider_message_id`, `sent_at` kept) | final |
//! | `retry`      | mark: a retryable provider failure and `attempts` < the ceiling; `available_at` = now + jittered exponential backoff | claim once due |
//! | `dead`       | mark: the ceiling was reached or the provider refused for good | operator `retry` (→ `pending`, a fresh attempt budget) or `discard` |
//! | `no_contact` | mark: the recipient has no usable address (no email, no phone, or no provider for the channel) | final (an operator `retry` re-sends after the contact data was fixed) |
//! | `opted_out`  | (rows from before V22: the patient had opted out of notifications; now `suppressed`) | final |
//! | `deferred`   | mark: the contact policy ([`policy`]) found the recipient inside their quiet hours; `available_at` = the first instant they end, the attempt given back (the lease queue's `held`: a delay, not a failure) | claim once due (the policy decides again) |
//! | `suppressed` | mark: the contact policy said never — `last_error_code` = `opted_out`, `channel_not_allowed` or `no_consent` | final (accounted like a send) |
//! | `stale`      | mark: the render found the notice no longer true — the listener's freshness rule re-applied at send time ([`render`]: cancelled, rescheduled since the event, patient deleted); the reason code in `last_error_code` | final (an operator `retry` answers 409) |
//! | `discarded`  | operator `discard` | final |
//!
//! Invariants:
//! - Rows hold ids, a template id, a channel name, codes, counters and the provider's message id —
//!   never names, addresses or text. The rendered message exists only in memory, for the provider
//!   call ([`render`]); it is never stored, logged, put in an event, a message or a metric.
//! - The idempotency key `"{event_id}:{listener}"` is unique: a redelivered listener message finds the
//!   row and enqueues nothing. Providers receive the same key wherever their API takes one (the email
//!   carries it as a header; the file provider names its file by it, so a resend replaces the file).
//! - An email of a kind the patient may opt out of carries an RFC 8058 one-click link
//!   (`List-Unsubscribe`, `List-Unsubscribe-Post`) with a signed, expiring token ([`unsubscribe`]),
//!   when the sender has [`DeliveryConfig::unsubscribe`]; the link, like the text, exists only in the
//!   rendered message.
//! - The lease rules (claim, expiry to `uncertain`, burial at the ceiling, renewal, fence, operator
//!   retry and discard) are the lease queue's ([`crate::lease`], [`crate::lease::NOTIFICATIONS`]):
//!   every mark is fenced by the claim token, which every move out of `sending` clears, so a sender
//!   whose lease was taken over changes nothing. No transaction is open across a provider call; each provider call has a
//!   timeout below the lease.
//! - At-least-once to the provider: a crash between the provider's answer and the mark leaves the row
//!   `sending` until its lease ends, then `uncertain`, and the configured [`UncertainPolicy`] decides.
//! - Every render that loads a patient's personal fields records a disclosure (purpose = the
//!   listener, event id) in the transaction that loads them.

pub mod admin;
mod config;
mod enqueue;
pub mod freshness;
pub mod policy;
mod priority;
mod provider;
pub mod render;
mod sender;
pub mod sms;
mod store;
pub mod unsubscribe;

pub use config::{DeliveryConfig, NotifierKind, SenderSettings, UncertainPolicy, DEFAULT_BATCH, PACE_WAIT};
pub use enqueue::{enqueue, list, NewDelivery, NotificationItem};
pub use priority::{Priority, SAME_DAY};
pub use provider::{
    Accepted, Channel, FileProvider, LogProvider, OutgoingMessage, Provider, ProviderError, Providers,
    RECIPIENT_OPTED_OUT, THROTTLED,
};
pub use sender::{DeliveryOutcome, SendError, SendReport, Sender, NO_TOKEN, SEND_MARGIN};
pub use store::{ClaimedDelivery, DeliveryClaim};

use serde::Serialize;

/// Who a notification is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
#[schemars(inline)]
pub enum RecipientKind {
    Patient,
    Practitioner,
}

impl RecipientKind {
    pub const fn as_str(self) -> &'static str {
        match self {
            RecipientKind::Patient => "patient",
            RecipientKind::Practitioner => "practitioner",
        }
    }

    pub fn parse(name: &str) -> Option<RecipientKind> {
        match name {
            "patient" => Some(RecipientKind::Patient),
            "practitioner" => Some(RecipientKind::Practitioner),
            _ => None,
        }
    }
}

/// The statuses of a delivery (names as stored).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
#[schemars(inline)]
pub enum DeliveryStatus {
    Pending,
    Sending,
    Uncertain,
    Sent,
    Retry,
    Dead,
    NoContact,
    OptedOut,
    Discarded,
    Stale,
    Deferred,
    Suppressed,
}

impl DeliveryStatus {
    pub const ALL: &'static [DeliveryStatus] = &[
        DeliveryStatus::Pending,
        DeliveryStatus::Sending,
        DeliveryStatus::Uncertain,
        DeliveryStatus::Sent,
        DeliveryStatus::Retry,
        DeliveryStatus::Dead,
        DeliveryStatus::NoContact,
        DeliveryStatus::OptedOut,
        DeliveryStatus::Discarded,
        DeliveryStatus::Stale,
        DeliveryStatus::Deferred,
        DeliveryStatus::Suppressed,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            DeliveryStatus::Pending => "pending",
            DeliveryStatus::Sending => "sending",
            DeliveryStatus::Uncertain => "uncertain",
            DeliveryStatus::Sent => "sent",
            DeliveryStatus::Retry => "retry",
            DeliveryStatus::Dead => "dead",
            DeliveryStatus::NoContact => "no_contact",
            DeliveryStatus::OptedOut => "opted_out",
            DeliveryStatus::Discarded => "discarded",
            DeliveryStatus::Stale => "stale",
            DeliveryStatus::Deferred => "deferred",
            DeliveryStatus::Suppressed => "suppressed",
        }
    }

    pub fn parse(name: &str) -> Option<DeliveryStatus> {
        Self::ALL.iter().copied().find(|status| status.as_str() == name)
    }
}

/// A delivery's `channel` as stored and answered: `auto` when enqueued, the channel the sender chose
/// from the recipient's contact data ([`crate::domain::contact::Channel`]), or `none` when it sent
/// nothing (V5's CHECK). Use with `#[schemars(with = "StoredChannel")]`.
pub struct StoredChannel;

crate::inline_schema!(StoredChannel, |_: &mut schemars::SchemaGenerator| {
    let chosen = crate::domain::contact::Channel::ALL.iter().map(|channel| channel.as_str());
    let names: Vec<&str> = std::iter::once("auto").chain(chosen).chain(["none"]).collect();
    schemars::json_schema!({ "type": "string", "enum": names })
});

#[cfg(test)]
mod tests {
    /// The notification statuses are the glossary's column for `notifications` (the lease module
    /// sits below delivery and does not read it).
    #[test]
    fn the_notification_statuses_are_the_lease_glossarys() {
        let mut stored: Vec<&str> = super::DeliveryStatus::ALL.iter().map(|status| status.as_str()).collect();
        let mut glossary = crate::lease::NOTIFICATIONS.statuses();
        stored.sort_unstable();
        glossary.sort_unstable();
        assert_eq!(stored, glossary);
    }

    use super::*;

    #[test]
    fn names_round_trip() {
        for status in DeliveryStatus::ALL {
            assert_eq!(DeliveryStatus::parse(status.as_str()), Some(*status));
        }
        assert_eq!(DeliveryStatus::parse("recorded"), None);
        assert_eq!(RecipientKind::parse("patient"), Some(RecipientKind::Patient));
        assert_eq!(RecipientKind::parse("member"), None);
    }
}
