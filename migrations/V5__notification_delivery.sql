-- Delivery to people (DESIGN.md §5b, issue 15): every notification row becomes a small outbox of its
-- own. A listener commits the row (ids and template only) with its receipt; a sender claims due rows
-- with FOR UPDATE SKIP LOCKED under a lease, calls the provider with no transaction open and marks
-- the row, fenced by its claim token. The state machine is documented in shared/core/src/delivery.
--
-- Bound: one row (~200 bytes, ids and codes) per (event, listener) that notifies — the unique
-- idempotency key — so the table grows like `events` and lives as long as the event log. It is
-- deliberately not swept with receipts (shared/core/src/retention.rs): once a receipt is gone, the
-- key is what keeps a redelivered message from notifying twice (`Notified::AlreadySent`). Live rows
-- stay few (the due index covers only them). Nothing here holds content: no names, addresses, text.

ALTER TABLE notifications
    ADD COLUMN attempts             integer NOT NULL DEFAULT 0,
    ADD COLUMN available_at         timestamptz NOT NULL DEFAULT now(),
    ADD COLUMN claim_token          uuid,
    ADD COLUMN claimed_until        timestamptz,
    ADD COLUMN provider_message_id  text CONSTRAINT notifications_provider_message_id_length
                                        CHECK (length(provider_message_id) <= 200),
    ADD COLUMN last_error_code      text CONSTRAINT notifications_last_error_code_length
                                        CHECK (length(last_error_code) <= 100),
    ADD COLUMN sent_at              timestamptz,
    ADD COLUMN updated_at           timestamptz NOT NULL DEFAULT now();

-- Rows written by the delivery log before delivery existed were never sent; they are not sent now
-- (they may be months old), they are closed with a code that says why.
UPDATE notifications SET status = 'discarded', last_error_code = 'predates_delivery'
    WHERE status = 'recorded';

ALTER TABLE notifications ALTER COLUMN status SET DEFAULT 'pending';
ALTER TABLE notifications ADD CONSTRAINT notifications_status_check CHECK (status IN (
    'pending', 'sending', 'sent', 'retry', 'uncertain', 'dead', 'discarded', 'no_contact', 'opted_out'));
-- `auto` until the sender chose from the recipient's contact data at send time.
ALTER TABLE notifications ADD CONSTRAINT notifications_channel_check
    CHECK (channel IN ('auto', 'email', 'sms', 'none'));

-- The sender's due scan (and lease-expiry scan) stays small however long the history grows.
CREATE INDEX notifications_due_idx ON notifications (available_at)
    WHERE status IN ('pending', 'retry', 'sending', 'uncertain');
-- Operator listings by status, newest first.
CREATE INDEX notifications_status_idx ON notifications (workspace_id, status, id DESC);

-- The row churns like the outbox: vacuum it eagerly.
ALTER TABLE notifications SET (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_cost_delay = 0, autovacuum_analyze_scale_factor = 0,
    autovacuum_analyze_threshold = 1000);

-- Per-patient opt-out of notifications: the sender records `opted_out` and sends nothing.
ALTER TABLE patients ADD COLUMN notifications_opt_out boolean NOT NULL DEFAULT false;

-- Where a practitioner's schedule-change notices go, and which staff member the practitioner is
-- (a staff member is never notified of their own change). Contact details are personal data: never
-- in events, logs or messages, like a patient's.
ALTER TABLE practitioners
    ADD COLUMN email      text,
    ADD COLUMN phone      text,
    ADD COLUMN member_id  uuid;

-- Operator actions on deliveries are audited beside outbox actions; `notification_id` names the
-- delivery (the event id is the notification's event).
ALTER TABLE operator_actions ADD COLUMN notification_id uuid;
CREATE INDEX operator_actions_notification_idx ON operator_actions (notification_id)
    WHERE notification_id IS NOT NULL;
