//! Retention: a sweep that deletes finished outbox bookkeeping once it is older than the retention.
//!
//! What it deletes, in bounded batches (each batch one short statement, committed on its own, so no
//! long transaction or lock is ever held):
//! 1. `event_outbox` rows in a final status — `dispatched` or `discarded` — whose last change
//!    (`updated_at`) is older than the retention and whose event is out of custody (no awaited
//!    listener on the row, no unsettled start: an operator may still need to replay it);
//! 2. `listener_starts` older than the retention, settled (their receipt is in), whose event has no
//!    live outbox row;
//! 3. `listener_receipts` older than the retention whose event has no live outbox row, no awaited
//!    listener and no unsettled start (custody, DESIGN §5a: an event still in custody keeps all its bookkeeping).
//! 4. `idempotency_keys` older than their own time to live ([`RetentionConfig::idempotency_ttl`],
//!    `CLINIC_IDEMPOTENCY_TTL_HOURS`, default 7 days): a retry of a request after that is a new
//!    request (clients retry within minutes; the README's idempotency promise holds for the TTL);
//! 5. `appointment_reminders` whose start time is older than the retention: the reminder scan only
//!    looks at appointments starting in the future, so such a row can never dedupe anything again;
//! 6. `listener_rejections` older than their own retention ([`RetentionConfig::rejection_retention`],
//!    `CLINIC_REJECTION_RETENTION_HOURS`, default 30 days): forensic records of refused deliveries
//!    (a flood of forged messages grows this table, and the sweep bounds it). `outbox_history` needs
//!    no step: its rows go with their outbox row (ON DELETE CASCADE);
//! 7. `webhook_deliveries` that were `delivered` or `discarded` longer ago than the retention, with their
//!    `webhook_attempts` (by cascade): failed and live deliveries stay (recover-since needs them).
//! 8. rotated-out webhook signing secrets whose overlap ended (`webhook_endpoints.previous_secret`
//!    set to NULL): a secret rotated because it leaked leaves the row at the end of its overlap.
//! 9. `notifications` that ended (`sent`, `stale`, `opted_out`, `suppressed`, `discarded`) longer ago than their own
//!    retention ([`RetentionConfig::notification_retention`], `CLINIC_NOTIFICATION_RETENTION_HOURS`,
//!    default 90 days) whose event has no outbox row any more: step 1 removed it, so no operator
//!    replay and no redelivery can reach the event again and the row's idempotency key dedupes
//!    nothing. `dead` and `no_contact` rows wait for an operator (`GET /v1/system/deliveries`).
//!
//! Everything else that grows has its own stated bound (docs/retention.md): the event log, dead
//! outbox rows and deliveries, the operator audit and the disclosures are kept on purpose and never
//! swept by the app role.
//!
//! Invariants:
//! - It never touches `pending`, `claimed`, `retry` or `dead` rows (nor the starts and receipts of
//!   their events, which a retry still needs), and never `events` or `event_resources`: the event log
//!   is the durable history (its tables reject DELETE anyway). A row that an operator replays while
//!   the sweep runs is re-checked under its row lock and kept.
//! - Batches walk the primary keys in order (event ids are ULIDs, so ids older than the retention
//!   sort below a computed bound) or the receipts' `received_at` index, so each batch reads at most
//!   [`RetentionConfig::batch`] rows whatever the table size, and the whole sweep is linear.
//! - It stops after its time budget; the next sweep continues where the data says (nothing is
//!   remembered between sweeps). The report says whether it finished.
//!
//! CAUTION — receipts: a listener receipt is what turns a redelivered message into a no-op. Once it
//! is deleted, an old message delivered again (an SQS redelivery, a dead-letter redrive, a replay)
//! runs the listener again. Notifications are still sent once — they keep their UNIQUE idempotency
//! key `"{event_id}:{listener}"` in `notifications`, which is never swept — and stale-state checks
//! make most chained work a no-op, but keep the retention well above the longest time a message can
//! live in a queue or its dead-letter queue (SQS keeps messages up to 14 days; the default retention
//! here is 15 days = 360 h, above the 14-day retention of the listeners' dead-letter queues in
//! template.yaml, so a redriven message still finds its receipt). A swept outbox row also cannot be retried
//! or replayed any more (operator actions answer 404 for it).

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use deadpool_postgres::Pool;
use serde::Serialize;
use ulid::Ulid;

use super::job::{Job, JobError, JobKind, JobReport};
use crate::config::{ConfigError, Env};
use crate::db::sql;
use crate::error::DomainError;
use crate::ids::EventId;

