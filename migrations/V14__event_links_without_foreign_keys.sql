-- The event's own rows without foreign-key checks on the hot path (issue 13: commit → receipt at
-- 1,000/s).
--
-- `event_resources.event_id` and `event_outbox.event_id` referenced `events (id)` by foreign key. Both
-- are written only by the one event writer (`events::store::append`), in the statement that inserts
-- the event itself, and `events` rejects UPDATE, DELETE and TRUNCATE (V1's triggers), so neither
-- reference can dangle. The constraint therefore guarded nothing the writer does not already
-- guarantee, and it cost four `SELECT … FOR KEY SHARE` row locks per event on the event row the
-- same statement had just inserted: each a WAL record and an exclusive lock on the heap page every
-- concurrent writer is appending to. Measured with pg_stat_statements at 1,000 bookings/s (2 cores,
-- PostgreSQL's defaults): the append statement took 2.9 ms on average and each check 0.63 ms (0.03 ms
-- at 200/s); without the constraints the append takes 0.20–0.23 ms at the same rate.
--
-- The other reference to events keeps its key: `listener_starts` (written off the hot path, by the
-- dispatcher for partial attempts and by the reconciler).

ALTER TABLE event_resources DROP CONSTRAINT event_resources_event_id_fkey;
ALTER TABLE event_outbox DROP CONSTRAINT event_outbox_event_id_fkey;
