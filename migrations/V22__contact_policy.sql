-- Issue 40, contact policy at send time (DESIGN §5e). Before every send one pure function
-- (shared/core/src/delivery/policy.rs) decides send | defer(until) | suppress(reason) from what
-- this migration stores.
--
-- 1. The patient's contact preferences (resource fields, changed through the API; each change one
--    `patient.updated` event naming the changed fields only):
--    - `contact_channels`: the channels the patient consented to. Existing patients keep both (the
--      clinic collected their contact details for appointment messages); an empty list is "no
--      consent" and every message to them is suppressed (`no_consent`).
--    - `contact_opt_outs`: the message kinds the patient opted out of (`booking_confirmation`,
--      `change_notice` = reschedule or cancellation notice, `reminder`).
--    - `time_zone`: the patient's IANA zone, checked against the tz database before it is stored;
--      NULL falls back to the workspace's.
--    None of these is personal free text: a fixed vocabulary and a zone name.
ALTER TABLE patients
    ADD COLUMN contact_channels text[] NOT NULL DEFAULT '{email,sms}'
        CONSTRAINT patients_contact_channels_check CHECK (contact_channels <@ '{email,sms}'::text[]),
    ADD COLUMN contact_opt_outs text[] NOT NULL DEFAULT '{}'
        CONSTRAINT patients_contact_opt_outs_check
            CHECK (contact_opt_outs <@ '{booking_confirmation,change_notice,reminder}'::text[]),
    ADD COLUMN time_zone text
        CONSTRAINT patients_time_zone_check CHECK (length(time_zone) BETWEEN 1 AND 64);
GRANT UPDATE (contact_channels, contact_opt_outs, time_zone) ON patients TO clinic_app;

-- 2. The workspace's quiet hours (local time in the patient's zone; default 21:00–08:00, a window
--    that may wrap midnight; start = end means none) and the kinds that may bypass them. Only a
--    change notice (a same-day cancellation or reschedule by the clinic) may: reminders and booking
--    confirmations never do, and the CHECK holds that. Set by the owner like the time zone.
ALTER TABLE workspaces
    ADD COLUMN quiet_hours_start time NOT NULL DEFAULT '21:00',
    ADD COLUMN quiet_hours_end time NOT NULL DEFAULT '08:00',
    ADD COLUMN quiet_hours_bypass text[] NOT NULL DEFAULT '{}'
        CONSTRAINT workspaces_quiet_hours_bypass_check
            CHECK (quiet_hours_bypass <@ '{change_notice}'::text[]);

-- 3. Two notification statuses: `deferred` (the policy moved the row's availability to the next
--    allowed moment: the lease queue's delay, due again at `available_at`, the attempt given back)
--    and `suppressed` (final, the reason in `last_error_code`: `opted_out`, `channel_not_allowed`,
--    `no_consent`). `quiet_hours_bypassed` records each send that went out inside quiet hours
--    because the workspace allows its kind to bypass them.
ALTER TABLE notifications DROP CONSTRAINT notifications_status_check;
ALTER TABLE notifications ADD CONSTRAINT notifications_status_check CHECK (status IN (
    'pending', 'sending', 'sent', 'retry', 'uncertain', 'dead', 'discarded', 'no_contact', 'opted_out',
    'stale', 'deferred', 'suppressed'));
ALTER TABLE notifications ADD COLUMN quiet_hours_bypassed boolean NOT NULL DEFAULT false;
GRANT UPDATE (quiet_hours_bypassed) ON notifications TO clinic_app;

-- The due scan covers deferred rows too.
DROP INDEX notifications_due_idx;
CREATE INDEX notifications_due_idx ON notifications (available_at)
    WHERE status IN ('pending', 'retry', 'deferred', 'sending', 'uncertain');
