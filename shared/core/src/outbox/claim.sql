-- One statement, one round trip: pick due rows (pending; retry whose backoff ended; claimed whose
-- lease expired) without waiting on rows another dispatcher holds, claim them under a fresh token and
-- lease, and return each event's envelope. A re-claimed row (attempts > 1) also returns the listeners
-- already started, so only the missing ones start again (a row held for a paused listener too, whose
-- attempt was given back), and every row returns its workspace's paused listeners (a tiny table).
--
-- `relaxed`: this statement's transaction commits without waiting for its WAL flush
-- (synchronous_commit off, for this transaction only). A claim lost in a server crash only returns
-- its rows to the scan (at-least-once holds, receipts absorb the repeat), while waiting for the flush
-- would add a disk sync to every event's dispatch latency and halve the claim loop's rate.
WITH relaxed AS MATERIALIZED (
    SELECT set_config('synchronous_commit', 'off', true)
), due AS (
    SELECT event_id, status AS previous_status
    FROM event_outbox
    WHERE status IN ('pending', 'retry', 'claimed') AND available_at <= now()
    ORDER BY available_at
    LIMIT $1
    FOR UPDATE SKIP LOCKED
)
UPDATE event_outbox o
SET status = 'claimed',
    claim_token = $2,
    claimed_by = $3,
    available_at = now() + $4::float8 * interval '1 millisecond',
    claimed_until = now() + $4::float8 * interval '1 millisecond',
    attempts = o.attempts + 1,
    updated_at = now()
FROM relaxed, due JOIN events e ON e.id = due.event_id
WHERE o.event_id = due.event_id
RETURNING o.attempts,
          due.previous_status,
          o.only_listeners,
          CASE WHEN o.attempts > 1 OR o.last_error_code = '{HELD_CODE}' THEN
              ARRAY(SELECT s.listener FROM listener_starts s WHERE s.event_id = o.event_id)
          END AS started,
          {ENVELOPE_COLUMNS},
          ARRAY(SELECT p.listener FROM listener_pauses p WHERE p.workspace_id = e.workspace_id) AS paused
