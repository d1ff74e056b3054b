//! The published form of an event: a CloudEvents 1.0.2 structured-mode JSON document. The one
//! builder ([`to_cloud_event`] for a listener queue, [`to_published_event`] for a subscriber) and
//! parser of SQS bodies and webhook payloads.
//!
//! `specversion` "1.0", `id` = event id, `source` = `<prefix>/workspaces/<workspaceId>`, `type` =
//! the published name `clinic.<event type>.v<version>` (e.g. `clinic.appointment.created.v1`),
//! `dataschema` = the URI of that version's JSON Schema ([`crate::contract::dataschema`]), `subject` =
//! the resource id, `time` = `occurredAt`, `datacontenttype` "application/json", `data` = the
//! envelope, and the extensions `tenantid` (workspace id), `correlationid`, `causationid`,
//! `traceparent` (the CloudEvents distributed-tracing extension: the W3C trace context of the request
//! that committed the event, when it has one), on listener queues `listener`, and on webhook bodies
//! `sequence` (the delivery's number, [`crate::webhooks::sequence`]).
//!
//! [`parse_message`] (and [`parse_cloud_event`]) is strict about what it acts on: a body that is not
//! such a document, names no or an unknown listener, or whose attributes disagree with its envelope is
//! a [`MessageError`] — permanent for that message. It ignores attributes and envelope fields it does
//! not know, and a missing `dataschema` (a message of an older build), so the contract can grow. A
//! `traceparent` that is not a valid version-00 trace context is dropped, never a reason to reject:
//! it serves tracing only, and the parsed envelope carries the valid one ([`Envelope::traceparent`]).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

pub use crate::events::event_source;
use crate::events::Envelope;
use crate::listeners::map::Listener;
use crate::telemetry::TraceParent;

pub const SPEC_VERSION: &str = "1.0";

pub const DATA_CONTENT_TYPE: &str = "application/json";

/// A structured-mode CloudEvent carrying an envelope.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CloudEvent {
    /// Always "1.0".
    pub specversion: String,
    /// The event id.
    pub id: String,
    /// `<prefix>/workspaces/<workspaceId>`.
    pub source: String,
    /// The published name, e.g. `clinic.appointment.created.v1`.
    #[serde(rename = "type")]
    pub event_type: String,
    /// The URI of the JSON Schema `data` validates against (absent only in messages of older builds).
    #[serde(default)]
    #[schemars(extend("format" = "uri"))]
    pub dataschema: String,
    /// The resource id.
    pub subject: String,
    /// `occurredAt`.
    pub time: DateTime<Utc>,
    /// Always "application/json".
    pub datacontenttype: String,
    /// The identifier-only envelope.
    pub data: Envelope,
    /// Extension: the workspace id.
    pub tenantid: String,
    /// Extension: the correlation id.
    pub correlationid: String,
    /// Extension: the causation id.
    pub causationid: String,
    /// Extension on listener queues: the listener the message starts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub listener: Option<String>,
    /// Extension on webhook bodies (the CloudEvents `sequence` extension): the delivery's number in
    /// its endpoint's sequence, zero-padded to 19 digits so string order is number order; dense per
    /// endpoint (1, 2, 3 …) and the same on every attempt, recover and replay.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sequence: Option<String>,
    /// Extension (distributed tracing): the W3C trace context of the request that committed the event.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "lenient_traceparent")]
    pub traceparent: Option<TraceParent>,
}

/// A `traceparent` attribute that does not parse reads as absent (tracing only; see the module docs).
fn lenient_traceparent<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<TraceParent>, D::Error> {
    let text = Option::<serde_json::Value>::deserialize(deserializer)?;
    Ok(text.as_ref().and_then(serde_json::Value::as_str).and_then(TraceParent::parse))
}

/// The CloudEvents `type` of an envelope, e.g. `clinic.appointment.created.v1`.
pub fn cloud_event_type(envelope: &Envelope) -> String {
    envelope.event_type.published_name(envelope.version)
}

/// Wraps `envelope` for `listener`'s queue; `source_prefix` is e.g. `/clinic`.
pub fn to_cloud_event(envelope: &Envelope, listener: Listener, source_prefix: &str) -> CloudEvent {
    CloudEvent { listener: Some(listener.as_str().into()), ..to_published_event(envelope, source_prefix) }
}

/// Wraps `envelope` as published to subscribers (webhooks): no `listener` extension.
pub fn to_published_event(envelope: &Envelope, source_prefix: &str) -> CloudEvent {
    CloudEvent {
        specversion: SPEC_VERSION.into(),
        id: envelope.id.to_string(),
        source: event_source(source_prefix, envelope.workspace_id),
        event_type: cloud_event_type(envelope),
        dataschema: super::dataschema(envelope.event_type, envelope.version),
        subject: envelope.resource_id.to_string(),
        time: envelope.occurred_at,
        datacontenttype: DATA_CONTENT_TYPE.into(),
        data: envelope.clone(),
        tenantid: envelope.workspace_id.to_string(),
        correlationid: envelope.correlation_id.to_string(),
        causationid: envelope.causation_id.to_string(),
        listener: None,
        sequence: None,
        traceparent: envelope.traceparent,
    }
}

/// Why a message body cannot be run. Always permanent for that message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MessageError {
    #[error("body is not a clinic CloudEvent: {0}")]
    Malformed(String),
    #[error("unsupported specversion {0}")]
    SpecVersion(String),
    #[error("unknown listener {0}")]
    UnknownListener(String),
    #[error("attribute {0} disagrees with the envelope")]
    Inconsistent(&'static str),
}

