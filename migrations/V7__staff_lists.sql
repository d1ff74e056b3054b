-- What the staff app's lists need (issue 19): the schedule view, patient search, the practitioner list
-- and the practitioner's active flag. Indexes only serve reads; no data is rewritten.

-- An inactive practitioner keeps its history and appointments but cannot be booked.
ALTER TABLE practitioners ADD COLUMN active boolean NOT NULL DEFAULT true;

-- `GET /v1/practitioners`: the workspace's practitioners in id (creation) order, keyset by id.
CREATE INDEX practitioners_list_idx ON practitioners (workspace_id, id);

-- `GET /v1/appointments?from=&to=`: the schedule view, ordered by (starts_at, id) and paged by that
-- keyset. One index per way of narrowing it: the whole workspace, one practitioner's day, one
-- patient's appointments (status is a filter on top: three values, no index of its own).
CREATE INDEX appointments_schedule_idx ON appointments (workspace_id, starts_at, id);
CREATE INDEX appointments_practitioner_schedule_idx
    ON appointments (workspace_id, practitioner_id, starts_at, id);
CREATE INDEX appointments_patient_schedule_idx ON appointments (workspace_id, patient_id, starts_at, id);

-- `GET /v1/patients?q=`: a case-insensitive prefix of the family or the given name. The lower-cased
-- name under the "C" collation orders by code point, so a prefix is one index range and the keyset
-- (name, id) is the index order. Deleted (erased) patients are not in these indexes and never listed.
CREATE INDEX patients_family_prefix_idx
    ON patients (workspace_id, (lower(family_name)) COLLATE "C", id) WHERE deleted_at IS NULL;
CREATE INDEX patients_given_prefix_idx
    ON patients (workspace_id, (lower(given_name)) COLLATE "C", id) WHERE deleted_at IS NULL;
