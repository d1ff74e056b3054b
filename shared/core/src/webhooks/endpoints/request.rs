//! What a create (`POST /v1/webhooks/endpoints`), update (`PATCH`), rotation or recover request of an
//! endpoint may say: parsed from the JSON body into [`NewEndpoint`], [`EndpointChange`], [`Rotation`]
//! or [`Recovery`], or refused with a [`FieldError`] naming the field (nothing is written). A URL
//! passes the SSRF guard ([`crate::webhooks::guard`]) here, before anything is stored; the writes are
//! the repository's ([`super`]).
//!
//! The parsed types derive the schemas of the bodies they are read from (`NewWebhookEndpoint`,
//! `WebhookEndpointChange`, `WebhookRotateRequest`, `WebhookRecoverRequest`); each field's value
//! schema is the rule its parser below applies, with the parser's own bounds.

use chrono::{DateTime, Utc};
use schemars::{json_schema, JsonSchema, SchemaGenerator};
use serde_json::Value;

use crate::domain::input::{self, FieldError};
use crate::events::EventType;
use crate::webhooks::guard::EndpointUrl;

const MAX_EVENT_TYPES: usize = 20;
/// Heartbeat interval when none is asked for (seconds; 0 = no heartbeats).
pub const DEFAULT_HEARTBEAT_SECONDS: i32 = 300;
/// The longest heartbeat interval (a day).
pub const MAX_HEARTBEAT_SECONDS: i32 = 86_400;
const MAX_DESCRIPTION: usize = 200;
/// No control character (Unicode `Cc`, what [`char::is_control`] finds): a description's rule.
const NO_CONTROL: &str = r"^[^\x00-\x1f\x7f-\x9f]*$";

/// A create request (`POST /v1/webhooks/endpoints`). Its schema is the body
/// [`NewEndpoint::try_from`] reads.
#[derive(Debug, Clone, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NewEndpoint {
    /// https only; must resolve to public addresses (checked at save and at every attempt)
    #[schemars(with = "EndpointUrl")]
    pub url: String,
    /// At most 200 characters, no control characters.
    #[serde(default)]
    #[schemars(with = "Description")]
    pub description: String,
    #[serde(default)]
    #[schemars(with = "EventTypes")]
    pub event_types: Vec<EventType>,
    /// Seconds without any attempt before a signed heartbeat is sent (0: no heartbeats).
    #[serde(default = "default_heartbeat_seconds")]
    #[schemars(with = "HeartbeatSeconds")]
    pub heartbeat_seconds: i32,
    /// cloudevents: the identifier-only CloudEvent (with `sequence`); fhir-id-only: a FHIR R5 Bundle of type subscription-notification whose SubscriptionStatus carries the status, the event number and focus references (identifiers only), sent as application/fhir+json. Both signed with the Standard Webhooks headers.
    #[serde(default = "default_payload_format")]
    #[schemars(with = "PayloadFormat")]
    pub payload_format: &'static str,
}

/// An update (`PATCH`): any subset, at least one field. Its schema is the body
/// [`EndpointChange::try_from`] reads: a field given is never null.
#[derive(Debug, Clone, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(extend("minProperties" = 1))]
pub struct EndpointChange {
    // Each field: the schema of the value (never null), and optional (`default`; the skip only keeps
    // the schema from stating a default of null).
    /// https only; must resolve to public addresses (checked at save and at every attempt)
    #[schemars(with = "EndpointUrl", default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// At most 200 characters, no control characters.
    #[schemars(with = "Description", default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[schemars(with = "EventTypes", default, skip_serializing_if = "Option::is_none")]
    pub event_types: Option<Vec<EventType>>,
    #[schemars(with = "bool", default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// Seconds without any attempt before a signed heartbeat is sent (0: no heartbeats).
    #[schemars(with = "HeartbeatSeconds", default, skip_serializing_if = "Option::is_none")]
    pub heartbeat_seconds: Option<i32>,
    /// cloudevents: the identifier-only CloudEvent (with `sequence`); fhir-id-only: a FHIR R5 Bundle of type subscription-notification whose SubscriptionStatus carries the status, the event number and focus references (identifiers only), sent as application/fhir+json. Both signed with the Standard Webhooks headers.
    #[schemars(with = "PayloadFormat", default, skip_serializing_if = "Option::is_none")]
    pub payload_format: Option<&'static str>,
}

