//! The run's figures, printed as a Markdown table (docs/chaos.md keeps measured ones), then the
//! checks.

use std::collections::BTreeMap;
use std::time::Duration;

use super::checks::Report;
use super::fault_checks::FaultLog;
use super::sqs::Consumed;
use super::writers::Tally;

pub struct Figures<'a> {
    pub seed: u64,
    pub writers: usize,
    pub writes_took: Duration,
    pub settle_took: Duration,
    pub kills: u32,
    pub dispatcher_starts: u32,
    pub pg_downtime: Duration,
    pub consumed: Option<&'a Consumed>,
    pub faults: &'a FaultLog,
    pub tally: &'a Tally,
    pub report: &'a Report,
}

fn by_reason(counts: &BTreeMap<&'static str, u64>) -> String {
    let total: u64 = counts.values().sum();
    let each = counts.iter().map(|(reason, n)| format!("{reason} {n}")).collect::<Vec<_>>().join(", ");
    format!("{total} ({each})")
}

fn rows(f: &Figures<'_>) -> Vec<(&'static str, String)> {
    let r = f.report;
    let mut by_type: BTreeMap<&str, usize> = BTreeMap::new();
    for mutation in &f.tally.mutations {
        *by_type.entry(mutation.event_type.as_str()).or_default() += 1;
    }
    let mix = by_type.iter().map(|(t, n)| format!("{t} {n}")).collect::<Vec<_>>().join(", ");
    let transport = match f.consumed {
        Some(_) => {
            "sqs (moto_server behind a proxy the run cuts; consumers run the listener Lambda's handler)"
        }
        None => "local (listeners in the dispatcher process)",
    };
    let mut rows: Vec<(&'static str, String)> = vec![
        ("Seed", f.seed.to_string()),
        ("Transport", transport.into()),
        ("Writers × writing time", format!("{} × {:.1} s", f.writers, f.writes_took.as_secs_f64())),
        ("HTTP answers (incl. retries)", f.tally.requests.to_string()),
        ("2xx mutations", format!("{} ({mix})", f.tally.mutations.len())),
        ("Retries (same Idempotency-Key)", f.tally.retries.to_string()),
        ("Connection errors", f.tally.connection_errors.to_string()),
        ("Dispatcher SIGKILLs / starts", format!("{} / {}", f.kills, f.dispatcher_starts)),
        ("PostgreSQL restarts / downtime", format!("1 / {:.1} s", f.pg_downtime.as_secs_f64())),
        ("503 during the outage (problem documents)", r.unavailable_during_outage.to_string()),
        ("Mutations that saw a 503, then succeeded once", r.retried_after_503.to_string()),
        ("Other 5xx", (f.tally.server_errors.len() - r.unavailable_during_outage).to_string()),
    ];
    if let Some(down) = f.faults.sqs_down {
        let budget = f.faults.retry_budget.as_secs_f64();
        let ratio = if budget > 0.0 { down.as_secs_f64() / budget } else { 0.0 };
        rows.push((
            "SQS outage / dispatcher retry budget",
            format!("{:.1} s / {budget:.1} s ({ratio:.0}×)", down.as_secs_f64()),
        ));
    }
    rows.push(("Forged or altered messages sent (by reason)", by_reason(&f.faults.forged_sent)));
    rows.push(("… rejected (by reason)", by_reason(&f.faults.forged_rejected)));
    if !f.faults.stolen.is_empty() {
        rows.push((
            "Messages deleted after sending / restarted by the reconciler / their effects",
            format!(
                "{} / {} / {}",
                f.faults.stolen.len(),
                f.faults.restarted_stolen,
                f.faults.stolen_effects
            ),
        ));
    }
    if let Some(lock) = &f.faults.lock {
        rows.push((
            "Lock held / lock timeouts of the blocked message / of others",
            format!("{:.1} s / {} / {}", lock.held.as_secs_f64(), lock.victim_timeouts, lock.other_timeouts),
        ));
    }
    rows.extend([
        ("Events / links / outbox rows", format!("{} / {} / {}", r.events, r.links, r.outbox_rows)),
        ("Receipts / expected", format!("{} / {}", r.receipts, r.expected_receipts)),
        ("Notifications / duplicates", format!("{} / {}", r.notifications, r.duplicate_notifications)),
        (
            "Outbox rows claimed more than once / max attempts",
            format!("{} / {}", r.reclaimed, r.max_attempts),
        ),
        ("Rows claimed past their lease", r.claimed_past_lease.to_string()),
        ("Dead outbox rows", r.dead.len().to_string()),
        ("Settling after the writers stopped", format!("{:.1} s", f.settle_took.as_secs_f64())),
    ]);
    if let Some(c) = f.consumed {
        let retryable =
            c.retryable.iter().map(|(code, n)| format!("{code} {n}")).collect::<Vec<_>>().join(", ");
        rows.push(("SQS messages run / duplicate deliveries", format!("{} / {}", c.runs, c.duplicates)));
        rows.push((
            "Listener runs failed retryable (redelivered)",
            format!("{} ({retryable})", c.retryable_total()),
        ));
        rows.push(("SQS receive errors (outage)", c.receive_errors.to_string()));
        rows.push(("Dead-lettered messages (planted: 1)", c.dead_lettered.len().to_string()));
    }
    rows
}

pub fn print(f: &Figures<'_>) {
    println!();
    println!("| Figure | Value |");
    println!("|---|---|");
    for (name, value) in rows(f) {
        println!("| {name} | {value} |");
    }
    println!();
    for (name, passed) in &f.report.checks {
        println!("  [{}] {name}", if *passed { "ok" } else { "FAIL" });
    }
    for failure in &f.report.failures {
        println!("  - {failure}");
    }
}
