-- Custody until receipt (DESIGN §5a) and the app role's timeouts.
--
-- 1. Every listener start is recorded (`listener_starts`, one row per (event, listener), written by
--    the dispatcher's mark in the same statement that marks the row dispatched). A start is
--    *settled* when that listener's receipt is in: `settled_at` is set by the receipt insert (the
--    trigger below, inside the listener's own transaction — no extra round trip) or at the start's
--    insert when the receipt was already there (the local transport commits it first). The
--    reconciler (`housekeeping::reconcile`) restarts unsettled starts that are overdue, counting
--    `restarts`, and after its limit sets `stuck_at`: the pair is handed to operators.
-- 2. `clinic_app` gets statement, lock and idle-in-transaction timeouts below the dispatcher's lease
--    (30 s): see docs/alarms.md ("Timeouts").

ALTER TABLE listener_starts
    ADD COLUMN settled_at   timestamptz,
    ADD COLUMN restarts     integer NOT NULL DEFAULT 0,
    ADD COLUMN restarted_at timestamptz,
    ADD COLUMN stuck_at     timestamptz;

-- Starts recorded before custody existed: settled when their receipt is in; the others are what the
-- reconciler is for.
UPDATE listener_starts s SET settled_at = r.received_at
FROM listener_receipts r WHERE r.event_id = s.event_id AND r.listener = s.listener;

-- The custody scan and OldestUnsettledAgeMs read only unsettled starts, however many settled ones
-- history holds.
CREATE INDEX listener_starts_unsettled_idx ON listener_starts (started_at) WHERE settled_at IS NULL;

CREATE FUNCTION listener_receipt_settles_start() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE listener_starts SET settled_at = NEW.received_at
    WHERE event_id = NEW.event_id AND listener = NEW.listener AND settled_at IS NULL;
    RETURN NULL;
END
$$;

CREATE TRIGGER listener_receipts_settle_start AFTER INSERT ON listener_receipts
    FOR EACH ROW EXECUTE FUNCTION listener_receipt_settles_start();

-- Session defaults of the app role. Role settings apply at login, so they also go to every login
-- role that is a direct member of clinic_app when this runs (grant first, then migrate; for a login
-- role granted later run the same three ALTER ROLE statements for it — docs/alarms.md). Superusers
-- are left alone (they run migrations and operator maintenance).
ALTER ROLE clinic_app SET statement_timeout = '10s';
ALTER ROLE clinic_app SET lock_timeout = '3s';
ALTER ROLE clinic_app SET idle_in_transaction_session_timeout = '15s';
DO $$
DECLARE
    member text;
BEGIN
    FOR member IN
        SELECT r.rolname FROM pg_auth_members m
        JOIN pg_roles g ON g.oid = m.roleid AND g.rolname = 'clinic_app'
        JOIN pg_roles r ON r.oid = m.member
        WHERE r.rolcanlogin AND NOT r.rolsuper
    LOOP
        EXECUTE format('ALTER ROLE %I SET statement_timeout = %L', member, '10s');
        EXECUTE format('ALTER ROLE %I SET lock_timeout = %L', member, '3s');
        EXECUTE format('ALTER ROLE %I SET idle_in_transaction_session_timeout = %L', member, '15s');
    END LOOP;
END
$$;
