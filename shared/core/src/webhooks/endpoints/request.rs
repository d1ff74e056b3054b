//! What a create (`POST /v1/webhooks/endpoints`) or update (`PATCH`) request of an endpoint may say:
//! parsed from the JSON body into [`NewEndpoint`] or [`EndpointChange`], or refused with a
//! [`FieldError`] naming the field (nothing is written). A URL passes the SSRF guard
//! ([`crate::webhooks::guard`]) here, before anything is stored; the writes are the repository's
//! ([`super`]).

use serde_json::Value;

use crate::domain::input::{self, FieldError};
use crate::events::EventType;

const MAX_EVENT_TYPES: usize = 20;
/// Heartbeat interval when none is asked for (seconds; 0 = no heartbeats).
pub const DEFAULT_HEARTBEAT_SECONDS: i32 = 300;
/// The longest heartbeat interval (a day).
pub const MAX_HEARTBEAT_SECONDS: i32 = 86_400;
const MAX_DESCRIPTION: usize = 200;

/// A create request (`POST /v1/webhooks/endpoints`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewEndpoint {
    pub url: String,
    pub description: String,
    pub event_types: Vec<EventType>,
    pub heartbeat_seconds: i32,
    pub payload_format: &'static str,
}

/// An update (`PATCH`): any subset.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct EndpointChange {
    pub url: Option<String>,
    pub description: Option<String>,
    pub event_types: Option<Vec<EventType>>,
    pub enabled: Option<bool>,
    pub heartbeat_seconds: Option<i32>,
    pub payload_format: Option<&'static str>,
}

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
