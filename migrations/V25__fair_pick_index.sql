-- Issue 41: the fair pick ranks only the first due rows of each (workspace, priority) pair
-- (shared/core/src/lease/sql.rs, `Queue::fair_pick`), so its cost grows with the clinics that have
-- due work, not with the due rows. This index serves both of its steps: the skip scan that finds
-- the pairs (`Queue::groups`: one probe per pair) and each pair's first rows, oldest first (one
-- short range scan per pair). Its predicate is the statuses a claim can find due
-- (`delivery::store::claimable`); rows leave it when they are claimed, sent or end otherwise, so it
-- stays as small as the queue's live work.
CREATE INDEX notifications_fair_idx ON notifications (workspace_id, priority, available_at, id)
    WHERE status IN ('deferred', 'pending', 'retry', 'uncertain');

-- Each workspace's place in the fair order across claims (weighted fair queueing's virtual time):
-- a claim ranks a workspace's rows from `vtime` on, 1/weight apart, and moves `vtime` on by what it
-- took, so claims of a row or two (as many as the provider's rate allows) still take turns across
-- workspaces. `last_charge` is the last claim's step (lets concurrent claims add up, never overwrite).
-- Bound: one row per (queue, workspace); gone with its workspace.
CREATE TABLE fair_turns (
    queue        text NOT NULL CONSTRAINT fair_turns_queue_check
        CHECK (queue IN ('outbox', 'notifications', 'webhook_deliveries')),
    workspace_id uuid NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
    vtime        double precision NOT NULL,
    last_charge  double precision NOT NULL,
    PRIMARY KEY (queue, workspace_id)
);
GRANT SELECT, INSERT, UPDATE ON fair_turns TO clinic_app;
