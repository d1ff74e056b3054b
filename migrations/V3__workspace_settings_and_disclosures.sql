-- Workspace settings the notification renderers and onboarding need, and the accounting of
-- disclosures (DESIGN.md §6a): one row per read of a patient's personal fields.

-- IANA time zone name used to render times for people (validated by the application; default UTC).
ALTER TABLE workspaces ADD COLUMN time_zone text NOT NULL DEFAULT 'UTC'
    CONSTRAINT workspaces_time_zone_check CHECK (length(time_zone) BETWEEN 1 AND 64);

-- Who read which patient's personal fields, why, and when. Ids and codes only: `purpose` is a route
-- name (`GET /v1/patients/{id}`) or a listener name, `event_id` the event a listener or renderer
-- acted on. Append-only: the app role may INSERT and SELECT, never UPDATE or DELETE (the same
-- triggers as `events`, and grants). Bound: kept as long as the clinic's audit retention requires (HIPAA: six years); an
-- operator archives by `created_at`, never the app.
CREATE TABLE patient_disclosures (
    id            uuid PRIMARY KEY,
    workspace_id  uuid NOT NULL REFERENCES workspaces (id),
    patient_id    uuid NOT NULL,
    actor_kind    text NOT NULL CONSTRAINT patient_disclosures_actor_kind_check
                      CHECK (actor_kind IN ('member', 'patient', 'system')),
    actor_id      uuid,
    purpose       text NOT NULL CONSTRAINT patient_disclosures_purpose_check
                      CHECK (length(purpose) BETWEEN 1 AND 200),
    event_id      uuid,
    created_at    timestamptz NOT NULL DEFAULT now()
);

-- Serves `GET /v1/patients/{id}/disclosures`: newest first, keyset by (created_at, id).
CREATE INDEX patient_disclosures_by_patient
    ON patient_disclosures (workspace_id, patient_id, created_at DESC, id DESC);

CREATE TRIGGER patient_disclosures_no_update_or_delete
    BEFORE UPDATE OR DELETE ON patient_disclosures
    FOR EACH ROW EXECUTE FUNCTION reject_append_only_change();

CREATE TRIGGER patient_disclosures_no_truncate
    BEFORE TRUNCATE ON patient_disclosures
    FOR EACH STATEMENT EXECUTE FUNCTION reject_append_only_change();

GRANT SELECT, INSERT ON patient_disclosures TO clinic_app;
