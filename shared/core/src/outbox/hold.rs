//! Holding a claimed row for a paused listener (see [`crate::operator::pause`]): the row goes back
//! to `retry` with code `listener_paused`, its attempt is given back (a pause never spends the
//! attempt budget), and it is due again only after [`HOLD_RECHECK`] — or at once, in event order,
//! when the listener is resumed. Fenced by the claim token like every mark.

use std::time::Duration;

use deadpool_postgres::GenericClient;

use crate::db::sql;
use crate::ids::{ClaimToken, EventId};

/// The `last_error_code` of a row held for a paused listener (also read by `claim.sql` and
/// [`crate::operator::pause`]).
pub const HELD_CODE: &str = "listener_paused";

/// How long a held row waits before the claim looks at it again (a safety net: resume releases
/// held rows at once).
pub const HOLD_RECHECK: Duration = Duration::from_secs(300);

const MARK_HELD: &str = "UPDATE event_outbox \
     SET status = 'retry', attempts = greatest(attempts - 1, 0), \
         available_at = now() + $3::float8 * interval '1 millisecond', \
         claim_token = NULL, claimed_until = NULL, claimed_by = NULL, \
         last_error_code = $4, updated_at = now() \
     WHERE event_id = ANY($1) AND claim_token = $2 AND status = 'claimed' \
     RETURNING event_id";

/// Marks every listed row held; returns the ids actually marked (the rest were fenced).
pub async fn mark_held(
    client: &impl GenericClient,
    token: ClaimToken,
    event_ids: &[EventId],
) -> Result<Vec<EventId>, tokio_postgres::Error> {
    if event_ids.is_empty() {
        return Ok(Vec::new());
    }
    let recheck_ms = HOLD_RECHECK.as_secs_f64() * 1000.0;
    let rows = sql::query(client, MARK_HELD, &[&event_ids, &token, &recheck_ms, &HELD_CODE]).await?;
    Ok(rows.iter().map(|row| row.get(0)).collect())
}
