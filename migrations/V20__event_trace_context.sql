-- Issue 43 item 1: the W3C `traceparent` of the request that committed an event, stored with the
-- event in the same transaction (events::store::append) and carried on every message and webhook
-- body as the CloudEvents distributed-tracing extension. Nullable: events from before this migration
-- and events committed outside a request trace have none. The CHECK is the same strict version-00
-- form the API parses (telemetry::traceparent::PATTERN): 55 characters of lower-case hex and dashes,
-- so the column cannot hold a name, a contact detail or a token.
ALTER TABLE events
    ADD COLUMN traceparent text,
    ADD CONSTRAINT events_traceparent_check
        CHECK (traceparent IS NULL OR traceparent ~ '^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$');
