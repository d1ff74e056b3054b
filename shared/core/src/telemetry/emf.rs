//! CloudWatch embedded metric format (EMF): every metric line of every process is built here, so the
//! `_aws` metadata is written once (DESIGN §6b; the template's alarms read these names).
//!
//! Invariants:
//! - Every line is in one of two namespaces: [`NAMESPACE`] (the outbox, the queues, the webhooks) or
//!   [`LISTENERS`] (the listeners' rejections); dimension values and metric names are identifiers
//!   (event types, listener names, reasons, queue names), never data.
//! - [`document`] gives the metadata with no values (callers that fill many values, such as the
//!   dispatcher's per-event-type lines); [`line`] gives a whole line with its values.

use serde_json::{json, Map, Value};

/// The CloudWatch namespace of the dispatcher's, the queues' and the webhooks' metrics.
pub const NAMESPACE: &str = "Clinic/Outbox";
/// The CloudWatch namespace of the listeners' rejections.
pub const LISTENERS: &str = "Clinic/Listeners";

/// An EMF document in [`NAMESPACE`] with its `_aws` metadata (`dimensions` names one dimension set;
/// `metrics` are `(name, unit)`) and no values yet.
pub fn document(timestamp_ms: i64, dimensions: &[&str], metrics: &[(&str, &str)]) -> Map<String, Value> {
    document_in(NAMESPACE, timestamp_ms, dimensions, metrics)
}

fn document_in(
    namespace: &str,
    timestamp_ms: i64,
    dimensions: &[&str],
    metrics: &[(&str, &str)],
) -> Map<String, Value> {
    let definitions: Vec<Value> =
        metrics.iter().map(|(name, unit)| json!({ "Name": name, "Unit": unit })).collect();
    let mut document = Map::new();
    document.insert(
        "_aws".into(),
        json!({
            "Timestamp": timestamp_ms,
            "CloudWatchMetrics": [{
                "Namespace": namespace,
                "Dimensions": [dimensions],
                "Metrics": definitions,
            }],
        }),
    );
    document
}

/// A whole line in `namespace`: its dimensions `(name, value)`, and its metrics `(name, unit, value)`.
pub fn line(
    namespace: &str,
    timestamp_ms: i64,
    dimensions: &[(&str, &str)],
    metrics: &[(&str, &str, i64)],
) -> Value {
    let names: Vec<&str> = dimensions.iter().map(|(name, _)| *name).collect();
    let definitions: Vec<(&str, &str)> = metrics.iter().map(|(name, unit, _)| (*name, *unit)).collect();
    let mut line = document_in(namespace, timestamp_ms, &names, &definitions);
    for (name, value) in dimensions {
        line.insert((*name).into(), json!(value));
    }
    for (name, _, value) in metrics {
        line.insert((*name).into(), json!(value));
    }
    Value::Object(line)
}

/// Prints [`line`] in [`NAMESPACE`] now (stdout: Lambda's log stream, where CloudWatch reads EMF).
pub fn print(dimensions: &[(&str, &str)], metrics: &[(&str, &str, i64)]) {
    println!("{}", line(NAMESPACE, chrono::Utc::now().timestamp_millis(), dimensions, metrics));
}

/// Whether metrics are printed: `CLINIC_METRICS` = `emf` (the default) or `off`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricsMode {
    Emf,
    Off,
}

impl MetricsMode {
    /// `CLINIC_METRICS`: `emf` (the default) or `off`.
    pub fn read(env: &crate::config::Env) -> Result<MetricsMode, crate::config::ConfigError> {
        match env.var("CLINIC_METRICS").as_deref() {
            None | Some("emf") => Ok(MetricsMode::Emf),
            Some("off") => Ok(MetricsMode::Off),
            Some(other) => Err(crate::config::ConfigError::Invalid {
                name: "CLINIC_METRICS",
                value: other.to_owned(),
                message: "expected `emf` or `off`".into(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_names_its_dimensions_and_metrics_and_carries_their_values() {
        let dimensions = [("Listener", "patient-reminder")];
        let line = line(LISTENERS, 1_700_000_000_000, &dimensions, &[("Rejected", "Count", 1)]);
        let directive = &line["_aws"]["CloudWatchMetrics"][0];
        assert_eq!(line["_aws"]["Timestamp"], 1_700_000_000_000_i64);
        assert_eq!(directive["Namespace"], LISTENERS);
        assert_eq!(directive["Dimensions"], json!([["Listener"]]));
        assert_eq!(directive["Metrics"], json!([{ "Name": "Rejected", "Unit": "Count" }]));
        assert_eq!(
            (line["Listener"].as_str(), line["Rejected"].as_i64()),
            (Some("patient-reminder"), Some(1))
        );
        let bare = super::line(NAMESPACE, 1, &[], &[("HeldStarts", "Count", 0)]);
        assert_eq!(bare["_aws"]["CloudWatchMetrics"][0]["Dimensions"], json!([[]]));
        assert_eq!(bare["_aws"]["CloudWatchMetrics"][0]["Namespace"], NAMESPACE);
    }
}
