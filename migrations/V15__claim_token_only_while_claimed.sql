-- The claim token is the dispatcher's fence, and only the fence (issue 13: sustained dispatch).
--
-- Every mark of a claimed outbox row (outbox/mark.rs) is fenced by its claim's token. It was also
-- fenced by `status = 'claimed'`, and that second test let the planner read the batch's rows from
-- `event_outbox_status_workspace_idx` (status, workspace, event) instead of by key: statistics
-- count only the few live claimed rows, but every claim adds a `claimed` entry to that index which
-- its mark leaves dead until VACUUM. Measured in `clinic bench sustained` (PostgreSQL's defaults,
-- autovacuum on, 1.4 million dead tuples in the outbox): each mark read 8,361 buffers and took
-- 4–17 ms, most of the dispatcher's time, and the drain fell from 29,000 to 14,000 events/s within
-- three minutes. The marks now test the token alone.
--
-- That is enough only while a token is set on no row but a claimed one. Every writer already keeps
-- it so: the claim sets it on the rows it claims (NULL on a row it buries), and each mark, failure,
-- operator retry or replay clears it, while a discard applies to dead rows only. This constraint
-- makes the rule the database's, so no later writer can break the fence unnoticed.
ALTER TABLE event_outbox ADD CONSTRAINT event_outbox_claim_token_only_while_claimed
    CHECK (claim_token IS NULL OR status = 'claimed');
