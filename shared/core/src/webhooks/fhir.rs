//! The id-only FHIR payload (DESIGN.md §5f, `payloadFormat: fhir-id-only`): a FHIR R5 `Bundle` of
//! type `subscription-notification` whose one entry is a `SubscriptionStatus` carrying the
//! endpoint's status, the event number(s) and `focus` references such as `Appointment/{id}` —
//! identifiers only, no resource content (FHIR's `id-only` payload content). Heartbeats are the same
//! Bundle with `type: heartbeat` and no `notificationEvent`.
//!
//! Invariants:
//! - Ids, numbers, codes and times only: the `focus` names the event's resource by type and id, the
//!   `subscription` reference names the endpoint; nothing else about a patient.
//! - `eventsSinceSubscriptionStart` and `eventNumber` are `integer64` (decimal strings in FHIR JSON):
//!   the delivery number, the same one the CloudEvents format carries as `sequence`.
//! - Signed with the same Standard Webhooks headers as every delivery; sent as
//!   `application/fhir+json` ([`CONTENT_TYPE`]).
//! - `tests/e2e` validates every such body with the PyPI `fhir.resources` R5 models.

use chrono::{DateTime, Utc};
use serde_json::{json, Value};

use super::heartbeat::Heartbeat;
use super::sequence::Sequence;
use crate::contract::webhook_bodies::fhir_resource_type;
use crate::events::Envelope;
use crate::ids::WebhookEndpointId;

/// The stored and answered name of this format.
pub const FORMAT: &str = "fhir-id-only";
/// The media type of a FHIR JSON body.
pub const CONTENT_TYPE: &str = "application/fhir+json";

fn bundle(
    notification: &str,
    endpoint: WebhookEndpointId,
    status: &str,
    last: Sequence,
    at: DateTime<Utc>,
    events: Vec<Value>,
) -> Value {
    let status_id = uuid::Uuid::from(ulid::Ulid::generate());
    let mut subscription_status = json!({
        "resourceType": "SubscriptionStatus",
        "status": status,
        "type": notification,
        "eventsSinceSubscriptionStart": last.0.to_string(),
        "subscription": { "reference": format!("Subscription/{endpoint}") },
    });
    if !events.is_empty() {
        subscription_status["notificationEvent"] = Value::Array(events);
    }
    json!({
        "resourceType": "Bundle",
        "id": ulid::Ulid::generate().to_string(),
        "type": "subscription-notification",
        "timestamp": at,
        "entry": [{
            "fullUrl": format!("urn:uuid:{status_id}"),
            "resource": subscription_status,
        }],
    })
}

/// The notification of one numbered delivery of `envelope`.
pub fn event_notification(
    envelope: &Envelope,
    sequence: Sequence,
    endpoint: WebhookEndpointId,
    status: &str,
) -> Value {
    let focus = format!("{}/{}", fhir_resource_type(envelope.resource_type), envelope.resource_id);
    let event = json!({
        "eventNumber": sequence.0.to_string(),
        "timestamp": envelope.occurred_at,
        "focus": { "reference": focus },
    });
    bundle("event-notification", endpoint, status, sequence, Utc::now(), vec![event])
}

/// A heartbeat: the status and the last number, no event.
pub fn heartbeat(beat: &Heartbeat) -> Value {
    bundle("heartbeat", beat.endpoint_id, &beat.status, beat.last_sequence, beat.at, Vec::new())
}
