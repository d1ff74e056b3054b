//! The checks of the message faults: forged and altered messages rejected (none acted), lost messages
//! restarted by the custody reconciler with exactly one receipt and at most one effect each (none when
//! the work had gone stale meanwhile), and the lock-blocked message retried alone until it succeeded.

use std::collections::BTreeMap;
use std::time::Duration;

use super::checks::Report;

/// What the lock fault did.
#[derive(Debug, Clone, Default)]
pub struct LockLog {
    pub event_id: String,
    pub held: Duration,
    /// Lock-timeout failures of the victim's listener run (SQS: deliveries; local: outbox attempts − 1).
    pub victim_timeouts: u64,
    /// Lock-timeout failures of any other message (SQS only).
    pub other_timeouts: u64,
}

/// What the message faults injected, and what the listener side answered them.
#[derive(Debug, Clone, Default)]
pub struct FaultLog {
    pub forged_sent: BTreeMap<&'static str, u64>,
    pub forged_rejected: BTreeMap<&'static str, u64>,
    pub sqs_down: Option<Duration>,
    pub retry_budget: Duration,
    pub stolen: Vec<(String, String)>,
    pub restarted_stolen: i64,
    /// Notifications of the restarted stolen pairs (a stale one has none).
    pub stolen_effects: i64,
    pub lock: Option<LockLog>,
}

/// Adds the fault checks (8–11) to `report`.
pub async fn check(
    client: &tokio_postgres::Client,
    log: &mut FaultLog,
    report: &mut Report,
) -> anyhow::Result<()> {
    // 8. Every forged or altered message rejected with its own reason (their effects — a cancellation
    //    without a 2xx answer, a receipt or notification beyond the listener map — fail 1–3).
    let mut failures = Vec::new();
    if log.forged_sent != log.forged_rejected {
        failures.push(format!(
            "forged by reason {:?}, rejected by reason {:?}",
            log.forged_sent, log.forged_rejected
        ));
    }
    report.check("every forged or altered message rejected with its reason; none acted", failures);

    // 9. The SQS outage outlasted the dispatcher's retry budget ten times over (and 5 found no dead row).
    if let Some(down) = log.sqs_down {
        let mut failures = Vec::new();
        if down < log.retry_budget * 10 {
            failures
                .push(format!("outage {down:?} shorter than 10 × the retry budget {:?}", log.retry_budget));
        }
        report.check("the SQS outage lasted at least 10 × the retry budget", failures);
    }

    // 10. Every stolen message restarted by the reconciler: its receipt is in, with exactly one effect.
    if !log.stolen.is_empty() {
        let mut failures = Vec::new();
        for (event, listener) in &log.stolen {
            let id: ulid::Ulid = event.parse()?;
            let id = uuid::Uuid::from(id);
            let row = client
                .query_one(
                    "SELECT (SELECT count(*) FROM listener_receipts WHERE event_id = $1 AND listener = $2), \
                            (SELECT count(*) FROM notifications WHERE event_id = $1 AND listener = $2), \
                            (SELECT coalesce(max(restarts), 0) FROM listener_starts WHERE event_id = $1 AND listener = $2)",
                    &[&id, listener],
                )
                .await?;
            let (receipts, effects, restarts): (i64, i64, i32) = (row.get(0), row.get(1), row.get(2));
            // One receipt; one notification, or none when the work had gone stale by then (the
            // appointment cancelled or completed meanwhile: the receipt is still committed).
            if receipts != 1 || effects > 1 {
                failures.push(format!(
                    "stolen {listener} of {event}: {receipts} receipts, {effects} effects, {restarts} restarts"
                ));
            } else {
                log.restarted_stolen += i64::from(restarts >= 1);
                log.stolen_effects += effects;
            }
        }
        // A stolen message whose start the dispatcher had sent twice (killed before its mark) is
        // run from the other copy, without a restart; the reconciler must have restarted the rest.
        if log.restarted_stolen == 0 {
            failures.push(format!(
                "none of the {} stolen messages was restarted by the reconciler",
                log.stolen.len()
            ));
        }
        report.check(
            "every message lost after sending restarted by the reconciler, exactly one receipt and effect each",
            failures,
        );
    }

    // 11. The lock-blocked message failed on its lock timeout, was retried alone, then took effect once.
    if let Some(lock) = &log.lock {
        let id = uuid::Uuid::from(lock.event_id.parse::<ulid::Ulid>()?);
        let row = client
            .query_one(
                "SELECT (SELECT count(*) FROM listener_receipts WHERE event_id = $1 AND listener = $2), \
                        (SELECT count(*) FROM notifications WHERE event_id = $1 AND listener = $2)",
                &[&id, &super::lock::LOCKED_LISTENER.as_str()],
            )
            .await?;
        let (receipts, effects): (i64, i64) = (row.get(0), row.get(1));
        let mut failures = Vec::new();
        if lock.victim_timeouts == 0 {
            failures.push(format!("the blocked listener never hit its lock timeout (held {:?})", lock.held));
        }
        if lock.other_timeouts != 0 {
            failures.push(format!("{} lock timeouts of other messages", lock.other_timeouts));
        }
        if (receipts, effects) != (1, 1) {
            failures.push(format!("blocked message: {receipts} receipts, {effects} effects after the lock"));
        }
        report.check(
            "the message blocked past lock_timeout was retried alone, then took effect once",
            failures,
        );
    }
    Ok(())
}
