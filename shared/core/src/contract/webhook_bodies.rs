//! The webhook bodies that are not an event's CloudEvent (DESIGN §5f), as published contract:
//! the heartbeat's `data` ([`HeartbeatData`], `schemas/webhooks/heartbeat/v1.json`) and the id-only
//! FHIR R5 Bundle of `payloadFormat: fhir-id-only` (`schemas/webhooks/fhir-id-only/v1.json`).
//!
//! Invariants:
//! - The heartbeat's `data` is built from [`HeartbeatData`], the type its schema is derived from, so
//!   the two cannot drift; its CloudEvent names the schema in `dataschema` ([`heartbeat_dataschema`]).
//! - The FHIR schema states the shape `crate::webhooks::fhir` sends — one `SubscriptionStatus`, ids,
//!   numbers, codes and times only — and is checked against every body the test suite captures
//!   (tests/contract). FHIR's own validation of the same bodies is the `fhir.resources` models in
//!   tests/e2e; this schema is the narrower promise of what we put in them.
//! - Like every published schema, neither forbids additional properties.

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::events::ResourceType;

/// The CloudEvents `type` of a heartbeat.
pub const HEARTBEAT_TYPE: &str = "clinic.webhook.heartbeat.v1";
/// The path of the heartbeat `data` schema.
pub const HEARTBEAT_SCHEMA_PATH: &str = "schemas/webhooks/heartbeat/v1.json";
/// The path of the id-only FHIR Bundle's schema.
pub const FHIR_ID_ONLY_SCHEMA_PATH: &str = "schemas/webhooks/fhir-id-only/v1.json";

/// An endpoint's status as a receiver is told it (DESIGN §5f): `active`, `error` (failing for
/// longer than the error threshold without a success) or `off` (no new event reaches it).
pub const ENDPOINT_STATUSES: [&str; 3] = ["active", "error", "off"];

/// The `data` of a heartbeat.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HeartbeatData {
    /// The endpoint the heartbeat is for (ULID).
    pub endpoint_id: String,
    /// The endpoint's status: `active`, `error` or `off`.
    #[schemars(extend("enum" = ENDPOINT_STATUSES))]
    pub status: String,
    /// The number of the endpoint's last delivery (0: nothing numbered yet). A receiver whose last
    /// number is lower has missed deliveries: it backfills them by replay.
    #[schemars(range(min = 0))]
    pub last_sequence: i64,
    /// The endpoint's heartbeat interval in seconds: the next heartbeat is due this long after the
    /// endpoint's last attempt of any kind.
    #[schemars(range(min = 1, max = 86400))]
    pub heartbeat_seconds: i32,
}

/// The `dataschema` of a heartbeat.
pub fn heartbeat_dataschema() -> String {
    format!("{}/{HEARTBEAT_SCHEMA_PATH}", crate::events::dataschema::schema_base())
}

/// The schema of a heartbeat's `data`.
pub fn heartbeat_schema() -> Value {
    let mut schema = super::schemas::generate::<HeartbeatData>();
    schema["title"] = json!(HEARTBEAT_TYPE);
    schema["description"] = json!(format!(
        "The `data` of a webhook heartbeat (CloudEvent `type` {HEARTBEAT_TYPE}, `subject` the endpoint \
         id): sent to an endpoint that got no attempt for its heartbeat interval. It has no `sequence` \
         of its own. Consumers must ignore properties they do not know."
    ));
    schema
}

/// The FHIR resource type of an event's resource (`appointment` → `Appointment`, …): what the id-only
/// payload's `focus` references name, and what its schema allows.
pub const fn fhir_resource_type(resource_type: ResourceType) -> &'static str {
    match resource_type {
        ResourceType::Appointment => "Appointment",
        ResourceType::Patient => "Patient",
        ResourceType::Practitioner => "Practitioner",
    }
}

/// `^(Appointment|Patient|Practitioner)/<ULID>$`: a `focus` reference.
fn focus_pattern() -> String {
    let types = [ResourceType::Appointment, ResourceType::Patient, ResourceType::Practitioner]
        .map(fhir_resource_type);
    format!("^({})/{ULID}$", types.join("|"))
}

const ULID: &str = "[0-9A-HJKMNP-TV-Z]{26}";
const INTEGER64: &str = "^[0-9]{1,19}$";

