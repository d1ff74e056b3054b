-- One statement, one round trip: pick due rows (pending; retry whose backoff ended; claimed whose
-- lease expired) without waiting on rows another dispatcher holds, claim them under a fresh token and
-- lease, and return each event's envelope. A re-claimed row (attempts > 1, or any row an earlier
-- attempt marked: a hold gives its attempt back, an operator retry starts a fresh budget, so the
-- attempt count alone cannot tell) also returns the listeners already started, so only the missing
-- ones start again. A row whose attempts already reached the
-- ceiling ($5) — its last attempt's dispatcher died before marking it — is buried (`dead`,
-- `attempts_exhausted`) here instead of being claimed again, so lease expiry cannot loop forever.
-- {DUE}, {CLAIM_OR_BURY} and {DEAD} are the lease queue's rules for `event_outbox` (crate::lease):
-- the due predicate, and per column the burial at the ceiling or the claim (token, lease, attempts + 1).
-- Every row returns its workspace's paused listeners, read once per claim (a tiny table, hashed),
-- not once per row, and whether a webhook endpoint of its workspace that collects deliveries (enabled,
-- or off for less than webhooks::fanout::HOLD_DAYS) subscribes to its type (the fan-out starts only then).
--
-- `$6` (NULL: none) is the claim floor (dispatch/floor.rs): while a backlog lasts, the scan starts
-- at that `available_at` instead of at the start of `event_outbox_due_idx`, whose oldest entries are
-- those every claim and mark leave behind until VACUUM removes them. Each row returns its
-- `available_at` from before this claim, so the dispatcher can place the next floor.
--
-- `relaxed`: this statement's transaction commits without waiting for its WAL flush
-- (synchronous_commit off, for this transaction only). A claim lost in a server crash only returns
-- its rows to the scan (at-least-once holds, receipts absorb the repeat), while waiting for the flush
-- would add a disk sync to every event's dispatch latency and halve the claim loop's rate.
WITH relaxed AS MATERIALIZED (
    SELECT set_config('synchronous_commit', 'off', true)
), due AS (
    SELECT event_id, status AS previous_status, available_at AS previous_available_at
    FROM event_outbox
    WHERE {DUE} AND available_at >= coalesce($6::timestamptz, '-infinity')
    ORDER BY available_at
    LIMIT $1
    FOR UPDATE SKIP LOCKED
), paused AS (
    SELECT workspace_id, array_agg(listener) AS listeners FROM listener_pauses GROUP BY workspace_id
)
UPDATE event_outbox o
SET {CLAIM_OR_BURY}
FROM relaxed, due JOIN events e ON e.id = due.event_id LEFT JOIN paused p ON p.workspace_id = e.workspace_id
WHERE o.event_id = due.event_id
RETURNING o.attempts,
          CASE WHEN o.status = {DEAD} THEN 'buried' ELSE due.previous_status END,
          o.only_listeners,
          CASE WHEN o.attempts > 1 OR o.last_error_code IS NOT NULL THEN
              ARRAY(SELECT s.listener FROM listener_starts s WHERE s.event_id = o.event_id)
          END AS started,
          {ENVELOPE_COLUMNS},
          p.listeners AS paused,
          EXISTS (SELECT 1 FROM webhook_endpoints w
                  WHERE w.workspace_id = e.workspace_id AND {SUBSCRIBED_TO_E}) AS webhooks,
          due.previous_available_at
