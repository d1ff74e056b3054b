//! The one way to write an event.
//!
//! [`append`] writes, on the caller's transaction and in one statement (one round trip): the `events`
//! row, its `event_resources` timeline links (the primary resource always, plus the extra links the
//! caller names), its `event_outbox` row, and a `NOTIFY` on [`OUTBOX_CHANNEL`] when — and only when —
//! some dispatcher has registered itself as idle in `outbox_waiters`. PostgreSQL serialises the
//! commits of notifying transactions, so a busy pipeline (no idle dispatcher) pays nothing for
//! wake-ups; an idle dispatcher re-scans after registering, and polls as a safety net, so no event is
//! left behind by a wake-up that was not sent.
//!
//! The event commits or rolls back with the resource change, because the caller owns the transaction.

use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;
use ulid::Ulid;

use super::{Cause, Envelope, EventType, ResourceType, ENVELOPE_VERSION};
use crate::ids::{EventId, WorkspaceId};

/// The channel dispatchers LISTEN on.
pub const OUTBOX_CHANNEL: &str = "clinic_outbox";

pub(crate) const APPEND_EVENT: &str = include_str!("append_event.sql");

/// What a use case knows about the event it is recording.
#[derive(Debug, Clone)]
pub struct NewEvent {
    pub event_type: EventType,
    pub workspace_id: WorkspaceId,
    pub resource_id: Ulid,
    /// The resource's version after the mutation.
    pub resource_version: i32,
    pub occurred_at: DateTime<Utc>,
    /// Timeline links beyond the primary resource (an appointment's patient and practitioner).
    pub also_links: Vec<(ResourceType, Ulid)>,
    /// Update and reschedule events: the names (from [`EventType::changeable_fields`]) of the fields
    /// the mutation changed; `None` for the other types.
    pub changed_fields: Option<Vec<&'static str>>,
}

/// Appends `event` on the caller's transaction: event row, links, outbox row, conditional wake-up.
/// The event keeps the cause's trace context (`events.traceparent`).
pub async fn append(
    client: &impl GenericClient,
    cause: &Cause,
    event: NewEvent,
) -> Result<Envelope, tokio_postgres::Error> {
    let id = EventId::generate();
    let resource_type = event.event_type.resource_type();
    let mut link_types = vec![resource_type.as_str()];
    let mut link_ids = vec![uuid::Uuid::from(event.resource_id)];
    for (link_type, link_id) in &event.also_links {
        link_types.push(link_type.as_str());
        link_ids.push(uuid::Uuid::from(*link_id));
    }
    let changed_fields = event.changed_fields.clone();
    let idempotency_key = cause.idempotency_key.map(|digest| digest.render());
    let statement = client.prepare_cached(APPEND_EVENT).await?;
    let row = client
        .query_one(
            &statement,
            &[
                &id,
                &event.workspace_id,
                &event.event_type.as_str(),
                &ENVELOPE_VERSION,
                &cause.actor.kind(),
                &cause.actor.id().map(uuid::Uuid::from),
                &event.occurred_at,
                &resource_type.as_str(),
                &uuid::Uuid::from(event.resource_id),
                &event.resource_version,
                &cause.correlation_id,
                &uuid::Uuid::from(cause.causation_id.0),
                &link_types,
                &link_ids,
                &OUTBOX_CHANNEL,
                &changed_fields,
                &idempotency_key,
                &cause.trace.map(|trace| trace.to_string()),
            ],
        )
        .await?;
    Ok(Envelope {
        id,
        event_type: event.event_type,
        version: ENVELOPE_VERSION,
        workspace_id: event.workspace_id,
        actor: cause.actor,
        occurred_at: event.occurred_at,
        recorded_at: row.get(0),
        resource_type,
        resource_id: event.resource_id,
        resource_version: event.resource_version,
        correlation_id: cause.correlation_id,
        causation_id: cause.causation_id,
        published_name: String::new(),
        producer: String::new(),
        idempotency_key,
        changed_fields: changed_fields.map(|names| names.into_iter().map(String::from).collect()),
        metadata: Default::default(),
        traceparent: cause.trace,
    }
    .with_derived_fields())
}
