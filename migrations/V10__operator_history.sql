-- Operating without SQL, recorded (issue 17, task H3): the listener rejections and the outbox row's
-- history, so `explain` shows what happened instead of deriving it. Ids, codes, counters and times
-- only: no error texts, no names, no reasons.

-- 1. Listener rejections (shared/core/src/listeners/pointer.rs): one row per rejected delivery,
--    written after the rejected transaction rolled back, on the rejection path only (the happy path
--    gets no extra round trip). `event_id` is the id AS SENT — a forged id that matches no event is
--    still recorded under the id it claimed. `workspace_id` is the stored event's workspace when the
--    id exists (a message claiming another tenant is filed under the event's real owner), else the
--    claimed one. Bounded: swept by the retention sweep after CLINIC_REJECTION_RETENTION_HOURS
--    (docs/retention.md).
CREATE TABLE listener_rejections (
    id            uuid PRIMARY KEY,
    event_id      uuid NOT NULL,
    workspace_id  uuid NOT NULL,
    listener      text NOT NULL,
    reason        text NOT NULL CONSTRAINT listener_rejections_reason_check CHECK (reason IN (
        'unknown_event', 'tenant_mismatch', 'type_mismatch', 'subject_mismatch', 'version_mismatch',
        'source_mismatch', 'listener_not_routed')),
    transport     text NOT NULL,
    message_id    text CONSTRAINT listener_rejections_message_id_length CHECK (length(message_id) <= 200),
    rejected_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX listener_rejections_event_idx ON listener_rejections (event_id);
CREATE INDEX listener_rejections_workspace_idx ON listener_rejections (workspace_id, id);
CREATE INDEX listener_rejections_rejected_idx ON listener_rejections (rejected_at);
GRANT SELECT, INSERT, DELETE ON listener_rejections TO clinic_app;

-- 2. The outbox row's history: an AFTER UPDATE trigger whose WHEN clause lets only the unhappy
--    transitions through, so a normal dispatch (pending → claimed → dispatched) never calls the
--    function — the WHEN clause is evaluated on the row in C, with no function call and no write:
--    - a failure mark (claimed → retry | dead) that spent the attempt, or changed the error code;
--      a hold (attempt given back) is recorded when its code is new, so a long outage's repeated
--      probes with the same code add nothing;
--    - a burial at claim time (pending | retry → dead, or claimed → dead: attempts_exhausted);
--    - a lease takeover (claimed → claimed under a new claim token: the previous lease expired).
--    Operator actions are already in `operator_actions`. Rows go with their outbox row (ON DELETE
--    CASCADE; the retention sweep deletes finished rows; the cascade runs as the table owner), so the
--    history is bounded like the row itself; per row it is bounded by the attempt ceiling plus one
--    row per distinct hold code and per takeover.
CREATE TABLE outbox_history (
    id               uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    event_id         uuid NOT NULL REFERENCES event_outbox (event_id) ON DELETE CASCADE,
    kind             text NOT NULL CONSTRAINT outbox_history_kind_check
        CHECK (kind IN ('failure', 'hold', 'dead', 'takeover')),
    status_before    text NOT NULL,
    status_after     text NOT NULL,
    attempt          integer NOT NULL,
    error_code       text,
    claimed_by       text,
    previous_claimed_by text,
    at               timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX outbox_history_event_idx ON outbox_history (event_id, at);
GRANT SELECT, INSERT ON outbox_history TO clinic_app;

CREATE FUNCTION event_outbox_record_history() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO outbox_history (event_id, kind, status_before, status_after, attempt, error_code,
                                claimed_by, previous_claimed_by)
    VALUES (
        NEW.event_id,
        CASE WHEN NEW.status = 'claimed' THEN 'takeover'
             WHEN NEW.status = 'dead' THEN 'dead'
             WHEN NEW.attempts < OLD.attempts THEN 'hold'
             ELSE 'failure' END,
        OLD.status,
        NEW.status,
        OLD.attempts,
        CASE WHEN NEW.status = 'claimed' THEN 'lease_expired' ELSE NEW.last_error_code END,
        NEW.claimed_by,
        CASE WHEN NEW.status = 'claimed' THEN OLD.claimed_by END
    );
    RETURN NULL;
END
$$;

CREATE TRIGGER event_outbox_history AFTER UPDATE ON event_outbox
    FOR EACH ROW
    WHEN ((OLD.status = 'claimed' AND NEW.status IN ('retry', 'dead')
           AND (NEW.attempts >= OLD.attempts OR NEW.last_error_code IS DISTINCT FROM OLD.last_error_code))
       OR (OLD.status IN ('pending', 'retry') AND NEW.status = 'dead')
       OR (OLD.status = 'claimed' AND NEW.status = 'claimed' AND NEW.claim_token IS DISTINCT FROM OLD.claim_token))
    EXECUTE FUNCTION event_outbox_record_history();
