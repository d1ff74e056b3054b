//! Marks: every one fenced by the claim token (a taken-over claim updates nothing), each one
//! statement whatever the batch size.

use std::time::Duration;

use deadpool_postgres::GenericClient;

use crate::db::sql;
use crate::ids::{ClaimToken, EventId};
use crate::listeners::Listener;

/// `relaxed`: the mark's transaction commits without waiting for its WAL flush (synchronous_commit
/// off, for that transaction only). A mark lost in a server crash leaves the row `claimed` until its
/// lease ends; it is then claimed and started again, a duplicate that receipts absorb — while waiting
/// for the flush would cost a disk sync per batch.
const MARK_DISPATCHED: &str = "UPDATE event_outbox \
     SET status = 'dispatched', dispatched_at = now(), updated_at = now(), \
         claim_token = NULL, claimed_until = NULL \
     FROM (SELECT set_config('synchronous_commit', 'off', true)) AS relaxed \
     WHERE event_id = ANY($1) AND claim_token = $2 AND status = 'claimed' \
     RETURNING event_id";

/// The same mark, recording the step's starts in the same statement (custody: every start is a
/// `listener_starts` row, settled at once when its receipt is already in — the local transport — or
/// later by the receipt's trigger; see V4). One round trip for a fully successful batch.
const MARK_DISPATCHED_WITH_STARTS: &str = "WITH relaxed AS MATERIALIZED ( \
         SELECT set_config('synchronous_commit', 'off', true) \
     ), started AS ( \
         INSERT INTO listener_starts (event_id, listener, transport_message_id, settled_at) \
         SELECT s.event_id, s.listener, s.message_id, \
                CASE WHEN EXISTS (SELECT 1 FROM listener_receipts r \
                                  WHERE r.listener = s.listener AND r.event_id = s.event_id) \
                     THEN now() END \
         FROM relaxed, unnest($3::uuid[], $4::text[], $5::text[]) AS s (event_id, listener, message_id) \
         ON CONFLICT (event_id, listener) DO NOTHING \
     ) \
     UPDATE event_outbox \
     SET status = 'dispatched', dispatched_at = now(), updated_at = now(), \
         claim_token = NULL, claimed_until = NULL \
     FROM relaxed \
     WHERE event_id = ANY($1) AND claim_token = $2 AND status = 'claimed' \
     RETURNING event_id";

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
const MARK_FAILED: &str = "UPDATE event_outbox o \
     SET status = f.status, \
         attempts = CASE WHEN f.spend THEN o.attempts ELSE greatest(o.attempts - 1, 0) END, \
         available_at = CASE WHEN f.status = 'retry' \
                             THEN now() + f.delay_ms * interval '1 millisecond' \
                             ELSE o.available_at END, \
         claim_token = NULL, claimed_until = NULL, \
         last_error_code = f.code, last_error = f.message, updated_at = now() \
     FROM unnest($2::uuid[], $3::text[], $4::float8[], $5::text[], $6::text[], $7::bool[]) \
          AS f (event_id, status, delay_ms, code, message, spend) \
     WHERE o.event_id = f.event_id AND o.claim_token = $1 AND o.status = 'claimed' \
     RETURNING o.event_id";

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
    let rows = sql::query(client, MARK_DISPATCHED, &[&event_ids, &token]).await?;
    Ok(rows.iter().map(|row| row.get(0)).collect())
}

/// [`mark_dispatched`] and [`record_starts`] in one statement (the dispatcher's success path).
pub async fn mark_dispatched_with_starts(
    client: &impl GenericClient,
    token: ClaimToken,
    event_ids: &[EventId],
    starts: &[StartRecord],
) -> Result<Vec<EventId>, tokio_postgres::Error> {
    if starts.is_empty() {
        return mark_dispatched(client, token, event_ids).await;
    }
    let (ids, listeners, message_ids) = start_columns(starts);
    let rows = sql::query(
        client,
        MARK_DISPATCHED_WITH_STARTS,
        &[&event_ids, &token, &ids, &listeners, &message_ids],
    )
    .await?;
    Ok(rows.iter().map(|row| row.get(0)).collect())
}

fn start_columns(starts: &[StartRecord]) -> (Vec<EventId>, Vec<&str>, Vec<Option<&str>>) {
    let ids = starts.iter().map(|s| s.event_id).collect();
    let listeners = starts.iter().map(|s| s.listener.as_str()).collect();
    let message_ids = starts.iter().map(|s| s.message_id.as_deref()).collect();
    (ids, listeners, message_ids)
}

/// A listener start to remember, so a retry does not start it again.
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
            Failure::Retry(_) | Failure::Hold(_) => "retry",
            Failure::Dead => "dead",
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
        sql::query(client, MARK_FAILED, &[&token, &ids, &statuses, &delays, &codes, &messages, &spend])
            .await?;
    Ok(rows.iter().map(|row| row.get(0)).collect())
}
