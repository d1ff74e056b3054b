-- The published event contract (DESIGN §4a): what the envelope carries beyond V1's columns.
--
-- changed_fields: on update and reschedule events, the NAMES of the fields the mutation changed
-- (camelCase, e.g. {email,phone}); never their values. The CHECK keeps anything but bare names out.
-- idempotency_key_digest: `hmac-sha256:<hex>` of the originating request's Idempotency-Key (a keyed
-- digest, never the key itself: clients choose keys and may put words in them).
--
-- Both columns are NULL for older events and for events without them; `events` stays append-only
-- (adding nullable columns rewrites nothing and fires no trigger). Bound: as `events` (docs/retention.md).
ALTER TABLE events
    ADD COLUMN changed_fields text[],
    ADD COLUMN idempotency_key_digest text;

ALTER TABLE events
    ADD CONSTRAINT events_changed_fields_names_check
        CHECK (changed_fields IS NULL
               OR array_to_string(changed_fields, ',') ~ '^([a-zA-Z]{1,64}(,[a-zA-Z]{1,64})*)?$'),
    ADD CONSTRAINT events_idempotency_key_digest_check
        CHECK (idempotency_key_digest IS NULL OR idempotency_key_digest ~ '^hmac-sha256:[0-9a-f]{64}$');
