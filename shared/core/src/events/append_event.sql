-- One statement, one round trip: event, timeline links, outbox row, and a wake-up only when some
-- dispatcher is idle and listening (see outbox_waiters). $15 is the channel, bound from the Rust
-- constant `events::store::OUTBOX_CHANNEL` (the one place its name is written).
WITH event AS (
    INSERT INTO events (id, workspace_id, type, version, actor_kind, actor_id, occurred_at,
                        resource_type, resource_id, resource_version, correlation_id, causation_id,
                        changed_fields, idempotency_key_digest, traceparent)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $16, $17, $18)
    RETURNING id, recorded_at
), links AS (
    INSERT INTO event_resources (workspace_id, resource_type, resource_id, event_id)
    SELECT $2, link.resource_type, link.resource_id, event.id
    FROM event, unnest($13::text[], $14::uuid[]) AS link (resource_type, resource_id)
), outbox AS (
    INSERT INTO event_outbox (event_id, workspace_id, available_at, created_at, updated_at)
    SELECT id, $2, recorded_at, recorded_at, recorded_at FROM event
)
SELECT event.recorded_at,
       (SELECT count(pg_notify($15, '')) FROM outbox_waiters) AS wakeups
FROM event
