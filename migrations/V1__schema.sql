-- Clinic schema: tenants, resources, the append-only event log, the outbox and listener bookkeeping.
-- Forward-only: never edit this file once landed; add V{n+1}__name.sql instead.

CREATE EXTENSION IF NOT EXISTS btree_gist;

CREATE TABLE workspaces (
    id          uuid PRIMARY KEY,
    name        text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE members (
    id            uuid PRIMARY KEY,
    workspace_id  uuid NOT NULL REFERENCES workspaces (id),
    role          text NOT NULL CONSTRAINT members_role_check CHECK (role IN ('staff', 'admin')),
    display_name  text NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE practitioners (
    id            uuid PRIMARY KEY,
    workspace_id  uuid NOT NULL REFERENCES workspaces (id),
    display_name  text NOT NULL,
    specialty     text,
    version       integer NOT NULL DEFAULT 1,
    created_at    timestamptz NOT NULL,
    updated_at    timestamptz NOT NULL
);
CREATE INDEX practitioners_workspace_idx ON practitioners (workspace_id);

CREATE TABLE patients (
    id             uuid PRIMARY KEY,
    workspace_id   uuid NOT NULL REFERENCES workspaces (id),
    given_name     text NOT NULL,
    family_name    text NOT NULL,
    email          text,
    phone          text,
    date_of_birth  date,
    version        integer NOT NULL DEFAULT 1,
    created_at     timestamptz NOT NULL,
    updated_at     timestamptz NOT NULL,
    deleted_at     timestamptz
);
CREATE INDEX patients_workspace_idx ON patients (workspace_id);

CREATE TABLE appointments (
    id                   uuid PRIMARY KEY,
    workspace_id         uuid NOT NULL REFERENCES workspaces (id),
    patient_id           uuid NOT NULL REFERENCES patients (id),
    practitioner_id      uuid NOT NULL REFERENCES practitioners (id),
    starts_at            timestamptz NOT NULL,
    ends_at              timestamptz NOT NULL,
    status               text NOT NULL
        CONSTRAINT appointments_status_check CHECK (status IN ('booked', 'cancelled', 'completed')),
    reason               text,
    cancellation_reason  text,
    version              integer NOT NULL DEFAULT 1,
    created_at           timestamptz NOT NULL,
    updated_at           timestamptz NOT NULL,
    CONSTRAINT appointments_ends_after_starts CHECK (ends_at > starts_at),
    CONSTRAINT appointments_no_double_booking EXCLUDE USING gist (
        practitioner_id WITH =,
        tstzrange(starts_at, ends_at, '[)') WITH &&
    ) WHERE (status = 'booked')
);
CREATE INDEX appointments_patient_idx ON appointments (patient_id, starts_at);
CREATE INDEX appointments_booked_starts_idx ON appointments (starts_at) WHERE status = 'booked';

-- The durable, append-only event log. Identifiers only: no names, contact details or reasons.
CREATE TABLE events (
    id                uuid PRIMARY KEY,
    workspace_id      uuid NOT NULL,
    type              text NOT NULL,
    version           integer NOT NULL,
    actor_kind        text NOT NULL CONSTRAINT events_actor_kind_check CHECK (actor_kind IN ('member', 'patient', 'system')),
    actor_id          uuid,
    occurred_at       timestamptz NOT NULL,
    recorded_at       timestamptz NOT NULL DEFAULT clock_timestamp(),
    resource_type     text NOT NULL,
    resource_id       uuid NOT NULL,
    resource_version  integer NOT NULL,
    correlation_id    uuid NOT NULL,
    causation_id      uuid NOT NULL
);

-- Timeline links. No foreign key to resources: history outlives a deleted resource.
CREATE TABLE event_resources (
    workspace_id   uuid NOT NULL,
    resource_type  text NOT NULL,
    resource_id    uuid NOT NULL,
    event_id       uuid NOT NULL REFERENCES events (id),
    PRIMARY KEY (workspace_id, resource_type, resource_id, event_id)
);

CREATE FUNCTION reject_append_only_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'table % is append-only: % rejected', TG_TABLE_NAME, TG_OP
        USING ERRCODE = 'restrict_violation';
END;
$$;

CREATE TRIGGER events_append_only BEFORE UPDATE OR DELETE ON events
    FOR EACH ROW EXECUTE FUNCTION reject_append_only_change();
CREATE TRIGGER events_no_truncate BEFORE TRUNCATE ON events
    FOR EACH STATEMENT EXECUTE FUNCTION reject_append_only_change();
CREATE TRIGGER event_resources_append_only BEFORE UPDATE OR DELETE ON event_resources
    FOR EACH ROW EXECUTE FUNCTION reject_append_only_change();
CREATE TRIGGER event_resources_no_truncate BEFORE TRUNCATE ON event_resources
    FOR EACH STATEMENT EXECUTE FUNCTION reject_append_only_change();

-- The outbox: one row per event, referencing it (no second payload). `available_at` is the one
-- "due" clock for every live status: creation time for pending, backoff end for retry and lease end
-- for claimed, so one partial index answers the claim scan. See outbox/mod.rs for the state machine.
CREATE TABLE event_outbox (
    event_id         uuid PRIMARY KEY REFERENCES events (id),
    status           text NOT NULL DEFAULT 'pending'
        CONSTRAINT event_outbox_status_check
        CHECK (status IN ('pending', 'claimed', 'dispatched', 'retry', 'dead', 'discarded')),
    attempts         integer NOT NULL DEFAULT 0,
    available_at     timestamptz NOT NULL DEFAULT now(),
    claim_token      uuid,
    claimed_by       text,
    claimed_until    timestamptz,
    dispatched_at    timestamptz,
    only_listeners   text[],
    last_error_code  text,
    last_error       text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now()
) WITH (
    autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_threshold = 5000,
    autovacuum_vacuum_cost_delay = 0,
    autovacuum_analyze_scale_factor = 0,
    autovacuum_analyze_threshold = 5000
);
CREATE INDEX event_outbox_due_idx ON event_outbox (available_at)
    WHERE status IN ('pending', 'retry', 'claimed');
CREATE INDEX event_outbox_status_idx ON event_outbox (status, created_at)
    WHERE status IN ('dead', 'retry', 'discarded');

-- Dispatchers that are idle and LISTENing. Writers send NOTIFY only while a row exists here, so a
-- busy pipeline does not pay PostgreSQL's commit-time notify lock on every write.
CREATE UNLOGGED TABLE outbox_waiters (
    dispatcher_id  text PRIMARY KEY,
    since          timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE listener_starts (
    event_id            uuid NOT NULL REFERENCES events (id),
    listener            text NOT NULL,
    started_at          timestamptz NOT NULL DEFAULT now(),
    transport_message_id text,
    PRIMARY KEY (event_id, listener)
);

CREATE TABLE listener_receipts (
    listener     text NOT NULL,
    event_id     uuid NOT NULL,
    received_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (listener, event_id)
);
CREATE INDEX listener_receipts_received_idx ON listener_receipts (received_at);

-- The delivery log of the built-in notifier. Ids and template names only, never content.
CREATE TABLE notifications (
    id                uuid PRIMARY KEY,
    workspace_id      uuid NOT NULL,
    event_id          uuid NOT NULL,
    listener          text NOT NULL,
    idempotency_key   text NOT NULL CONSTRAINT notifications_idempotency_key_unique UNIQUE,
    recipient_kind    text NOT NULL CONSTRAINT notifications_recipient_kind_check CHECK (recipient_kind IN ('patient', 'practitioner')),
    recipient_id      uuid NOT NULL,
    template          text NOT NULL,
    channel           text NOT NULL,
    status            text NOT NULL,
    created_at        timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX notifications_workspace_idx ON notifications (workspace_id, id DESC);

CREATE TABLE operator_actions (
    id              uuid PRIMARY KEY,
    workspace_id    uuid NOT NULL,
    event_id        uuid NOT NULL,
    action          text NOT NULL CONSTRAINT operator_actions_action_check CHECK (action IN ('retry', 'replay', 'discard')),
    actor           text NOT NULL,
    reason          text NOT NULL CONSTRAINT operator_actions_reason_not_blank CHECK (btrim(reason) <> ''),
    status_before   text NOT NULL,
    status_after    text NOT NULL,
    listeners       text[],
    created_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX operator_actions_event_idx ON operator_actions (event_id);

-- Producer dedupe for POST requests: the key is stored in the transaction of the mutation it guards.
CREATE TABLE idempotency_keys (
    workspace_id    uuid NOT NULL,
    key             text NOT NULL,
    request_hash    text NOT NULL,
    response_status smallint NOT NULL,
    resource_type   text NOT NULL,
    resource_id     uuid NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (workspace_id, key)
);

-- Appointment reminders: one row per appointment and start time, so reminder_due is emitted once.
CREATE TABLE appointment_reminders (
    appointment_id  uuid NOT NULL,
    starts_at       timestamptz NOT NULL,
    event_id        uuid NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (appointment_id, starts_at)
);
