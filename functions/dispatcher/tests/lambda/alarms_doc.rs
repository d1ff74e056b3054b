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
    for metric in ["OldestPendingAgeMs", "OldestLiveAgeMs", "OldestUnsettledAgeMs", "WaitingForOperator"] {
        assert!(TEMPLATE.contains(&format!("MetricName: {metric}\n")), "no alarm on {metric}");
    }
    let mut metrics = clinic_core::dispatch::metrics::DispatchMetrics::new();
    metrics.dead(None);
    metrics.ages(clinic_core::outbox::lag::Ages {
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

/// Issue 38 item 7: a dead outbox row, a dead notification and a failed webhook delivery each keep an
/// alarm up while they wait — one alarm per queue on the `WaitingForOperator` gauge, whose `Queue`
/// values are the ones the gauge emits, with missing points ignored (not read as "cleared").
#[test]
fn each_queue_waiting_for_an_operator_has_an_alarm_on_the_gauge() {
    let waiting = clinic_core::housekeeping::waiting::Waiting::default();
    let emitted: BTreeSet<String> =
        waiting.to_emf(0).iter().map(|line| line["Queue"].as_str().unwrap().to_owned()).collect();
    let mut alarmed = BTreeSet::new();
    for block in TEMPLATE.split("\n\n").filter(|block| block.contains("MetricName: WaitingForOperator\n")) {
        assert!(
            block.contains("Statistic: Maximum") && block.contains("TreatMissingData: ignore"),
            "{block}"
        );
        let queue = block.split("- Name: Queue\n          Value: ").nth(1).expect("a Queue dimension");
        alarmed.insert(queue.lines().next().unwrap().trim().to_owned());
    }
    assert_eq!(alarmed, emitted);
    assert_eq!(alarmed.len(), 3);
}
