-- Outgoing webhooks (issue 16, DESIGN.md §5c): endpoints per workspace, one delivery per (endpoint,
-- event), every attempt, and the append-only audit of endpoint changes.

-- A workspace's subscription. `event_types` empty = every event type. The signing secrets are the
-- `whsec_…` tokens the receivers verify with: HMAC needs the key itself, so it is stored (never
-- hashed), readable only by the app role, and never copied into an event, outbox row, message,
-- delivery, attempt, audit row, metric or log (docs/webhooks.md). `previous_secret` signs beside
-- `secret` until `previous_expires_at` (rotation overlap).
CREATE TABLE webhook_endpoints (
    id                    uuid PRIMARY KEY,
    workspace_id          uuid NOT NULL REFERENCES workspaces (id),
    url                   text NOT NULL CONSTRAINT webhook_endpoints_url_length CHECK (length(url) BETWEEN 8 AND 2000),
    description           text NOT NULL DEFAULT ''
        CONSTRAINT webhook_endpoints_description_length CHECK (length(description) <= 200),
    event_types           text[] NOT NULL DEFAULT '{}',
    enabled               boolean NOT NULL DEFAULT true,
    disabled_at           timestamptz,
    disabled_reason       text CONSTRAINT webhook_endpoints_disabled_reason_check
        CHECK (disabled_reason IN ('operator', 'failing')),
    secret                text NOT NULL,
    previous_secret       text,
    previous_expires_at   timestamptz,
    -- The start of the current run of failed attempts (NULL after a success): 5 days → disabled.
    failing_since         timestamptz,
    version               integer NOT NULL DEFAULT 1,
    created_at            timestamptz NOT NULL DEFAULT now(),
    updated_at            timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT webhook_endpoints_disabled_consistent CHECK (enabled = (disabled_at IS NULL)),
    CONSTRAINT webhook_endpoints_previous_consistent
        CHECK ((previous_secret IS NULL) = (previous_expires_at IS NULL))
);
CREATE INDEX webhook_endpoints_workspace_idx ON webhook_endpoints (workspace_id, id);

-- One delivery per (endpoint, event); its id is the `webhook-id` header, stable across attempts.
-- A small outbox of its own: pending → sending (leased, fenced by claim_token) → delivered | retry →
-- failed. `available_at` is the one due clock of every live status.
CREATE TABLE webhook_deliveries (
    id              uuid PRIMARY KEY,
    endpoint_id     uuid NOT NULL REFERENCES webhook_endpoints (id) ON DELETE CASCADE,
    workspace_id    uuid NOT NULL,
    event_id        uuid NOT NULL,
    event_type      text NOT NULL,
    status          text NOT NULL DEFAULT 'pending' CONSTRAINT webhook_deliveries_status_check
        CHECK (status IN ('pending', 'sending', 'delivered', 'retry', 'failed')),
    attempts        integer NOT NULL DEFAULT 0,
    available_at    timestamptz NOT NULL DEFAULT now(),
    claim_token     uuid,
    last_status     integer,
    last_error_code text,
    delivered_at    timestamptz,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT webhook_deliveries_once UNIQUE (endpoint_id, event_id)
);
CREATE INDEX webhook_deliveries_due_idx ON webhook_deliveries (available_at)
    WHERE status IN ('pending', 'sending', 'retry');
CREATE INDEX webhook_deliveries_endpoint_idx ON webhook_deliveries (endpoint_id, status, created_at);
CREATE INDEX webhook_deliveries_event_idx ON webhook_deliveries (event_id);
CREATE INDEX webhook_deliveries_swept_idx ON webhook_deliveries (updated_at) WHERE status = 'delivered';
ALTER TABLE webhook_deliveries SET (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_cost_delay = 0);

-- Every attempt: HTTP status, duration, error code and at most a short, scanned excerpt of the
-- answer (never the body beyond that).
CREATE TABLE webhook_attempts (
    id            uuid PRIMARY KEY,
    delivery_id   uuid NOT NULL REFERENCES webhook_deliveries (id) ON DELETE CASCADE,
    endpoint_id   uuid NOT NULL,
    workspace_id  uuid NOT NULL,
    attempt       integer NOT NULL,
    status_code   integer,
    duration_ms   integer NOT NULL,
    error_code    text,
    excerpt       text CONSTRAINT webhook_attempts_excerpt_length CHECK (length(excerpt) <= 200),
    attempted_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX webhook_attempts_delivery_idx ON webhook_attempts (delivery_id, attempt);

-- The audit of endpoint changes, like operator_actions: append-only, field names and codes only
-- (never a URL's query, a secret or a description).
CREATE TABLE webhook_endpoint_actions (
    id            uuid PRIMARY KEY,
    workspace_id  uuid NOT NULL,
    endpoint_id   uuid NOT NULL,
    action        text NOT NULL CONSTRAINT webhook_endpoint_actions_action_check
        CHECK (action IN ('create', 'update', 'disable', 'enable', 'delete', 'rotate', 'recover', 'auto_disable')),
    actor         text NOT NULL,
    detail        jsonb NOT NULL DEFAULT '{}',
    created_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX webhook_endpoint_actions_endpoint_idx ON webhook_endpoint_actions (endpoint_id, created_at);
CREATE TRIGGER webhook_endpoint_actions_append_only BEFORE UPDATE OR DELETE ON webhook_endpoint_actions
    FOR EACH ROW EXECUTE FUNCTION reject_append_only_change();
CREATE TRIGGER webhook_endpoint_actions_no_truncate BEFORE TRUNCATE ON webhook_endpoint_actions
    FOR EACH STATEMENT EXECUTE FUNCTION reject_append_only_change();

GRANT SELECT, INSERT, UPDATE, DELETE ON webhook_endpoints TO clinic_app;
-- DELETE: the retention sweep removes delivered rows (their attempts go with them).
GRANT SELECT, INSERT, DELETE ON webhook_deliveries TO clinic_app;
GRANT UPDATE (status, attempts, available_at, claim_token, last_status, last_error_code, delivered_at,
    updated_at) ON webhook_deliveries TO clinic_app;
GRANT SELECT, INSERT, DELETE ON webhook_attempts TO clinic_app;
GRANT SELECT, INSERT ON webhook_endpoint_actions TO clinic_app;