/// How much the sweep keeps and how much work it does per run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetentionConfig {
    /// `CLINIC_RETENTION_HOURS` (default 360 = 15 days, 1–87600; keep it above the
    /// dead-letter queues' 14-day retention): age after which finished rows go.
    pub retention: Duration,
    /// `CLINIC_RETENTION_BATCH` (default 1000, 1–10000): rows examined per statement.
    pub batch: i64,
    /// `CLINIC_RETENTION_BUDGET_SECS` (default 30, 1–900): the sweep stops after this long.
    pub budget: Duration,
    /// `CLINIC_IDEMPOTENCY_TTL_HOURS` (default 168 = 7 days, 1–87600): age after which an
    /// `Idempotency-Key` is forgotten.
    pub idempotency_ttl: Duration,
    /// `CLINIC_REJECTION_RETENTION_HOURS` (default 720 = 30 days, 1–87600): age after which a
    /// recorded listener rejection is deleted.
    pub rejection_retention: Duration,
    /// `CLINIC_NOTIFICATION_RETENTION_HOURS` (default 2160 = 90 days, 1–87600): age (since its last
    /// change) after which a notification that ended is deleted, once its event's outbox row is gone.
    pub notification_retention: Duration,
}

impl Default for RetentionConfig {
    fn default() -> Self {
        Self {
            retention: Duration::from_secs(360 * 3600),
            batch: 1000,
            budget: Duration::from_secs(30),
            idempotency_ttl: Duration::from_secs(168 * 3600),
            rejection_retention: Duration::from_secs(720 * 3600),
            notification_retention: Duration::from_secs(2160 * 3600),
        }
    }
}

impl RetentionConfig {
    pub fn read(env: &Env) -> Result<Self, ConfigError> {
        Ok(Self {
            retention: Duration::from_secs(env.bounded("CLINIC_RETENTION_HOURS", 360, 1..=87_600)? * 3600),
            batch: env.bounded("CLINIC_RETENTION_BATCH", 1000, 1..=10_000)? as i64,
            budget: Duration::from_secs(env.bounded("CLINIC_RETENTION_BUDGET_SECS", 30, 1..=900)?),
            idempotency_ttl: Duration::from_secs(
                env.bounded("CLINIC_IDEMPOTENCY_TTL_HOURS", 168, 1..=87_600)? * 3600,
            ),
            rejection_retention: Duration::from_secs(
                env.bounded("CLINIC_REJECTION_RETENTION_HOURS", 720, 1..=87_600)? * 3600,
            ),
            notification_retention: Duration::from_secs(
                env.bounded("CLINIC_NOTIFICATION_RETENTION_HOURS", 2160, 1..=87_600)? * 3600,
            ),
        })
    }
}

/// What one sweep deleted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SweepReport {
    pub outbox_rows: u64,
    pub listener_starts: u64,
    pub listener_receipts: u64,
    pub idempotency_keys: u64,
    pub appointment_reminders: u64,
    pub listener_rejections: u64,
    pub webhook_deliveries: u64,
    /// Rotated-out webhook secrets cleared (their overlap ended).
    pub webhook_previous_secrets: u64,
    /// Ended notifications deleted.
    pub notifications: u64,
    /// Statements run.
    pub batches: u64,
    /// False when the time budget ran out before everything old enough was deleted.
    pub complete: bool,
}

/// One batch of the outbox walk: the next `$3` rows after `$1` with ids below `$2`, of which the
/// final, old ones are deleted. Answers the last id examined and the number deleted.
const SWEEP_OUTBOX: &str = "WITH batch AS ( \
         SELECT event_id FROM event_outbox \
         WHERE event_id > $1 AND event_id < $2 ORDER BY event_id LIMIT $3 \
     ), gone AS ( \
         DELETE FROM event_outbox o USING batch b \
         WHERE o.event_id = b.event_id AND o.status IN ('dispatched', 'discarded') AND o.updated_at < $4 \
           AND o.awaiting IS NULL \
           AND NOT EXISTS (SELECT 1 FROM listener_starts s WHERE s.event_id = o.event_id \
                           AND s.settled_at IS NULL) \
         RETURNING 1 \
     ) \
     SELECT (SELECT event_id FROM batch ORDER BY event_id DESC LIMIT 1), (SELECT count(*) FROM batch), \
            (SELECT count(*) FROM gone)";

