//! The AsyncAPI 3.0.0 document (`asyncapi.yaml`), generated from the listener map and the event
//! catalog, so a new listener or event type appears in it on regeneration.
//!
//! Invariants:
//! - One channel per listener queue, with the SQS binding (standard queue, redrive to the listener's
//!   dead-letter queue) and the AMQP baseline binding (a durable queue per listener, bound to the
//!   `clinic.events` topic exchange by published name) for self-hosted brokers.
//! - One channel for webhook delivery (DESIGN §5c): the same CloudEvent, posted with the Standard
//!   Webhooks headers `webhook-id`, `webhook-timestamp` and `webhook-signature`.
//! - Messages reference the checked-in schemas by relative path (`schemas/…`), which resolves both
//!   beside the file in the repository and beside `/asyncapi.yaml` on the API.

use serde_json::{json, Map, Value};

use super::webhook_bodies::{FHIR_ID_ONLY_SCHEMA_PATH, HEARTBEAT_SCHEMA_PATH, HEARTBEAT_TYPE};
use super::{schema_path, CLOUDEVENT_SCHEMA_PATH};
use crate::events::EventType;
use crate::listeners::map::{listeners, Listener};

/// The AMQP baseline's topic exchange.
pub const AMQP_EXCHANGE: &str = "clinic.events";

fn message_id(event_type: EventType, version: i32) -> String {
    format!("{}_v{version}", event_type.as_str().replace('.', "_"))
}

fn message(event_type: EventType, version: i32, webhook: bool) -> Value {
    let published = event_type.published_name(version);
    let mut message = json!({
        "name": published,
        "title": published,
        "summary": format!("{published}: the identifier-only envelope as a CloudEvent"),
        "contentType": "application/json",
        "correlationId": { "location": "$message.payload#/correlationid" },
        "payload": {
            "allOf": [
                { "$ref": CLOUDEVENT_SCHEMA_PATH },
                {
                    "type": "object",
                    "properties": {
                        "type": { "const": published },
                        "data": { "$ref": schema_path(event_type, version) },
                    },
                },
            ],
        },
    });
    if webhook {
        message["traits"] = json!([{ "$ref": "#/components/messageTraits/standardWebhooks" }]);
        // Every webhook body carries its delivery's number (DESIGN §5f).
        let numbered = &mut message["payload"]["allOf"][1];
        numbered["properties"]["sequence"] = json!({
            "type": "string",
            "pattern": "^[0-9]{19}$",
            "description": "The delivery's number in its endpoint's sequence (1, 2, 3 … with no gap \
                            and no reuse), zero-padded to 19 digits; the same on every attempt, \
                            recover and replay.",
        });
        numbered["required"] = json!(["sequence"]);
    }
    message
}

fn channel_messages(types: &[EventType], prefix: &str) -> Value {
    let mut messages = Map::new();
    for (event_type, version) in super::published_versions() {
        if types.contains(&event_type) {
            let id = message_id(event_type, version);
            messages.insert(id.clone(), json!({ "$ref": format!("#/components/messages/{prefix}{id}") }));
        }
    }
    Value::Object(messages)
}

/// The webhook channel's messages that are not an event's CloudEvent: the heartbeat and the id-only
/// FHIR Bundle (DESIGN §5f).
const WEBHOOK_BODIES: [&str; 2] = ["webhook_heartbeat_v1", "webhook_fhir_id_only_v1"];

fn webhook_channel_messages(types: &[EventType]) -> Value {
    let mut messages = channel_messages(types, "webhook_");
    if let Value::Object(map) = &mut messages {
        for id in WEBHOOK_BODIES {
            map.insert(id.into(), json!({ "$ref": format!("#/components/messages/{id}") }));
        }
    }
    messages
}

/// The heartbeat: a CloudEvent without the event-only extensions, its `data` per its own schema.
fn heartbeat_message() -> Value {
    json!({
        "name": HEARTBEAT_TYPE,
        "title": HEARTBEAT_TYPE,
        "summary": "A signed heartbeat to an endpoint that got no attempt for its heartbeat interval: its \
                    status and last delivery number, so a receiver tells an idle feed from a broken one \
                    and sees a gap at the tail of its sequence. No `sequence` of its own, never retried.",
        "contentType": "application/json",
        "traits": [{ "$ref": "#/components/messageTraits/standardWebhooks" }],
        "payload": {
            "type": "object",
            "required": ["specversion", "id", "source", "type", "subject", "time", "datacontenttype",
                         "dataschema", "tenantid", "data"],
            "properties": {
                "specversion": { "const": "1.0" },
                "id": { "type": "string", "description": "Unique per heartbeat (its `webhook-id`)" },
                "source": { "type": "string", "description": "`<prefix>/workspaces/<workspaceId>`, as the events'" },
                "type": { "const": HEARTBEAT_TYPE },
                "subject": { "type": "string", "description": "The endpoint id" },
                "time": { "type": "string", "format": "date-time" },
                "datacontenttype": { "const": "application/json" },
                "dataschema": { "type": "string", "format": "uri", "description": "The URI of the heartbeat data's schema" },
                "tenantid": { "type": "string", "description": "Extension: the workspace id" },
                "data": { "$ref": HEARTBEAT_SCHEMA_PATH },
            },
        },
    })
}

