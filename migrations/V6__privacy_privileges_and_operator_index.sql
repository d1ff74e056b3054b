-- Issue 12 (items 5, 7, 9, 10): erasure of deleted patients, least privilege for `clinic_app`, the
-- workspace on the outbox for operator queries, and the indexes the retention sweeps walk.

-- 1. Erasure (DESIGN.md §6a). A deleted patient keeps its id, version and times (timelines stay
-- whole) but none of its personal fields; its appointments keep ids, statuses and times but lose their
-- free-text reasons. Names become nullable so an erased row holds no placeholder text.
ALTER TABLE patients ALTER COLUMN given_name DROP NOT NULL;
ALTER TABLE patients ALTER COLUMN family_name DROP NOT NULL;

-- Patients deleted before this migration are erased now, so the constraints below hold for every row.
UPDATE appointments a SET reason = NULL, cancellation_reason = NULL
FROM patients p
WHERE p.id = a.patient_id AND p.deleted_at IS NOT NULL
  AND (a.reason IS NOT NULL OR a.cancellation_reason IS NOT NULL);
UPDATE patients
SET given_name = NULL, family_name = NULL, email = NULL, phone = NULL, date_of_birth = NULL
WHERE deleted_at IS NOT NULL;

ALTER TABLE patients
    ADD CONSTRAINT patients_live_have_names
        CHECK (deleted_at IS NOT NULL OR (given_name IS NOT NULL AND family_name IS NOT NULL)),
    ADD CONSTRAINT patients_deleted_are_erased
        CHECK (deleted_at IS NULL OR (given_name IS NULL AND family_name IS NULL AND email IS NULL
                                      AND phone IS NULL AND date_of_birth IS NULL));

-- 2. Operator queries (issue 12 item 9): the workspace is copied onto the outbox row by the one write
-- path (events/append_event.sql), so the admin list and stats are served by indexes that start with
-- the workspace instead of joining every outbox row to `events`.
ALTER TABLE event_outbox ADD COLUMN workspace_id uuid;
UPDATE event_outbox o SET workspace_id = e.workspace_id FROM events e WHERE e.id = o.event_id;

-- Rows inserted without the workspace (hand-written SQL in tests and benchmarks) take the event's.
-- The WHEN clause keeps the trigger off the normal write path, which always supplies it.
CREATE FUNCTION event_outbox_fill_workspace() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    SELECT e.workspace_id INTO NEW.workspace_id FROM events e WHERE e.id = NEW.event_id;
    RETURN NEW;
END;
$$;
CREATE TRIGGER event_outbox_fill_workspace BEFORE INSERT ON event_outbox
    FOR EACH ROW WHEN (NEW.workspace_id IS NULL) EXECUTE FUNCTION event_outbox_fill_workspace();

ALTER TABLE event_outbox ALTER COLUMN workspace_id SET NOT NULL;

-- Newest-first listing of a workspace (keyset on the event id), with or without a status filter;
-- per-status counts (of one workspace or all) read the second one index-only.
CREATE INDEX event_outbox_workspace_idx ON event_outbox (workspace_id, event_id);
CREATE INDEX event_outbox_status_workspace_idx ON event_outbox (status, workspace_id, event_id);

-- 3. Retention (issue 12 item 10; docs/retention.md): the sweeps walk these in bounded batches.
CREATE INDEX idempotency_keys_created_idx ON idempotency_keys (created_at);
CREATE INDEX appointment_reminders_starts_idx ON appointment_reminders (starts_at);

-- 4. Least privilege (issue 12 item 7). `clinic_app` holds only what the code uses.
-- The operator audit trail is append-only, like `events` and `patient_disclosures`.
REVOKE UPDATE, DELETE, TRUNCATE ON operator_actions FROM clinic_app;
CREATE TRIGGER operator_actions_append_only BEFORE UPDATE OR DELETE ON operator_actions
    FOR EACH ROW EXECUTE FUNCTION reject_append_only_change();
CREATE TRIGGER operator_actions_no_truncate BEFORE TRUNCATE ON operator_actions
    FOR EACH STATEMENT EXECUTE FUNCTION reject_append_only_change();

-- Tenants and members are created by the owner (`clinic dev`'s seeding, `clinic workspaces`, the
-- deploy guide), never by the API or the listeners, which only read them.
REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON workspaces, members FROM clinic_app;

-- Notifications: the app inserts them and moves them through the delivery lifecycle (V5), column by
-- column; it never deletes them (the delivery log is kept, see docs/retention.md) and never rewrites
-- what a notification is (event, listener, recipient, template, idempotency key).
REVOKE UPDATE, DELETE, TRUNCATE ON notifications FROM clinic_app;
GRANT UPDATE (status, channel, attempts, available_at, claim_token, claimed_until, last_error_code,
              provider_message_id, sent_at, updated_at)
    ON notifications TO clinic_app;

-- Nobody but the owner creates objects in the schema (the default until PostgreSQL 15 let PUBLIC).
REVOKE CREATE ON SCHEMA public FROM PUBLIC;
