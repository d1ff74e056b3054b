//! Marks: every one fenced by the claim token (a taken-over claim updates nothing), each one
//! statement whatever the batch size.
//!
//! Invariants:
//! - The token is the whole fence: only a claim sets it, and only on the rows it claims; every
//!   other change of a claimed row clears it (V15's constraint: a token only while `claimed`). So
//!   `claim_token = $token` means "still held by this claim", and no mark tests `status`.
//! - Each mark finds its batch's rows by key (`event_outbox_pkey`). A `status = 'claimed'` test
//!   would let the planner read them from an index on `status` instead, whose `claimed` entries
//!   are mostly dead ones every claim adds and its mark leaves until VACUUM: measured, 8,361
//!   buffers and 4–17 ms per mark with 1.4 million dead tuples, which halved a sustained drain.

use std::sync::LazyLock;
use std::time::Duration;

use deadpool_postgres::GenericClient;

use crate::db::sql;
use crate::ids::{ClaimToken, EventId};
use crate::listeners::Listener;

/// `relaxed`: the mark's transaction commits without waiting for its WAL flush (synchronous_commit
/// off, for that transaction only). A mark lost in a server crash leaves the row `claimed` until its
/// lease ends; it is then claimed and started again, a duplicate that receipts absorb — while waiting
/// for the flush would cost a disk sync per batch.
static MARK_DISPATCHED: LazyLock<String> = LazyLock::new(|| {
    let queue = crate::lease::OUTBOX;
    format!(
        "UPDATE event_outbox SET status = '{done}', dispatched_at = now(), {release} \
         FROM (SELECT set_config('synchronous_commit', 'off', true)) AS relaxed \
         WHERE event_id = ANY($1) AND {fence} RETURNING event_id",
        done = queue.stored.done,
        release = queue.release_set(),
        fence = queue.fence("", "$2"),
    )
});

/// The same mark, recording on each row the listeners this attempt started whose receipt is not in
/// yet (`awaiting`, custody until receipt: V10). `$3` runs parallel to `$1`: each row's started
/// listeners, comma-separated, or NULL when it records none (the local transport, whose success is
/// the receipt). Receipts already in (a listener faster than this mark) are left out at once; the
/// receipt trigger removes the others as they commit. A row that still awaits listeners from an
/// earlier dispatch (an operator replay of some of them) keeps those. One statement and no row
/// inserted, whatever the batch holds.
static MARK_DISPATCHED_AWAITING: LazyLock<String> = LazyLock::new(|| {
    let queue = crate::lease::OUTBOX;
    format!(
        "WITH relaxed AS MATERIALIZED ( \
             SELECT set_config('synchronous_commit', 'off', true) \
         ) \
         UPDATE event_outbox o \
         SET status = '{done}', dispatched_at = now(), {release}, \
             awaiting = CASE WHEN d.listeners IS NULL THEN o.awaiting ELSE nullif(ARRAY( \
                 SELECT DISTINCT a.listener \
                 FROM unnest(coalesce(o.awaiting, '{{}}') || string_to_array(d.listeners, ',')) AS a (listener) \
                 WHERE NOT EXISTS (SELECT 1 FROM listener_receipts r \
                                   WHERE r.listener = a.listener AND r.event_id = o.event_id)), '{{}}') END \
         FROM relaxed, unnest($1::uuid[], $3::text[]) AS d (event_id, listeners) \
         WHERE o.event_id = d.event_id AND {fence} \
         RETURNING o.event_id",
        done = queue.stored.done,
        release = queue.release_set(),
        fence = queue.fence("o", "$2"),
    )
});

const RECORD_STARTS: &str =
    "INSERT INTO listener_starts (event_id, listener, transport_message_id, settled_at) \
     SELECT s.event_id, s.listener, s.message_id, \
            CASE WHEN EXISTS (SELECT 1 FROM listener_receipts r \
                              WHERE r.listener = s.listener AND r.event_id = s.event_id) \
                 THEN now() END \
     FROM unnest($1::uuid[], $2::text[], $3::text[]) AS s (event_id, listener, message_id) \
     ON CONFLICT (event_id, listener) DO NOTHING";

