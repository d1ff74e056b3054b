-- Operating without SQL (issue 17): bulk actions, durable listener pauses, and the indexes the
-- explain view reads through.

-- One bulk request shares a batch id across the audit rows of every target it changed.
ALTER TABLE operator_actions ADD COLUMN batch_id uuid;
CREATE INDEX operator_actions_batch_idx ON operator_actions (batch_id) WHERE batch_id IS NOT NULL;

-- Durable pauses, per (workspace, listener): while a row exists, the dispatcher does not start that
-- listener for the workspace's events; the event's row stays live (held) and the other listeners
-- flow. Bounded by workspaces × listeners.
CREATE TABLE listener_pauses (
    workspace_id  uuid NOT NULL,
    listener      text NOT NULL,
    paused_by     text NOT NULL,
    paused_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (workspace_id, listener)
);

-- The audit of pauses and resumes (append-only; grows only with operators' actions).
CREATE TABLE listener_pause_actions (
    id            uuid PRIMARY KEY,
    workspace_id  uuid NOT NULL,
    listener      text NOT NULL,
    action        text NOT NULL CONSTRAINT listener_pause_actions_action_check
        CHECK (action IN ('pause', 'resume')),
    actor         text NOT NULL,
    reason        text NOT NULL CONSTRAINT listener_pause_actions_reason_not_blank CHECK (btrim(reason) <> ''),
    released      integer NOT NULL DEFAULT 0,
    created_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX listener_pause_actions_workspace_idx ON listener_pause_actions (workspace_id, created_at);
CREATE TRIGGER listener_pause_actions_append_only BEFORE UPDATE OR DELETE ON listener_pause_actions
    FOR EACH ROW EXECUTE FUNCTION reject_append_only_change();
CREATE TRIGGER listener_pause_actions_no_truncate BEFORE TRUNCATE ON listener_pause_actions
    FOR EACH STATEMENT EXECUTE FUNCTION reject_append_only_change();

GRANT SELECT, INSERT, DELETE ON listener_pauses TO clinic_app;
GRANT SELECT, INSERT ON listener_pause_actions TO clinic_app;

-- Explain: the events an event caused, and the deliveries it produced.
CREATE INDEX events_causation_idx ON events (causation_id);
CREATE INDEX notifications_event_idx ON notifications (event_id);
-- Bulk recovery by error code over the rows an operator acts on.
CREATE INDEX event_outbox_error_code_idx ON event_outbox (last_error_code, created_at)
    WHERE status IN ('dead', 'retry');
