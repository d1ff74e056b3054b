-- The rows waiting for an operator, per queue (clinic_core::housekeeping::waiting): dead outbox rows
-- (already reachable through event_outbox_status_idx), dead notifications and failed webhook
-- deliveries. The gauge counts each every minute with a bound; these partial indexes hold only the
-- waiting rows, so the count costs what is waiting, not the tables' history.
CREATE INDEX notifications_dead_idx ON notifications (id) WHERE status = 'dead';
CREATE INDEX webhook_deliveries_failed_idx ON webhook_deliveries (id) WHERE status = 'failed';
