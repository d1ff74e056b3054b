//! The JSON Schemas (2020-12) of the published events, derived with `schemars` from the Rust types
//! ([`Envelope`], [`CloudEvent`]) and specialised per event type from the [`EventType`] catalog.
//!
//! Invariants:
//! - A per-type schema is the envelope's schema with `type`, `version`, `resourceType` and
//!   `publishedName` fixed (`const`) and `changedFields` limited to the type's
//!   [`EventType::changeable_fields`] (absent from types that never carry it).
//! - No schema forbids additional properties: consumers must ignore what they do not know, so fields
//!   can be added without a new version.

use serde_json::{json, Value};

use crate::contract::cloudevent::CloudEvent;
use crate::events::{Envelope, EventType};

pub(super) fn generate<T: schemars::JsonSchema>() -> Value {
    let generator = schemars::generate::SchemaSettings::draft2020_12().into_generator();
    let mut schema = generator.into_root_schema_for::<T>().to_value();
    strip_defaults(&mut schema);
    schema
}

/// Drops `default` annotations: they describe how an older message is read (serde's defaults for
/// fields added later), not values a consumer may rely on. The API's document drops them too.
pub fn strip_defaults(value: &mut Value) {
    match value {
        Value::Object(map) => {
            map.remove("default");
            map.values_mut().for_each(strip_defaults);
        }
        Value::Array(items) => items.iter_mut().for_each(strip_defaults),
        _ => {}
    }
}

/// The schema of `version` of `event_type`'s envelope (the CloudEvent's `data`).
pub fn event_schema(event_type: EventType, version: i32) -> Value {
    let mut schema = generate::<Envelope>();
    let published = event_type.published_name(version);
    schema["title"] = json!(published);
    schema["description"] = json!(format!(
        "The identifier-only envelope of {published} (`data` of the CloudEvent whose `type` is \
         {published}); emitted by {}. Consumers must ignore properties they do not know.",
        event_type.producer()
    ));
    let properties = &mut schema["properties"];
    properties["type"] = json!({ "const": event_type.as_str(), "description": "The short event type" });
    properties["version"] =
        json!({ "const": version, "description": "The version of this event type's schema" });
    properties["resourceType"] = json!({ "const": event_type.resource_type().as_str() });
    properties["publishedName"] =
        json!({ "const": published, "description": "The published name (the CloudEvents `type`)" });
    let fields = event_type.changeable_fields();
    if let Value::Object(properties) = properties {
        if fields.is_empty() {
            properties.remove("changedFields");
        } else {
            properties.insert(
                "changedFields".into(),
                json!({
                    "type": "array",
                    "description": "The names of the fields the mutation changed (never their values)",
                    "items": { "enum": fields },
                    "uniqueItems": true,
                }),
            );
        }
    }
    schema
}

/// The schema of the CloudEvent wrapper (any event type; `data` is an envelope).
pub fn cloudevent_schema() -> Value {
    let mut schema = generate::<CloudEvent>();
    schema["title"] = json!("clinic CloudEvent v1");
    schema["description"] = json!(
        "A CloudEvents 1.0.2 structured-mode document as sent to the listener queues and to webhook \
         subscribers; `data` validates against the schema named by `dataschema`."
    );
    schema["properties"]["specversion"] = json!({ "const": "1.0" });
    schema["properties"]["datacontenttype"] = json!({ "const": "application/json" });
    schema
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_type_schemas_fix_the_type_and_limit_changed_fields() {
        let schema = event_schema(EventType::PatientUpdated, 1);
        assert_eq!(schema["$schema"], "https://json-schema.org/draft/2020-12/schema");
        assert_eq!(schema["properties"]["type"]["const"], "patient.updated");
        assert_eq!(schema["properties"]["publishedName"]["const"], "clinic.patient.updated.v1");
        assert_eq!(schema["properties"]["changedFields"]["items"]["enum"][2], "email");
        let created = event_schema(EventType::PatientCreated, 1);
        assert!(created["properties"].get("changedFields").is_none());
        let required: Vec<&str> =
            created["required"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
        assert!(required.contains(&"id") && required.contains(&"causationId"));
        assert!(!required.contains(&"idempotencyKey"), "added fields stay optional");
        assert!(created.get("additionalProperties").is_none());
    }
}
