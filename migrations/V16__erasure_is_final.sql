-- Erasure is final, and the database enforces it (issue 39 item 1; DESIGN.md §6a, §6c).
--
-- After a patient's deletion commits, nothing may write free text or personal data about that patient
-- again, whoever asks and in whatever order. Before this migration the erasure cleared only the
-- appointments that held a reason in its own snapshot, so a cancel racing the deletion could store its
-- reason after the erasure committed; staff could still reschedule, complete or cancel (with a reason)
-- the appointments of an erased patient; and a future appointment stayed `booked` until the
-- deletion's listener cancelled it, blocking the practitioner's slot for everybody else meanwhile.
--
-- 1. `appointments.patient_erased`: set by the erasure (patients/repo.rs `ERASE`) on EVERY
--    appointment of the patient, in the deletion's transaction. Because the erasure now writes every
--    such row, it waits for any transaction holding one of them (a cancel in flight) and then clears
--    what that transaction wrote; and a change that locks the row after the erasure committed reads
--    the flag on the row it locked. The application answers 409 `patient-deleted` for it; the
--    trigger below refuses it even if the application did not look.
ALTER TABLE appointments ADD COLUMN patient_erased boolean NOT NULL DEFAULT false;
UPDATE appointments a SET patient_erased = true
FROM patients p
WHERE p.id = a.patient_id AND p.deleted_at IS NOT NULL;

-- 2. An erased patient blocks no slot: its appointments no longer take part in the double-booking
--    constraint, so a future appointment still `booked` until the listener cancels it does not refuse
--    another patient's booking of that time.
ALTER TABLE appointments DROP CONSTRAINT appointments_no_double_booking;
ALTER TABLE appointments ADD CONSTRAINT appointments_no_double_booking EXCLUDE USING gist (
    practitioner_id WITH =,
    tstzrange(starts_at, ends_at, '[)') WITH &&
) WHERE (status = 'booked' AND NOT patient_erased);

-- 3. The rules, as triggers. Each refusal is `restrict_violation` naming the constraint
--    `patient_erased`, which the API answers 409 `patient-deleted` (never 500).
--    Appointments of an erased patient: no reason or cancellation reason, no new appointment, no
--    other patient, and no status change other than a cancellation (the deletion's listener cancels
--    future ones, without a reason); the flag never goes back. Times are not personal data and take
--    no slot any more (2.); the API refuses a reschedule all the same (409 `patient-deleted`).
CREATE FUNCTION appointments_of_erased_patient() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        IF NEW.patient_erased OR EXISTS (
            SELECT 1 FROM patients p WHERE p.id = NEW.patient_id AND p.deleted_at IS NOT NULL
        ) THEN
            RAISE EXCEPTION 'the patient of this appointment is deleted'
                USING ERRCODE = 'restrict_violation', CONSTRAINT = 'patient_erased';
        END IF;
        RETURN NEW;
    END IF;
    IF OLD.patient_erased AND (
        NOT NEW.patient_erased
        OR NEW.reason IS NOT NULL
        OR NEW.cancellation_reason IS NOT NULL
        OR NEW.patient_id <> OLD.patient_id
        OR (NEW.status <> OLD.status AND NEW.status <> 'cancelled')
    ) THEN
        RAISE EXCEPTION 'the patient of this appointment is deleted'
            USING ERRCODE = 'restrict_violation', CONSTRAINT = 'patient_erased';
    END IF;
    RETURN NEW;
END;
$$;
CREATE TRIGGER appointments_of_erased_patient BEFORE INSERT OR UPDATE ON appointments
    FOR EACH ROW EXECUTE FUNCTION appointments_of_erased_patient();

--    Patients: a deleted patient stays deleted (deleted_at never goes back to NULL) and gets no
--    personal field again (the CHECK `patients_deleted_are_erased` holds that too; this answers first,
--    with the same refusal as above).
CREATE FUNCTION patients_erasure_is_final() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.deleted_at IS NOT NULL AND (
        NEW.deleted_at IS NULL
        OR NEW.given_name IS NOT NULL OR NEW.family_name IS NOT NULL OR NEW.email IS NOT NULL
        OR NEW.phone IS NOT NULL OR NEW.date_of_birth IS NOT NULL
    ) THEN
        RAISE EXCEPTION 'this patient is deleted'
            USING ERRCODE = 'restrict_violation', CONSTRAINT = 'patient_erased';
    END IF;
    RETURN NEW;
END;
$$;
CREATE TRIGGER patients_erasure_is_final BEFORE UPDATE ON patients
    FOR EACH ROW EXECUTE FUNCTION patients_erasure_is_final();

-- 4. Least privilege (issue 39 item 6): `clinic_app` holds what the code runs, no more. Every
--    statement against these tables was read before revoking (docs/privacy.md lists them).
--    Resources are soft-deleted (patients) or kept (appointments, practitioners): no DELETE. UPDATE
--    only on the columns the code writes: a patient's personal fields, version and times and
--    `deleted_at` (the erasure sets it; the trigger above refuses setting it back to NULL); an
--    appointment's times, status, reasons, version, `updated_at` and `patient_erased` (never its
--    patient, practitioner, workspace or creation); a practitioner's profile, `active`, version and
--    `updated_at` (never `member_id` or contact details, which the owner sets). Row locks (FOR UPDATE,
--    FOR SHARE) need UPDATE on one column, which each table keeps.
REVOKE DELETE, UPDATE, TRUNCATE ON patients, appointments, practitioners FROM clinic_app;
GRANT UPDATE (given_name, family_name, email, phone, date_of_birth, version, updated_at, deleted_at)
    ON patients TO clinic_app;
GRANT UPDATE (starts_at, ends_at, status, reason, cancellation_reason, version, updated_at,
              patient_erased)
    ON appointments TO clinic_app;
GRANT UPDATE (display_name, specialty, active, version, updated_at) ON practitioners TO clinic_app;

--    Receipts: inserted by listeners (pointer.rs), deleted by the retention sweep; never updated.
--    Starts: inserted by the dispatcher and the reconciler, settled by the receipt trigger,
--    restarted or marked stuck by the reconciler (those four columns only), and deleted by the
--    retention sweep and an operator replay.
REVOKE UPDATE, TRUNCATE ON listener_receipts FROM clinic_app;
REVOKE UPDATE, TRUNCATE ON listener_starts FROM clinic_app;
GRANT UPDATE (settled_at, restarts, restarted_at, stuck_at) ON listener_starts TO clinic_app;
