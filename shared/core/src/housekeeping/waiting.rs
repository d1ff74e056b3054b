//! Rows waiting for an operator, as a gauge per queue: dead outbox rows, dead notifications and
//! failed webhook deliveries. Each stays until an operator retries, replays or discards it, so an
//! alarm on this gauge stays up for exactly as long as such rows exist (a count of new deaths per
//! minute would clear after a minute while the rows still wait; docs/alarms.md).
//!
//! Invariants:
//! - One statement, three bounded counts: each counts at most [`CAP`] + 1 rows through a partial
//!   index of its waiting status (V19), so the cost does not grow with the tables' history, and a
//!   count above the cap is reported as the cap (the alarm only needs "more than zero").
//! - The EMF lines carry the queue's name and a count only (namespace `Clinic/Outbox`, metric
//!   `WaitingForOperator`, dimension `Queue`): never ids, reasons or health data.
//! - Emitted by every scheduled `drain` invocation (each minute, `functions/dispatcher`), whatever
//!   else that invocation did, so the gauge has a point every minute while the dispatcher runs.

use deadpool_postgres::GenericClient;
use serde_json::{json, Value};

use crate::db::sql;
use crate::telemetry::emf::MetricsMode;

/// The largest count reported per queue.
pub const CAP: i64 = 10_000;

/// The metric's name.
pub const METRIC: &str = "WaitingForOperator";

/// How many rows of each queue wait for an operator (each at most [`CAP`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Waiting {
    /// `event_outbox` rows in `dead`.
    pub outbox: i64,
    /// `notifications` rows in `dead`.
    pub notifications: i64,
    /// `webhook_deliveries` rows in `failed`.
    pub webhook_deliveries: i64,
}

const COUNT: &str = "SELECT \
     (SELECT count(*) FROM (SELECT 1 FROM event_outbox WHERE status = 'dead' LIMIT $1) o), \
     (SELECT count(*) FROM (SELECT 1 FROM notifications WHERE status = 'dead' LIMIT $1) n), \
     (SELECT count(*) FROM (SELECT 1 FROM webhook_deliveries WHERE status = 'failed' LIMIT $1) w)";

/// Reads [`Waiting`] in one round trip.
pub async fn read(client: &impl GenericClient) -> Result<Waiting, tokio_postgres::Error> {
    let row = sql::query_one(client, COUNT, &[&(CAP + 1)]).await?;
    let capped = |index: usize| row.get::<_, i64>(index).min(CAP);
    Ok(Waiting { outbox: capped(0), notifications: capped(1), webhook_deliveries: capped(2) })
}

impl Waiting {
    /// The queues by their `Queue` dimension value.
    pub fn by_queue(&self) -> [(&'static str, i64); 3] {
        [
            ("outbox", self.outbox),
            ("notifications", self.notifications),
            ("webhook_deliveries", self.webhook_deliveries),
        ]
    }

    /// One EMF document per queue (every queue, zeros included: a zero is what clears the alarm).
    pub fn to_emf(&self, timestamp_ms: i64) -> Vec<Value> {
        self.by_queue()
            .into_iter()
            .map(|(queue, count)| {
                let mut document =
                    crate::telemetry::emf::document(timestamp_ms, &["Queue"], &[(METRIC, "Count")]);
                document.insert("Queue".into(), json!(queue));
                document.insert(METRIC.into(), json!(count));
                Value::Object(document)
            })
            .collect()
    }
}

/// Reads the gauge and prints its EMF lines (one write) unless metrics are off; a failed read is
/// logged and nothing is printed (the alarm keeps its state: missing data is ignored).
pub async fn emit(client: &impl GenericClient, mode: MetricsMode) -> Option<Waiting> {
    let waiting = match read(client).await {
        Ok(waiting) => waiting,
        Err(error) => {
            tracing::warn!(error = %error, "could not count the rows waiting for an operator");
            return None;
        }
    };
    if mode == MetricsMode::Emf {
        let mut text = String::new();
        for document in waiting.to_emf(chrono::Utc::now().timestamp_millis()) {
            text.push_str(&document.to_string());
            text.push('\n');
        }
        print!("{text}");
    }
    Some(waiting)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_queue_gets_a_line_with_its_count_only() {
        let waiting = Waiting { outbox: 2, notifications: 0, webhook_deliveries: 7 };
        let lines = waiting.to_emf(1_700_000_000_000);
        assert_eq!(lines.len(), 3);
        let line = &lines[2];
        assert_eq!(line["Queue"], "webhook_deliveries");
        assert_eq!(line[METRIC], 7);
        assert_eq!(line["_aws"]["CloudWatchMetrics"][0]["Namespace"], "Clinic/Outbox");
        assert_eq!(line["_aws"]["CloudWatchMetrics"][0]["Dimensions"], json!([["Queue"]]));
        assert_eq!(lines[1][METRIC], 0, "a zero is emitted: it is what clears the alarm");
        assert_eq!(line.as_object().unwrap().len(), 3, "{line}");
    }
}
