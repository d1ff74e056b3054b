-- A notification the current state has made stale at send time (DESIGN §5d, §5e): the render
-- re-applies its listener's freshness rule (appointment still booked, same resource version as the
-- event that caused it, patient not deleted) before every send, and a stale one ends `stale` — final,
-- never sent, its reason code in `last_error_code`. An operator retry of it answers 409.
ALTER TABLE notifications DROP CONSTRAINT notifications_status_check;
ALTER TABLE notifications ADD CONSTRAINT notifications_status_check CHECK (status IN (
    'pending', 'sending', 'sent', 'retry', 'uncertain', 'dead', 'discarded', 'no_contact', 'opted_out',
    'stale'));
