//! Reading events back: single envelopes and resource timelines (newest first, keyset on event id).

use deadpool_postgres::GenericClient;
use tokio_postgres::Row;
use ulid::Ulid;

use super::{Actor, Envelope, EventType, ResourceType};
use crate::db::sql;
use crate::ids::{CausationId, EventId, WorkspaceId};
use crate::telemetry::TraceParent;

/// [`ENVELOPE_COLUMNS`] as a literal, so this module's statements are compile-time `concat!`s.
macro_rules! envelope_columns {
    () => {
        "e.id, e.type, e.version, e.workspace_id, e.actor_kind, e.actor_id, \
         e.occurred_at, e.recorded_at, e.resource_type, e.resource_id, e.resource_version, \
         e.correlation_id, e.causation_id, e.changed_fields, e.idempotency_key_digest, e.traceparent"
    };
}

/// The `events` columns every envelope query selects, in the order [`envelope_from_row`] reads.
pub const ENVELOPE_COLUMNS: &str = envelope_columns!();

/// How many columns [`ENVELOPE_COLUMNS`] selects: a statement's own columns after them start here.
pub const ENVELOPE_COLUMN_COUNT: usize = 16;

/// Why a stored row is not an envelope (a type this build does not know, a corrupt actor).
#[derive(Debug, thiserror::Error)]
#[error("event {event_id} cannot be read: {problem}")]
pub struct UnreadableEvent {
    pub event_id: EventId,
    pub problem: String,
    /// A type or resource type this build does not know (a newer build wrote it): retryable, unlike
    /// a corrupt row.
    pub unknown_to_build: bool,
}

/// Reads an envelope from a row selected with [`ENVELOPE_COLUMNS`] starting at column `first`.
pub fn envelope_from_row(row: &Row, first: usize) -> Result<Envelope, UnreadableEvent> {
    let id: EventId = row.get(first);
    let unreadable = |problem: String| UnreadableEvent { event_id: id, problem, unknown_to_build: false };
    let unknown = |problem: String| UnreadableEvent { event_id: id, problem, unknown_to_build: true };
    let type_name: &str = row.get(first + 1);
    let event_type =
        EventType::parse(type_name).ok_or_else(|| unknown(format!("unknown type {type_name}")))?;
    let actor_kind: &str = row.get(first + 4);
    let actor_id: Option<uuid::Uuid> = row.get(first + 5);
    let actor = Actor::from_parts(actor_kind, actor_id.map(Ulid::from))
        .ok_or_else(|| unreadable(format!("bad actor {actor_kind}")))?;
    let resource_type_name: &str = row.get(first + 8);
    let resource_type = ResourceType::parse(resource_type_name)
        .ok_or_else(|| unknown(format!("unknown resource type {resource_type_name}")))?;
    let resource_id: uuid::Uuid = row.get(first + 9);
    let causation_id: uuid::Uuid = row.get(first + 12);
    Ok(Envelope {
        id,
        event_type,
        version: row.get(first + 2),
        workspace_id: row.get(first + 3),
        actor,
        occurred_at: row.get(first + 6),
        recorded_at: row.get(first + 7),
        resource_type,
        resource_id: Ulid::from(resource_id),
        resource_version: row.get(first + 10),
        correlation_id: row.get(first + 11),
        causation_id: CausationId(Ulid::from(causation_id)),
        published_name: String::new(),
        producer: String::new(),
        changed_fields: row.get(first + 13),
        idempotency_key: row.get(first + 14),
        metadata: Default::default(),
        // Written only in the strict form (the column's CHECK); a value that does not parse is dropped.
        traceparent: row.get::<_, Option<&str>>(first + 15).and_then(TraceParent::parse),
    }
    .with_derived_fields())
}

#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error(transparent)]
    Db(#[from] tokio_postgres::Error),
    #[error(transparent)]
    Unreadable(#[from] UnreadableEvent),
}

const FIND: &str = concat!("SELECT ", envelope_columns!(), " FROM events e WHERE e.id = $1");

/// One event by id.
pub async fn find(client: &impl GenericClient, id: EventId) -> Result<Option<Envelope>, ReadError> {
    match sql::query_opt(client, FIND, &[&id]).await? {
        Some(row) => Ok(Some(envelope_from_row(&row, 0)?)),
        None => Ok(None),
    }
}

const TIMELINE: &str = concat!(
    "SELECT ",
    envelope_columns!(),
    " FROM event_resources r JOIN events e ON e.id = r.event_id \
     WHERE r.workspace_id = $1 AND r.resource_type = $2 AND r.resource_id = $3 \
       AND ($4::uuid IS NULL OR r.event_id < $4) \
     ORDER BY r.event_id DESC LIMIT $5"
);

/// Up to `limit` events linked to a resource, newest first, strictly older than `before` when given.
pub async fn timeline(
    client: &impl GenericClient,
    workspace_id: WorkspaceId,
    resource_type: ResourceType,
    resource_id: Ulid,
    before: Option<EventId>,
    limit: i64,
) -> Result<Vec<Envelope>, ReadError> {
    let rows = sql::query(
        client,
        TIMELINE,
        &[&workspace_id, &resource_type.as_str(), &uuid::Uuid::from(resource_id), &before, &limit],
    )
    .await?;
    rows.iter().map(|row| envelope_from_row(row, 0).map_err(ReadError::from)).collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_column_count_matches_the_column_list() {
        assert_eq!(super::ENVELOPE_COLUMNS.split(',').count(), super::ENVELOPE_COLUMN_COUNT);
    }
}
