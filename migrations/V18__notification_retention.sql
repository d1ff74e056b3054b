-- Issue 38 item 7: every lease table has a stated bound. Notifications that ended — `sent`, `stale`,
-- `opted_out`, `discarded` — are deleted by the retention sweep once older than
-- CLINIC_NOTIFICATION_RETENTION_HOURS and once their event's outbox row is gone (the outbox row goes
-- only after CLINIC_RETENTION_HOURS, above the dead-letter queues' lifetime, and with it every way
-- to replay or redeliver the event, so the row's idempotency key `"{event_id}:{listener}"` can no
-- longer dedupe anything). `dead`, `no_contact` and live rows are never swept: they wait for an
-- operator. The role still may not update content columns (V5's column grants are unchanged).
GRANT DELETE ON notifications TO clinic_app;

-- The sweep walks ended rows by (updated_at, id), so each batch reads at most its batch size.
CREATE INDEX notifications_ended_idx ON notifications (updated_at, id)
    WHERE status IN ('sent', 'stale', 'opted_out', 'discarded');
