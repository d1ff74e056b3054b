//! `docs/alarms.md` matches `template.yaml`: every alarm the template creates is in the table and the
//! table names no alarm the template lacks; every metric an alarm watches is one the dispatcher emits.

use std::collections::BTreeSet;

const TEMPLATE: &str = include_str!("../../../../template.yaml");
const DOC: &str = include_str!("../../../../docs/alarms.md");

/// `<stack>-…` names of the template's alarms (the six DLQ alarms as one `dlq-<listener>` row).
fn template_alarms() -> BTreeSet<String> {
    TEMPLATE
        .lines()
        .filter_map(|line| line.trim().strip_prefix("AlarmName: !Sub ${AWS::StackName}-"))
        .map(|name| if name.starts_with("dlq-") { "dlq-<listener>".to_owned() } else { name.to_owned() })
        .collect()
}

fn documented_alarms() -> BTreeSet<String> {
    DOC.lines()
        .filter_map(|line| line.strip_prefix("| `<stack>-"))
        .filter_map(|rest| rest.split('`').next())
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_alarm_table_matches_the_template() {
    let template = template_alarms();
    assert!(template.len() >= 7, "{template:?}");
    assert_eq!(documented_alarms(), template);
}

#[test]
fn the_outbox_alarms_watch_metrics_the_dispatcher_emits() {
    for metric in ["OldestPendingAgeMs", "OldestLiveAgeMs", "OldestUnsettledAgeMs", "Dead"] {
        assert!(TEMPLATE.contains(&format!("MetricName: {metric}\n")), "no alarm on {metric}");
    }
    let mut metrics = clinic_core::metrics::DispatchMetrics::new();
    metrics.dead(None);
    metrics.ages(clinic_core::metrics::Ages {
        oldest_pending_ms: 1,
        oldest_live_ms: 2,
        oldest_unsettled_ms: 3,
    });
    let lines = metrics.to_emf(0);
    let totals = lines.last().unwrap();
    for metric in ["OldestPendingAgeMs", "OldestLiveAgeMs", "OldestUnsettledAgeMs", "Dead", "Held"] {
        assert!(totals.get(metric).is_some(), "{metric} not emitted: {totals}");
    }
}
