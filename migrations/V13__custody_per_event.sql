-- Custody per event, not per listener start (issue 11 item 3's cost, issue 13 item 2).
--
-- V8 recorded every start the broker accepted as one `listener_starts` row, inserted by the
-- dispatcher's mark: a heap row, two index entries and a foreign-key check per listener on the
-- dispatch hot path. Now the mark that turns a row `dispatched` records, on the outbox row itself,
-- which listeners it started whose receipt is not in yet (`awaiting`); the receipt trigger removes
-- its listener from that set in the listener's own transaction, and the set becomes NULL when the
-- last receipt is in. No row is inserted on the success path.
--
-- `listener_starts` stays the per-pair record where a pair needs one: starts of an attempt that did
-- not finish the row (a partial failure, a hold for a paused or unknown listener: the retry must
-- skip them), and pairs the reconciler takes over once they are overdue (it moves them out of
-- `awaiting` into `listener_starts` with the dispatch time as `started_at`, then counts restarts and
-- marks `stuck_at` there as before). `listener_custody` is the one definition of "a pair still in
-- custody" over both records; the metric, the operator list and the tests read it.
--
-- Existing data needs no move: unsettled `listener_starts` rows keep meaning what they meant.

ALTER TABLE event_outbox ADD COLUMN awaiting text[];

-- The reconciler's scan and OldestUnsettledAgeMs read only events still awaiting a receipt, however
-- much dispatched history the outbox holds.
CREATE INDEX event_outbox_awaiting_idx ON event_outbox (dispatched_at) WHERE awaiting IS NOT NULL;

CREATE OR REPLACE FUNCTION listener_receipt_settles_start() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- The outbox row first: when the reconciler is moving this pair into listener_starts, this waits
    -- for its commit, and the next statement (a fresh snapshot) then sees and settles the moved row.
    UPDATE event_outbox SET awaiting = nullif(array_remove(awaiting, NEW.listener), '{}')
    WHERE event_id = NEW.event_id AND NEW.listener = ANY (awaiting);
    UPDATE listener_starts SET settled_at = NEW.received_at
    WHERE event_id = NEW.event_id AND listener = NEW.listener AND settled_at IS NULL;
    RETURN NULL;
END
$$;

-- Every (event, listener) pair still in custody: started (or restarted) and not settled by its
-- receipt. `started_at` is the start (or, for the per-event record, the dispatch) time.
CREATE VIEW listener_custody AS
    SELECT s.event_id, s.listener, s.started_at, s.restarts, s.restarted_at, s.stuck_at
    FROM listener_starts s
    WHERE s.settled_at IS NULL
    UNION ALL
    SELECT o.event_id, a.listener, o.dispatched_at, 0, NULL::timestamptz, NULL::timestamptz
    FROM event_outbox o CROSS JOIN LATERAL unnest(o.awaiting) AS a (listener)
    WHERE o.awaiting IS NOT NULL;

GRANT SELECT ON listener_custody TO clinic_app;
