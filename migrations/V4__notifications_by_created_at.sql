-- `GET /v1/notifications` pages newest first by (created_at, id): this index serves the first page and
-- every keyset page after it (a row comparison on its trailing columns). The older
-- notifications_workspace_idx (workspace_id, id DESC) no longer serves that route; it is kept for
-- whatever else reads the log by id and can be dropped once nothing does.
CREATE INDEX notifications_workspace_created_idx
    ON notifications (workspace_id, created_at DESC, id DESC);