const SWEEP_STARTS: &str = "WITH batch AS ( \
         SELECT event_id, listener FROM listener_starts \
         WHERE (event_id, listener) > ($1, $2) AND event_id < $3 ORDER BY event_id, listener LIMIT $4 \
     ), gone AS ( \
         DELETE FROM listener_starts s USING batch b \
         WHERE s.event_id = b.event_id AND s.listener = b.listener AND s.started_at < $5 \
           AND s.settled_at IS NOT NULL \
           AND NOT EXISTS (SELECT 1 FROM event_outbox o WHERE o.event_id = s.event_id \
                           AND o.status IN ('pending', 'claimed', 'retry', 'dead')) \
         RETURNING 1 \
     ), last AS ( \
         SELECT event_id, listener FROM batch ORDER BY event_id DESC, listener DESC LIMIT 1 \
     ) \
     SELECT (SELECT event_id FROM last), (SELECT listener FROM last), \
            (SELECT count(*) FROM batch), (SELECT count(*) FROM gone)";

/// Receipts are walked by `received_at` (indexed); rows sharing the exact microsecond of a batch's
/// last row beyond the batch are left for the next sweep.
const SWEEP_RECEIPTS: &str = "WITH batch AS ( \
         SELECT listener, event_id, received_at FROM listener_receipts \
         WHERE received_at < $1 AND received_at > $2 ORDER BY received_at LIMIT $3 \
     ), gone AS ( \
         DELETE FROM listener_receipts r USING batch b \
         WHERE r.listener = b.listener AND r.event_id = b.event_id \
           AND NOT EXISTS (SELECT 1 FROM listener_starts s WHERE s.event_id = r.event_id \
                           AND s.settled_at IS NULL) \
           AND NOT EXISTS (SELECT 1 FROM event_outbox o WHERE o.event_id = r.event_id \
                           AND (o.status IN ('pending', 'claimed', 'retry', 'dead') \
                                OR o.awaiting IS NOT NULL)) \
         RETURNING 1 \
     ) \
     SELECT (SELECT max(received_at) FROM batch), (SELECT count(*) FROM batch), (SELECT count(*) FROM gone)";

/// One batch of expired idempotency keys (oldest first, by `idempotency_keys_created_idx`).
const SWEEP_IDEMPOTENCY_KEYS: &str = "WITH batch AS ( \
         SELECT workspace_id, key FROM idempotency_keys WHERE created_at < $1 ORDER BY created_at LIMIT $2 \
     ), gone AS ( \
         DELETE FROM idempotency_keys k USING batch b \
         WHERE k.workspace_id = b.workspace_id AND k.key = b.key RETURNING 1 \
     ) \
     SELECT (SELECT count(*) FROM batch), (SELECT count(*) FROM gone)";

/// One batch of reminder claims for start times long past (by `appointment_reminders_starts_idx`).
const SWEEP_REMINDERS: &str = "WITH batch AS ( \
         SELECT appointment_id, starts_at FROM appointment_reminders WHERE starts_at < $1 \
         ORDER BY starts_at LIMIT $2 \
     ), gone AS ( \
         DELETE FROM appointment_reminders r USING batch b \
         WHERE r.appointment_id = b.appointment_id AND r.starts_at = b.starts_at RETURNING 1 \
     ) \
     SELECT (SELECT count(*) FROM batch), (SELECT count(*) FROM gone)";

/// One batch of old recorded rejections (by `listener_rejections_rejected_idx`).
const SWEEP_REJECTIONS: &str = "WITH batch AS ( \
         SELECT id FROM listener_rejections WHERE rejected_at < $1 ORDER BY rejected_at LIMIT $2 \
     ), gone AS ( \
         DELETE FROM listener_rejections r USING batch b WHERE r.id = b.id RETURNING 1 \
     ) \
     SELECT (SELECT count(*) FROM batch), (SELECT count(*) FROM gone)";

/// One batch of ended notifications, walked by (`updated_at`, `id`) on `notifications_ended_idx`
/// (V18) after `($2, $3)`: those whose event has no outbox row any more are deleted (the status is
/// re-checked under the row lock). Answers the last key examined and the counts.
const SWEEP_NOTIFICATIONS: &str = "WITH batch AS ( \
         SELECT id, updated_at FROM notifications \
         WHERE status IN ('sent', 'stale', 'opted_out', 'suppressed', 'discarded') AND updated_at < $1 \
           AND (updated_at, id) > ($2, $3) ORDER BY updated_at, id LIMIT $4 \
     ), gone AS ( \
         DELETE FROM notifications n USING batch b \
         WHERE n.id = b.id AND n.status IN ('sent', 'stale', 'opted_out', 'suppressed', 'discarded') \
           AND NOT EXISTS (SELECT 1 FROM event_outbox o WHERE o.event_id = n.event_id) \
         RETURNING 1 \
     ), last AS ( \
         SELECT updated_at, id FROM batch ORDER BY updated_at DESC, id DESC LIMIT 1 \
     ) \
     SELECT (SELECT updated_at FROM last), (SELECT id FROM last), (SELECT count(*) FROM batch), \
            (SELECT count(*) FROM gone)";

