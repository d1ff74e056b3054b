//! Messages are untrusted pointers: a delivery is checked against the `events` row before anything
//! acts on it.
//!
//! Invariants:
//! - The check is folded into the receipt insert ([`CHECK_AND_RECEIPT`]): ONE statement reads the
//!   stored event and inserts the receipt only when the claimed workspace, type, version, resource and
//!   resource version match it. No extra round trip on the happy path.
//! - A mismatch or an unknown id is a [`Rejection`] with a stable reason code: the transaction rolls
//!   back (no receipt, no effect), the run fails permanently for that message alone, and exactly one
//!   structured log line (ids and the code) and one `Rejected` EMF metric (by listener and reason) are
//!   written ([`report`]).
//! - After the check, the listener works from the STORED envelope (occurredAt, actor, correlation and
//!   causation from the database), never from what the message said.
//! - Both transports go through here: the listener Lambda (and the local SQS consumers of `clinic dev`
//!   and `clinic chaos`) with the CloudEvents `source` the message carried, the local transport with
//!   no wire attribute to check (`source: None`).

use std::sync::LazyLock;

use super::{is_routed, Listener, ListenerError};
use crate::db::{sql, Tx};
use crate::events::read::{envelope_from_row, ENVELOPE_COLUMNS, ENVELOPE_COLUMN_COUNT};
use crate::events::Envelope;

/// The namespace of listener metrics.
pub use crate::telemetry::emf::LISTENERS as NAMESPACE;

macro_rules! rejections {
    ($($variant:ident => $name:literal;)+) => {
        /// Why a delivery was rejected. The codes are stable (logs, metrics, tests).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Rejection {
            $($variant,)+
        }

        impl Rejection {
            pub const ALL: &'static [Rejection] = &[$(Rejection::$variant,)+];

            pub const fn as_str(self) -> &'static str {
                match self {
                    $(Rejection::$variant => $name,)+
                }
            }

            pub fn parse(code: &str) -> Option<Rejection> {
                match code {
                    $($name => Some(Rejection::$variant),)+
                    _ => None,
                }
            }
        }

        // The codes, in declaration order.
        crate::inline_schema!(Rejection, |_: &mut schemars::SchemaGenerator| {
            schemars::json_schema!({ "type": "string", "enum": [$($name,)+] })
        });
    };
}

rejections! {
    UnknownEvent => "unknown_event";
    TenantMismatch => "tenant_mismatch";
    TypeMismatch => "type_mismatch";
    SubjectMismatch => "subject_mismatch";
    VersionMismatch => "version_mismatch";
    SourceMismatch => "source_mismatch";
    ListenerNotRouted => "listener_not_routed";
}

impl Rejection {
    /// The permanent listener error of this rejection (`code` = the reason code).
    pub fn into_error(self, delivery: &Delivery<'_>) -> ListenerError {
        ListenerError::Permanent {
            code: self.as_str(),
            message: format!(
                "{} rejected event {} for {}: {}",
                delivery.transport,
                delivery.envelope.id,
                delivery.listener,
                self.as_str()
            ),
        }
    }
}

pub use crate::events::event_source;

/// The `source` a message carried and the prefix this deployment publishes with.
#[derive(Debug, Clone, Copy)]
pub struct SourceClaim<'a> {
    pub claimed: &'a str,
    pub prefix: &'a str,
}

/// One delivery of one event to one listener, as the transport received it.
#[derive(Debug, Clone, Copy)]
pub struct Delivery<'a> {
    pub listener: Listener,
    /// What the message claims (the CloudEvent's `data`, checked against the CloudEvent attributes by
    /// the parser); never trusted beyond being a pointer.
    pub envelope: &'a Envelope,
    /// The CloudEvents `source`, when the transport carries one.
    pub source: Option<SourceClaim<'a>>,
    /// `sqs`, `local`, …: for the log line.
    pub transport: &'static str,
    /// The transport's message id, when it has one: for the log line.
    pub message_id: Option<&'a str>,
    /// When the transport sent the message (SQS `SentTimestamp`; the hand-over for the local
    /// transport): the start of the run's `queue.wait_ms`.
    pub sent_at: Option<chrono::DateTime<chrono::Utc>>,
}

impl<'a> Delivery<'a> {
    /// An in-process delivery (the local transport): no wire attributes.
    pub fn local(listener: Listener, envelope: &'a Envelope) -> Self {
        Delivery {
            listener,
            envelope,
            source: None,
            transport: "local",
            message_id: None,
            sent_at: Some(chrono::Utc::now()),
        }
    }
}

/// What the check found, when the delivery is genuine.
#[derive(Debug)]
pub(super) enum Checked {
    /// The receipt was inserted: run the work with the stored envelope, then commit.
    Fresh(Box<Envelope>),
    /// The receipt existed: an earlier delivery did the work.
    Duplicate,
}

/// Reads the stored event and inserts the receipt only when the claim matches it; answers the stored
/// envelope and how many receipts were inserted (0 or 1). No row: the id exists nowhere.
pub(super) static CHECK_AND_RECEIPT: LazyLock<String> = LazyLock::new(|| {
    format!(
        "WITH receipt AS ( \
             INSERT INTO listener_receipts (listener, event_id) \
             SELECT $1, e.id FROM events e \
              WHERE e.id = $2 AND e.workspace_id = $3 AND e.type = $4 AND e.version = $5 \
                AND e.resource_type = $6 AND e.resource_id = $7 AND e.resource_version = $8 \
             ON CONFLICT DO NOTHING RETURNING 1) \
         SELECT {ENVELOPE_COLUMNS}, (SELECT count(*) FROM receipt) AS inserted \
           FROM events e WHERE e.id = $2"
    )
});