impl MessageError {
    /// A stable code for logs and metrics.
    pub fn code(&self) -> &'static str {
        match self {
            MessageError::Malformed(_) => "malformed_message",
            MessageError::SpecVersion(_) => "unsupported_specversion",
            MessageError::UnknownListener(_) => "unknown_listener",
            MessageError::Inconsistent(_) => "inconsistent_message",
        }
    }
}

/// Reads a message body back into the listener to run and the envelope to run it for.
pub fn parse_message(body: &str) -> Result<(Listener, Envelope), MessageError> {
    parse_cloud_event(body).map(|(listener, event)| (listener, event.data))
}

/// Like [`parse_message`], keeping the whole CloudEvent (its `source` is checked by the listener
/// against the event log, see `clinic_core::listeners::pointer`). The envelope carries the message's
/// `traceparent`.
pub fn parse_cloud_event(body: &str) -> Result<(Listener, CloudEvent), MessageError> {
    let mut event: CloudEvent = serde_json::from_str(body).map_err(|e| {
        // serde_json's message names the field and position, never the value of a string.
        MessageError::Malformed(format!("line {} column {}: {}", e.line(), e.column(), e.classify_name()))
    })?;
    if event.specversion != SPEC_VERSION {
        return Err(MessageError::SpecVersion(event.specversion));
    }
    let name = event.listener.as_deref().ok_or(MessageError::Malformed("no listener attribute".into()))?;
    let listener = Listener::parse(name).ok_or_else(|| MessageError::UnknownListener(name.to_owned()))?;
    let envelope = &event.data;
    if event.id != envelope.id.to_string() {
        return Err(MessageError::Inconsistent("id"));
    }
    if event.event_type != cloud_event_type(envelope) {
        return Err(MessageError::Inconsistent("type"));
    }
    if event.tenantid != envelope.workspace_id.to_string() {
        return Err(MessageError::Inconsistent("tenantid"));
    }
    if event.subject != envelope.resource_id.to_string() {
        return Err(MessageError::Inconsistent("subject"));
    }
    event.data.traceparent = event.traceparent;
    Ok((listener, event))
}

trait ClassifyName {
    fn classify_name(&self) -> &'static str;
}

impl ClassifyName for serde_json::Error {
    fn classify_name(&self) -> &'static str {
        match self.classify() {
            serde_json::error::Category::Io => "io",
            serde_json::error::Category::Syntax => "not JSON",
            serde_json::error::Category::Data => "missing or invalid attribute",
            serde_json::error::Category::Eof => "truncated",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::EventType;
    use crate::ids::EventId;

    #[test]
    fn round_trips_and_carries_the_required_attributes() {
        let env = Envelope::sample(EventType::AppointmentCreated);
        let body =
            serde_json::to_string(&to_cloud_event(&env, Listener::PatientBookingConfirmation, "/clinic/"))
                .unwrap();
        let json: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(json["specversion"], "1.0");
        assert_eq!(json["type"], "clinic.appointment.created.v1");
        assert_eq!(json["source"], format!("/clinic/workspaces/{}", env.workspace_id));
        assert_eq!(json["datacontenttype"], "application/json");
        assert_eq!(json["tenantid"], env.workspace_id.to_string());
        assert_eq!(json["dataschema"], crate::contract::dataschema(EventType::AppointmentCreated, 1));
        assert!(json["dataschema"]
            .as_str()
            .unwrap()
            .ends_with("/schemas/events/appointment.created/v1.json"));
        let (listener, back) = parse_message(&body).unwrap();
        assert_eq!(listener, Listener::PatientBookingConfirmation);
        assert_eq!(back, env);
        assert!(json.get("traceparent").is_none(), "absent when the event has none");
    }

    #[test]
    fn carries_the_trace_context_as_the_distributed_tracing_extension() {
        let mut env = Envelope::sample(EventType::AppointmentCreated);
        let trace = TraceParent::generate();
        env.traceparent = Some(trace);
        let event = to_cloud_event(&env, Listener::PatientBookingConfirmation, "/clinic");
        let mut json = serde_json::to_value(&event).unwrap();
        assert_eq!(json["traceparent"], trace.to_string());
        assert!(json["data"].get("traceparent").is_none(), "an attribute, not an envelope field");
        let (_, back) = parse_cloud_event(&json.to_string()).unwrap();
        assert_eq!(back.data.traceparent, Some(trace));
        // A bad value is dropped, the message still runs.
        for bad in [serde_json::json!("00-Jane-Doe"), serde_json::json!(42)] {
            json["traceparent"] = bad;
            let (_, back) = parse_cloud_event(&json.to_string()).unwrap();
            assert_eq!((back.traceparent, back.data.traceparent), (None, None));
        }
    }

    #[test]
    fn rejects_malformed_unknown_and_inconsistent_bodies() {
        assert_eq!(parse_message("not json").unwrap_err().code(), "malformed_message");
        assert_eq!(parse_message("{}").unwrap_err().code(), "malformed_message");
        let env = Envelope::sample(EventType::AppointmentCreated);
        let mut event = to_cloud_event(&env, Listener::PatientReminder, "/clinic");
        event.listener = Some("send_fax".into());
        let body = serde_json::to_string(&event).unwrap();
        assert_eq!(parse_message(&body).unwrap_err().code(), "unknown_listener");
        let mut event = to_cloud_event(&env, Listener::PatientReminder, "/clinic");
        event.id = EventId::generate().to_string();
        let body = serde_json::to_string(&event).unwrap();
        assert_eq!(parse_message(&body).unwrap_err(), MessageError::Inconsistent("id"));
        let mut event = to_cloud_event(&env, Listener::PatientReminder, "/clinic");
        event.specversion = "0.3".into();
        let body = serde_json::to_string(&event).unwrap();
        assert_eq!(parse_message(&body).unwrap_err().code(), "unsupported_specversion");
    }
}
