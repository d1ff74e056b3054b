-- The role the Lambda functions and the local API path connect as. It may read and write the
-- resource and bookkeeping tables, append to the event log, and nothing more: no UPDATE or DELETE on
-- `events`/`event_resources` (so the append-only rule holds even if the triggers were dropped), no
-- DDL, no TRUNCATE. NOLOGIN here; operators grant it to a login role (see README, "Deploy to AWS").
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'clinic_app') THEN
        CREATE ROLE clinic_app NOLOGIN;
    END IF;
END
$$;

GRANT USAGE ON SCHEMA public TO clinic_app;
GRANT SELECT, INSERT ON events, event_resources TO clinic_app;
GRANT SELECT, INSERT, UPDATE, DELETE ON
    workspaces, members, practitioners, patients, appointments,
    event_outbox, outbox_waiters, listener_starts, listener_receipts, notifications,
    operator_actions, idempotency_keys, appointment_reminders
    TO clinic_app;
GRANT SELECT ON schema_migrations TO clinic_app;