/// The schema of the id-only FHIR Bundle (an event notification or a heartbeat).
pub fn fhir_id_only_schema() -> Value {
    let string_pattern = |pattern: String, description: &str| json!({ "type": "string", "pattern": pattern, "description": description });
    let date_time =
        |description: &str| json!({ "type": "string", "format": "date-time", "description": description });
    let notification_event = json!({
        "type": "object",
        "required": ["eventNumber", "timestamp", "focus"],
        "properties": {
            "eventNumber": string_pattern(INTEGER64.into(), "The delivery's number (FHIR integer64): the CloudEvents format's `sequence`"),
            "timestamp": date_time("When the event occurred"),
            "focus": {
                "type": "object",
                "required": ["reference"],
                "properties": {
                    "reference": string_pattern(focus_pattern(), "The event's resource, by FHIR type and id; nothing else about it"),
                },
            },
        },
    });
    let subscription_status = json!({
        "type": "object",
        "required": ["resourceType", "status", "type", "eventsSinceSubscriptionStart", "subscription"],
        "properties": {
            "resourceType": { "const": "SubscriptionStatus" },
            "status": { "enum": ENDPOINT_STATUSES, "description": "The endpoint's status" },
            "type": { "enum": ["event-notification", "heartbeat"] },
            "eventsSinceSubscriptionStart": string_pattern(INTEGER64.into(), "The endpoint's last delivery number (FHIR integer64)"),
            "subscription": {
                "type": "object",
                "required": ["reference"],
                "properties": {
                    "reference": string_pattern(format!("^Subscription/{ULID}$"), "The webhook endpoint, by id"),
                },
            },
            "notificationEvent": {
                "type": "array",
                "minItems": 1,
                "items": notification_event,
                "description": "The numbered deliveries this notification carries (absent in a heartbeat)",
            },
        },
        "if": { "properties": { "type": { "const": "heartbeat" } } },
        "then": { "not": { "required": ["notificationEvent"] } },
        "else": { "required": ["notificationEvent"] },
    });
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "clinic id-only FHIR subscription notification v1",
        "description": "The body (`application/fhir+json`) posted to an endpoint whose `payloadFormat` is \
                        `fhir-id-only`: a FHIR R5 Bundle of type `subscription-notification` with one \
                        SubscriptionStatus entry — the endpoint's status, its event numbers and `focus` \
                        references such as `Appointment/{id}`, identifiers only (FHIR's id-only payload \
                        content). A heartbeat is the same Bundle with SubscriptionStatus.type `heartbeat` \
                        and no notificationEvent. Signed with the Standard Webhooks headers. Consumers \
                        must ignore properties they do not know.",
        "type": "object",
        "required": ["resourceType", "id", "type", "timestamp", "entry"],
        "properties": {
            "resourceType": { "const": "Bundle" },
            "id": { "type": "string", "description": "Unique per body" },
            "type": { "const": "subscription-notification" },
            "timestamp": date_time("When the body was made"),
            "entry": {
                "type": "array",
                "minItems": 1,
                "maxItems": 1,
                "items": {
                    "type": "object",
                    "required": ["fullUrl", "resource"],
                    "properties": {
                        "fullUrl": string_pattern("^urn:uuid:[0-9a-f-]{36}$".into(), "The entry's temporary id"),
                        "resource": subscription_status,
                    },
                },
            },
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resource_types_become_fhir_types() {
        assert_eq!(fhir_resource_type(ResourceType::Appointment), "Appointment");
        assert_eq!(fhir_resource_type(ResourceType::Patient), "Patient");
        assert_eq!(fhir_resource_type(ResourceType::Practitioner), "Practitioner");
    }

    #[test]
    fn the_focus_pattern_names_every_resource_type_by_its_fhir_name() {
        assert_eq!(focus_pattern(), "^(Appointment|Patient|Practitioner)/[0-9A-HJKMNP-TV-Z]{26}$");
    }

    #[test]
    fn the_heartbeat_schema_is_derived_from_the_type_the_sender_serialises() {
        let schema = heartbeat_schema();
        let required: Vec<&str> =
            schema["required"].as_array().unwrap().iter().filter_map(|v| v.as_str()).collect();
        assert_eq!(required, ["endpointId", "status", "lastSequence", "heartbeatSeconds"]);
        assert_eq!(schema["properties"]["status"]["enum"], json!(["active", "error", "off"]));
        let data = HeartbeatData {
            endpoint_id: "01J00000000000000000000000".into(),
            status: "off".into(),
            last_sequence: 7,
            heartbeat_seconds: 300,
        };
        let value = serde_json::to_value(&data).unwrap();
        for field in required {
            assert!(value.get(field).is_some(), "{field} is not serialised");
        }
    }
}