/// `f.spend` false (a hold): the claim's attempt is given back, so an outage or a type unknown to
/// this build never brings a row closer to `dead`.
static MARK_FAILED: LazyLock<String> = LazyLock::new(|| {
    let queue = crate::lease::OUTBOX;
    format!(
        "UPDATE event_outbox o \
         SET status = f.status, \
             attempts = CASE WHEN f.spend THEN o.attempts ELSE {give_back} END, \
             available_at = CASE WHEN f.status = '{retry}' \
                                 THEN {after} ELSE o.available_at END, \
             last_error_code = f.code, last_error = f.message, {release} \
         FROM unnest($2::uuid[], $3::text[], $4::float8[], $5::text[], $6::text[], $7::bool[]) \
              AS f (event_id, status, delay_ms, code, message, spend) \
         WHERE o.event_id = f.event_id AND {fence} \
         RETURNING o.event_id",
        give_back = queue.give_back("o"),
        retry = queue.stored.retry,
        after = crate::lease::sql::after_ms("f.delay_ms"),
        release = queue.release_set(),
        fence = queue.fence("o", "$1"),
    )
});

/// The longest error text kept in `last_error`.
pub const MAX_ERROR_CHARS: usize = 1000;

/// Marks every listed row `dispatched` in one statement; returns the ids actually marked (the others
/// were fenced: their claim was taken over).
pub async fn mark_dispatched(
    client: &impl GenericClient,
    token: ClaimToken,
    event_ids: &[EventId],
) -> Result<Vec<EventId>, tokio_postgres::Error> {
    if event_ids.is_empty() {
        return Ok(Vec::new());
    }
    let rows = sql::query(client, &MARK_DISPATCHED, &[&event_ids, &token]).await?;
    Ok(rows.iter().map(|row| row.get(0)).collect())
}

/// One row to mark `dispatched`, with the listeners this attempt started through a transport whose
/// success is not yet the receipt (empty for the local transport, or for an event without listeners).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DispatchedRow {
    pub event_id: EventId,
    pub awaiting: Vec<Listener>,
}

/// [`mark_dispatched`], recording each row's awaited listeners on the row (custody until receipt) in
/// the same statement: the dispatcher's success path, one round trip, no inserts.
pub async fn mark_dispatched_awaiting(
    client: &impl GenericClient,
    token: ClaimToken,
    rows: &[DispatchedRow],
) -> Result<Vec<EventId>, tokio_postgres::Error> {
    if rows.iter().all(|row| row.awaiting.is_empty()) {
        let ids: Vec<EventId> = rows.iter().map(|row| row.event_id).collect();
        return mark_dispatched(client, token, &ids).await;
    }
    let ids: Vec<EventId> = rows.iter().map(|row| row.event_id).collect();
    let listeners: Vec<Option<String>> = rows
        .iter()
        .map(|row| {
            (!row.awaiting.is_empty())
                .then(|| row.awaiting.iter().map(|l| l.as_str()).collect::<Vec<_>>().join(","))
        })
        .collect();
    let marked = sql::query(client, &MARK_DISPATCHED_AWAITING, &[&ids, &token, &listeners]).await?;
    Ok(marked.iter().map(|row| row.get(0)).collect())
}

fn start_columns(starts: &[StartRecord]) -> (Vec<EventId>, Vec<&str>, Vec<Option<&str>>) {
    let ids = starts.iter().map(|s| s.event_id).collect();
    let listeners = starts.iter().map(|s| s.listener.as_str()).collect();
    let message_ids = starts.iter().map(|s| s.message_id.as_deref()).collect();
    (ids, listeners, message_ids)
}

/// A listener start of an attempt that did not finish its row, to remember so the retry does not
/// start it again (a `listener_starts` row; it is in custody until its receipt settles it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StartRecord {
    pub event_id: EventId,
    pub listener: Listener,
    pub message_id: Option<String>,
}