/// The body of an endpoint whose `payloadFormat` is `fhir-id-only` (an event or a heartbeat).
fn fhir_message() -> Value {
    json!({
        "name": "fhir-id-only",
        "title": "FHIR R5 id-only subscription notification",
        "summary": "What an endpoint with `payloadFormat: fhir-id-only` receives instead of the \
                    CloudEvent: a FHIR R5 `subscription-notification` Bundle (type `event-notification` \
                    for an event, `heartbeat` for a heartbeat), identifiers only.",
        "contentType": "application/fhir+json",
        "traits": [{ "$ref": "#/components/messageTraits/standardWebhooks" }],
        "payload": { "$ref": FHIR_ID_ONLY_SCHEMA_PATH },
    })
}

fn routed_types(listener: Listener) -> Vec<EventType> {
    EventType::ALL.iter().copied().filter(|t| listeners(*t).contains(&listener)).collect()
}

fn listener_channel(listener: Listener) -> Value {
    let name = listener.as_str();
    json!({
        "address": format!("clinic-{name}"),
        "title": format!("{name} queue"),
        "description": format!(
            "The queue of the `{name}` listener: the dispatcher sends one message per event routed to \
             it (listener map). Deployed as template.yaml's queue for this listener, its URL in \
             `CLINIC_SQS_QUEUE_URL_{}`; FIFO queues get MessageGroupId = resource id and \
             MessageDeduplicationId = `{{eventId}}:{name}`.",
            name.to_uppercase()
        ),
        "servers": [{ "$ref": "#/servers/sqs" }, { "$ref": "#/servers/amqp" }],
        "messages": channel_messages(&routed_types(listener), ""),
        "bindings": {
            "sqs": {
                "queue": {
                    "name": format!("clinic-{name}"),
                    "fifoQueue": false,
                    "visibilityTimeout": 180,
                    "redrivePolicy": {
                        "deadLetterQueue": { "name": format!("clinic-{name}-dlq") },
                        "maxReceiveCount": 5,
                    },
                },
                "bindingVersion": "0.2.0",
            },
            "amqp": {
                "is": "queue",
                "queue": {
                    "name": format!("clinic.{name}"),
                    "durable": true,
                    "exclusive": false,
                    "autoDelete": false,
                    "vhost": "/",
                },
                "bindingVersion": "0.3.0",
            },
        },
    })
}

