//! The fan-out: one delivery per (endpoint subscribed to the event's type, event), written in the
//! `webhook_fan_out` listener's receipt transaction. `UNIQUE(endpoint_id, event_id)` makes a
//! duplicate run create nothing; rows carry ids, the type name and the delivery's number only.
//!
//! Numbering (DESIGN.md §5f): each endpoint numbers its deliveries 1, 2, 3 … with no gap and no
//! reuse, assigned here in the fan-out's transaction ([`insert_sql`]); the number never changes
//! afterwards, so every attempt, recover and replay carries the same one.
//!
//! A disabled endpoint gets its deliveries too: they are **held** (created `pending`, never claimed,
//! no attempt spent while it is off — the sender's claim joins enabled endpoints only) and go out once
//! it is enabled again, so nothing committed while it was off is lost. Bound: an endpoint disabled
//! for longer than [`HOLD_DAYS`] gets no new deliveries, so an endpoint left off for good holds at
//! most the deliveries of the events of its types committed in its first [`HOLD_DAYS`] off (delete it
//! to drop them; docs/webhooks.md, docs/retention.md).

use deadpool_postgres::GenericClient;

use crate::db::sql;
use crate::events::Envelope;

/// How long a disabled endpoint keeps collecting (held) deliveries.
pub const HOLD_DAYS: u32 = 30;

/// The predicate "the endpoint `w` is enabled, or disabled for less than [`HOLD_DAYS`], and
/// subscribes to the event type `event_type`" (an SQL expression of the caller's statement), used by
/// the dispatcher's claim (`outbox/claim.sql`: whether to start the fan-out at all, with the event's
/// type column) and by the fan-out itself (with its type parameter): defined once.
pub fn subscribed(event_type: &str) -> String {
    format!(
        "(w.enabled OR w.disabled_at > now() - interval '{HOLD_DAYS} days') \
         AND (w.event_types = '{{}}' OR {event_type} = ANY (w.event_types))"
    )
}

/// The subscribed endpoints without a delivery of the event are locked in id order (so two fan-outs
/// of one workspace cannot deadlock), then one delivery each is inserted; the schema's trigger
/// (`number_webhook_delivery`, V24) gives each its endpoint's next number under that lock, held until
/// the listener's transaction commits, so concurrent fan-outs to one endpoint number in commit order
/// and a rolled-back fan-out gives its numbers back (no gap, no reuse). A duplicate run finds the
/// deliveries and takes no number; a concurrent duplicate run fails on `UNIQUE(endpoint_id,
/// event_id)` and is retried like any listener error, taking no number either.
fn insert_sql() -> String {
    format!(
        "WITH locked AS ( \
           SELECT w.id, w.workspace_id FROM webhook_endpoints w WHERE w.workspace_id = $1 AND {subscribed} \
             AND NOT EXISTS (SELECT 1 FROM webhook_deliveries d WHERE d.endpoint_id = w.id AND d.event_id = $3) \
           ORDER BY w.id FOR UPDATE) \
         INSERT INTO webhook_deliveries (id, endpoint_id, workspace_id, event_id, event_type) \
         SELECT gen_random_uuid(), id, workspace_id, $3, $2 FROM locked",
        subscribed = subscribed("$2::text")
    )
}

/// Creates the deliveries of `envelope`; answers how many were new.
pub async fn fan_out(client: &impl GenericClient, envelope: &Envelope) -> Result<u64, tokio_postgres::Error> {
    static SQL: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let statement = SQL.get_or_init(insert_sql);
    let event_type = envelope.event_type.as_str();
    sql::execute(client, statement, &[&envelope.workspace_id, &event_type, &envelope.id]).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hold_window_in_the_predicate_is_the_documented_one() {
        let predicate = subscribed("$2::text");
        assert!(predicate.contains(&format!("interval '{HOLD_DAYS} days'")), "{predicate}");
        assert!(predicate.contains("$2::text = ANY (w.event_types)"), "{predicate}");
    }
}