/// The smallest event id minted at or after `at`: every id below it was minted before `at`.
fn first_id_at(at: DateTime<Utc>) -> EventId {
    let millis = u64::try_from(at.timestamp_millis()).unwrap_or(0);
    EventId::from_ulid(Ulid::from_parts(millis, 0))
}

/// The retention job: [`sweep`] as of now, its budget cut to the time left before its deadline,
/// run by the housekeeping Lambda's `sweep` mode (`complete: false` when it stopped early).
#[derive(Debug, Clone)]
pub struct Sweep {
    pub pool: Pool,
    pub config: RetentionConfig,
}

#[async_trait::async_trait]
impl Job for Sweep {
    fn kind(&self) -> JobKind {
        JobKind::Sweep
    }

    async fn run(&self, deadline: Option<Instant>) -> Result<JobReport, JobError> {
        let mut config = self.config;
        if let Some(deadline) = deadline {
            config.budget = config.budget.min(deadline.saturating_duration_since(Instant::now()));
        }
        sweep(&self.pool, &config, crate::domain::values::now())
            .await
            .map(JobReport::Sweep)
            .map_err(|error| JobError::new(JobKind::Sweep, error))
    }
}

/// Deletes finished outbox rows, listener starts and receipts older than `config.retention` (as of
/// `now`), batch by batch, until done or `config.budget` is spent.
pub async fn sweep(
    pool: &Pool,
    config: &RetentionConfig,
    now: DateTime<Utc>,
) -> Result<SweepReport, DomainError> {
    let started = tokio::time::Instant::now();
    let out_of_time = || started.elapsed() >= config.budget;
    let retention = chrono::Duration::from_std(config.retention).unwrap_or(chrono::Duration::MAX);
    let cutoff = now.checked_sub_signed(retention).unwrap_or_else(epoch).max(epoch());
    let id_bound = first_id_at(cutoff);
    let mut report = SweepReport::default();
    let client = pool.get().await?;

    // 1. Final outbox rows.
    let mut after = EventId::from_ulid(Ulid::nil());
    loop {
        if out_of_time() {
            return Ok(finish(report, false));
        }
        let row = sql::query_one(&client, SWEEP_OUTBOX, &[&after, &id_bound, &config.batch, &cutoff]).await?;
        report.batches += 1;
        report.outbox_rows += row.get::<_, i64>(2) as u64;
        let examined: i64 = row.get(1);
        match row.get::<_, Option<EventId>>(0) {
            Some(last) if examined == config.batch => after = last,
            _ => break,
        }
    }

    // 2. Listener starts.
    let (mut after_id, mut after_listener) = (EventId::from_ulid(Ulid::nil()), String::new());
    loop {
        if out_of_time() {
            return Ok(finish(report, false));
        }
        let row = sql::query_one(
            &client,
            SWEEP_STARTS,
            &[&after_id, &after_listener, &id_bound, &config.batch, &cutoff],
        )
        .await?;
        report.batches += 1;
        report.listener_starts += row.get::<_, i64>(3) as u64;
        let examined: i64 = row.get(2);
        match (row.get::<_, Option<EventId>>(0), row.get::<_, Option<String>>(1)) {
            (Some(id), Some(listener)) if examined == config.batch => {
                after_id = id;
                after_listener = listener;
            }
            _ => break,
        }
    }

    // 3. Listener receipts (walked by their `received_at` index).
    let mut after_at = epoch();
    loop {
        if out_of_time() {
            return Ok(finish(report, false));
        }
        let row = sql::query_one(&client, SWEEP_RECEIPTS, &[&cutoff, &after_at, &config.batch]).await?;
        report.batches += 1;
        report.listener_receipts += row.get::<_, i64>(2) as u64;
        let examined: i64 = row.get(1);
        match row.get::<_, Option<DateTime<Utc>>>(0) {
            Some(last) if examined == config.batch => after_at = last,
            _ => break,
        }
    }

    // 4. Expired idempotency keys; 5. reminder claims of long-past start times; 6. old rejections.
    let older_than = |age: Duration| {
        let age = chrono::Duration::from_std(age).unwrap_or(chrono::Duration::MAX);
        now.checked_sub_signed(age).unwrap_or_else(epoch).max(epoch())
    };
    let (expired, rejected_before) =
        (older_than(config.idempotency_ttl), older_than(config.rejection_retention));
    for (statement, before) in
        [(SWEEP_IDEMPOTENCY_KEYS, expired), (SWEEP_REMINDERS, cutoff), (SWEEP_REJECTIONS, rejected_before)]
    {
        loop {
            if out_of_time() {
                return Ok(finish(report, false));
            }
            let row = sql::query_one(&client, statement, &[&before, &config.batch]).await?;
            report.batches += 1;
            let deleted = row.get::<_, i64>(1) as u64;
            match statement {
                SWEEP_IDEMPOTENCY_KEYS => report.idempotency_keys += deleted,
                SWEEP_REMINDERS => report.appointment_reminders += deleted,
                _ => report.listener_rejections += deleted,
            }
            if row.get::<_, i64>(0) < config.batch {
                break;
            }
        }
    }
    // 7. Delivered webhook deliveries (their attempts go with them).
    let hours = config.retention.as_secs_f64() / 3600.0;
    loop {
        if out_of_time() {
            return Ok(finish(report, false));
        }
        let deleted = crate::webhooks::store::sweep_delivered(&client, hours, config.batch).await?;
        report.batches += 1;
        report.webhook_deliveries += deleted;
        if deleted < config.batch as u64 {
            break;
        }
    }
    // 8. Rotated-out webhook secrets whose overlap ended.
    loop {
        if out_of_time() {
            return Ok(finish(report, false));
        }
        let cleared = crate::webhooks::endpoints::clear_expired_previous(&client, config.batch).await?;
        report.batches += 1;
        report.webhook_previous_secrets += cleared;
        if cleared < config.batch as u64 {
            break;
        }
    }
    // 9. Ended notifications whose event left the outbox.
    let ended_before = older_than(config.notification_retention);
    let (mut after_at, mut after_id) = (epoch(), uuid::Uuid::nil());
    loop {
        if out_of_time() {
            return Ok(finish(report, false));
        }
        let row = sql::query_one(
            &client,
            SWEEP_NOTIFICATIONS,
            &[&ended_before, &after_at, &after_id, &config.batch],
        )
        .await?;
        report.batches += 1;
        report.notifications += row.get::<_, i64>(3) as u64;
        let examined: i64 = row.get(2);
        match (row.get::<_, Option<DateTime<Utc>>>(0), row.get::<_, Option<uuid::Uuid>>(1)) {
            (Some(at), Some(id)) if examined == config.batch => (after_at, after_id) = (at, id),
            _ => break,
        }
    }
    Ok(finish(report, true))
}

