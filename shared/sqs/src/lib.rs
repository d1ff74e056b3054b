//! SQS transport for the clinic dispatcher, and the message format listeners read back.
//!
//! **Decision: one queue per listener.** Each listener (`patient_booking_confirmation`,
//! `cancel_future_appointments`, …) gets its own standard (or FIFO) queue with its own dead-letter
//! queue. Why not one queue with a `listener` attribute:
//! - a poison message, a redrive and an alarm belong to one workflow — an operator redrives
//!   `patient_reminder` without touching cancellations, and a DLQ's depth names the broken listener;
//! - each listener scales and is throttled on its own (reserved concurrency, batch size, visibility
//!   timeout sized to its work), so a slow notification provider does not delay chained mutations;
//! - a new listener is a new queue: no consumer has to filter out messages it does not understand.
//!
//! The listener is still named in every message (a `listener` CloudEvents extension in the body, and a
//! `listener` message attribute), so one consumer function can serve every queue and a message moved
//! between queues by hand is still routed correctly.
//!
//! Configuration ([`SqsConfig::read`]): `CLINIC_SQS_QUEUE_URL_<LISTENER>` for every listener
//! (the listener name upper-cased, e.g. `CLINIC_SQS_QUEUE_URL_PATIENT_BOOKING_CONFIRMATION`; all
//! required), `CLINIC_CLOUDEVENTS_SOURCE` (default `/clinic`; the `source` attribute is
//! `<source>/workspaces/<workspaceId>`) and `CLINIC_SQS_ENDPOINT` (optional endpoint override, e.g. a
//! local emulator). Region and credentials come from the usual AWS environment.
//!
//! Invariants:
//! - Bodies are CloudEvents 1.0.2 structured JSON ([`cloudevents`]) whose `data` is the identifier-only
//!   envelope: no health data ever reaches a queue.
//! - Starts are sent with SendMessageBatch, at most 10 entries a call; each entry's result maps back to
//!   exactly its start, so a per-entry failure retries only that listener.
//! - A call that did not reach SQS or that SQS refused as a whole for its own state (timeout,
//!   connection error, internal error, throttling) answers *unavailable* starts: the dispatcher holds
//!   those rows without spending attempts. So does an entry SQS failed on its own side
//!   (`SenderFault = false`, a partial incident). Per-entry rejections of the sender's fault count as
//!   per-message failures. A
//!   per-queue breaker ([`breaker`]) stops calling a queue after repeated unavailable calls and lets
//!   one probe through per cool-down (doubling, at most 30 s).
//! - Calls are bounded by [`SqsTimeouts`] (operation and attempt timeouts below the lease).
//! - FIFO queues (URL ends in `.fifo`) get MessageGroupId = the resource id (per-resource order) and
//!   MessageDeduplicationId = `"{event_id}:{listener}"`.
//! - Standard queues get MessageGroupId = the workspace id, which makes them SQS fair queues (issue
//!   41): when one workspace floods a queue, SQS keeps the other workspaces' messages moving. No
//!   queue setting is needed; ordering and delivery stay those of a standard queue.

mod breaker;
pub mod cloudevents;
mod config;
pub mod queues;
#[cfg(test)]
mod template;
#[cfg(feature = "testing")]
pub mod testing;
mod transport;

pub use cloudevents::{parse_cloud_event, parse_message, to_cloud_event, CloudEvent, MessageError};
pub use config::{
    build_client, build_client_with, queue_url_var, template_logical_id, QueueMap, SqsConfig, SqsTimeouts,
};
pub use transport::SqsTransport;

/// The body of a webhook delivery: the identifier-only CloudEvent the queues carry, from the one
/// builder (`to_published_event`, which [`to_cloud_event`] extends), without the internal `listener`
/// extension and with the delivery's number as the `sequence` extension; or a heartbeat
/// (`clinic_core::webhooks::heartbeat`) with the same `source`.
pub fn webhook_body(source_prefix: &str) -> clinic_core::webhooks::BodyFn {
    use clinic_core::webhooks::Payload;
    let prefix = source_prefix.to_owned();
    std::sync::Arc::new(move |payload: Payload<'_>| match payload {
        Payload::Event { envelope, sequence } => {
            let mut event = clinic_core::contract::cloudevent::to_published_event(envelope, &prefix);
            event.sequence = Some(sequence.to_wire());
            serde_json::to_vec(&event).unwrap_or_default()
        }
        Payload::Heartbeat(heartbeat) => {
            let event = clinic_core::webhooks::heartbeat::to_cloud_event(heartbeat, &prefix);
            serde_json::to_vec(&event).unwrap_or_default()
        }
    })
}
