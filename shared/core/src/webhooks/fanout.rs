//! The fan-out: one delivery per (endpoint subscribed to the event's type, event), written in the
//! `webhook_fan_out` listener's receipt transaction. `UNIQUE(endpoint_id, event_id)` makes a
//! duplicate run create nothing; rows carry ids and the type name only.
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

/// The predicate "an endpoint of workspace $1 that is enabled, or disabled for less than
/// [`HOLD_DAYS`], subscribes to type $2", used by the dispatcher's claim (whether to start the fan-out
/// at all) and by the fan-out itself: defined once.
pub const SUBSCRIBED: &str = "(w.enabled OR w.disabled_at > now() - interval '30 days') \
     AND (w.event_types = '{}' OR $2::text = ANY (w.event_types))";

fn insert_sql() -> String {
    format!(
        "INSERT INTO webhook_deliveries (id, endpoint_id, workspace_id, event_id, event_type) \
         SELECT gen_random_uuid(), w.id, w.workspace_id, $3, $2 FROM webhook_endpoints w \
         WHERE w.workspace_id = $1 AND {SUBSCRIBED} \
         ON CONFLICT (endpoint_id, event_id) DO NOTHING"
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
        assert!(SUBSCRIBED.contains(&format!("interval '{HOLD_DAYS} days'")), "{SUBSCRIBED}");
    }
}
