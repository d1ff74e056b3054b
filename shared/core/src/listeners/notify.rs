//! The [`Notifier`] seam listeners write through, and the built-in [`DeliveryLog`].
//!
//! Invariants:
//! - A notification carries ids and a template id only — never names, contact details, reasons or
//!   any other content. Rendering (and looking up contact details) happens at send time, in
//!   [`crate::delivery`], behind this seam: the providers (SES v2, SNS, files) sit behind the sender.
//! - Every notification has the idempotency key `"{event_id}:{listener}"`, unique in the database, and
//!   providers receive the same key, so a redelivered event never notifies twice.
//! - The built-in notifier writes on the listener's transaction, so the notification, the listener's
//!   receipt and any other effect commit together or not at all. [`Notified::AlreadySent`] says that
//!   the key was used before: nothing new was recorded, and the listener reports no new effect.

use async_trait::async_trait;
use ulid::Ulid;

use super::Listener;
use crate::db::Tx;
use crate::delivery::{self, NewDelivery};
use crate::ids::{EventId, NotificationId, WorkspaceId};

pub use crate::delivery::RecipientKind;

/// What a listener asks to be sent: ids and a template, nothing else.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewNotification {
    pub workspace_id: WorkspaceId,
    pub event_id: EventId,
    pub listener: Listener,
    pub recipient_kind: RecipientKind,
    pub recipient_id: Ulid,
    /// A template id such as `appointment.booking_confirmation`.
    pub template: &'static str,
    /// How soon it should go out ([`crate::delivery::Priority::of`]).
    pub priority: crate::delivery::Priority,
}

impl NewNotification {
    /// `"{event_id}:{listener}"`: the key every provider deduplicates on.
    pub fn idempotency_key(&self) -> String {
        self.delivery().idempotency_key()
    }

    fn delivery(&self) -> NewDelivery<'static> {
        NewDelivery {
            workspace_id: self.workspace_id,
            event_id: self.event_id,
            listener: self.listener.as_str(),
            recipient_kind: self.recipient_kind,
            recipient_id: self.recipient_id,
            template: self.template,
            priority: self.priority,
        }
    }
}

/// Whether the notifier did something new.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Notified {
    /// A new delivery was committed with the listener's receipt; a sender delivers it.
    Recorded(NotificationId),
    /// The idempotency key was already used: nothing new was recorded or will be sent.
    AlreadySent,
}

/// Why a notification could not be handed over.
#[derive(Debug, thiserror::Error)]
pub enum NotifyError {
    #[error("database error: {0}")]
    Db(#[from] tokio_postgres::Error),
    /// A provider refused or was unreachable; `code` is stable, `message` carries no health data.
    #[error("provider error {code}: {message}")]
    Provider { code: String, message: String, retryable: bool },
}

/// Where listeners send notifications. Implementations must deduplicate on
/// [`NewNotification::idempotency_key`].
#[async_trait]
pub trait Notifier: Send + Sync {
    async fn notify(&self, tx: &Tx<'_>, notification: &NewNotification) -> Result<Notified, NotifyError>;
}

/// The built-in notifier: commits a `pending` delivery (see [`crate::delivery`]) on the listener's
/// transaction.
#[derive(Debug, Clone, Copy, Default)]
pub struct DeliveryLog;

#[async_trait]
impl Notifier for DeliveryLog {
    async fn notify(&self, tx: &Tx<'_>, n: &NewNotification) -> Result<Notified, NotifyError> {
        Ok(match delivery::enqueue(tx, &n.delivery()).await? {
            Some(id) => Notified::Recorded(id),
            None => Notified::AlreadySent,
        })
    }
}