/// A rotation (`POST /v1/webhooks/endpoints/{id}/rotate`; the body may be empty). Its schema is the
/// body [`Rotation::try_from`] reads; the bounds of `overlapHours` are checked by the rotation
/// ([`super::rotate`], 422 naming the field).
#[derive(Debug, Clone, Copy, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Rotation {
    #[serde(default = "default_overlap_hours")]
    #[schemars(range(min = 0, max = super::MAX_OVERLAP_HOURS))]
    pub overlap_hours: i64,
}

/// How long the previous secret keeps signing when a rotation names no overlap (hours).
pub const DEFAULT_OVERLAP_HOURS: i64 = 24;

fn default_overlap_hours() -> i64 {
    DEFAULT_OVERLAP_HOURS
}

impl TryFrom<&Value> for Rotation {
    type Error = FieldError;

    fn try_from(body: &Value) -> Result<Self, FieldError> {
        let map = object(body)?;
        reject_unknown(map, &["overlapHours"])?;
        let overlap_hours = match map.get("overlapHours") {
            None => DEFAULT_OVERLAP_HOURS,
            Some(value) => value
                .as_number()
                .and_then(input::integer)
                .ok_or_else(|| FieldError::new("overlapHours", "must be a whole number of hours"))?,
        };
        Ok(Rotation { overlap_hours })
    }
}

/// A recover (`POST /v1/webhooks/endpoints/{id}/recover`): the failed deliveries created since
/// `since` are sent again. Its schema is the body [`Recovery::try_from`] reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Recovery {
    pub since: DateTime<Utc>,
}

impl TryFrom<&Value> for Recovery {
    type Error = FieldError;

    fn try_from(body: &Value) -> Result<Self, FieldError> {
        let map = object(body)?;
        reject_unknown(map, &["since"])?;
        let since = map
            .get("since")
            .and_then(Value::as_str)
            .and_then(|raw| DateTime::parse_from_rfc3339(raw).ok())
            .map(|at| at.with_timezone(&Utc))
            .ok_or_else(|| FieldError::new("since", "is required: an RFC 3339 time"))?;
        Ok(Recovery { since })
    }
}

fn default_heartbeat_seconds() -> i32 {
    DEFAULT_HEARTBEAT_SECONDS
}

fn default_payload_format() -> &'static str {
    PAYLOAD_FORMATS[0]
}

crate::inline_schema!(
/// `description` ([`description_field`]).
struct Description,
|_: &mut SchemaGenerator| json_schema!({
    "type": "string",
    "maxLength": MAX_DESCRIPTION,
    "pattern": NO_CONTROL,
})
);

crate::inline_schema!(
/// `eventTypes` ([`event_types_field`]): a list of event type names.
struct EventTypes,
|generator: &mut SchemaGenerator| json_schema!({
    "type": "array",
    "maxItems": MAX_EVENT_TYPES,
    "items": generator.subschema_for::<EventType>(),
})
);

crate::inline_schema!(
/// `heartbeatSeconds` ([`heartbeat_field`]).
struct HeartbeatSeconds,
|_: &mut SchemaGenerator| json_schema!({
    "type": "integer",
    "minimum": 0,
    "maximum": MAX_HEARTBEAT_SECONDS,
})
);

crate::inline_schema!(
/// `payloadFormat` ([`payload_format_field`]).
struct PayloadFormat,
|_: &mut SchemaGenerator| json_schema!({
    "type": "string",
    "enum": PAYLOAD_FORMATS,
})
);

impl EndpointChange {
    /// The names of the fields this change sets (the audit's detail).
    pub fn fields(&self) -> Vec<&'static str> {
        let mut fields = Vec::new();
        for (set, name) in [
            (self.url.is_some(), "url"),
            (self.description.is_some(), "description"),
            (self.event_types.is_some(), "eventTypes"),
            (self.enabled.is_some(), "enabled"),
            (self.heartbeat_seconds.is_some(), "heartbeatSeconds"),
            (self.payload_format.is_some(), "payloadFormat"),
        ] {
            if set {
                fields.push(name);
            }
        }
        fields
    }
}

fn object(body: &Value) -> Result<&serde_json::Map<String, Value>, FieldError> {
    body.as_object().ok_or_else(|| FieldError::new("body", "must be a JSON object"))
}

fn reject_unknown(map: &serde_json::Map<String, Value>, known: &[&str]) -> Result<(), FieldError> {
    match map.keys().find(|key| !known.contains(&key.as_str())) {
        Some(key) => Err(FieldError::new(key.clone(), "is not a field of this request")),
        None => Ok(()),
    }
}

