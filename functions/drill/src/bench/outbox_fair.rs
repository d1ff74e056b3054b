//! A workspace-interleaved pick for the outbox claim (issue 41 item 1, "the outbox too where it
//! costs nothing"), kept as a bench-only variant of the raw claim-then-mark loop so `bench dispatch`
//! measures its cost beside the oldest-first pick in the same run (row 2a-fair).
//!
//! The pick, one statement, work-conserving: the workspaces with live rows are found by a skip scan
//! of `event_outbox_status_workspace_idx` (one probe per (status, workspace)), each one's first
//! `4 × batch + 16` due rows (in `event_id` order, which is commit order) are ranked oldest first,
//! and the claim takes by rank across workspaces (the first row of each, then the second, …), ties
//! to the oldest; the ranked window is joined back by key and locked `FOR UPDATE SKIP LOCKED`,
//! with the due condition re-checked on the locked row. A lone workspace fills the whole claim.
//!
//! Invariants: the same claim and mark as `RAW_CLAIM` in bench/dispatch.rs apart from the pick
//! (same token, lease and attempt count), so the two loops differ only by the pick's cost. Not
//! used by the service: the measured cost is in docs/benchmarks.md ("Outbox fair claim").

/// `WITH due AS (…)`: up to `$1` due rows interleaved across workspaces (see the module doc). The
/// `VALUES` list is the live statuses of `clinic_core::outbox_live_predicate!`, one probe each.
macro_rules! fair_due_rows {
    () => {
        concat!(
            "WITH RECURSIVE s AS ( \
                 SELECT v.status, (SELECT workspace_id FROM event_outbox WHERE status = v.status \
                                   ORDER BY status, workspace_id LIMIT 1) AS workspace_id \
                 FROM (VALUES ('pending'), ('retry'), ('claimed')) AS v (status) \
                 UNION ALL \
                 SELECT s.status, (SELECT workspace_id FROM event_outbox \
                                   WHERE status = s.status AND workspace_id > s.workspace_id \
                                   ORDER BY status, workspace_id LIMIT 1) \
                 FROM s WHERE s.workspace_id IS NOT NULL \
             ), due AS ( \
                 SELECT o.event_id FROM ( \
                     SELECT r.* FROM ( \
                         SELECT c.event_id, c.available_at AS ranked_at, row_number() OVER ( \
                                  PARTITION BY s.workspace_id ORDER BY c.available_at, c.event_id) AS turn \
                         FROM s CROSS JOIN LATERAL ( \
                             SELECT event_id, available_at FROM event_outbox \
                             WHERE status = s.status AND workspace_id = s.workspace_id \
                               AND available_at <= now() \
                             ORDER BY status, workspace_id, event_id LIMIT $1::bigint * 4 + 16) c \
                         WHERE s.workspace_id IS NOT NULL \
                     ) r ORDER BY r.turn, r.ranked_at, r.event_id LIMIT $1::bigint * 4 + 16 \
                 ) f JOIN event_outbox o ON o.event_id = f.event_id \
                 WHERE ",
            clinic_core::outbox_due_predicate!(),
            " \
                 ORDER BY f.turn, f.ranked_at, f.event_id LIMIT $1::bigint FOR UPDATE OF o SKIP LOCKED \
             ) "
        )
    };
}

/// The raw loop's claim with the fair pick (bench/dispatch.rs `RAW_CLAIM` with `fair_due_rows!`).
pub(super) const RAW_FAIR_CLAIM: &str = concat!(
    fair_due_rows!(),
    "UPDATE event_outbox o \
     SET status = 'claimed', claim_token = $2, claimed_by = 'raw-loop', \
         available_at = now() + interval '30 seconds', claimed_until = now() + interval '30 seconds', \
         attempts = o.attempts + 1, updated_at = now() \
     FROM due WHERE o.event_id = due.event_id \
     RETURNING o.event_id"
);
