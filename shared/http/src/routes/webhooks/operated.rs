//! Webhook deliveries as operators act on them: the schemas of the bulk request's filter
//! (`WebhookDeliveryFilter`; the request is [`crate::routes::acted::BulkBody`] over it) and of a
//! single-row retry's or discard's answer (`WebhookDeliveryAction`).
//!
//! These are wire shapes only: the parser and the writer are the operator actions' own, shared with
//! the notifications' queue. The bulk body is read by [`acted::bulk`] (`dryRun`, `limit`, `filter`),
//! [`ActionRequest::from_body`] (`reason`, `listeners`) and [`RowFilter::parse`] over
//! [`WebhookDeliveries`]' filter fields; the answer is written by [`RowActionRecord`] through
//! [`acted::act`]. The API fuzzing checks that the parser agrees with the schema; the tests below check
//! the names against the queue's filter fields and the record as it serialises.
//!
//! [`acted::bulk`]: crate::routes::acted::bulk
//! [`acted::act`]: crate::routes::acted::act
//! [`ActionRequest::from_body`]: clinic_core::operator::ActionRequest::from_body
//! [`RowFilter::parse`]: clinic_core::operator::RowFilter::parse
//! [`WebhookDeliveries`]: clinic_core::operator::WebhookDeliveries
//! [`RowActionRecord`]: clinic_core::operator::RowActionRecord

use chrono::{DateTime, Utc};
use schemars::{json_schema, JsonSchema, SchemaGenerator};

use clinic_core::domain::schema::ApiUlid;
use clinic_core::events::EventType;
use clinic_core::ids::{EventId, OperatorActionId, WebhookDeliveryId, WorkspaceId};
use clinic_core::lease::operator::WEBHOOK_ACTIONS;
use clinic_core::lease::WEBHOOK_DELIVERIES;
use clinic_core::operator::{Age, ErrorCode};

/// The filter of a bulk request on webhook deliveries: any of the queue's filter fields, at least one.
#[expect(dead_code, reason = "a wire shape: never built, its fields state the schema")]
#[derive(JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(rename = "WebhookDeliveryFilter", extend("minProperties" = 1))]
pub struct Filter {
    // Each field: optional, never null (`default`; the skip only keeps the schema from stating a
    // default of null).
    #[schemars(with = "DeliveryStatus", default, skip_serializing_if = "Option::is_none")]
    status: Option<String>,
    /// An age: seconds, or a number with s, m, h or d.
    #[schemars(with = "Age", default, skip_serializing_if = "Option::is_none")]
    older_than: Option<String>,
    #[schemars(with = "DateTime<Utc>", default, skip_serializing_if = "Option::is_none")]
    from: Option<DateTime<Utc>>,
    /// Must be after from when both are given.
    #[schemars(with = "DateTime<Utc>", default, skip_serializing_if = "Option::is_none")]
    to: Option<DateTime<Utc>>,
    #[schemars(with = "ErrorCode", default, skip_serializing_if = "Option::is_none")]
    error_code: Option<String>,
    /// Deliveries to this endpoint
    #[schemars(with = "ApiUlid", default, skip_serializing_if = "Option::is_none")]
    endpoint_id: Option<String>,
    #[schemars(with = "EventType", default, skip_serializing_if = "Option::is_none")]
    event_type: Option<EventType>,
}

/// The answer of a single-row retry or discard of a webhook delivery: its audit record.
#[expect(dead_code, reason = "a wire shape: never built, its fields state the schema")]
#[derive(JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ActionRecord {
    id: OperatorActionId,
    workspace_id: WorkspaceId,
    webhook_delivery_id: WebhookDeliveryId,
    event_id: EventId,
    #[schemars(extend("enum" = WEBHOOK_ACTIONS.offered()))]
    action: String,
    /// The acting admin's member id
    actor: String,
    #[schemars(with = "DeliveryStatus")]
    status_before: String,
    #[schemars(with = "DeliveryStatus")]
    status_after: String,
    created_at: DateTime<Utc>,
}

clinic_core::inline_schema!(
/// A stored status of a webhook delivery (the lease queue's names).
struct DeliveryStatus,
|_: &mut SchemaGenerator| json_schema!({
    "type": "string",
    "enum": WEBHOOK_DELIVERIES.statuses(),
})
);

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use serde_json::Value;

    use super::*;
    use clinic_core::lease::ActionKind;
    use clinic_core::operator::{OperatedQueue, QueueRow, RowActionRecord, WebhookDeliveries};

    fn schema<T: JsonSchema>() -> Value {
        let settings = schemars::generate::SchemaSettings::draft2020_12().for_serialize();
        settings.into_generator().into_root_schema_for::<T>().to_value()
    }

    fn names(value: &Value) -> BTreeSet<String> {
        value.as_object().expect("an object").keys().cloned().collect()
    }

    #[test]
    fn the_filter_names_exactly_the_queues_filter_fields() {
        let filter = schema::<Filter>();
        let fields: BTreeSet<String> =
            WebhookDeliveries::FILTER_FIELDS.iter().map(|field| (*field).to_owned()).collect();
        assert_eq!(names(&filter["properties"]), fields);
        assert_eq!(filter["additionalProperties"], false);
        assert!(filter.get("required").is_none(), "{filter}");
    }

    #[test]
    fn the_answer_names_every_field_the_record_writes_for_a_webhook_delivery() {
        let ulid = ulid::Ulid::generate();
        let record = RowActionRecord {
            id: OperatorActionId::from_ulid(ulid),
            workspace_id: WorkspaceId::from_ulid(ulid),
            row: QueueRow::WebhookDeliveryId(WebhookDeliveryId::from_ulid(ulid)),
            event_id: EventId::from_ulid(ulid),
            action: ActionKind::Retry,
            actor: "member".into(),
            status_before: "failed".into(),
            status_after: "pending".into(),
            batch_id: None,
            created_at: Utc::now(),
        };
        let written = serde_json::to_value(&record).unwrap();
        let answer = schema::<ActionRecord>();
        assert_eq!(names(&answer["properties"]), names(&written));
        let required: BTreeSet<String> = answer["required"]
            .as_array()
            .unwrap()
            .iter()
            .map(|name| name.as_str().unwrap().to_owned())
            .collect();
        assert_eq!(required, names(&written));
        assert_eq!(answer["properties"]["action"]["enum"], serde_json::json!(["retry", "discard"]));
    }
}