/// The document as a JSON value.
pub fn document() -> Value {
    let mut channels = Map::new();
    let mut operations = Map::new();
    for listener in Listener::ALL {
        let name = listener.as_str();
        channels.insert(name.into(), listener_channel(*listener));
        let messages: Vec<Value> = routed_types(*listener)
            .iter()
            .flat_map(|t| super::published_versions().into_iter().filter(move |(v, _)| v == t))
            .map(|(t, v)| json!({ "$ref": format!("#/channels/{name}/messages/{}", message_id(t, v)) }))
            .collect();
        operations.insert(
            format!("start_{name}"),
            json!({
                "action": "send",
                "title": format!("Start {name}"),
                "summary": format!("The dispatcher starts the `{name}` listener for an event"),
                "channel": { "$ref": format!("#/channels/{name}") },
                "messages": messages,
                "bindings": { "amqp": { "deliveryMode": 2, "bindingVersion": "0.3.0" } },
            }),
        );
    }
    let all: Vec<EventType> = EventType::ALL.to_vec();
    channels.insert(
        "events_exchange".into(),
        json!({
            "address": AMQP_EXCHANGE,
            "title": "clinic.events exchange (AMQP baseline)",
            "description": "Self-hosted brokers: every event is published to this topic exchange with \
                            its published name as routing key; each listener's queue is bound to the \
                            names its listener map entry routes.",
            "servers": [{ "$ref": "#/servers/amqp" }],
            "messages": channel_messages(&all, ""),
            "bindings": {
                "amqp": {
                    "is": "routingKey",
                    "exchange": { "name": AMQP_EXCHANGE, "type": "topic", "durable": true, "autoDelete": false, "vhost": "/" },
                    "bindingVersion": "0.3.0",
                },
            },
        }),
    );
    channels.insert(
        "webhooks".into(),
        json!({
            "address": null,
            "title": "Webhook delivery",
            "description": "Each registered endpoint of a workspace (DESIGN §5c) receives the events its \
                            filter selects as an HTTPS POST of the identifier-only CloudEvent, signed per \
                            the Standard Webhooks spec; retried on a growing schedule. The address is \
                            the endpoint's registered URL.",
            "servers": [{ "$ref": "#/servers/webhooks" }],
            "messages": webhook_channel_messages(&all),
        }),
    );
    let mut webhook_messages: Vec<Value> = super::published_versions()
        .into_iter()
        .map(|(t, v)| json!({ "$ref": format!("#/channels/webhooks/messages/{}", message_id(t, v)) }))
        .collect();
    webhook_messages.extend(
        WEBHOOK_BODIES.iter().map(|id| json!({ "$ref": format!("#/channels/webhooks/messages/{id}") })),
    );
    let exchange_messages: Vec<Value> = super::published_versions()
        .into_iter()
        .map(|(t, v)| json!({ "$ref": format!("#/channels/events_exchange/messages/{}", message_id(t, v)) }))
        .collect();
    operations.insert(
        "publish_events".into(),
        json!({
            "action": "send",
            "title": "Publish to the exchange (AMQP baseline)",
            "channel": { "$ref": "#/channels/events_exchange" },
            "messages": exchange_messages,
        }),
    );
    operations.insert(
        "deliver_webhook".into(),
        json!({
            "action": "send",
            "title": "Deliver a webhook",
            "channel": { "$ref": "#/channels/webhooks" },
            "messages": webhook_messages,
            "bindings": { "http": { "method": "POST", "bindingVersion": "0.3.0" } },
        }),
    );
    let mut messages = Map::new();
    for (event_type, version) in super::published_versions() {
        let id = message_id(event_type, version);
        messages.insert(id.clone(), message(event_type, version, false));
        messages.insert(format!("webhook_{id}"), message(event_type, version, true));
    }
    messages.insert(WEBHOOK_BODIES[0].into(), heartbeat_message());
    messages.insert(WEBHOOK_BODIES[1].into(), fhir_message());
    json!({
        "asyncapi": "3.0.0",
        "info": {
            "title": "Clinic events",
            "version": "1.0.0",
            "description": "The clinic scheduling service's identifier-only domain events: the \
                            listener queues the dispatcher starts (SQS; an AMQP baseline for \
                            self-hosted brokers) and webhook delivery to other applications. Every \
                            message is a CloudEvents 1.0.2 structured-mode JSON document whose `type` \
                            is the published name and whose `dataschema` names the event version's \
                            JSON Schema. Extension attributes: `tenantid`, `correlationid`, \
                            `causationid`, `traceparent` (the CloudEvents distributed-tracing \
                            extension: the W3C trace context of the request that committed the \
                            event, when it has one), on listener queues `listener`, and on webhook \
                            bodies `sequence` (the delivery's number in its endpoint's sequence). \
                            Generated; see docs/events.md.",
        },
        "defaultContentType": "application/json",
        "servers": {
            "sqs": {
                "host": "sqs.{region}.amazonaws.com",
                "protocol": "sqs",
                "description": "Amazon SQS: one standard queue per listener, each with a dead-letter queue.",
                "variables": { "region": { "default": "us-east-1" } },
            },
            "amqp": {
                "host": "{broker}",
                "protocol": "amqp",
                "protocolVersion": "0.9.1",
                "description": "Baseline for a self-hosted broker (exchange and queue per listener).",
                "variables": { "broker": { "default": "localhost:5672" } },
            },
            "webhooks": {
                "host": "{subscriber}",
                "protocol": "https",
                "description": "A subscriber's registered endpoint (public https addresses only).",
                "variables": { "subscriber": { "default": "subscriber.example" } },
            },
        },
        "channels": channels,
        "operations": operations,
        "components": {
            "messages": messages,
            "messageTraits": {
                "standardWebhooks": {
                    "headers": {
                        "type": "object",
                        "required": ["webhook-id", "webhook-timestamp", "webhook-signature"],
                        "properties": {
                            "webhook-id": {
                                "type": "string",
                                "description": "Unique per delivery (endpoint, event); the same on every retry",
                            },
                            "webhook-timestamp": {
                                "type": "string",
                                "pattern": "^[0-9]+$",
                                "description": "Seconds since the Unix epoch when this attempt was signed",
                            },
                            "webhook-signature": {
                                "type": "string",
                                "description": "Space-separated `v1,<base64 HMAC-SHA256 of id.timestamp.body>` \
                                                signatures, one per active secret",
                            },
                        },
                    },
                },
            },
        },
    })
}

/// The document as YAML (what `asyncapi.yaml` holds and `/asyncapi.yaml` serves).
pub fn yaml() -> String {
    format!(
        "# Generated by clinic_core::contract::asyncapi; do not edit. Regenerate: UPDATE_CONTRACT=1 cargo \
         test -p clinic-core --lib contract\n{}",
        super::yaml::to_yaml(&document())
    )
}