/// Records listener starts in one statement. Not fenced: a start that happened is a fact worth
/// keeping whoever holds the claim now (it spares the new holder a duplicate start).
pub async fn record_starts(
    client: &impl GenericClient,
    starts: &[StartRecord],
) -> Result<u64, tokio_postgres::Error> {
    if starts.is_empty() {
        return Ok(0);
    }
    let (ids, listeners, message_ids) = start_columns(starts);
    sql::execute(client, RECORD_STARTS, &[&ids, &listeners, &message_ids]).await
}

/// Where a failed row goes next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// Back to the claim scan after `Duration`.
    Retry(Duration),
    /// The attempt ceiling was reached or the failure is permanent.
    Dead,
    /// Back to the claim scan after `Duration` without spending the attempt: the transport was
    /// unavailable (an outage, an open breaker) or the row names something this build does not know.
    Hold(Duration),
}

/// One failed row: where it goes, and the error (code and ids-only text) to keep.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailureMark {
    pub event_id: EventId,
    pub next: Failure,
    pub code: String,
    pub message: String,
}

/// Marks failed rows `retry` (with their backoff) or `dead` in one statement; returns the ids actually
/// marked (the others were fenced).
pub async fn mark_failed(
    client: &impl GenericClient,
    token: ClaimToken,
    marks: &[FailureMark],
) -> Result<Vec<EventId>, tokio_postgres::Error> {
    if marks.is_empty() {
        return Ok(Vec::new());
    }
    let ids: Vec<EventId> = marks.iter().map(|m| m.event_id).collect();
    let statuses: Vec<&str> = marks
        .iter()
        .map(|m| match m.next {
            Failure::Retry(_) | Failure::Hold(_) => crate::lease::OUTBOX.stored.retry,
            Failure::Dead => crate::lease::OUTBOX.stored.dead,
        })
        .collect();
    let delays: Vec<f64> = marks
        .iter()
        .map(|m| match m.next {
            Failure::Retry(delay) | Failure::Hold(delay) => delay.as_secs_f64() * 1000.0,
            Failure::Dead => 0.0,
        })
        .collect();
    let spend: Vec<bool> = marks.iter().map(|m| !matches!(m.next, Failure::Hold(_))).collect();
    let codes: Vec<&str> = marks.iter().map(|m| m.code.as_str()).collect();
    let messages: Vec<String> =
        marks.iter().map(|m| m.message.chars().take(MAX_ERROR_CHARS).collect()).collect();
    let rows =
        sql::query(client, &MARK_FAILED, &[&token, &ids, &statuses, &delays, &codes, &messages, &spend])
            .await?;
    Ok(rows.iter().map(|row| row.get(0)).collect())
}

#[cfg(test)]
mod tests {
    //! The marks' plans on real PostgreSQL: none reads its batch's rows through an index on
    //! `status`, however few rows the statistics count as `claimed` (V15).

    use super::{MARK_DISPATCHED, MARK_DISPATCHED_AWAITING, MARK_FAILED};

    const TOKEN: &str = "'00000000-0000-0000-0000-0000000000aa'::uuid";

    /// 20,000 dispatched rows and 100 claimed under [`TOKEN`], analysed: the statistics of a busy
    /// outbox, where live `claimed` rows are a sliver of the table.
    fn seed() -> String {
        format!(
            "INSERT INTO workspaces (id, name) VALUES ('00000000-0000-0000-0000-000000000001', 'plans');
             INSERT INTO events (id, workspace_id, type, version, actor_kind, occurred_at, recorded_at,
                                 resource_type, resource_id, resource_version, correlation_id, causation_id)
             SELECT gen_random_uuid(), '00000000-0000-0000-0000-000000000001', 'patient.registered', 1,
                    'system', now(), now(), 'patient', gen_random_uuid(), 1, gen_random_uuid(),
                    gen_random_uuid()
             FROM generate_series(1, 20100);
             INSERT INTO event_outbox (event_id, status, attempts, dispatched_at)
             SELECT id, 'dispatched', 1, now() FROM events;
             UPDATE event_outbox SET status = 'claimed', claim_token = {TOKEN},
                    claimed_until = now() + interval '30 seconds', dispatched_at = NULL
             WHERE event_id IN (SELECT event_id FROM event_outbox LIMIT 100);
             ANALYZE event_outbox;
             ANALYZE events;"
        )
    }