/// The check and the receipt, in the listener's transaction `tx`.
pub(super) async fn check_and_receipt(tx: &Tx<'_>, delivery: &Delivery<'_>) -> Result<Checked, Rejected> {
    let claim = delivery.envelope;
    if !is_routed(claim.event_type, delivery.listener) {
        return Err(Rejected::Rejection(Rejection::ListenerNotRouted));
    }
    let resource_id = uuid::Uuid::from(claim.resource_id);
    let row = sql::query_opt(
        tx,
        &CHECK_AND_RECEIPT,
        &[
            &delivery.listener.as_str(),
            &claim.id,
            &claim.workspace_id,
            &claim.event_type.as_str(),
            &claim.version,
            &claim.resource_type.as_str(),
            &resource_id,
            &claim.resource_version,
        ],
    )
    .await?;
    let Some(row) = row else { return Err(Rejected::Rejection(Rejection::UnknownEvent)) };
    let inserted: i64 = row.get(ENVELOPE_COLUMN_COUNT);
    // A stored row this build cannot read (an event type it does not know) is not this message's
    // fault: retryable (a newer build reads it).
    let stored = envelope_from_row(&row, 0).map_err(|error| {
        Rejected::Error(ListenerError::Retryable { code: "event_unreadable", message: error.to_string() })
    })?;
    if let Some(rejection) = mismatch(claim, &stored, delivery.source) {
        return Err(Rejected::Rejection(rejection));
    }
    Ok(if inserted == 1 { Checked::Fresh(Box::new(stored)) } else { Checked::Duplicate })
}

/// The first attribute of `claim` that disagrees with `stored` (ids are compared as the database
/// compared them; the check order is the order of the reason codes).
fn mismatch(claim: &Envelope, stored: &Envelope, source: Option<SourceClaim<'_>>) -> Option<Rejection> {
    if claim.workspace_id != stored.workspace_id {
        return Some(Rejection::TenantMismatch);
    }
    if claim.event_type != stored.event_type || claim.version != stored.version {
        return Some(Rejection::TypeMismatch);
    }
    if claim.resource_type != stored.resource_type || claim.resource_id != stored.resource_id {
        return Some(Rejection::SubjectMismatch);
    }
    if claim.resource_version != stored.resource_version {
        return Some(Rejection::VersionMismatch);
    }
    match source {
        Some(source) if source.claimed != event_source(source.prefix, stored.workspace_id) => {
            Some(Rejection::SourceMismatch)
        }
        _ => None,
    }
}

/// A failed check: a rejection of the message, or an error of the database.
#[derive(Debug)]
pub(super) enum Rejected {
    Rejection(Rejection),
    Error(ListenerError),
}

impl From<tokio_postgres::Error> for Rejected {
    fn from(error: tokio_postgres::Error) -> Self {
        Rejected::Error(error.into())
    }
}

/// The one log line of a rejection (its `Rejected` metric is printed by the host, [`rejected_emf`],
/// as the process's metrics mode says).
pub(super) fn report(delivery: &Delivery<'_>, rejection: Rejection) {
    tracing::warn!(
        transport = delivery.transport,
        message_id = delivery.message_id.unwrap_or(""),
        event_id = %delivery.envelope.id,
        workspace_id = %delivery.envelope.workspace_id,
        event_type = delivery.envelope.event_type.as_str(),
        listener = delivery.listener.as_str(),
        code = rejection.as_str(),
        "message rejected: it does not match the event log; nothing done"
    );
}

/// The EMF line of one rejection (dimensions Listener and Reason, metric `Rejected` = 1).
pub fn rejected_emf(listener: Listener, rejection: Rejection, timestamp_ms: i64) -> serde_json::Value {
    let dimensions = [("Listener", listener.as_str()), ("Reason", rejection.as_str())];
    crate::telemetry::emf::line(NAMESPACE, timestamp_ms, &dimensions, &[("Rejected", "Count", 1)])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reason_codes_are_stable_and_round_trip() {
        let codes: Vec<&str> = Rejection::ALL.iter().map(|r| r.as_str()).collect();
        assert_eq!(
            codes,
            [
                "unknown_event",
                "tenant_mismatch",
                "type_mismatch",
                "subject_mismatch",
                "version_mismatch",
                "source_mismatch",
                "listener_not_routed"
            ]
        );
        for rejection in Rejection::ALL {
            assert_eq!(Rejection::parse(rejection.as_str()), Some(*rejection));
        }
        assert_eq!(Rejection::parse("db_error"), None);
    }

    #[test]
    fn the_emf_line_names_listener_and_reason_only() {
        let line = rejected_emf(Listener::CancelFutureAppointments, Rejection::UnknownEvent, 7);
        assert_eq!(line["Rejected"], 1);
        assert_eq!(line["Reason"], "unknown_event");
        assert_eq!(line["Listener"], "cancel_future_appointments");
        assert_eq!(line["_aws"]["CloudWatchMetrics"][0]["Dimensions"][0][1], "Reason");
    }
}