/// 1970-01-01: earlier than anything stored, and a value PostgreSQL accepts.
fn epoch() -> DateTime<Utc> {
    DateTime::<Utc>::UNIX_EPOCH
}

fn finish(report: SweepReport, complete: bool) -> SweepReport {
    let report = SweepReport { complete, ..report };
    tracing::info!(
        outbox_rows = report.outbox_rows,
        listener_starts = report.listener_starts,
        listener_receipts = report.listener_receipts,
        idempotency_keys = report.idempotency_keys,
        appointment_reminders = report.appointment_reminders,
        listener_rejections = report.listener_rejections,
        webhook_deliveries = report.webhook_deliveries,
        webhook_previous_secrets = report.webhook_previous_secrets,
        notifications = report.notifications,
        batches = report.batches,
        complete = report.complete,
        "retention sweep done"
    );
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_id_bound_sorts_between_older_and_newer_ids() {
        let at = Utc::now();
        let bound = first_id_at(at);
        let older = EventId::from_ulid(Ulid::from_parts(at.timestamp_millis() as u64 - 1, u128::MAX));
        let newer = EventId::from_ulid(Ulid::from_parts(at.timestamp_millis() as u64, 1));
        assert!(older < bound && bound < newer);
        // The database compares the uuid bytes, which keep the ULID order.
        assert!(older.uuid() < bound.uuid() && bound.uuid() < newer.uuid());
    }

    #[test]
    fn defaults_outlive_the_dead_letter_queues() {
        // Receipts must outlive anything that can redeliver: the DLQs keep messages 14 days.
        let config = RetentionConfig::default();
        assert_eq!(config.retention, Duration::from_secs(15 * 24 * 3600));
        assert!(config.retention > Duration::from_secs(14 * 24 * 3600));
        assert_eq!(config.batch, 1000);
        assert_eq!(config.idempotency_ttl, Duration::from_secs(7 * 24 * 3600));
    }
}