    /// The plan of `statement` run with `arguments` (SQL literals, in parameter order), generic (as
    /// a prepared statement runs after its fifth execution) or custom.
    async fn plan(
        client: &tokio_postgres::Client,
        statement: &str,
        arguments: &str,
        generic: bool,
    ) -> String {
        let mode = if generic { "force_generic_plan" } else { "force_custom_plan" };
        client.batch_execute(&format!("DEALLOCATE ALL; SET plan_cache_mode = {mode}")).await.unwrap();
        client.batch_execute(&format!("PREPARE mark AS {statement}")).await.unwrap();
        let lines = client.query(&format!("EXPLAIN EXECUTE mark({arguments})"), &[]).await.unwrap();
        lines.iter().map(|row| row.get::<_, String>(0)).collect::<Vec<_>>().join("\n")
    }

    #[tokio::test]
    async fn a_claim_token_on_a_row_that_is_not_claimed_is_refused() {
        let db = clinic_testkit::fresh_db().await;
        let client = db.pool.get().await.unwrap();
        client.batch_execute(&seed()).await.unwrap();
        let error = client
            .batch_execute(&format!(
                "UPDATE event_outbox SET claim_token = {TOKEN} WHERE event_id = \
                 (SELECT event_id FROM event_outbox WHERE status = 'dispatched' LIMIT 1)"
            ))
            .await
            .unwrap_err();
        let constraint = error.as_db_error().and_then(|e| e.constraint());
        assert_eq!(constraint, Some("event_outbox_claim_token_only_while_claimed"), "{error}");
        // A row leaving `claimed` with its token still set is refused the same way.
        let error = client
            .batch_execute("UPDATE event_outbox SET status = 'dispatched' WHERE status = 'claimed'")
            .await
            .unwrap_err();
        let constraint = error.as_db_error().and_then(|e| e.constraint());
        assert_eq!(constraint, Some("event_outbox_claim_token_only_while_claimed"), "{error}");
    }

    #[tokio::test]
    async fn no_mark_reads_its_rows_through_an_index_on_status() {
        let db = clinic_testkit::fresh_db().await;
        let client = db.pool.get().await.unwrap();
        client.batch_execute(&seed()).await.unwrap();
        let ids: Vec<String> = client
            .query("SELECT event_id::text FROM event_outbox WHERE status = 'claimed'", &[])
            .await
            .unwrap()
            .iter()
            .map(|row| row.get(0))
            .collect();
        let ids = format!("'{{{}}}'::uuid[]", ids.join(","));
        let hundred = |value: &str| format!("array_fill({value}, ARRAY[100])");
        let failures = [
            hundred("'retry'::text"),
            hundred("1000::float8"),
            hundred("'code'::text"),
            hundred("'message'::text"),
            hundred("true"),
        ]
        .join(", ");
        for (name, statement, arguments) in [
            ("mark_dispatched", &*MARK_DISPATCHED, format!("{ids}, {TOKEN}")),
            (
                "mark_dispatched_awaiting",
                &*MARK_DISPATCHED_AWAITING,
                format!("{ids}, {TOKEN}, {}", hundred("'notifications'::text")),
            ),
            ("mark_failed", &*MARK_FAILED, format!("{TOKEN}, {ids}, {failures}")),
        ] {
            for generic in [true, false] {
                let plan = plan(&client, statement, &arguments, generic).await;
                // A table this small may be read whole; only an index on `status` is wrong.
                assert!(
                    !plan.contains("event_outbox_status") && !plan.contains("event_outbox_due_idx"),
                    "{name} (generic plan: {generic}) must not read its rows through an index on status:\n{plan}"
                );
            }
        }
    }
}
