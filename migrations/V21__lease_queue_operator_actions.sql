-- Issue 38: operator retry and discard of one webhook delivery, audited like the other queues'
-- actions, and the lease fence of notifications and webhook deliveries made the database's.
--
-- 1. `discarded`: an operator gave a webhook delivery up (final; the lifecycle's `discarded`,
--    clinic_core::lease::WEBHOOK_DELIVERIES). Swept after the retention like `delivered` rows.
ALTER TABLE webhook_deliveries DROP CONSTRAINT webhook_deliveries_status_check;
ALTER TABLE webhook_deliveries ADD CONSTRAINT webhook_deliveries_status_check
    CHECK (status IN ('pending', 'sending', 'delivered', 'retry', 'failed', 'discarded'));
DROP INDEX webhook_deliveries_swept_idx;
CREATE INDEX webhook_deliveries_swept_idx ON webhook_deliveries (updated_at)
    WHERE status IN ('delivered', 'discarded');

-- 2. The audit row of an action on a webhook delivery names it (the event id is the delivery's
--    event), like `notification_id` does for a notification; an audit row names at most one of them.
ALTER TABLE operator_actions ADD COLUMN webhook_delivery_id uuid;
CREATE INDEX operator_actions_webhook_delivery_idx ON operator_actions (webhook_delivery_id)
    WHERE webhook_delivery_id IS NOT NULL;
ALTER TABLE operator_actions ADD CONSTRAINT operator_actions_one_row
    CHECK (notification_id IS NULL OR webhook_delivery_id IS NULL);

-- 3. The claim token is the fence of a leased row (DESIGN §5d), as V15 made it for the outbox: a
--    `sending` row carries its claim's token, and no other row carries one (every exit from
--    `sending` — the marks, the expiry, the burial, the operator actions — clears it). A writer that
--    breaks the rule is refused instead of leaving a lease no mark can end.
ALTER TABLE notifications ADD CONSTRAINT notifications_claim_token_exactly_while_sending
    CHECK ((status = 'sending') = (claim_token IS NOT NULL));
ALTER TABLE webhook_deliveries ADD CONSTRAINT webhook_deliveries_claim_token_exactly_while_sending
    CHECK ((status = 'sending') = (claim_token IS NOT NULL));