fn url_field(value: &Value) -> Result<String, FieldError> {
    let url = value.as_str().ok_or_else(|| FieldError::new("url", "must be a string"))?;
    crate::webhooks::guard::EndpointUrl::parse(url)
        .map_err(|refused| FieldError::new("url", refused.to_string()))
        .map(|_| url.to_owned())
}

fn description_field(value: &Value) -> Result<String, FieldError> {
    let text = value.as_str().ok_or_else(|| FieldError::new("description", "must be a string"))?;
    if text.chars().count() > MAX_DESCRIPTION || text.chars().any(char::is_control) {
        return Err(FieldError::new(
            "description",
            format!("must be at most {MAX_DESCRIPTION} characters without control characters"),
        ));
    }
    Ok(text.to_owned())
}

/// The body formats an endpoint may take.
pub const PAYLOAD_FORMATS: [&str; 2] = ["cloudevents", crate::webhooks::fhir::FORMAT];

fn payload_format_field(value: &Value) -> Result<&'static str, FieldError> {
    let name = value.as_str().unwrap_or_default();
    PAYLOAD_FORMATS
        .into_iter()
        .find(|format| *format == name)
        .ok_or_else(|| FieldError::new("payloadFormat", "must be cloudevents or fhir-id-only"))
}

fn heartbeat_field(value: &Value) -> Result<i32, FieldError> {
    value
        .as_number()
        .and_then(input::integer)
        .and_then(|n| i32::try_from(n).ok())
        .filter(|n| (0..=MAX_HEARTBEAT_SECONDS).contains(n))
        .ok_or_else(|| {
            FieldError::new(
                "heartbeatSeconds",
                format!("must be a whole number of seconds, 0 (no heartbeats) to {MAX_HEARTBEAT_SECONDS}"),
            )
        })
}

fn event_types_field(value: &Value) -> Result<Vec<EventType>, FieldError> {
    let bad = || FieldError::new("eventTypes", "must be a list of event type names (empty: every type)");
    let items = value.as_array().ok_or_else(bad)?;
    if items.len() > MAX_EVENT_TYPES {
        return Err(FieldError::new("eventTypes", format!("must list at most {MAX_EVENT_TYPES} types")));
    }
    let mut types = Vec::with_capacity(items.len());
    for item in items {
        let name = item.as_str().ok_or_else(bad)?;
        let parsed = EventType::parse(name)
            .ok_or_else(|| FieldError::new("eventTypes", format!("unknown event type {name:?}")))?;
        if !types.contains(&parsed) {
            types.push(parsed);
        }
    }
    Ok(types)
}

impl TryFrom<&Value> for NewEndpoint {
    type Error = FieldError;

    fn try_from(body: &Value) -> Result<Self, FieldError> {
        let map = object(body)?;
        reject_unknown(map, &["url", "description", "eventTypes", "heartbeatSeconds", "payloadFormat"])?;
        let url = url_field(map.get("url").ok_or_else(|| FieldError::new("url", "is required"))?)?;
        let description = map.get("description").map(description_field).transpose()?.unwrap_or_default();
        let event_types = map.get("eventTypes").map(event_types_field).transpose()?.unwrap_or_default();
        let heartbeat_seconds = map
            .get("heartbeatSeconds")
            .map(heartbeat_field)
            .transpose()?
            .unwrap_or(DEFAULT_HEARTBEAT_SECONDS);
        let payload_format =
            map.get("payloadFormat").map(payload_format_field).transpose()?.unwrap_or(PAYLOAD_FORMATS[0]);
        Ok(NewEndpoint { url, description, event_types, heartbeat_seconds, payload_format })
    }
}

impl TryFrom<&Value> for EndpointChange {
    type Error = FieldError;

    fn try_from(body: &Value) -> Result<Self, FieldError> {
        let map = object(body)?;
        reject_unknown(
            map,
            &["url", "description", "eventTypes", "enabled", "heartbeatSeconds", "payloadFormat"],
        )?;
        let change = EndpointChange {
            url: map.get("url").map(url_field).transpose()?,
            description: map.get("description").map(description_field).transpose()?,
            event_types: map.get("eventTypes").map(event_types_field).transpose()?,
            enabled: input::boolean("enabled", map.get("enabled"))?,
            heartbeat_seconds: map.get("heartbeatSeconds").map(heartbeat_field).transpose()?,
            payload_format: map.get("payloadFormat").map(payload_format_field).transpose()?,
        };
        if change.fields().is_empty() {
            return Err(FieldError::new("body", "names no field to change"));
        }
        Ok(change)
    }
}
