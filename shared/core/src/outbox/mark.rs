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

const RECORD_STARTS: &str = "INSERT INTO listener_starts (event_id, listener, transport_message_id) \
     SELECT * FROM unnest($1::uuid[], $2::text[], $3::text[]) \
     ON CONFLICT (event_id, listener) DO NOTHING";

const MARK_FAILED: &str = "UPDATE event_outbox o \
     SET status = f.status, \
         available_at = CASE WHEN f.status = 'retry' \
                             THEN now() + f.delay_ms * interval '1 millisecond' \
                             ELSE o.available_at END, \
         claim_token = NULL, claimed_until = NULL, \
         last_error_code = f.code, last_error = f.message, updated_at = now() \
     FROM unnest($2::uuid[], $3::text[], $4::float8[], $5::text[], $6::text[]) \
          AS f (event_id, status, delay_ms, code, message) \
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
    let ids: Vec<EventId> = starts.iter().map(|s| s.event_id).collect();
    let listeners: Vec<&str> = starts.iter().map(|s| s.listener.as_str()).collect();
    let message_ids: Vec<Option<&str>> = starts.iter().map(|s| s.message_id.as_deref()).collect();
    sql::execute(client, RECORD_STARTS, &[&ids, &listeners, &message_ids]).await
}

/// Where a failed row goes next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// Back to the claim scan after `Duration`.
    Retry(Duration),
    /// The attempt ceiling was reached or the failure is permanent.
    Dead,
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
            Failure::Retry(_) => "retry",
            Failure::Dead => "dead",
        })
        .collect();
    let delays: Vec<f64> = marks
        .iter()
        .map(|m| match m.next {
            Failure::Retry(delay) => delay.as_secs_f64() * 1000.0,
            Failure::Dead => 0.0,
        })
        .collect();
    let codes: Vec<&str> = marks.iter().map(|m| m.code.as_str()).collect();
    let messages: Vec<String> =
        marks.iter().map(|m| m.message.chars().take(MAX_ERROR_CHARS).collect()).collect();
    let rows =
        sql::query(client, MARK_FAILED, &[&token, &ids, &statuses, &delays, &codes, &messages]).await?;
    Ok(rows.iter().map(|row| row.get(0)).collect())
}
