-- Issue 42 (DESIGN.md §5f): subscriptions a receiver can verify.
--
-- Numbered deliveries: each endpoint numbers its deliveries densely (1, 2, 3 …). The schema assigns
-- the number: a trigger on every insert into webhook_deliveries takes the next one from
-- `webhook_endpoints.last_sequence` (whatever the insert said), in the inserting transaction,
-- holding the endpoint's row lock until commit: concurrent fan-outs to one endpoint queue on that
-- lock, a rolled-back insert gives its number back, so there is no gap and no reuse. The number is
-- stored with the delivery and sent on every attempt, recover and replay (the CloudEvents
-- `sequence` extension).
ALTER TABLE webhook_endpoints
    ADD COLUMN last_sequence bigint NOT NULL DEFAULT 0
        CONSTRAINT webhook_endpoints_last_sequence_check CHECK (last_sequence >= 0),
    -- Heartbeats: every `heartbeat_seconds` without any attempt to the endpoint (0 = off).
    ADD COLUMN heartbeat_seconds integer NOT NULL DEFAULT 300
        CONSTRAINT webhook_endpoints_heartbeat_seconds_check
        CHECK (heartbeat_seconds BETWEEN 0 AND 86400),
    -- The last attempt of any kind (delivery or heartbeat) to the endpoint: the heartbeat clock.
    ADD COLUMN last_contact_at timestamptz,
    -- What the receiver is told about the subscription (heartbeats carry it, GET shows it):
    -- `off` = disabled, `error` = failing for longer than the sender's threshold, else `active`.
    ADD COLUMN status text NOT NULL DEFAULT 'active'
        CONSTRAINT webhook_endpoints_status_check CHECK (status IN ('active', 'error', 'off')),
    -- The body format: the identifier-only CloudEvent, or an id-only FHIR R5 subscription-notification.
    ADD COLUMN payload_format text NOT NULL DEFAULT 'cloudevents'
        CONSTRAINT webhook_endpoints_payload_format_check CHECK (payload_format IN ('cloudevents', 'fhir-id-only'));

UPDATE webhook_endpoints SET status = 'off' WHERE NOT enabled;
ALTER TABLE webhook_endpoints ADD CONSTRAINT webhook_endpoints_status_off_when_disabled
    CHECK (enabled = (status <> 'off'));

ALTER TABLE webhook_deliveries ADD COLUMN sequence bigint;
-- The deliveries kept from before numbering get numbers in the order they were created.
UPDATE webhook_deliveries d SET sequence = n.sequence
  FROM (SELECT id, row_number() OVER (PARTITION BY endpoint_id ORDER BY created_at, id) AS sequence
          FROM webhook_deliveries) n
 WHERE n.id = d.id;
UPDATE webhook_endpoints w SET last_sequence = m.last
  FROM (SELECT endpoint_id, max(sequence) AS last FROM webhook_deliveries GROUP BY endpoint_id) m
 WHERE m.endpoint_id = w.id;
ALTER TABLE webhook_deliveries ALTER COLUMN sequence SET NOT NULL,
    ADD CONSTRAINT webhook_deliveries_sequence_check CHECK (sequence >= 1);
-- No reuse, and the replay route's scan (`after=N` in order).
CREATE UNIQUE INDEX webhook_deliveries_sequence_idx ON webhook_deliveries (endpoint_id, sequence);

-- Shaped for the fan-out, which inserts one delivery per endpoint per transaction. A statement that
-- inserts many deliveries of one endpoint updates that endpoint's row once per delivery, each update
-- walking the row's earlier versions of the same transaction: spread bulk inserts over transactions.
CREATE FUNCTION number_webhook_delivery() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE webhook_endpoints SET last_sequence = last_sequence + 1
     WHERE id = NEW.endpoint_id RETURNING last_sequence INTO NEW.sequence;
    RETURN NEW;
END $$;
CREATE TRIGGER webhook_deliveries_numbered BEFORE INSERT ON webhook_deliveries
    FOR EACH ROW EXECUTE FUNCTION number_webhook_delivery();
-- The number never changes once given: clinic_app may update only the columns V12 names, not
-- `sequence`.

-- A status change is audited like every other change of an endpoint.
ALTER TABLE webhook_endpoint_actions DROP CONSTRAINT webhook_endpoint_actions_action_check,
    ADD CONSTRAINT webhook_endpoint_actions_action_check
        CHECK (action IN ('create', 'update', 'disable', 'enable', 'delete', 'rotate', 'recover',
                          'auto_disable', 'status'));
